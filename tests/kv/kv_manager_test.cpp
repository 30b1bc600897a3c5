// Exact block ids, reference counts, copy ops and eviction order of KvManager on small pools.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "kv_test_util.h"

using namespace efim;
using namespace efim::kvtest;
using V = std::vector<int32_t>;

namespace {

V refs(const KvManager& kv, int32_t n_blocks) {
  V r;
  for (int32_t b = 0; b < n_blocks; ++b) r.push_back(kv.ref_count(b));
  return r;
}

// Everything observable about the pool, to show that a failed call changed nothing.
struct Snapshot {
  KvStats st;
  V free, lru, ref;
  std::vector<bool> cached;
  bool operator==(const Snapshot& o) const {
    return st.free_blocks == o.st.free_blocks && st.cached_blocks == o.st.cached_blocks &&
           st.used_blocks == o.st.used_blocks &&
           st.prefix_query_tokens == o.st.prefix_query_tokens &&
           st.prefix_hit_tokens == o.st.prefix_hit_tokens && free == o.free && lru == o.lru &&
           ref == o.ref && cached == o.cached;
  }
};

Snapshot snapshot(const KvManager& kv, int32_t n_blocks) {
  Snapshot s{kv.stats(), kv.free_order(), kv.eviction_order(), refs(kv, n_blocks), {}};
  for (int32_t b = 0; b < n_blocks; ++b) s.cached.push_back(kv.is_cached(b));
  return s;
}

}  // namespace

TEST(KvManager, RejectsBadOptionsAndCalls) {
  EXPECT_THROW(KvManager({.n_blocks = 0, .block_size = 16}), Error);
  EXPECT_THROW(KvManager({.n_blocks = 4, .block_size = 0}), Error);
  EXPECT_THROW(KvManager({.n_blocks = 1 << 28, .block_size = 16}), Error);  // slot overflow
  KvManager kv({.n_blocks = 4, .block_size = 4});
  EXPECT_THROW(kv.match_and_allocate(1, V{}), Error);
  ASSERT_TRUE(kv.match_and_allocate(1, V{1, 2}));
  EXPECT_THROW(kv.match_and_allocate(1, V{1, 2}), Error);  // duplicate id
  EXPECT_THROW(kv.commit(1, 3), Error);                    // beyond its tokens
  EXPECT_THROW(kv.commit(2, 1), Error);                    // unknown id
  EXPECT_THROW(kv.slot(1, 2), Error);
  EXPECT_EQ(kv_blocks_for_budget(1000, 300), 3);
  EXPECT_THROW(kv_blocks_for_budget(100, 300), Error);
  EXPECT_THROW(kv_blocks_for_budget(100, 0), Error);
}

TEST(KvManager, AllocatesBlocksInOrder) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  auto a = kv.match_and_allocate(1, iota_tokens(10, 100));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 0);
  EXPECT_TRUE(a->copies.empty());
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2}));
  EXPECT_EQ(a->slots, iota_tokens(10, 0));
  auto b = kv.match_and_allocate(2, iota_tokens(5, 200));
  ASSERT_TRUE(b);
  EXPECT_EQ(table(kv, 2), (V{3, 4}));
  EXPECT_EQ(b->slots, (V{12, 13, 14, 15, 16}));
  EXPECT_EQ(refs(kv, 8), (V{1, 1, 1, 1, 1, 0, 0, 0}));
  KvStats st = kv.stats();
  EXPECT_EQ(st.total_blocks, 8);
  EXPECT_EQ(st.used_blocks, 5);
  EXPECT_EQ(st.free_blocks, 3);
  EXPECT_EQ(st.cached_blocks, 0);
  EXPECT_DOUBLE_EQ(st.usage(), 5.0 / 8.0);
  kv.check_invariants();
}

TEST(KvManager, GrowsAcrossBlockBoundary) {
  KvManager kv({.n_blocks = 4, .block_size = 4});
  ASSERT_TRUE(kv.match_and_allocate(1, V{10, 11, 12}));
  kv.commit(1, 3);
  EXPECT_TRUE(kv.is_cached(0));  // partial row is cacheable at once
  ASSERT_TRUE(kv.append_tokens(1, V{13}));
  EXPECT_EQ(table(kv, 1), (V{0}));
  kv.commit(1, 4);
  ASSERT_TRUE(kv.append_tokens(1, V{14}));
  EXPECT_EQ(table(kv, 1), (V{0, 1}));
  EXPECT_EQ(kv.slot(1, 4), 4);
  EXPECT_FALSE(kv.is_cached(1));  // allocated, not computed yet
  kv.commit(1, 5);
  EXPECT_TRUE(kv.is_cached(1));
  ASSERT_TRUE(kv.append_tokens(1, V{15, 16, 17, 18, 19, 20, 21, 22}));  // positions 5..12
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2, 3}));
  EXPECT_EQ(kv.slots(1), iota_tokens(13, 0));
  kv.check_invariants();
  EXPECT_EQ(kv.peek(V{10, 11, 12, 13, 14, 15}), 5);  // only computed tokens are cached
}

