// Scheduler: exact plans (which sequences, how many tokens) and exact KV block ids, with no
// model: the tests play the runner's part (on_computed, append_token).
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "base/error.h"

namespace efim {
namespace {

std::vector<int32_t> iota_tokens(int32_t n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> table(const KvManager& kv, SeqId id) {
  auto t = kv.block_table(id);
  return {t.begin(), t.end()};
}

// Plays the runner: every planned chunk is computed, sampled chunks get `next` appended.
void run_plan(Scheduler& s, const StepPlan& plan, int32_t next = 7) {
  for (const PlannedSeq& p : plan.seqs) {
    s.on_computed(p);
    if (p.sample) s.append_token(p.id, next);
  }
}

TEST(Scheduler, ChunkedPrefillThenDecodeUnderOneBudget) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  Scheduler s({.max_step_tokens = 8, .max_running = 4}, kv);
  s.add(1, iota_tokens(10, 100));
  s.add(2, iota_tokens(6, 200));

  // Step 1: the budget of 8 goes to the first 8 prompt tokens of 1; 2 waits (no budget left).
  StepPlan p1 = s.schedule();
  EXPECT_EQ(p1.seqs, (std::vector<PlannedSeq>{{1, 0, 8, false}}));
  EXPECT_EQ(p1.admitted, (std::vector<SeqId>{1}));
  EXPECT_EQ(p1.n_tokens, 8);
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{2}));
  run_plan(s, p1);
  EXPECT_EQ(kv.n_computed(1), 8);

  // Step 2: the last 2 prompt tokens of 1 (sampling), then 2 is admitted with the other 6.
  StepPlan p2 = s.schedule();
  EXPECT_EQ(p2.seqs, (std::vector<PlannedSeq>{{1, 8, 2, true}, {2, 0, 6, true}}));
  EXPECT_EQ(p2.admitted, (std::vector<SeqId>{2}));
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{3, 4}));
  run_plan(s, p2);

  // Step 3: both decode, one token each, admission order.
  StepPlan p3 = s.schedule();
  EXPECT_EQ(p3.seqs, (std::vector<PlannedSeq>{{1, 10, 1, true}, {2, 6, 1, true}}));
  EXPECT_EQ(p3.n_tokens, 2);
  EXPECT_TRUE(p3.admitted.empty());
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1, 2}));  // 11 tokens fit 3 blocks
  run_plan(s, p3);
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{3, 4}));
  // Step 4: 2 grows to its 9th token: a new block.
  StepPlan p4 = s.schedule();
  EXPECT_EQ(p4.seqs, (std::vector<PlannedSeq>{{1, 11, 1, true}, {2, 7, 1, true}}));
  run_plan(s, p4);
  StepPlan p5 = s.schedule();
  EXPECT_EQ(p5.seqs, (std::vector<PlannedSeq>{{1, 12, 1, true}, {2, 8, 1, true}}));
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1, 2, 5}));
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{3, 4, 6}));
  kv.check_invariants();
}

TEST(Scheduler, DecodeTokensComeBeforePromptChunks) {
  KvManager kv({.n_blocks = 16, .block_size = 4});
  Scheduler s({.max_step_tokens = 6, .max_running = 4}, kv);
  s.add(1, iota_tokens(3, 100));
  run_plan(s, s.schedule());  // 1 computes its prompt and samples
  s.add(2, iota_tokens(20, 200));
  StepPlan p = s.schedule();  // 1 decodes first, 2 gets the remaining 5
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{1, 3, 1, true}, {2, 0, 5, false}}));
  run_plan(s, p);
  s.add(3, iota_tokens(5, 300));
  // Now 2 is admitted earlier than 3; 1 decodes, 2 takes the rest, 3 is admitted with none.
  StepPlan q = s.schedule();
  EXPECT_EQ(q.seqs, (std::vector<PlannedSeq>{{1, 4, 1, true}, {2, 5, 5, false}}));
  EXPECT_TRUE(q.admitted.empty());  // no budget left: 3 waits
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{3}));
}

