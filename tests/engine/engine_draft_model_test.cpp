// Speculative decoding with a draft model (engine/draft_model.h) on the tiny random Llama:
// DraftModel proposes the draft model's greedy continuation, reuses the prefix a session shares
// with the next tokens and bounds sessions, context, end tokens and confidence; through the
// engine, greedy output equals ContiguousSession's whether the draft model is the model itself
// (every draft accepted) or another one (most rejected), alone and batched under small budgets,
// seeded sampling draws the same tokens, and a cancelled request gives back its blocks and its
// session.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine_test_fixture.h"

namespace efim {
namespace {

class DraftModelTest : public EngineTest {
 protected:
  static void SetUpTestSuite() {
    EngineTest::SetUpTestSuite();
    if (::testing::Test::HasFatalFailure() || !model_) return;
    other_dir_ = new test::TempDir();
    // The same architecture and vocabulary, other weights: a draft model that is mostly wrong.
    ASSERT_TRUE(test::run_command(test::kPython + " " +
                                  test::source_path("scripts/make_tiny_model.py") + " " +
                                  other_dir_->path() + " --kind llama --dtype f32 --seed 99"));
    LoadOptions lo;
    lo.n_threads = 1;
    same_ = Model::load(dir_->path(), lo).release();  // the model's own weights
    other_ = Model::load(other_dir_->path(), lo).release();
  }
  static void TearDownTestSuite() {
    delete same_;
    delete other_;
    delete other_dir_;
    same_ = other_ = nullptr;
    other_dir_ = nullptr;
    EngineTest::TearDownTestSuite();
  }
  void SetUp() override {
    EngineTest::SetUp();
    ASSERT_NE(same_, nullptr);
    ASSERT_NE(other_, nullptr);
  }

  static EngineOptions drafting(EngineOptions o, Model* draft, int32_t sessions = 4) {
    o.speculative.enabled = true;
    o.speculative.ngram = false;  // the draft model alone
    o.speculative.draft_model = draft;
    o.speculative.draft.max_sessions = sessions;
    o.speculative.draft.p_min = 0.0f;  // draft as long as the length allows
    return o;
  }