TEST(KvManager, TwoSequencesShareAPrefix) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p1 = iota_tokens(10, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p1));
  kv.commit(1, 10);
  V p2 = concat(V(p1.begin(), p1.begin() + 8), V{7, 8, 9});
  auto a = kv.match_and_allocate(2, p2);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 8);
  EXPECT_TRUE(a->copies.empty());  // diverges on a block boundary
  EXPECT_EQ(table(kv, 2), (V{0, 1, 3}));
  EXPECT_EQ(refs(kv, 8), (V{2, 2, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(a->slots, (V{0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14}));
  kv.release(1);
  EXPECT_EQ(refs(kv, 8), (V{1, 1, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(kv.stats().cached_blocks, 1);  // block 2: sequence 1's last row
  kv.check_invariants();
}

TEST(KvManager, MidBlockMatchCopiesOnWrite) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p1 = iota_tokens(10, 100);  // rows: [100..103] [104..107] [108 109]
  ASSERT_TRUE(kv.match_and_allocate(1, p1));
  kv.commit(1, 10);
  kv.release(1);
  EXPECT_EQ(kv.eviction_order(), (V{2}));
  V p2{100, 101, 102, 103, 104, 105, 50, 51};  // diverges at position 6, inside row 1
  auto a = kv.match_and_allocate(2, p2);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 6);
  EXPECT_EQ(table(kv, 2), (V{0, 3}));
  EXPECT_EQ(a->copies, (std::vector<SlotCopy>{{4, 12}, {5, 13}}));
  EXPECT_EQ(a->slots, (V{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(refs(kv, 8), (V{1, 1, 0, 1, 0, 0, 0, 0}));  // block 1 pinned as copy source
  kv.check_invariants();
  kv.commit(2, 8);
  EXPECT_EQ(refs(kv, 8), (V{1, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_TRUE(kv.is_cached(1) && kv.is_cached(2) && kv.is_cached(3));
  EXPECT_EQ(kv.peek(p1), 10);  // both branches stay hittable
  EXPECT_EQ(kv.peek(p2), 8);
  KvStats st = kv.stats();
  EXPECT_EQ(st.prefix_query_tokens, 18);
  EXPECT_EQ(st.prefix_hit_tokens, 6);
  kv.check_invariants();
}

TEST(KvManager, AdoptsUnreferencedPartialRowWithoutCopy) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p1 = iota_tokens(6, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p1));
  kv.commit(1, 6);
  kv.release(1);
  auto a = kv.match_and_allocate(2, concat(p1, V{106, 107, 108}));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 6);
  EXPECT_TRUE(a->copies.empty());
  EXPECT_EQ(table(kv, 2), (V{0, 1, 2}));
  kv.commit(2, 9);
  EXPECT_EQ(kv.peek(iota_tokens(9, 100)), 9);
  kv.check_invariants();
}

TEST(KvManager, FullyCachedPromptRecomputesOnlyItsLastToken) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p = iota_tokens(8, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));
  kv.commit(1, 8);
  kv.release(1);
  auto a = kv.match_and_allocate(2, p);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 7);  // position 7 is computed again for its logits
  EXPECT_EQ(table(kv, 2), (V{0, 2}));
  EXPECT_EQ(a->copies, (std::vector<SlotCopy>{{4, 8}, {5, 9}, {6, 10}}));
  kv.release(2);
  auto b = kv.match_and_allocate(3, concat(p, V{1}));  // 8 cached rows end on a boundary
  ASSERT_TRUE(b);
  EXPECT_EQ(b->n_cached, 8);
  EXPECT_TRUE(b->copies.empty());
  EXPECT_EQ(table(kv, 3), (V{0, 1, 3}));
  auto c = kv.match_and_allocate(4, V{100});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->n_cached, 0);
  kv.check_invariants();
}

TEST(KvManager, ReleaseKeepsComputedContentHittable) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p = iota_tokens(10, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));
  kv.commit(1, 7);  // only 7 of 10 computed (e.g. cancelled mid prefill)
  kv.release(1);
  KvStats st = kv.stats();
  EXPECT_EQ(st.used_blocks, 0);
  EXPECT_EQ(st.cached_blocks, 2);  // rows 0, 1 (3 tokens)
  EXPECT_EQ(st.free_blocks, 6);
  EXPECT_EQ(kv.free_order(), (V{3, 4, 5, 6, 7, 2}));
  EXPECT_EQ(kv.peek(p), 7);
  auto a = kv.match_and_allocate(2, p);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->n_cached, 7);
  kv.check_invariants();
}