TEST(Scheduler, MaxRunningLimitsAdmission) {
  KvManager kv({.n_blocks = 16, .block_size = 4});
  Scheduler s({.max_step_tokens = 100, .max_running = 2}, kv);
  for (SeqId id = 1; id <= 3; ++id) s.add(id, iota_tokens(4, int32_t(id) * 100));
  StepPlan p = s.schedule();
  EXPECT_EQ(p.admitted, (std::vector<SeqId>{1, 2}));
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{3}));
  run_plan(s, p);
  s.remove(1);
  StepPlan q = s.schedule();
  EXPECT_EQ(q.seqs, (std::vector<PlannedSeq>{{2, 4, 1, true}, {3, 0, 4, true}}));
  EXPECT_EQ(q.admitted, (std::vector<SeqId>{3}));
}

TEST(Scheduler, AllocationFailureWaitsInFifoOrder) {
  KvManager kv({.n_blocks = 4, .block_size = 4});
  Scheduler s({.max_step_tokens = 100, .max_running = 8}, kv);
  s.add(1, iota_tokens(12, 100));  // 3 blocks
  s.add(2, iota_tokens(8, 200));   // 2 blocks: does not fit beside 1
  s.add(3, iota_tokens(2, 300));   // 1 block: would fit, but FIFO keeps it behind 2
  StepPlan p = s.schedule();
  EXPECT_EQ(p.admitted, (std::vector<SeqId>{1}));
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{1, 0, 12, true}}));
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{2, 3}));
  run_plan(s, p);
  s.remove(1);  // its 3 blocks become cached (evictable)
  StepPlan q = s.schedule();
  EXPECT_EQ(q.admitted, (std::vector<SeqId>{2, 3}));
  EXPECT_EQ(q.seqs, (std::vector<PlannedSeq>{{2, 0, 8, true}, {3, 0, 2, true}}));
  // 2 takes the free block 3, then evicts the LRU leaf of 1's path (block 2, its last row);
  // 3 evicts the next exposed leaf (block 1).
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(table(kv, 3), (std::vector<int32_t>{1}));
  kv.check_invariants();
}

TEST(Scheduler, PrefixHitStartsAtTheCachedTokens) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  Scheduler s({.max_step_tokens = 100, .max_running = 8}, kv);
  std::vector<int32_t> a = iota_tokens(10, 100);
  s.add(1, a);
  run_plan(s, s.schedule());
  s.remove(1);  // rows [100..103], [104..107], [108, 109] stay cached in blocks 0, 1, 2
  std::vector<int32_t> b(a.begin(), a.begin() + 9);
  b.push_back(999);  // shares 9 tokens, diverges inside row 2
  b.push_back(998);
  s.add(2, b);
  StepPlan p = s.schedule();
  // Rows 0 and 1 are shared, row 2's first token is copied into a fresh block (copy-on-write
  // of the partly matched block 2 at offset 0).
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{2, 9, 2, true}}));
  EXPECT_EQ(s.n_cached_at_admission(2), 9);
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(p.copies, (std::vector<SlotCopy>{{2 * 4 + 0, 3 * 4 + 0}}));
}

TEST(Scheduler, PreemptsTheLastAdmittedWhenARunningSequenceCannotGrow) {
  KvManager kv({.n_blocks = 4, .block_size = 4});
  Scheduler s({.max_step_tokens = 64, .max_running = 8}, kv);
  s.add(1, iota_tokens(8, 100));  // blocks 0, 1
  s.add(2, iota_tokens(8, 200));  // blocks 2, 3
  StepPlan p1 = s.schedule();
  EXPECT_EQ(p1.seqs, (std::vector<PlannedSeq>{{1, 0, 8, true}, {2, 0, 8, true}}));
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{2, 3}));
  run_plan(s, p1, 50);  // both sampled token 50: each now wants a 9th token, a 3rd block

  StepPlan p2 = s.schedule();
  EXPECT_EQ(p2.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(p2.seqs, (std::vector<PlannedSeq>{{1, 8, 1, true}}));
  EXPECT_TRUE(p2.admitted.empty());  // 2 waits one step at the front of the queue
  EXPECT_EQ(s.waiting(), (std::deque<SeqId>{2}));
  EXPECT_FALSE(s.is_running(2));
  EXPECT_EQ(s.n_computed(2), 0);
  EXPECT_EQ(s.tokens(2).size(), 9u);  // tokens kept, including the sampled one
  // 2's released rows were cached; 1's growth evicted its last row (block 3).
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_TRUE(kv.is_cached(2));
  EXPECT_EQ(kv.ref_count(2), 0);
  run_plan(s, p2, 51);

  s.remove(1);  // 1 finishes: 2 is readmitted and recovers its cached first row
  StepPlan p3 = s.schedule();
  EXPECT_EQ(p3.admitted, (std::vector<SeqId>{2}));
  EXPECT_EQ(p3.seqs, (std::vector<PlannedSeq>{{2, 4, 5, true}}));
  EXPECT_EQ(table(kv, 2), (std::vector<int32_t>{2, 3, 1}));
  EXPECT_EQ(s.n_preemptions(2), 1);
  EXPECT_EQ(s.n_cached_at_admission(2), 0);  // reported for the first admission
  kv.check_invariants();
}

