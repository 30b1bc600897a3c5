// Engine end to end on a tiny random Llama (scripts/make_tiny_model.py, numpy required): greedy
// output through the engine must equal ContiguousSession's greedy decoding token for token,
// whatever the batching, chunking, prefix reuse or preemption.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <future>
#include <numeric>
#include <optional>
#include <thread>

#include "../model/model_test_util.h"
#include "engine_test_fixture.h"
#include "base/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace efim {
namespace {

TEST_F(EngineTest, GreedyAloneMatchesContiguousSession) {
  Engine e(*model_, options(512, 64));
  Request r = greedy(prompt(12, 1), 20);
  auto stream = e.submit(r);
  // Tokens arrive through the stream as they are produced, then the stream ends.
  std::vector<int32_t> streamed;
  for (StreamChunk part = stream->next(); !part.empty(); part = stream->next()) {
    streamed.insert(streamed.end(), part.tokens.begin(), part.tokens.end());
    EXPECT_TRUE(part.text.empty());  // no tokenizer, no text
  }
  RequestResult res = stream->wait();
  EXPECT_EQ(res.tokens, reference(r.prompt, 20));
  EXPECT_EQ(streamed, res.tokens);
  EXPECT_EQ(res.finish, FinishReason::length);
  EXPECT_EQ(res.n_cached, 0);
  EXPECT_GT(res.timings.first_token_ms, 0.0);
  EXPECT_GE(res.timings.total_ms, res.timings.first_token_ms);
  EXPECT_EQ(e.steps(), 20);  // one step for the whole prompt, then one per decode token
}

TEST_F(EngineTest, FourRequestsBatchedMatchAlone) {
  StartGate gate;
  Engine e(*model_, gate.attach(options(512, 64)));
  std::vector<Request> reqs = {greedy(prompt(5, 2), 20), greedy(prompt(17, 3), 8),
                               greedy(prompt(30, 4), 15), greedy(prompt(9, 5), 25)};
  run_batch(e, reqs, &gate);
  EXPECT_EQ(e.steps(), 2 + 24);  // opener (2 steps), then the longest request: 25 tokens
  EXPECT_EQ(gate.max_batch, 5u);  // the 4 prefills with the opener's second token
  e.check_invariants();
}

TEST_F(EngineTest, ChunkedPrefillWithASmallBudgetGivesTheSameTokens) {
  StartGate gate;
  Engine e(*model_, gate.attach(options(7, 64, 4)));
  std::vector<Request> reqs = {greedy(prompt(30, 6), 10), greedy(prompt(23, 7), 12),
                               greedy(prompt(3, 8), 9)};
  run_batch(e, reqs, &gate);
  EXPECT_GE(e.steps(), 1 + (30 + 23 + 3) / 7);  // no step computed more than 7 tokens
  EXPECT_GE(gate.max_batch, 2u);
  e.check_invariants();
}

TEST_F(EngineTest, SharedPrefixIsReusedWithTheSameOutput) {
  Engine e(*model_, options(512, 64, 4));
  std::vector<int32_t> a = prompt(26, 9);
  RequestResult ra = run_batch(e, {greedy(a, 6)})[0];
  EXPECT_EQ(ra.n_cached, 0);
  std::vector<int32_t> b(a.begin(), a.begin() + 18);  // diverges inside a block (18 % 4 = 2)
  for (int32_t t : prompt(7, 10)) b.push_back(t);
  RequestResult rb = run_batch(e, {greedy(b, 10)})[0];
  EXPECT_EQ(rb.n_cached, 18);
  // The same prompt again: everything but the last prompt token is cached.
  RequestResult rc = run_batch(e, {greedy(b, 10)})[0];
  EXPECT_EQ(rc.n_cached, static_cast<int32_t>(b.size()) - 1);
  KvStats st = e.kv_stats();
  EXPECT_EQ(st.prefix_hit_tokens, 18 + static_cast<int64_t>(b.size()) - 1);
  e.check_invariants();
}

// An f16 K/V cache (efim serve's default): batched, chunked, with a prefix reused from the
// cache through a copied block, the engine equals ContiguousSession on an f16 cache token for
// token, and a block holds twice the tokens of f32 in the same bytes.
TEST_F(EngineTest, F16KvCacheMatchesTheSessionOnF16) {
  EngineOptions o = options(7, 64, 4);
  o.kv_type = DType::F16;
  StartGate gate;
  Engine e(*model_, gate.attach(o));
  std::vector<int32_t> a = prompt(26, 11);
  run_batch(e, {greedy(a, 12), greedy(prompt(19, 12), 9), greedy(prompt(4, 13), 14)}, &gate,
            DType::F16);
  std::vector<int32_t> b(a.begin(), a.begin() + 18);  // diverges inside a block: copied
  for (int32_t t : prompt(5, 14)) b.push_back(t);
  RequestResult rb = run_batch(e, {greedy(b, 10)}, nullptr, DType::F16)[0];
  EXPECT_EQ(rb.n_cached, 18);
  e.check_invariants();
  const ModelConfig& c = model_->config();
  EXPECT_EQ(2 * Engine::kv_bytes_per_token(c, DType::F16),
            Engine::kv_bytes_per_token(c, DType::F32));
  EngineOptions budget;
  budget.kv_cache_bytes = 1 << 20;
  budget.kv_type = DType::F32;
  const int64_t f32_slots = Engine(*model_, budget).kv_slots();
  budget.kv_type = DType::F16;
  EXPECT_EQ(Engine(*model_, budget).kv_slots(), 2 * f32_slots);
}

TEST_F(EngineTest, CancelMidGenerationFreesTheSequence) {
  // The step hook holds the engine thread after step 5 until the cancel is posted, so the
  // cancel lands exactly between steps 5 and 6.
  std::promise<void> reached, go;
  std::shared_future<void> go_f = go.get_future().share();
  int64_t n_steps = 0;
  EngineOptions o = options(512, 32, 4);
  o.on_step = [&](const StepPlan&) {
    if (++n_steps == 5) {
      reached.set_value();
      go_f.wait();
    }
  };
  Engine e(*model_, o);
  const KvStats before = e.kv_stats();
  Request r = greedy(prompt(10, 11), 100);
  auto s = e.submit(r);
  auto other = e.submit(greedy(prompt(14, 12), 12));
  reached.get_future().wait();
  e.cancel(s->id());
  go.set_value();
  RequestResult res = s->wait();
  EXPECT_EQ(res.finish, FinishReason::cancelled);
  std::vector<int32_t> ref = reference(r.prompt, 100);
  ref.resize(5);
  EXPECT_EQ(res.tokens, ref);  // one token per step before the cancel, all still right
  RequestResult ro = other->wait();
  EXPECT_EQ(ro.tokens, reference(prompt(14, 12), 12));
  e.cancel(s->id());  // cancelling a finished request is a no-op
  KvStats mid = e.kv_stats();
  EXPECT_EQ(mid.used_blocks, 0);
  EXPECT_GT(mid.cached_blocks, 0);  // the computed prefixes stay cached
  e.clear_cache();
  KvStats after = e.kv_stats();
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_EQ(after.free_blocks, after.total_blocks);
  e.check_invariants();
}

TEST_F(EngineTest, PreemptionUnderATinyKvBudgetKeepsGreedyOutputs) {
  // 12 blocks of 4 = 48 slots; 4 requests of up to 35 tokens each cannot all run at once.
  StartGate gate;
  Engine e(*model_, gate.attach(options(512, 12, 4)));
  std::vector<Request> reqs = {greedy(prompt(10, 13), 20), greedy(prompt(12, 14), 22),
                               greedy(prompt(8, 15), 24), greedy(prompt(15, 16), 20)};
  std::vector<RequestResult> res = run_batch(e, reqs, &gate);
  int32_t preemptions = 0;
  for (const RequestResult& r : res) preemptions += r.n_preemptions;
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(e.kv_stats().used_blocks, 0);
  e.check_invariants();
}

// The metrics counters are exact: prompt lookups at first admission only (a preempted request
// is not counted again), sampled tokens, finishes by reason, one TTFT and one latency each.
TEST_F(EngineTest, MetricsCountAdmissionsTokensAndFinishes) {
  EngineOptions o = options(512, 64, 4);
  // Slow steps: a 100-token request outlives the cancel posted after its first token.
  o.on_step = [](const StepPlan&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  Engine e(*model_, o);
  const std::vector<int32_t> p = prompt(10, 21);
  const std::vector<int32_t> ref = reference(p, 12);
  EXPECT_EQ(e.submit(greedy(p, 5))->wait().n_cached, 0);
  EngineMetrics m = e.metrics();
  EXPECT_EQ(m.prefix_query_tokens, 10);
  EXPECT_EQ(m.prefix_hit_tokens, 0);
  EXPECT_EQ(m.prompt_tokens, 10);
  EXPECT_EQ(m.generation_tokens, 5);
  EXPECT_EQ(m.finished_length, 1);
  EXPECT_EQ(m.ttft_seconds.count, 1);
  EXPECT_EQ(m.e2e_seconds.count, 1);
  EXPECT_EQ(m.n_running + m.n_waiting, 0);
  EXPECT_EQ(m.kv.used_blocks, 0);

  // The cache holds the prompt and the 4 generated tokens that were fed back (no cap).
  std::vector<int32_t> seq = p;
  seq.insert(seq.end(), ref.begin(), ref.begin() + 5);
  EXPECT_EQ(e.cached_prefix(seq), 14u);
  EXPECT_EQ(e.cached_prefix(p), 10u);
  EXPECT_EQ(e.cached_prefix(prompt(6, 22)), 0u);

  Request stop = greedy(p, 12);  // ends on its 3rd sampled token
  stop.stop_tokens = {ref[2]};
  ASSERT_EQ(std::find(ref.begin(), ref.begin() + 2, ref[2]), ref.begin() + 2);
  RequestResult rs = e.submit(stop)->wait();
  EXPECT_EQ(rs.finish, FinishReason::stop);
  EXPECT_EQ(rs.n_cached, 9);
  m = e.metrics();
  EXPECT_EQ(m.prefix_query_tokens, 20);
  EXPECT_EQ(m.prefix_hit_tokens, 9);
  EXPECT_EQ(m.generation_tokens, 5 + 3);  // the stop token was sampled too
  EXPECT_EQ(m.finished_stop, 1);

  // Cancels: the default counts as an abort, a reason is kept as given.
  auto cancel_with = [&](std::optional<FinishReason> reason) {
    auto s = e.submit(greedy(prompt(8, 23), 100));
    EXPECT_FALSE(s->next().tokens.empty());
    if (reason)
      e.cancel(s->id(), *reason);
    else
      e.cancel(s->id());
    return s->wait().finish;
  };
  EXPECT_EQ(cancel_with(std::nullopt), FinishReason::cancelled);
  EXPECT_EQ(cancel_with(FinishReason::stop), FinishReason::stop);
  EXPECT_EQ(cancel_with(FinishReason::length), FinishReason::length);
  EXPECT_THROW(e.cancel(1, FinishReason::error), Error);
  m = e.metrics();
  EXPECT_EQ(m.finished_abort, 1);
  EXPECT_EQ(m.finished_stop, 2);
  EXPECT_EQ(m.finished_length, 2);
  EXPECT_EQ(m.e2e_seconds.count, 5);
  EXPECT_EQ(m.e2e_seconds.cumulative(m.e2e_seconds.upper.size()), 5);
}

TEST_F(EngineTest, PreemptedRequestsAreQueriedOnce) {
  StartGate gate;
  Engine e(*model_, gate.attach(options(512, 12, 4)));
  std::vector<Request> reqs = {greedy(prompt(10, 13), 20), greedy(prompt(12, 14), 22),
                               greedy(prompt(8, 15), 24), greedy(prompt(15, 16), 20)};
  std::vector<RequestResult> res = run_batch(e, reqs, &gate);
  int32_t preemptions = 0, hits = 0;
  for (const RequestResult& r : res) {
    preemptions += r.n_preemptions;
    hits += r.n_cached;
  }
  ASSERT_GT(preemptions, 0);
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.prefix_query_tokens, 3 + 10 + 12 + 8 + 15);  // the gate's opener has 3
  EXPECT_EQ(m.prefix_hit_tokens, hits);
  EXPECT_GT(m.kv.prefix_query_tokens, m.prefix_query_tokens);  // readmissions looked up again
  EXPECT_EQ(m.finished_length, 5);
}

TEST_F(EngineTest, NoPrefixCacheRecomputesEveryPrompt) {
  EngineOptions o = options(512, 64, 4);
  o.kv.prefix_cache = false;
  Engine e(*model_, o);
  const std::vector<int32_t> p = prompt(13, 24);
  RequestResult a = e.submit(greedy(p, 6))->wait();
  RequestResult b = e.submit(greedy(p, 6))->wait();
  EXPECT_EQ(a.n_cached, 0);
  EXPECT_EQ(b.n_cached, 0);
  EXPECT_EQ(b.tokens, reference(p, 6));
  EXPECT_EQ(e.cached_prefix(p), 0u);
  const EngineMetrics m = e.metrics();
  EXPECT_EQ(m.prefix_query_tokens, 26);
  EXPECT_EQ(m.prefix_hit_tokens, 0);
  EXPECT_EQ(m.kv.cached_blocks, 0);
  EXPECT_EQ(m.kv.free_blocks, 64);
  e.check_invariants();
}

TEST_F(EngineTest, StopAndEosTokensEndGeneration) {
  EngineOptions o = options(512, 64);
  const std::vector<int32_t> p = prompt(11, 17);
  const std::vector<int32_t> ref = reference(p, 12);
  o.eos_tokens = std::vector<int32_t>{ref[7]};
  Engine e(*model_, o);
  auto first = [&](int32_t tok) {  // index of the first occurrence of tok in ref
    return static_cast<size_t>(std::find(ref.begin(), ref.end(), tok) - ref.begin());
  };
  Request stop = greedy(p, 12);
  stop.stop_tokens = {ref[4]};
  RequestResult rs = e.submit(stop)->wait();
  EXPECT_EQ(rs.finish, FinishReason::stop);
  EXPECT_EQ(rs.stop_token, ref[4]);
  EXPECT_EQ(rs.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + first(ref[4])));

