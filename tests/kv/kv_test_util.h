// Test helpers: a shadow of the KV storage that records, for every slot, a hash of the token
// prefix whose K/V it holds (K/V at position p depends on tokens 0..p). Steps "write" hashes,
// copy ops copy them, and reuse is correct iff every reused slot holds the prompt's hash.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "kv/kv_manager.h"

namespace efim::kvtest {

// h[p] identifies tokens[0..p] (position included by construction).
// A sequence's block table as a vector (for EXPECT_EQ against exact block ids).
inline std::vector<int32_t> table(const KvManager& kv, SeqId id) {
  auto t = kv.block_table(id);
  return {t.begin(), t.end()};
}

inline std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens) {
  std::vector<uint64_t> h(tokens.size());
  uint64_t x = 0x243f6a8885a308d3ULL;
  for (size_t p = 0; p < tokens.size(); ++p) {
    x = (x ^ static_cast<uint32_t>(tokens[p])) * 0x100000001b3ULL;
    x ^= x >> 29;
    h[p] = x;
  }
  return h;
}

inline std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, std::span<const int32_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Shadow {
 public:
  explicit Shadow(const KvManager& kv, int32_t n_blocks)
      : kv_(kv), slot_hash_(size_t(n_blocks) * kv.block_size(), 0) {}

  void copy(const std::vector<SlotCopy>& copies) {
    for (const SlotCopy& c : copies) slot_hash_[c.to] = slot_hash_[c.from];
  }
  // The model computed positions [from, to) of sequence id.
  void write(SeqId id, int32_t from, int32_t to) {
    std::vector<uint64_t> h = prefix_hashes(kv_.tokens(id));
    for (int32_t p = from; p < to; ++p) slot_hash_[kv_.slot(id, p)] = h[p];
  }
  // Every position below n holds the K/V of the sequence's own prefix.
  ::testing::AssertionResult holds(SeqId id, int32_t n) const {
    std::vector<uint64_t> h = prefix_hashes(kv_.tokens(id));
    for (int32_t p = 0; p < n; ++p) {
      if (slot_hash_[kv_.slot(id, p)] != h[p]) {
        return ::testing::AssertionFailure() << "sequence " << id << " position " << p << " slot "
                                             << kv_.slot(id, p) << " holds other K/V";
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  const KvManager& kv_;
  std::vector<uint64_t> slot_hash_;  // [n_slots]
};

// One prefill step over the whole uncomputed part, then commit.
inline void prefill(KvManager& kv, Shadow& sh, SeqId id) {
  sh.write(id, kv.n_computed(id), kv.n_tokens(id));
  kv.commit(id, kv.n_tokens(id));
}

// Decode: feed `tokens` one at a time (append, compute, commit).
inline void decode(KvManager& kv, Shadow& sh, SeqId id, std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    ASSERT_TRUE(kv.append_tokens(id, std::span(&t, 1)));
    prefill(kv, sh, id);
  }
}

}  // namespace efim::kvtest
