// Speculative decoding through the engine on the tiny random Llama: it may change how many
// steps a request takes, never what it generates. Greedy outputs equal ContiguousSession's
// token for token (alone, batched, mixed with requests that do not speculate, with drafts that
// are all right, partly wrong or absent); seeded sampling draws the same tokens as without
// speculation and the distribution of the first two tokens passes a chi-square test against the
// model's exact probabilities; rejected drafts never reach the prefix cache, and a cancelled
// speculative request leaves the KV pool as it found it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine_test_fixture.h"

namespace efim {
namespace {

EngineOptions speculative(EngineOptions o, int32_t max_draft = 8) {
  o.speculative.enabled = true;
  o.speculative.max_draft = max_draft;
  return o;
}

// A prompt that repeats itself, so n-gram drafts are found in it.
std::vector<int32_t> repetitive(int32_t n, int32_t seed) {
  std::vector<int32_t> p;
  const int32_t period = 5 + seed % 7;
  for (int32_t i = 0; i < n; ++i) p.push_back(3 + (seed * 53 + (i % period) * 29) % 290);
  return p;
}

// `tokens` with every `every`-th one (from `first`) changed to another token.
std::vector<int32_t> mutated(std::vector<int32_t> tokens, size_t first, size_t every) {
  for (size_t i = first; i < tokens.size(); i += every) tokens[i] = 3 + (tokens[i] + 101) % 290;
  return tokens;
}

using EngineSpeculativeTest = EngineTest;

TEST_F(EngineSpeculativeTest, GreedyOutputIsUnchangedWithPerfectWrongAndNoDrafts) {
  Engine plain(*model_, options(512, 64, 4));
  Engine e(*model_, speculative(options(512, 64, 4)));
  int64_t drafted = 0, accepted = 0, steps = 0, tokens = 0;
  for (int32_t seed = 0; seed < 12; ++seed) {
    const std::vector<int32_t> p = seed % 2 ? repetitive(20 + seed, seed) : prompt(15 + seed, seed);
    const int32_t n = 30 + seed;
    const std::vector<int32_t> ref = reference(p, n);
    for (int kind = 0; kind < 3; ++kind) {  // drafts from: the prompt only, the answer, a wrong one
      Request r = greedy(p, n);
      if (kind == 1) r.draft_documents = {ref};
      if (kind == 2) r.draft_documents = {mutated(ref, 3 + seed % 4, 5)};
      const RequestResult res = e.submit(r)->wait();
      EXPECT_EQ(res.tokens, ref) << "seed " << seed << " drafts " << kind;
      EXPECT_EQ(res.finish, FinishReason::length);
      EXPECT_LE(res.n_accepted, res.n_draft_tokens);
      if (kind == 1) {  // most drafts accepted
        EXPECT_LT(res.n_steps, n / 2) << "seed " << seed;
      }
      drafted += res.n_draft_tokens;
      accepted += res.n_accepted;
      steps += res.n_steps;
      tokens += static_cast<int64_t>(res.tokens.size());
    }
    EXPECT_EQ(plain.submit(greedy(p, n))->wait().tokens, ref);
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);  // the wrong drafts were rejected somewhere
  EXPECT_EQ(steps + accepted, tokens);  // every step draws one token more than it accepts
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.spec_draft_tokens, drafted);
  EXPECT_EQ(m.spec_accepted_tokens, accepted);
  EXPECT_EQ(m.kv.used_blocks, 0);
  e.check_invariants();
}

// The previous completions at the same place (Request.draft_place): a request asking again at
// a place drafts from what the last one generated there, with the same output; another place
// and a request that says nothing get no such drafts.
TEST_F(EngineSpeculativeTest, PreviousCompletionsAtThePlaceDraftTheNextRequest) {
  Engine e(*model_, speculative(options(512, 64, 4)));
  const std::vector<int32_t> p = prompt(24, 5);  // random: the prompt alone drafts little
  const int32_t n = 40;
  const std::vector<int32_t> ref = reference(p, n);
  auto at = [&](uint64_t place) {
    Request r = greedy(p, n);
    r.draft_place = place;
    r.draft_typed_from = p.size() - 4;
    return e.submit(r)->wait();
  };
  const RequestResult first = at(11);   // nothing remembered at 11 yet
  const RequestResult again = at(11);   // drafts from `first`'s completion
  const RequestResult other = at(12);   // another place: nothing remembered there
  Request plain = greedy(p, n);
  const RequestResult none = e.submit(plain)->wait();
  for (const RequestResult* r : {&first, &again, &other, &none}) EXPECT_EQ(r->tokens, ref);
  EXPECT_EQ(other.n_accepted, first.n_accepted);
  EXPECT_EQ(none.n_accepted, first.n_accepted);
  // The remembered completion is the whole answer: nearly every token comes from a draft.
  EXPECT_GE(again.n_accepted, n - 8) << "first " << first.n_accepted;
  EXPECT_LT(again.n_steps, n / 3);
  EXPECT_GT(again.n_accepted, first.n_accepted + 10);
  e.check_invariants();
}

// Batched: speculating requests with drafts of different lengths next to requests that do
// not speculate and a prompt being prefilled in chunks, under a small step budget that cuts
// drafts, and a KV pool small enough to drop drafts and preempt.
TEST_F(EngineSpeculativeTest, BatchedWithOtherRequestsUnderSmallBudgetsMatchesAlone) {
  for (const auto& [budget, blocks] : {std::pair{512, 64}, std::pair{9, 64}, std::pair{512, 16}}) {
    StartGate gate;
    Engine e(*model_, gate.attach(speculative(options(budget, blocks, 4))));
    std::vector<Request> reqs;
    for (int32_t i = 0; i < 6; ++i) {
      Request r = greedy(i % 2 ? repetitive(12 + 3 * i, i) : prompt(10 + 4 * i, 20 + i), 20 + i);
      r.draft_documents = {mutated(reference(r.prompt, r.max_tokens), 2 + i, 4 + i)};
      r.speculative = i != 3;
      reqs.push_back(r);
    }
    const std::vector<RequestResult> res = run_batch(e, reqs, &gate);
    EXPECT_EQ(res[3].n_draft_tokens, 0);  // it asked for no speculation
    int64_t accepted = 0;
    for (const RequestResult& r : res) accepted += r.n_accepted;
    EXPECT_GT(accepted, 0) << "budget " << budget << ", blocks " << blocks;
    EXPECT_EQ(e.kv_stats().used_blocks, 0);
    e.check_invariants();
  }
}

// Every seed draws the same tokens with and without speculation: the runner samples each
// verified position with the request's own sampler, once per token kept.
TEST_F(EngineSpeculativeTest, SeededSamplingDrawsTheSameTokens) {
  Engine plain(*model_, options(512, 64, 4));
  Engine e(*model_, speculative(options(512, 64, 4)));
  int64_t accepted = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    Request r = greedy(repetitive(16, static_cast<int32_t>(seed)), 24);
    r.sampling = {.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f, .seed = seed};
    const RequestResult a = plain.submit(r)->wait();
    r.draft_documents = {a.tokens};  // drafts that are right until the sampler strays
    const RequestResult b = e.submit(r)->wait();
    EXPECT_EQ(b.tokens, a.tokens) << "seed " << seed;
    accepted += b.n_accepted;
  }
  EXPECT_GT(accepted, 40 * 10);
}