  Request eos = greedy(p, 12);
  eos.ignore_eos = false;
  RequestResult re = e.submit(eos)->wait();
  EXPECT_EQ(re.finish, FinishReason::stop);
  EXPECT_EQ(re.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + first(ref[7])));

  RequestResult ri = e.submit(greedy(p, 12))->wait();  // ignore_eos
  EXPECT_EQ(ri.finish, FinishReason::length);
  EXPECT_EQ(ri.tokens, ref);
}

TEST_F(EngineTest, SequenceTheWholeCacheCannotHoldIsRefusedAtSubmit) {
  Engine e(*model_, options(512, 2, 4));  // 8 slots
  EXPECT_EQ(e.kv_slots(), 8);
  try {
    e.submit(greedy(prompt(6, 19), 10));
    ADD_FAILURE() << "no throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("need 16 KV cache slots, but the cache holds 8"),
              std::string::npos)
        << err.what();
  }
  EXPECT_EQ(e.kv_stats().used_blocks, 0);
  // A sequence that fits exactly runs; the engine keeps serving.
  RequestResult ok = e.submit(greedy(prompt(4, 20), 4))->wait();
  EXPECT_EQ(ok.tokens, reference(prompt(4, 20), 4));
}

TEST_F(EngineTest, InvalidRequestsThrowWithTheOffendingValue) {
  Engine e(*model_, options(512, 16));
  EXPECT_THROW(e.submit(greedy({}, 4)), Error);
  EXPECT_THROW(e.submit(greedy({1, 300}, 4)), Error);  // vocab is 300
  EXPECT_THROW(e.submit(greedy({1, 2}, 0)), Error);
  EXPECT_THROW(e.submit(greedy(prompt(100, 1), 29)), Error);  // context is 128
  Request bad = greedy({1, 2}, 4);
  bad.sampling.top_p = 0;
  EXPECT_THROW(e.submit(bad), Error);
  try {
    e.submit(greedy({5, -1}, 4));
    ADD_FAILURE() << "no throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("-1"), std::string::npos) << err.what();
  }
}

