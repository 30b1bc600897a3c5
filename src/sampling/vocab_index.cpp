#include "sampling/vocab_index.h"

#include <algorithm>
#include <numeric>

namespace efim {

VocabIndex::VocabIndex(const Tokenizer& tok) : tok_(&tok), vocab_(tok.vocab_size()) {
  for (int32_t id = 0; id < vocab_; ++id) {
    if (tok.is_special(id) || tok.token_bytes(id).empty()) continue;
    sorted_.push_back(id);
  }
  // string_view compares bytes as unsigned char (char_traits<char>), as healing needs.
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = tok.token_bytes(a), y = tok.token_bytes(b);
    return x < y || (x == y && a < b);
  });
  keys_.reserve(sorted_.size());
  for (int32_t id : sorted_) {
    keys_.push_back(tok.token_bytes(id));
    max_bytes_ = std::max(max_bytes_, keys_.back().size());
  }
}

size_t VocabIndex::lower(std::string_view s) const {
  return size_t(std::lower_bound(keys_.begin(), keys_.end(), s) - keys_.begin());
}

// Keys that start with s follow lower(s) contiguously.
size_t VocabIndex::after_prefix(std::string_view s) const {
  const auto from = keys_.begin() + ptrdiff_t(lower(s));
  return size_t(std::partition_point(from, keys_.end(),
                                     [&](std::string_view k) { return k.starts_with(s); }) -
                keys_.begin());
}

std::span<const int32_t> VocabIndex::starting_with(std::string_view s) const {
  const size_t a = lower(s), b = after_prefix(s);
  return std::span<const int32_t>(sorted_).subspan(a, b - a);
}

std::span<const int32_t> VocabIndex::equal_to(std::string_view s) const {
  const auto [a, b] = std::equal_range(keys_.begin(), keys_.end(), s);
  return std::span<const int32_t>(sorted_).subspan(size_t(a - keys_.begin()), size_t(b - a));
}

bool VocabIndex::strictly_extended(std::string_view s) const {
  const std::span<const int32_t> r = starting_with(s);
  // Sorted by bytes: an equal key, if any, comes first; anything after it is longer.
  return !r.empty() && (r.size() > 1 || bytes(r.front()).size() > s.size());
}

void VocabIndex::allowed(std::string_view rest, std::vector<int32_t>& out) const {
  out.clear();
  if (rest.empty()) return;
  for (size_t len = 1; len < rest.size(); ++len) {  // proper prefixes of rest
    const std::span<const int32_t> eq = equal_to(rest.substr(0, len));
    out.insert(out.end(), eq.begin(), eq.end());
  }
  const std::span<const int32_t> ext = starting_with(rest);  // rest itself and its extensions
  out.insert(out.end(), ext.begin(), ext.end());
  std::sort(out.begin(), out.end());  // disjoint sets: no duplicates to remove
}

}  // namespace efim