// The joint distribution of the first two tokens, where the second is drawn in a verify step
// whose draft is right for one first token and wrong for the others, matches the model's
// exact probabilities p(t1) p(t2 | t1) under top-k 3 (chi-square, 8 degrees of freedom).
TEST_F(EngineSpeculativeTest, SampledTokensFollowTheModelDistribution) {
  const std::vector<int32_t> p = prompt(12, 77);
  const int32_t last = p.back();
  // The model's top-3 distributions: after the prompt, and after the prompt + each first token.
  auto top3 = [](std::vector<float> logits) {
    std::vector<std::pair<float, int32_t>> v;
    for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) v.push_back({logits[i], i});
    std::partial_sort(v.begin(), v.begin() + 3, v.end(), std::greater<>());
    v.resize(3);
    const float mx = v[0].first;
    double z = 0;
    for (auto& [l, id] : v) z += std::exp(double(l) - mx);
    std::map<int32_t, double> out;
    for (auto& [l, id] : v) out[id] = std::exp(double(l) - mx) / z;
    return out;
  };
  ContiguousSession s(*ref_model_, 64);
  const std::map<int32_t, double> first = top3(s.eval(p));
  std::map<std::pair<int32_t, int32_t>, double> expected;
  std::vector<std::vector<int32_t>> docs;
  for (const auto& [t1, p1] : first) {
    ContiguousSession c(*ref_model_, 64);
    c.eval(p);
    const std::map<int32_t, double> second = top3(c.eval({t1}));
    for (const auto& [t2, p2] : second) expected[{t1, t2}] = p1 * p2;
    // After (last prompt token, t1) the draft is t1's most likely successor for the first
    // candidate, its least likely one for the others: acceptance and rejection both happen.
    const bool right = t1 == first.begin()->first;
    int32_t d = second.begin()->first;
    for (const auto& [t2, p2] : second)
      if (right ? p2 > second.at(d) : p2 < second.at(d)) d = t2;
    docs.push_back({last, t1, d});
  }
  Engine e(*model_, speculative(options(512, 256, 4)));
  const int kDraws = 3000;
  std::map<std::pair<int32_t, int32_t>, int> seen;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kDraws; ++i) {
    Request r = greedy(p, 3);
    r.sampling = {.temperature = 1.0f, .top_k = 3, .top_p = 1.0f, .min_p = 0.0f,
                  .seed = static_cast<uint64_t>(1000 + i)};
    r.draft_documents = docs;
    streams.push_back(e.submit(r));
  }
  int64_t drafted = 0, accepted = 0;
  for (auto& st : streams) {
    const RequestResult res = st->wait();
    ASSERT_EQ(res.tokens.size(), 3u);
    ++seen[{res.tokens[0], res.tokens[1]}];
    drafted += res.n_draft_tokens;
    accepted += res.n_accepted;
  }
  EXPECT_EQ(drafted, kDraws);  // one one-token draft per request (max_tokens 3 leaves room for 1)
  EXPECT_GT(accepted, kDraws / 10);
  EXPECT_LT(accepted, drafted);
  double chi2 = 0;
  for (const auto& [cell, prob] : expected) {
    const double want = prob * kDraws;
    const double got = seen.contains(cell) ? seen.at(cell) : 0;
    chi2 += (got - want) * (got - want) / want;
  }
  int outside = 0;
  for (const auto& [cell, n] : seen) outside += expected.contains(cell) ? 0 : n;
  EXPECT_EQ(outside, 0);
  EXPECT_LT(chi2, 26.1) << "chi-square with 8 degrees of freedom (p = 0.001 at 26.1)";
}