TEST(KvManager, DeduplicatesRowsComputedTwice) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p = iota_tokens(6, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));  // both admitted before either computed
  ASSERT_TRUE(kv.match_and_allocate(2, p));
  EXPECT_EQ(table(kv, 1), (V{0, 1}));
  EXPECT_EQ(table(kv, 2), (V{2, 3}));
  kv.commit(1, 6);
  kv.commit(2, 6);
  EXPECT_EQ(table(kv, 2), (V{0, 3}));  // full row 0 shared, its copy freed
  EXPECT_TRUE(kv.is_cached(3));        // its partial row too, a twin of block 1 for now
  EXPECT_EQ(refs(kv, 8), (V{2, 1, 0, 1, 0, 0, 0, 0}));
  ASSERT_TRUE(kv.append_tokens(1, V{106, 107}));
  ASSERT_TRUE(kv.append_tokens(2, V{106, 107}));
  kv.commit(1, 8);
  kv.commit(2, 8);
  EXPECT_EQ(table(kv, 2), (V{0, 1}));
  EXPECT_EQ(refs(kv, 8), (V{2, 2, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(kv.free_order(), (V{4, 5, 6, 7, 2, 3}));
  kv.check_invariants();
}

TEST(KvManager, EvictsOldestUnreferencedLeafFirst) {
  KvManager kv({.n_blocks = 6, .block_size = 4});
  auto run = [&](SeqId id, const V& p) {
    ASSERT_TRUE(kv.match_and_allocate(id, p));
    kv.commit(id, int32_t(p.size()));
    kv.release(id);
  };
  V a = iota_tokens(8, 100), b = iota_tokens(4, 200), c = iota_tokens(8, 300);
  run(1, a);  // blocks 0, 1
  run(2, b);  // block 2
  run(3, c);  // blocks 3, 4
  EXPECT_EQ(kv.eviction_order(), (V{1, 2, 4}));
  ASSERT_TRUE(kv.match_and_allocate(4, iota_tokens(12, 400)));
  // Free block 5 first, then leaf 1 (oldest); that exposes block 0, as old as it: next.
  EXPECT_EQ(table(kv, 4), (V{5, 1, 0}));
  EXPECT_EQ(kv.eviction_order(), (V{2, 4}));
  EXPECT_EQ(kv.peek(a), 0);
  EXPECT_EQ(kv.peek(b), 4);
  EXPECT_EQ(kv.peek(c), 8);
  // Sequence 5 shares c's first row: block 3 is now referenced, its leaf 4 is not.
  auto e = kv.match_and_allocate(5, concat(V(c.begin(), c.begin() + 4), V{9, 9, 9, 9, 9}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->n_cached, 4);
  EXPECT_EQ(table(kv, 5), (V{3, 2, 4}));
  EXPECT_EQ(kv.stats().free_blocks + kv.stats().cached_blocks, 0);
  kv.check_invariants();
}

TEST(KvManager, NeverEvictsReferencedBlocks) {
  KvManager kv({.n_blocks = 4, .block_size = 4});
  ASSERT_TRUE(kv.match_and_allocate(1, iota_tokens(8, 100)));
  kv.commit(1, 8);  // running: blocks 0, 1
  ASSERT_TRUE(kv.match_and_allocate(2, iota_tokens(8, 200)));
  kv.commit(2, 8);
  kv.release(2);  // cached: blocks 2, 3
  ASSERT_TRUE(kv.match_and_allocate(3, iota_tokens(5, 300)));
  EXPECT_EQ(table(kv, 3), (V{3, 2}));
  EXPECT_EQ(refs(kv, 4), (V{1, 1, 1, 1}));
  Snapshot before = snapshot(kv, 4);
  EXPECT_FALSE(kv.match_and_allocate(4, V{1}));
  EXPECT_FALSE(kv.append_tokens(3, V{1, 2, 3, 4}));  // needs a third block
  EXPECT_TRUE(snapshot(kv, 4) == before);
  EXPECT_TRUE(kv.append_tokens(3, V{1, 2, 3}));  // fits in its last block
  EXPECT_EQ(kv.peek(iota_tokens(8, 100)), 8);
  kv.check_invariants();
}

TEST(KvManager, FailedAllocationChangesNothing) {
  KvManager kv({.n_blocks = 3, .block_size = 4});
  V p = iota_tokens(8, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));
  kv.commit(1, 8);
  kv.release(1);  // blocks 0, 1 cached, block 2 free
  Snapshot before = snapshot(kv, 3);
  // Reuses rows 0 and 1 but needs two more: only block 2 is left once 0 and 1 are pinned.
  EXPECT_FALSE(kv.match_and_allocate(2, concat(p, iota_tokens(8, 500))));
  EXPECT_TRUE(snapshot(kv, 3) == before);
  EXPECT_FALSE(kv.contains(2));
  auto ok = kv.match_and_allocate(2, concat(p, iota_tokens(4, 500)));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->n_cached, 8);
  EXPECT_EQ(table(kv, 2), (V{0, 1, 2}));
  kv.check_invariants();
}

TEST(KvManager, ClearRestoresThePool) {
  KvManager kv({.n_blocks = 16, .block_size = 4});
  Shadow sh(kv, 16);
  for (SeqId id = 1; id <= 3; ++id) {
    ASSERT_TRUE(kv.match_and_allocate(id, iota_tokens(9 + int32_t(id), 10 * int32_t(id))));
    prefill(kv, sh, id);
  }
  kv.release(1);
  kv.release(2);
  kv.clear();  // sequence 3 is still running: its blocks stay
  EXPECT_EQ(kv.stats().cached_blocks, 0);
  EXPECT_EQ(kv.stats().used_blocks, 3);
  EXPECT_TRUE(kv.eviction_order().empty());
  EXPECT_EQ(kv.peek(iota_tokens(10, 10)), 0);
  EXPECT_EQ(kv.peek(iota_tokens(12, 30)), 12);
  kv.release(3);
  kv.clear();
  KvStats st = kv.stats();
  EXPECT_EQ(st.free_blocks, 16);
  EXPECT_EQ(st.cached_blocks + st.used_blocks, 0);
  EXPECT_EQ(kv.peek(iota_tokens(12, 30)), 0);
  kv.check_invariants();
}

TEST(KvManager, DropsADominatedPartialRowOnRelease) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  V p = iota_tokens(6, 100);
  ASSERT_TRUE(kv.match_and_allocate(1, p));
  ASSERT_TRUE(kv.match_and_allocate(2, p));
  kv.commit(1, 6);
  kv.commit(2, 6);
  ASSERT_TRUE(kv.append_tokens(1, V{106}));
  kv.commit(1, 7);  // block 1 now holds 104 105 106; block 3 holds 104 105
  kv.release(2);
  EXPECT_FALSE(kv.is_cached(3));  // nothing in it that block 1 lacks: freed at once
  EXPECT_EQ(kv.free_order(), (V{4, 5, 6, 7, 2, 3}));
  kv.release(1);
  EXPECT_TRUE(kv.is_cached(1));
  EXPECT_EQ(kv.eviction_order(), (V{1}));
  EXPECT_EQ(kv.peek(concat(p, V{106, 9})), 7);
  kv.check_invariants();
}