TEST_F(EngineTest, SampledRequestsAreReproducibleForASeed) {
  Engine e(*model_, options(512, 64));
  Request r = greedy(prompt(9, 18), 16);
  r.sampling = {.temperature = 0.8f, .top_k = 20, .top_p = 0.95f, .min_p = 0.0f, .seed = 42};
  auto a = e.submit(r);
  auto b = e.submit(r);  // batched together, separate samplers, same seed
  RequestResult ra = a->wait(), rb = b->wait();
  EXPECT_EQ(ra.tokens.size(), 16u);
  EXPECT_EQ(ra.tokens, rb.tokens);
}

TEST_F(EngineTest, ClientThreadsSubmitConcurrently) {
  Engine e(*model_, options(64, 64, 4));
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> clients;
  for (int32_t c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      for (int32_t round = 0; round < 2; ++round) {  // each client's rounds are sequential
        auto s = e.submit(greedy(prompt(6 + 5 * c + round, 20 + c), 6));
        std::vector<int32_t> t = s->wait().tokens;
        got[c].insert(got[c].end(), t.begin(), t.end());
      }
    });
  }
  for (auto& t : clients) t.join();
  for (int32_t c = 0; c < 4; ++c) {
    std::vector<int32_t> want = reference(prompt(6 + 5 * c, 20 + c), 6);
    std::vector<int32_t> second = reference(prompt(7 + 5 * c, 20 + c), 6);
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_EQ(got[c], want) << "client " << c;
  }
  e.check_invariants();
}