TEST(Scheduler, RejectsASequenceLargerThanThePool) {
  KvManager kv({.n_blocks = 2, .block_size = 4});
  Scheduler s({.max_step_tokens = 64, .max_running = 8}, kv);
  s.add(1, iota_tokens(9, 100));  // 9 tokens > 8 slots
  s.add(2, iota_tokens(3, 200));
  StepPlan p = s.schedule();
  EXPECT_EQ(p.rejected, (std::vector<SeqId>{1}));
  EXPECT_EQ(p.admitted, (std::vector<SeqId>{2}));
  s.remove(1);
  EXPECT_FALSE(s.contains(1));
}

TEST(Scheduler, LoneSequenceThatOutgrowsThePoolPreemptsItselfAndIsRejected) {
  KvManager kv({.n_blocks = 2, .block_size = 4});
  Scheduler s({.max_step_tokens = 64, .max_running = 8}, kv);
  s.add(1, iota_tokens(8, 100));
  run_plan(s, s.schedule());  // 9 tokens wanted now
  StepPlan p = s.schedule();
  EXPECT_EQ(p.preempted, (std::vector<SeqId>{1}));
  EXPECT_EQ(p.rejected, (std::vector<SeqId>{1}));  // 9 tokens can never fit 8 slots
  EXPECT_TRUE(p.empty());
  EXPECT_TRUE(s.waiting().empty());
}

TEST(Scheduler, RemoveFreesBlocksAndBadInputThrows) {
  KvManager kv({.n_blocks = 4, .block_size = 4});
  Scheduler s({.max_step_tokens = 64, .max_running = 8}, kv);
  s.add(1, iota_tokens(5, 100));
  s.schedule();  // admitted, nothing computed yet
  EXPECT_EQ(kv.stats().used_blocks, 2);
  s.remove(1);
  EXPECT_EQ(kv.stats().used_blocks, 0);
  EXPECT_EQ(kv.stats().free_blocks, 4);  // nothing committed, nothing cached
  EXPECT_THROW(s.add(2, {}), Error);
  s.add(3, {1});
  EXPECT_THROW(s.add(3, {1}), Error);
  EXPECT_THROW(Scheduler({.max_step_tokens = 0}, kv), Error);
  EXPECT_THROW(s.on_computed({3, 0, 1, true}), Error);  // not running
}

