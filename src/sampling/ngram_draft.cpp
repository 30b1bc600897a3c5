#include "sampling/ngram_draft.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace efim {

NgramIndex::NgramIndex(const NgramDraftOptions& options) : opt_(options) {
  EFIM_CHECK(opt_.min_n >= 1 && opt_.max_n >= opt_.min_n && opt_.max_n <= 64,
             "NgramDraftOptions: need 1 <= min_n <= max_n <= 64, got min_n ", opt_.min_n,
             ", max_n ", opt_.max_n);
  latest_.resize(static_cast<size_t>(opt_.max_n - opt_.min_n + 1));
}

uint64_t NgramIndex::hash(const int32_t* t, int32_t n) const {
  uint64_t h = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(n);
  for (int32_t i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0x100000001b3ull;
    h ^= h >> 29;
  }
  return h;
}

void NgramIndex::index_before(int32_t doc, int32_t pos) {
  const std::vector<int32_t>& d = docs_[static_cast<size_t>(doc)];
  for (int32_t n = opt_.min_n; n <= opt_.max_n && n <= pos; ++n)
    latest_[static_cast<size_t>(n - opt_.min_n)][hash(d.data() + pos - n, n)] = {doc, pos};
}

int32_t NgramIndex::add_document(std::span<const int32_t> tokens) {
  EFIM_CHECK(docs_.size() < size_t(INT32_MAX), "NgramIndex: too many documents");
  docs_.emplace_back();
  const auto doc = static_cast<int32_t>(docs_.size() - 1);
  append(doc, tokens);
  return doc;
}

void NgramIndex::append(int32_t doc, std::span<const int32_t> tokens) {
  EFIM_CHECK(doc >= 0 && size_t(doc) < docs_.size(), "NgramIndex: document ", doc,
             " outside [0, ", docs_.size(), ")");
  std::vector<int32_t>& d = docs_[static_cast<size_t>(doc)];
  EFIM_CHECK(d.size() + tokens.size() < size_t(INT32_MAX), "NgramIndex: document ", doc,
             " would exceed 2^31 tokens");
  for (int32_t t : tokens) {
    // The n-grams ending at the current end get a continuation now.
    if (!d.empty()) index_before(doc, static_cast<int32_t>(d.size()));
    d.push_back(t);
  }
}

std::vector<int32_t> NgramIndex::propose(int32_t doc, int32_t max_tokens) const {
  EFIM_CHECK(doc >= 0 && size_t(doc) < docs_.size(), "NgramIndex: document ", doc,
             " outside [0, ", docs_.size(), ")");
  const std::vector<int32_t>& d = docs_[static_cast<size_t>(doc)];
  const auto len = static_cast<int32_t>(d.size());
  for (int32_t n = std::min(opt_.max_n, len); n >= opt_.min_n && max_tokens > 0; --n) {
    const int32_t* suffix = d.data() + len - n;
    const auto& map = latest_[static_cast<size_t>(n - opt_.min_n)];
    auto it = map.find(hash(suffix, n));
    if (it == map.end()) continue;
    const std::vector<int32_t>& src = docs_[static_cast<size_t>(it->second.doc)];
    const int32_t pos = it->second.pos;
    // A hash collision is not a match.
    if (!std::equal(suffix, suffix + n, src.begin() + (pos - n))) continue;
    const int32_t end = std::min<int32_t>(static_cast<int32_t>(src.size()), pos + max_tokens);
    return std::vector<int32_t>(src.begin() + pos, src.begin() + end);
  }
  return {};
}

int64_t NgramIndex::n_tokens() const {
  int64_t n = 0;
  for (const auto& d : docs_) n += static_cast<int64_t>(d.size());
  return n;
}

DraftLength::DraftLength(int32_t min, int32_t max, int32_t start)
    : min_(min), max_(max), k_(std::clamp(start, min, max)) {
  EFIM_CHECK(min >= 1 && max >= min, "DraftLength: need 1 <= min <= max, got ", min, ", ", max);
}

void DraftLength::update(int32_t proposed, int32_t accepted) {
  EFIM_CHECK(proposed >= 0 && accepted >= 0 && accepted <= proposed,
             "DraftLength::update: accepted ", accepted, " of ", proposed, " proposed");
  if (proposed == 0) return;  // nothing was drafted: no evidence
  k_ = accepted == proposed ? std::min(max_, 2 * k_) : std::clamp(accepted + 1, min_, max_);
}

DraftMemory::DraftMemory(const DraftMemoryOptions& options) : opt_(options) {
  EFIM_CHECK(opt_.max_places > 0 && opt_.max_doc_tokens > 0, "DraftMemory: max_places ",
             opt_.max_places, " and max_doc_tokens ", opt_.max_doc_tokens, " must be positive");
}

void DraftMemory::touch(Place& p, uint64_t place) {
  lru_.erase(p.lru);
  lru_.push_front(place);
  p.lru = lru_.begin();
}

void DraftMemory::remember(uint64_t place, std::span<const int32_t> typed,
                           std::span<const int32_t> generated) {
  if (place == 0 || generated.empty() || opt_.docs_per_place == 0) return;
  // doc = typed[-keep:] ++ generated, cut to max_doc_tokens (the completion's start is kept).
  const size_t n_gen = std::min(generated.size(), opt_.max_doc_tokens);
  const size_t n_typed = std::min({typed.size(), opt_.keep_typed, opt_.max_doc_tokens - n_gen});
  std::vector<int32_t> doc(typed.end() - ptrdiff_t(n_typed), typed.end());
  doc.insert(doc.end(), generated.begin(), generated.begin() + ptrdiff_t(n_gen));

  auto it = places_.find(place);
  if (it == places_.end()) {
    if (places_.size() == opt_.max_places) {  // evict the least recently used place
      places_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(place);
    it = places_.emplace(place, Place{{}, lru_.begin()}).first;
  } else {
    touch(it->second, place);
  }
  auto& docs = it->second.docs;
  if (docs.size() == opt_.docs_per_place) docs.erase(docs.begin());
  docs.push_back(std::move(doc));
}

std::vector<std::vector<int32_t>> DraftMemory::recall(uint64_t place) {
  auto it = places_.find(place);
  if (it == places_.end()) return {};
  touch(it->second, place);
  return it->second.docs;
}

}  // namespace efim