TEST_F(EngineTest, CancelWhileWaitingAndShutdownEndEveryRequest) {
  std::shared_ptr<RequestStream> a, b;
  {
    EngineOptions o = options(512, 64, 4);
    o.scheduler.max_running = 1;  // b waits until a (120 tokens to generate) is done
    Engine e(*model_, o);
    a = e.submit(greedy(prompt(8, 30), 120));
    ASSERT_FALSE(a->next().tokens.empty());  // a runs
    b = e.submit(greedy(prompt(20, 31), 8));
    e.cancel(b->id());
    RequestResult rb = b->wait();
    EXPECT_EQ(rb.finish, FinishReason::cancelled);
    EXPECT_TRUE(rb.tokens.empty());
    EXPECT_EQ(rb.timings.first_token_ms, 0.0);
  }  // the destructor ends `a` if it still runs (timing-dependent: it may have finished)
  RequestResult ra = a->wait();
  EXPECT_TRUE(ra.finish == FinishReason::cancelled || ra.finish == FinishReason::length)
      << to_string(ra.finish);
  if (ra.finish == FinishReason::length) {
    EXPECT_EQ(ra.tokens.size(), 120u);
  }
}

// With a tokenizer the stream carries text: whole UTF-8 characters per chunk, adding up to the
// decoding of the generated ids. (The project's test tokenizer has 16k ids; the tiny model
// generates ids below 300.)
TEST_F(EngineTest, StreamsCarryIncrementallyDecodedText) {
  const Tokenizer tok = Tokenizer::from_json_file(
      test::source_path("tests/tokenizer/data/efim-base-py/tokenizer.json"));
  ASSERT_GE(tok.vocab_size(), model_->config().vocab);
  EngineOptions o = options(512, 64);
  o.tokenizer = &tok;
  Engine e(*model_, o);
  Request r = greedy(prompt(7, 40), 40);
  auto stream = e.submit(r);
  std::vector<int32_t> ids;
  std::string text;
  for (StreamChunk part = stream->next(); !part.empty(); part = stream->next()) {
    EXPECT_TRUE(unicode::is_valid_utf8(part.text));
    ids.insert(ids.end(), part.tokens.begin(), part.tokens.end());
    text += part.text;
  }
  RequestResult res = stream->wait();
  EXPECT_EQ(res.tokens, reference(r.prompt, 40));
  EXPECT_EQ(ids, res.tokens);
  EXPECT_EQ(res.text, text);
  EXPECT_FALSE(text.empty());
  // The same ids through a fresh decoder (its lossy decoding is tested in tests/tokenizer):
  // the engine fed every token in order and flushed at the end. Random ids rarely form valid
  // UTF-8, so this text has U+FFFD replacements; where the bytes are valid it is them exactly.
  IncrementalDecoder dec(tok);
  std::string want;
  for (int32_t id : res.tokens) want += dec.push(id);
  want += dec.flush();
  EXPECT_EQ(text, want);
  const std::string bytes = tok.decode(res.tokens);
  if (unicode::is_valid_utf8(bytes)) {
    EXPECT_EQ(text, bytes);
  }
}