// A rejected speculative draft: its rows return to the free list, the computed part stays
// cached and hittable, and the sequence grows again from the kept tokens.
TEST(KvManager, TruncateDropsUncomputedDraftRows) {
  KvManager kv({.n_blocks = 6, .block_size = 4});
  ASSERT_TRUE(kv.match_and_allocate(1, V{10, 11, 12, 13, 14}));  // rows 0, 1
  kv.commit(1, 5);
  ASSERT_TRUE(kv.append_tokens(1, V{15, 90, 91, 92, 93}));  // 15 + a 4-token draft: rows 1, 2
  EXPECT_EQ(table(kv, 1), (V{0, 1, 2}));
  EXPECT_THROW(kv.truncate(1, 4), Error);   // below the 5 computed
  EXPECT_THROW(kv.truncate(1, 11), Error);  // beyond the 10 held
  kv.truncate(1, 7);  // 15 and the first draft token (90) verified
  EXPECT_EQ(table(kv, 1), (V{0, 1}));
  EXPECT_EQ(refs(kv, 6), (V{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(kv.stats().free_blocks, 4);
  EXPECT_EQ(kv.free_order().back(), 2);  // the draft's block is free again, not cached
  kv.commit(1, 7);
  kv.check_invariants();
  EXPECT_EQ(kv.peek(V{10, 11, 12, 13, 14, 15, 90, 91}), 7);  // 91 was never computed
  ASSERT_TRUE(kv.append_tokens(1, V{50, 51}));
  EXPECT_EQ(V(kv.tokens(1).begin(), kv.tokens(1).end()), (V{10, 11, 12, 13, 14, 15, 90, 50, 51}));
  // (block 2 went to the back of the free list, so the next row takes block 3)
  EXPECT_EQ(table(kv, 1), (V{0, 1, 3}));
  kv.truncate(1, 7);  // a truncate within the last row frees nothing
  EXPECT_EQ(table(kv, 1), (V{0, 1}));
  kv.release(1);
  kv.check_invariants();
  const KvStats st = kv.stats();
  EXPECT_EQ(st.used_blocks, 0);
  EXPECT_EQ(st.free_blocks + st.cached_blocks, 6);
}