// Rejected draft rows are overwritten, never cached; a speculative request cancelled between
// steps returns every block it held.
TEST_F(EngineSpeculativeTest, RejectedDraftsNeverEnterThePrefixCacheAndCancelFreesAll) {
  std::promise<void> reached, go;
  std::shared_future<void> go_f = go.get_future().share();
  int64_t n_steps = 0;
  EngineOptions o = speculative(options(512, 32, 4));
  o.on_step = [&](const StepPlan&) {
    if (++n_steps == 4) {
      reached.set_value();
      go_f.wait();
    }
  };
  Engine e(*model_, o);
  const KvStats before = e.kv_stats();
  const std::vector<int32_t> p = prompt(14, 31);
  const std::vector<int32_t> ref = reference(p, 60);
  const std::vector<int32_t> wrong = mutated(ref, 4, 6);
  Request r = greedy(p, 60);
  r.draft_documents = {wrong};
  auto s = e.submit(r);
  reached.get_future().wait();
  e.cancel(s->id());
  go.set_value();
  const RequestResult res = s->wait();
  EXPECT_EQ(res.finish, FinishReason::cancelled);
  ASSERT_GT(res.tokens.size(), 4u);  // the drafts were accepted up to a wrong one
  EXPECT_EQ(res.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + res.tokens.size()));
  EXPECT_GT(res.n_draft_tokens, res.n_accepted);
  // No wrong token is cached after the right tokens before it.
  for (size_t j = 0; j < res.tokens.size(); ++j) {
    if (wrong[j] == ref[j]) continue;
    std::vector<int32_t> seq = p;
    seq.insert(seq.end(), ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(j));
    seq.push_back(wrong[j]);
    EXPECT_LT(e.cached_prefix(seq), seq.size()) << "wrong draft token at " << j;
  }
  KvStats mid = e.kv_stats();
  EXPECT_EQ(mid.used_blocks, 0);
  e.check_invariants();
  e.clear_cache();
  KvStats after = e.kv_stats();
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_EQ(after.free_blocks, after.total_blocks);
}

}  // namespace
}  // namespace efim