// Token healing: greedy decoding with heal_bytes equals a brute-force reference decoder that
// scans the whole vocabulary at every constrained step (allowed: a token whose bytes are a
// proper prefix of the bytes still required, or start with them), for several requests batched
// together; the text leaves the required bytes out.
TEST_F(EngineTest, HealedGreedyDecodingEqualsBruteForceReference) {
  const Tokenizer tok = Tokenizer::from_json_file(
      test::source_path("tests/tokenizer/data/efim-base-py/tokenizer.json"));
  const int32_t n_model = int32_t(model_->config().vocab);  // 300 logits; ids >= 300 never occur
  auto reference_healed = [&](const std::vector<int32_t>& p, std::string rest, int32_t n) {
    ContiguousSession s(*ref_model_, 128);
    std::vector<int32_t> out;
    std::vector<float> logits = s.eval(p);
    for (int32_t i = 0; i < n; ++i) {
      int32_t best = -1;
      for (int32_t id = 0; id < n_model; ++id) {
        const std::string_view b = tok.token_bytes(id);
        const bool ok = rest.empty() ||
                        (!tok.is_special(id) && !b.empty() &&
                         (b.starts_with(rest) ||
                          (b.size() < rest.size() && std::string_view(rest).starts_with(b))));
        if (ok && (best < 0 || logits[size_t(id)] > logits[size_t(best)])) best = id;
      }
      out.push_back(best);
      const std::string_view b = tok.token_bytes(best);
      rest = b.size() >= rest.size() ? std::string() : rest.substr(b.size());
      if (i + 1 < n) logits = s.eval({best});
    }
    return out;
  };
  EngineOptions o = options(48, 64);
  o.tokenizer = &tok;
  Engine e(*model_, o);
  // Required bytes made of a few low-id tokens' bytes (so that ids < 300 can cover them), one
  // of them cut inside its last token.
  const std::vector<std::string> required = {
      std::string(tok.token_bytes(260)) + std::string(tok.token_bytes(281)),
      std::string(tok.token_bytes(45)),
      std::string(tok.token_bytes(290)) + std::string(tok.token_bytes(270)).substr(0, 1)};
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<Request> reqs;
  for (size_t i = 0; i < required.size(); ++i) {
    Request r = greedy(prompt(9 + int32_t(i) * 5, 60 + int32_t(i)), 12);
    r.heal_bytes = required[i];
    reqs.push_back(r);
    streams.push_back(e.submit(r));
  }
  for (size_t i = 0; i < required.size(); ++i) {
    RequestResult res = streams[i]->wait();
    const std::vector<int32_t> want = reference_healed(reqs[i].prompt, required[i], 12);
    EXPECT_EQ(res.tokens, want) << "request " << i;
    ASSERT_GE(res.n_heal_tokens, 1) << i;
    // The text is the generated bytes less the required ones (lossy UTF-8 of what is left).
    const std::string bytes = tok.decode(res.tokens);
    ASSERT_TRUE(bytes.starts_with(required[i])) << i;
    EXPECT_EQ(res.text, unicode::to_valid_utf8(bytes.substr(required[i].size()))) << i;
  }
  EXPECT_EQ(e.metrics().token_healing, 3);
  EXPECT_EQ(e.metrics().heal_bytes.count, 3);
  // Healing needs the tokenizer.
  Engine bare(*model_, options(48, 16));
  Request r = greedy(prompt(5, 1), 4);
  r.heal_bytes = "x";
  EXPECT_THROW(bare.submit(r), Error);
}