  static std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b,
                                     size_t n) {
    a.insert(a.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    return a;
  }

  inline static test::TempDir* other_dir_ = nullptr;
  inline static Model* same_ = nullptr;
  inline static Model* other_ = nullptr;
};

TEST_F(DraftModelTest, ProposesTheGreedyContinuationAndKeepsTheCommonPrefix) {
  DraftModelOptions o;
  o.p_min = 0.0f;
  o.chunk = 7;  // catching up in several passes
  DraftModel dm(*same_, o);
  const std::vector<int32_t> p = prompt(20, 3);
  const std::vector<int32_t> ref = reference(p, 12);
  // The sequence so far is the prompt (its last token not computed by the target yet).
  EXPECT_EQ(dm.propose(1, p, 6), std::vector<int32_t>(ref.begin(), ref.begin() + 6));
  EXPECT_EQ(dm.stats().evaluated, 20 + 5);  // the prompt, then drafts 1-5 (6 is never fed)
  EXPECT_EQ(dm.stats().reused, 0);
  // The target accepted 2 drafts and drew the third: only that one is new to the session.
  const std::vector<int32_t> t2 = concat(p, ref, 3);
  EXPECT_EQ(dm.propose(1, t2, 4), reference(t2, 4));
  EXPECT_EQ(dm.stats().evaluated, 25 + 1 + 3);  // the third again, then drafts 1-3
  // A token the session does not hold (the target rejected the draft): cut back to before it.
  std::vector<int32_t> t3 = concat(p, ref, 1);
  t3.push_back(ref[1] == 7 ? 8 : 7);
  EXPECT_EQ(dm.propose(1, t3, 3), reference(t3, 3));
  EXPECT_EQ(dm.stats().evaluated, 29 + 1 + 2);
  EXPECT_EQ(dm.stats().reused, 0);  // one request: nothing left by another
  EXPECT_EQ(dm.sessions(), 1);
  EXPECT_EQ(dm.stats().proposals, 3);
}

TEST_F(DraftModelTest, SessionsAreBoundedAndReusedByTheLongestCommonPrefix) {
  DraftModelOptions o;
  o.p_min = 0.0f;
  o.max_sessions = 2;
  DraftModel dm(*same_, o);
  const std::vector<int32_t> a = prompt(30, 4), b = prompt(25, 5);
  EXPECT_FALSE(dm.propose(1, a, 2).empty());
  EXPECT_FALSE(dm.propose(2, b, 2).empty());
  EXPECT_TRUE(dm.propose(3, a, 2).empty());  // both sessions taken
  EXPECT_EQ(dm.stats().refused, 1);
  dm.release(1);
  dm.release(2);
  // A request at "a" again, a few tokens further on: it takes a's session, not b's.
  const int64_t reused = dm.stats().reused, evaluated = dm.stats().evaluated;
  const std::vector<int32_t> a2 = concat(a, prompt(4, 9), 4);
  EXPECT_EQ(dm.propose(3, a2, 3), reference(a2, 3));
  const int64_t kept = dm.stats().reused - reused;  // a, and the draft if a2 goes on with it
  EXPECT_GE(kept, 30);
  EXPECT_EQ(dm.stats().evaluated - evaluated, 34 - kept + 2);
  EXPECT_EQ(dm.sessions(), 2);
}

TEST_F(DraftModelTest, DraftsEndAtTheContextAnEndTokenAndLowConfidence) {
  const std::vector<int32_t> p = prompt(36, 6);
  const std::vector<int32_t> ref = reference(p, 8);
  {
    DraftModelOptions o;
    o.p_min = 0.0f;
    o.session_tokens = 40;  // 36 tokens + 4 drafts, the last never fed: 5 fit
    DraftModel dm(*same_, o);
    EXPECT_EQ(dm.propose(1, p, 8), std::vector<int32_t>(ref.begin(), ref.begin() + 5));
    EXPECT_TRUE(dm.propose(1, concat(p, ref, 5), 8).empty());  // 41 tokens: no room
  }
  {
    DraftModelOptions o;
    o.p_min = 0.0f;
    DraftModel dm(*same_, o, {ref[2]});  // ref[2] ends the text
    EXPECT_EQ(dm.propose(1, p, 8), std::vector<int32_t>(ref.begin(), ref.begin() + 3));
  }
  {
    DraftModelOptions o;
    o.p_min = 1.01f;  // no token is that likely
    DraftModel dm(*same_, o);
    EXPECT_TRUE(dm.propose(1, p, 8).empty());
    EXPECT_EQ(dm.stats().proposals, 0);
  }
  {
    DraftModelOptions o;
    o.p_min = 0.0f;
    ASSERT_GT(ref[0], 0);
    DraftModel dm(*same_, o, {}, ref[0]);  // a target of ref[0] tokens: ref[0] is none of them
    EXPECT_TRUE(dm.propose(1, p, 8).empty());
  }
}

// A catch-up longer than max_catch_up is put off: no draft, nothing evaluated, until idle_work
// has evaluated the tokens a chunk at a time; then the next request there drafts at once.
TEST_F(DraftModelTest, LongCatchUpWaitsForIdleWork) {
  DraftModelOptions o;
  o.p_min = 0.0f;
  o.max_catch_up = 10;
  o.idle_chunk = 7;
  DraftModel dm(*same_, o);
  const std::vector<int32_t> p = prompt(20, 8);
  EXPECT_FALSE(dm.has_idle_work());
  EXPECT_TRUE(dm.propose(1, p, 4).empty());
  EXPECT_EQ(dm.stats().deferred, 1);
  EXPECT_EQ(dm.stats().evaluated, 0);
  dm.release(1);
  for (int64_t done : {7, 14, 20}) {
    ASSERT_TRUE(dm.has_idle_work());
    dm.idle_work();
    EXPECT_EQ(dm.stats().evaluated, done);
  }
  EXPECT_FALSE(dm.has_idle_work());
  EXPECT_EQ(dm.stats().idle, 20);
  // The next request: the prompt and 2 typed tokens, only those new to the session.
  const std::vector<int32_t> p2 = concat(p, prompt(2, 9), 2);
  EXPECT_EQ(dm.propose(2, p2, 4), reference(p2, 4));
  EXPECT_EQ(dm.stats().reused, 20);
  EXPECT_EQ(dm.stats().evaluated, 20 + 2 + 3);
}

// Through the engine: the first request at a long prompt drafts nothing; the engine, idle
// after it, lets the draft model catch up; the same prompt again drafts, with the same output.
TEST_F(DraftModelTest, TheEngineCatchesUpWhileIdle) {
  EngineOptions o = drafting(options(512, 64, 4), same_);
  o.speculative.draft.max_catch_up = 8;
  o.speculative.draft.idle_chunk = 5;
  Engine e(*model_, o);
  const std::vector<int32_t> p = prompt(30, 12);
  const RequestResult first = e.submit(greedy(p, 20))->wait();
  EXPECT_EQ(first.tokens, reference(p, 20));
  EXPECT_EQ(first.n_draft_tokens, 0);
  // The first request's tokens (its prompt, then its output) are evaluated in chunks while idle.
  for (int i = 0; i < 1000 && e.metrics().draft_model_idle < int64_t(p.size()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_GE(e.metrics().draft_model_idle, int64_t(p.size()));
  const RequestResult again = e.submit(greedy(p, 20))->wait();
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_GT(again.n_draft_tokens, 0);
  EXPECT_EQ(again.n_accepted, again.n_draft_tokens);
  e.check_invariants();
}

TEST_F(DraftModelTest, GreedyOutputIsUnchangedAndTheModelItselfIsAlwaysAccepted) {
  for (Model* draft : {same_, other_}) {
    Engine e(*model_, drafting(options(512, 64, 4), draft));
    int64_t drafted = 0, accepted = 0;
    for (int32_t seed = 0; seed < 6; ++seed) {
      const std::vector<int32_t> p = prompt(12 + 3 * seed, 40 + seed);
      const int32_t n = 30 + seed;
      const RequestResult res = e.submit(greedy(p, n))->wait();
      EXPECT_EQ(res.tokens, reference(p, n)) << "seed " << seed;
      drafted += res.n_draft_tokens;
      accepted += res.n_accepted;
      if (draft == same_) {
        EXPECT_EQ(res.n_accepted, res.n_draft_tokens) << "seed " << seed;
        EXPECT_LT(res.n_steps, n / 3) << "seed " << seed;
      }
    }
    EXPECT_GT(drafted, 0);
    if (draft == other_) {
      EXPECT_LT(accepted, drafted / 2) << "other weights drafted well?";
    }
    const EngineMetrics m = e.metrics();
    EXPECT_EQ(m.spec_draft_tokens, drafted);
    EXPECT_EQ(m.spec_accepted_tokens, accepted);
    EXPECT_GT(m.draft_model_evaluated, 0);
    EXPECT_EQ(m.kv.used_blocks, 0);
    e.check_invariants();
  }
}

// Batched under a small step budget and a small pool, with fewer sessions than requests (the
// others decode without drafts) and one request that asks for no speculation.
TEST_F(DraftModelTest, BatchedWithFewerSessionsThanRequestsMatchesAlone) {
  for (const auto& [budget, blocks] : {std::pair{512, 64}, std::pair{9, 64}, std::pair{512, 16}}) {
    StartGate gate;
    Engine e(*model_, gate.attach(drafting(options(budget, blocks, 4), same_, 2)));
    std::vector<Request> reqs;
    for (int32_t i = 0; i < 5; ++i) {
      Request r = greedy(prompt(10 + 4 * i, 60 + i), 18 + i);
      r.speculative = i != 2;
      reqs.push_back(r);
    }
    const std::vector<RequestResult> res = run_batch(e, reqs, &gate);
    EXPECT_EQ(res[2].n_draft_tokens, 0);
    int64_t accepted = 0;
    for (const RequestResult& r : res) accepted += r.n_accepted;
    EXPECT_GT(accepted, 0) << "budget " << budget << ", blocks " << blocks;
    EXPECT_EQ(e.kv_stats().used_blocks, 0);
    e.check_invariants();
  }
}

TEST_F(DraftModelTest, SeededSamplingDrawsTheSameTokens) {
  Engine plain(*model_, options(512, 64, 4));
  Engine e(*model_, drafting(options(512, 64, 4), same_));
  int64_t accepted = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Request r = greedy(prompt(16, static_cast<int32_t>(seed)), 24);
    r.sampling = {.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
    const RequestResult a = plain.submit(r)->wait();
    const RequestResult b = e.submit(r)->wait();
    EXPECT_EQ(b.tokens, a.tokens) << "seed " << seed;
    accepted += b.n_accepted;
  }
  EXPECT_GT(accepted, 0);
}

// A request cancelled between steps returns its blocks and its session: with one session, the
// next request drafts, and from the cancelled one's tokens on (the same prompt).
TEST_F(DraftModelTest, CancelReturnsTheBlocksAndTheSession) {
  std::promise<void> reached, go;
  std::shared_future<void> go_f = go.get_future().share();
  int64_t n_steps = 0;
  EngineOptions o = drafting(options(512, 32, 4), same_, 1);
  o.on_step = [&](const StepPlan&) {
    if (++n_steps == 3) {
      reached.set_value();
      go_f.wait();
    }
  };
  Engine e(*model_, o);
  const std::vector<int32_t> p = prompt(14, 31);
  auto s = e.submit(greedy(p, 60));
  reached.get_future().wait();
  e.cancel(s->id());
  go.set_value();
  const RequestResult res = s->wait();
  EXPECT_EQ(res.finish, FinishReason::cancelled);
  EXPECT_GT(res.n_draft_tokens, 0);
  EXPECT_EQ(e.kv_stats().used_blocks, 0);
  const int64_t reused = e.metrics().draft_model_reused;
  const RequestResult next = e.submit(greedy(p, 20))->wait();
  EXPECT_EQ(next.tokens, reference(p, 20));
  EXPECT_GT(next.n_draft_tokens, 0);
  EXPECT_GE(e.metrics().draft_model_reused - reused, int64_t(p.size()) - 1);
  e.check_invariants();
}

}  // namespace
}  // namespace efim
