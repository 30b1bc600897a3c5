// Byte-level BPE: encodes one pre-tokenized piece (raw bytes) into token ids by applying merges
// in rank order, lowest rank first and leftmost first among equal ranks (Hugging Face's order).
#pragma once

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

class BpeModel {
 public:
  BpeModel() = default;
  // `piece_ids`: raw bytes -> id of every token BPE may produce (its byte-level text decoded).
  // `merges` in rank order. `ignore_merges`: a piece that is itself a token is emitted whole.
  BpeModel(std::unordered_map<std::string, int32_t> piece_ids, const std::vector<BpeMerge>& merges,
           bool ignore_merges);
  BpeModel(BpeModel&& other) noexcept;
  BpeModel& operator=(BpeModel&& other) noexcept;

  // Appends the ids of `piece` (non-empty raw bytes) to `out`. Throws Error when a byte has no
  // token (only possible for vocabularies without all 256 byte tokens).
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

  bool ignore_merges() const { return ignore_merges_; }
  const std::unordered_map<std::string, int32_t>& piece_ids() const { return piece_ids_; }

 private:
  struct Slot {
    uint64_t key = ~uint64_t{0};  // (left << 32) | right; all-ones marks an empty slot
    int32_t rank = 0;
    int32_t result = 0;
  };
  const Slot* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> piece_ids_;
  int32_t byte_ids_[256] = {};
  std::vector<Slot> table_;  // open addressing, power-of-two size, load <= 1/2
  bool ignore_merges_ = false;

  // Per-piece results; guarded because encode() is const and may run on several threads.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace efim
