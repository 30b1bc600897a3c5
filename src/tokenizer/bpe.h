// BPE by merge rank: encodes one pre-tokenized piece into token ids by applying merges in rank
// order, lowest rank first and leftmost first among equal ranks (Hugging Face's order).
// Byte-level vocabularies start from the piece's bytes; SentencePiece-style ones (Hugging Face
// BPE with byte_fallback) start from its UTF-8 characters, and a character without a token
// becomes the <0xXX> tokens of its bytes.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace efim {

struct BpeMerge {
  int32_t left, right, result;  // token ids; the merge's rank is its index
};

struct BpeOptions {
  bool ignore_merges = false;  // a piece that is itself a token is emitted whole
  // Symbols start as UTF-8 characters; one that is not in piece_ids becomes byte_tokens[b] for
  // each of its bytes b, or, when one of those is -1, the unknown token (a run of unknown
  // characters fused into one, as Hugging Face's fuse_unk does).
  bool char_symbols = false;
  std::array<int32_t, 256> byte_tokens{};
  int32_t unk = -1;
};

class BpeModel {
 public:
  BpeModel() = default;
  // `piece_ids`: text -> id of every token BPE may produce (raw bytes for byte-level
  // vocabularies, the "▁"-escaped spelling for SentencePiece-style ones). `merges` in rank order.
  BpeModel(std::unordered_map<std::string, int32_t> piece_ids, const std::vector<BpeMerge>& merges,
           const BpeOptions& opts);
  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of `piece` (non-empty raw bytes) to `out`. Throws Error when a byte has no
  // token (only possible for vocabularies without all 256 byte tokens).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  bool ignore_merges() const { return ignore_merges_; }
  bool char_symbols() const { return char_symbols_; }
  const std::unordered_map<std::string, int32_t>& piece_ids() const { return piece_ids_; }

 private:
  struct Slot {
    uint64_t key = ~uint64_t{0};  // (left << 32) | right; all-ones marks an empty slot
    int32_t rank = 0;
    int32_t result = 0;
  };
  const Slot* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t> piece_ids_;
  int32_t byte_ids_[256] = {};
  std::vector<Slot> table_;  // open addressing, power-of-two size, load <= 1/2
  bool ignore_merges_ = false;
  int32_t unk_ = -1;
  bool char_symbols_ = false;

  // Per-piece results; guarded because encode() is const and may run on several threads.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace efim