// A draft is planned with the token before it (logits at each), verified, and its rejected
// tail leaves the sequence and the KV blocks; the accepted part is computed and cached.
TEST(Scheduler, DraftIsPlannedWithItsTokenAndTheRejectedTailIsDropped) {
  KvManager kv({.n_blocks = 8, .block_size = 4});
  Scheduler s({.max_step_tokens = 16, .max_running = 4}, kv);
  s.add(1, iota_tokens(6, 100));
  EXPECT_THROW(s.set_draft(1, std::vector<int32_t>{50}), Error);  // waiting, not decoding
  run_plan(s, s.schedule());  // 6 computed, token 7 appended
  s.set_draft(1, std::vector<int32_t>{50, 51, 52});
  EXPECT_THROW(s.set_draft(1, std::vector<int32_t>{53}), Error);  // one draft at a time
  EXPECT_THROW(s.append_token(1, 9), Error);                      // not while drafting
  StepPlan p = s.schedule();
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{1, 6, 4, true, 3}}));
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1, 2}));  // 10 tokens
  EXPECT_THROW(s.on_computed(p.seqs[0]), Error);  // a draft is verified, not just computed
  s.on_verified(p.seqs[0], 1);                   // 50 accepted, 51 rejected
  EXPECT_EQ(s.n_computed(1), 8);
  EXPECT_EQ(s.n_draft(1), 0);
  EXPECT_EQ(std::vector<int32_t>(s.tokens(1).begin(), s.tokens(1).end()),
            (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 7, 50}));
  EXPECT_EQ(table(kv, 1), (std::vector<int32_t>{0, 1}));  // block 2 is free again
  EXPECT_EQ(kv.stats().free_blocks, 6);
  EXPECT_EQ(kv.peek(std::vector<int32_t>{100, 101, 102, 103, 104, 105, 7, 50, 51}), 8);
  s.append_token(1, 60);  // the token drawn where 51 was rejected
  EXPECT_EQ(s.schedule().seqs, (std::vector<PlannedSeq>{{1, 8, 1, true, 0}}));
  kv.check_invariants();
}

// Decode tokens keep their place in the budget; drafts get what is left, in admission order.
TEST(Scheduler, DraftsAreCutToTheStepBudget) {
  KvManager kv({.n_blocks = 16, .block_size = 4});
  Scheduler s({.max_step_tokens = 7, .max_running = 4}, kv);
  s.add(1, iota_tokens(3, 100));
  s.add(2, iota_tokens(3, 200));
  run_plan(s, s.schedule());
  s.set_draft(1, std::vector<int32_t>{1, 2, 3, 4});
  s.set_draft(2, std::vector<int32_t>{5, 6, 7, 8});
  StepPlan p = s.schedule();
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{1, 3, 5, true, 4}, {2, 3, 2, true, 1}}));
  EXPECT_EQ(p.n_tokens, 7);
  EXPECT_EQ(s.tokens(2).size(), 5u);  // 7, then the one draft token left
  s.on_verified(p.seqs[0], 4);
  s.on_verified(p.seqs[1], 0);
  EXPECT_EQ(s.n_computed(1), 8);
  EXPECT_EQ(s.n_computed(2), 4);
  kv.check_invariants();
}

// A draft never preempts: without blocks for it, it is dropped; preemption drops a draft too.
TEST(Scheduler, DraftsAreDroppedRatherThanPreemptAndByPreemption) {
  KvManager kv({.n_blocks = 3, .block_size = 4});
  Scheduler s({.max_step_tokens = 16, .max_running = 4}, kv);
  s.add(1, iota_tokens(3, 100));  // block 0
  s.add(2, iota_tokens(7, 200));  // blocks 1, 2
  run_plan(s, s.schedule());      // 1: 4 tokens, 2: 8 tokens: the pool is full
  s.set_draft(1, std::vector<int32_t>{1, 2});
  StepPlan p = s.schedule();
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(p.seqs, (std::vector<PlannedSeq>{{1, 3, 1, true, 0}, {2, 7, 1, true, 0}}));
  EXPECT_EQ(s.n_draft(1), 0);
  run_plan(s, p);  // 1: 5 tokens (needs a block), 2: 9 tokens
  // 2 (admitted last) holds a draft when 1's growth preempts it: it loses the draft.
  KvManager kv2({.n_blocks = 2, .block_size = 4});
  Scheduler s2({.max_step_tokens = 16, .max_running = 4}, kv2);
  s2.add(1, iota_tokens(4, 100));  // block 0
  s2.add(2, iota_tokens(3, 200));  // block 1
  run_plan(s2, s2.schedule());     // 1: 5 tokens, 2: 4 tokens
  s2.set_draft(2, std::vector<int32_t>{1, 2, 3});
  StepPlan p2 = s2.schedule();
  EXPECT_EQ(p2.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(p2.seqs, (std::vector<PlannedSeq>{{1, 4, 1, true, 0}}));
  EXPECT_EQ(s2.n_draft(2), 0);
  EXPECT_EQ(std::vector<int32_t>(s2.tokens(2).begin(), s2.tokens(2).end()),
            (std::vector<int32_t>{200, 201, 202, 7}));
  kv2.check_invariants();
}

}  // namespace
}  // namespace efim
