// KvManager with the prefix cache off (KvOptions.prefix_cache = false, `efim serve
// --no-prefix-cache`): exact block ids, free-list order and counters. Nothing is ever matched
// or kept; released blocks go straight back to the tail of the free list.
#include <gtest/gtest.h>

#include <vector>

#include "kv/kv_manager.h"
#include "kv_test_util.h"

using namespace efim;
using namespace efim::kvtest;
using V = std::vector<int32_t>;

namespace {

KvManager no_cache(int32_t n_blocks, int32_t block_size) {
  return KvManager({.n_blocks = n_blocks, .block_size = block_size, .prefix_cache = false});
}

}  // namespace

TEST(KvNoPrefixCache, IdenticalPromptIsComputedAgainInFreshBlocks) {
  KvManager kv = no_cache(6, 4);
  EXPECT_FALSE(kv.prefix_cache());
  const V p = iota_tokens(10, 100);  // rows [100..103] [104..107] [108 109]
  auto a = kv.match_and_allocate(1, p);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 0);
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2}));
  kv.commit(1, 10);
  EXPECT_FALSE(kv.is_cached(0) || kv.is_cached(1) || kv.is_cached(2));
  EXPECT_EQ(kv.peek(p), 0);
  kv.release(1);
  KvStats st = kv.stats();
  EXPECT_EQ(st.free_blocks, 6);
  EXPECT_EQ(st.cached_blocks, 0);
  EXPECT_EQ(st.used_blocks, 0);
  EXPECT_EQ(kv.free_order(), (V{3, 4, 5, 0, 1, 2}));  // back at the tail, in table order
  EXPECT_TRUE(kv.eviction_order().empty());

  auto b = kv.match_and_allocate(2, p);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->n_cached, 0);
  EXPECT_TRUE(b->copies.empty());
  EXPECT_EQ(table(kv, 2), (V{3, 4, 5}));
  EXPECT_EQ(b->slots, (V{12, 13, 14, 15, 16, 17, 18, 19, 20, 21}));
  st = kv.stats();
  EXPECT_EQ(st.prefix_query_tokens, 20);  // queries are still counted
  EXPECT_EQ(st.prefix_hit_tokens, 0);
  kv.check_invariants();
}

TEST(KvNoPrefixCache, RunningSequencesShareNothing) {
  KvManager kv = no_cache(8, 4);
  const V p = iota_tokens(8, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));
  kv.commit(1, 8);
  auto b = kv.match_and_allocate(2, concat(p, V{1, 2}));  // extends sequence 1's computed rows
  ASSERT_TRUE(b);
  EXPECT_EQ(b->n_cached, 0);
  EXPECT_EQ(table(kv, 1), (V{0, 1}));
  EXPECT_EQ(table(kv, 2), (V{2, 3, 4}));
  kv.commit(2, 10);  // identical full rows are not deduplicated either
  EXPECT_EQ(table(kv, 2), (V{2, 3, 4}));
  for (int32_t blk = 0; blk < 5; ++blk) EXPECT_EQ(kv.ref_count(blk), 1) << "block " << blk;
  kv.check_invariants();
}

TEST(KvNoPrefixCache, DecodeGrowthAndReleaseFreeEveryBlock) {
  KvManager kv = no_cache(4, 2);
  Shadow sh(kv, 4);
  ASSERT_TRUE(kv.match_and_allocate(1, V{7, 8, 9}));
  prefill(kv, sh, 1);
  decode(kv, sh, 1, V{10, 11, 12});  // positions 3..5: rows 1 and 2
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2}));
  EXPECT_TRUE(sh.holds(1, 6));
  EXPECT_FALSE(kv.append_tokens(1, V{13, 14, 15}));  // needs 2 blocks, 1 is left
  ASSERT_TRUE(kv.append_tokens(1, V{13}));
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2, 3}));
  kv.release(1);
  EXPECT_EQ(kv.free_order(), (V{0, 1, 2, 3}));
  EXPECT_EQ(kv.stats().free_blocks, 4);
  // A whole-pool prompt fits again: nothing was kept that needed evicting.
  auto a = kv.match_and_allocate(2, V{7, 8, 9, 10, 11, 12, 13, 14});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 0);
  EXPECT_EQ(table(kv, 2), (V{0, 1, 2, 3}));
  kv.clear();  // a no-op without cached blocks
  EXPECT_EQ(kv.stats().used_blocks, 4);
  kv.check_invariants();
}
