// VocabIndex: the vocabulary sorted by the bytes each token decodes to, for the byte-level
// questions token healing asks (which tokens start with these bytes, which are a prefix of
// them). Built once at load; immutable afterwards, so any thread may read it.
//
// Special tokens (control tokens, FIM sentinels) and tokens that decode to no bytes are left
// out: they are never part of text, so healing never backs off over one nor generates one.
//
// Sorted by bytes (unsigned lexicographic), the tokens that start with a byte string s are one
// contiguous range [lower_bound(s), lower_bound(s + 1)) where s + 1 is the least string
// greater than every extension of s; a query costs O(|s| log V).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace efim {

class VocabIndex {
 public:
  // `tok` is borrowed and must outlive the index.
  explicit VocabIndex(const Tokenizer& tok);

  // Tokens whose bytes start with `s` (all indexed tokens when s is empty), sorted by bytes,
  // then id.
  std::span<const int32_t> starting_with(std::string_view s) const;
  // Tokens whose bytes equal `s`.
  std::span<const int32_t> equal_to(std::string_view s) const;
  // True when some token's bytes start with `s` and are longer than `s`.
  bool strictly_extended(std::string_view s) const;
  // The healing constraint's allowed set for the bytes still required: tokens whose bytes are
  // a non-empty prefix of `rest` or start with `rest`. Sorted by id, without duplicates.
  // Empty `rest`: no constraint (returns nothing).
  void allowed(std::string_view rest, std::vector<int32_t>& out) const;

  std::string_view bytes(int32_t id) const { return tok_->token_bytes(id); }
  size_t size() const { return sorted_.size(); }
  size_t max_token_bytes() const { return max_bytes_; }
  int32_t vocab_size() const { return vocab_; }
  const Tokenizer& tokenizer() const { return *tok_; }

 private:
  size_t lower(std::string_view s) const;   // first index with key >= s
  size_t after_prefix(std::string_view s) const;  // first index whose key does not start with s

  const Tokenizer* tok_;
  int32_t vocab_ = 0;
  size_t max_bytes_ = 0;
  std::vector<int32_t> sorted_;          // [indexed tokens] ids by bytes, then id
  std::vector<std::string_view> keys_;   // [indexed tokens] bytes of sorted_[i]
};

}  // namespace efim