// The exact variant: greedy decoding picks the most probable covering of the required bytes
// (the product of the model's probabilities along the path, over every path of proper-prefix
// tokens), then continues greedily; equal to a brute-force enumeration of all coverings with the
// single-sequence reference path.
TEST_F(EngineTest, ExactHealingPicksTheMostProbableCovering) {
  const Tokenizer tok = Tokenizer::from_json_file(
      test::source_path("tests/tokenizer/data/efim-base-py/tokenizer.json"));
  const int32_t n_model = int32_t(model_->config().vocab);
  auto log_softmax = [](std::vector<float> l) {
    const float m = *std::max_element(l.begin(), l.end());
    double z = 0;
    for (float x : l) z += std::exp(double(x) - m);
    std::vector<double> out(l.size());
    for (size_t i = 0; i < l.size(); ++i) out[i] = double(l[i]) - m - std::log(z);
    return out;
  };
  struct Best {
    double logp = -INFINITY;
    std::vector<int32_t> path;
  };
  // Every covering below `path` (rest = bytes still required).
  std::function<void(const std::vector<int32_t>&, const std::vector<int32_t>&, std::string,
                     double, Best&)>
      search = [&](const std::vector<int32_t>& p, const std::vector<int32_t>& path,
                   std::string rest, double logp, Best& best) {
        ContiguousSession s(*ref_model_, 128);
        std::vector<int32_t> all = p;
        all.insert(all.end(), path.begin(), path.end());
        const std::vector<double> lp = log_softmax(s.eval(all));
        for (int32_t id = 0; id < n_model; ++id) {
          const std::string_view b = tok.token_bytes(id);
          if (tok.is_special(id) || b.empty()) continue;
          std::vector<int32_t> next = path;
          next.push_back(id);
          if (b.starts_with(rest)) {
            if (logp + lp[size_t(id)] > best.logp) best = {logp + lp[size_t(id)], next};
          } else if (b.size() < rest.size() && std::string_view(rest).starts_with(b)) {
            search(p, next, rest.substr(b.size()), logp + lp[size_t(id)], best);
          }
        }
      };
  EngineOptions o = options(48, 64);
  o.tokenizer = &tok;
  o.covering.max_expansions = 1000;  // the whole tree: exact
  o.covering.parallel = 3;
  Engine e(*model_, o);
  const std::vector<std::string> required = {
      std::string(tok.token_bytes(260)) + std::string(tok.token_bytes(281)),
      std::string(tok.token_bytes(290)) + std::string(tok.token_bytes(270)).substr(0, 1)};
  std::vector<Request> reqs;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < required.size(); ++i) {
    Request r = greedy(prompt(10 + int32_t(i) * 4, 70 + int32_t(i)), 10);
    r.heal_bytes = required[i];
    r.heal_exact = true;
    reqs.push_back(r);
    streams.push_back(e.submit(r));
  }
  for (size_t i = 0; i < required.size(); ++i) {
    RequestResult res = streams[i]->wait();
    Best best;
    search(reqs[i].prompt, {}, required[i], 0.0, best);
    ASSERT_FALSE(best.path.empty());
    std::vector<int32_t> want = best.path;
    std::vector<int32_t> ctx = reqs[i].prompt;
    ctx.insert(ctx.end(), want.begin(), want.end());
    const std::vector<int32_t> tail = reference(ctx, 10 - int32_t(want.size()));
    want.insert(want.end(), tail.begin(), tail.end());
    EXPECT_EQ(res.tokens, want) << "request " << i;
    EXPECT_EQ(res.n_heal_tokens, int32_t(best.path.size())) << i;
    EXPECT_EQ(res.finish, FinishReason::length);
    const std::string bytes = tok.decode(res.tokens);
    ASSERT_TRUE(bytes.starts_with(required[i])) << i;
    EXPECT_EQ(res.text, unicode::to_valid_utf8(bytes.substr(required[i].size()))) << i;
  }
  e.check_invariants();
  EXPECT_EQ(e.kv_stats().used_blocks, 0);  // the probes are gone
}


// Exact healing under a full running set: every running sequence may be an owner waiting for its
// probes, so probes skip the queue and the running limit (no request may end without a covering).
TEST_F(EngineTest, ExactHealingProbesRunWhenTheRunningSetIsFull) {
  const Tokenizer tok = Tokenizer::from_json_file(
      test::source_path("tests/tokenizer/data/efim-base-py/tokenizer.json"));
  EngineOptions o = options(64, 128);
  o.tokenizer = &tok;
  o.scheduler.max_running = 2;
  Engine e(*model_, o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int32_t i = 0; i < 8; ++i) {
    Request r = greedy(prompt(8 + i, 90 + i), 6);
    r.heal_bytes = std::string(tok.token_bytes(260)) + std::string(tok.token_bytes(281));
    r.heal_exact = true;
    streams.push_back(e.submit(r));
  }
  for (auto& st : streams) {
    RequestResult res = st->wait();
    EXPECT_EQ(res.finish, FinishReason::length) << res.error;
    EXPECT_GE(res.n_heal_tokens, 1);
  }
  e.check_invariants();
}

}  // namespace
}  // namespace efim
