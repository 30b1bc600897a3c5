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

}  // namespace efim
