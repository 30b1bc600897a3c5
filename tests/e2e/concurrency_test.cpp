// Many streaming clients at once against the in-process HTTP server on the bundled model, about
// half of them hanging up mid-stream. Afterwards: every stream that ran to its end was valid
// SSE, the server still answers, no KV block stays referenced, the pool returns to its
// starting state after clear_cache(), the KvManager audit passes, and greedy output is the
// same as before the storm (no cached block was corrupted by cancellation or sharing).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "format/gguf.h"
#include "model/model.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"
#include "../server/server_test_util.h"

namespace efim {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const std::string kModel = std::string(EFIM_SOURCE_DIR) + "/models/efim-tiny-q8_0.gguf";
constexpr int kClients = 32;
constexpr int kMaxTokens = 24;
constexpr uint32_t kSeed = 20261130;

// The bundled model on 2 threads, 512 blocks of 16 (8192 token slots: every client fits, no
// preemption needed); a short pause per step keeps streams open long enough for clients to
// hang up mid-way.
struct Served : servertest::Running {
  Served()
      : Running(Model::load(kModel, LoadOptions{.n_threads = 2}),
                std::make_unique<Tokenizer>(Tokenizer::from_gguf(GgufFile::open(kModel))),
                {.step_delay_ms = 3, .n_blocks = 512, .block_size = 16, .model_id = "bundled",
                 .read_timeout_s = 120}) {}
};

// One client's plan: what it asks for and after how many received pieces it hangs up.
struct Plan {
  bool infill = false;
  int hang_up_after = 0;  // 0: reads the stream to its end
  json body;
};

const std::string kShared = "import os\nimport sys\n\n\ndef main(argv):\n";

std::vector<Plan> make_plans() {
  std::mt19937 rng(kSeed);
  std::bernoulli_distribution half(0.5);
  std::uniform_int_distribution<int> pieces(1, 3);
  std::vector<Plan> plans(kClients);
  for (int i = 0; i < kClients; ++i) {
    Plan& p = plans[size_t(i)];
    p.infill = half(rng);
    p.hang_up_after = half(rng) ? pieces(rng) : 0;
    // Shared prefixes: concurrent sequences share cached blocks and diverge inside them.
    const std::string var = "    x" + std::to_string(i % 5) + " = ";
    if (p.infill) {
      p.body = {{"input_prefix", kShared + var}, {"input_suffix", "\n    return 0\n"},
                {"input_extra", json::array()}, {"prompt", ""}, {"n_predict", kMaxTokens},
                {"temperature", 0.7}, {"seed", i}, {"cache_prompt", true}, {"stream", true}};
    } else {
      p.body = {{"prompt", kShared + var}, {"max_tokens", kMaxTokens}, {"temperature", 0.7},
                {"seed", i}, {"ignore_eos", true}, {"stream", true}};
    }
  }
  return plans;
}

// Why a streamed body is not valid SSE for its route, or "" when it is. Every event is a
// "data: " line followed by a blank line and holds JSON; /v1/completions ends with
// "data: [DONE]" after a chunk with finish_reason and usage, /infill (llama.cpp) ends with
// an object whose "stop" is true.
std::string sse_problem(const std::string& body, bool infill) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) return "unterminated event at byte " + std::to_string(pos);
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) != 0) return "event without 'data: ': " + ev;
    events.push_back(ev.substr(6));
    pos = end + 2;
  }
  if (events.empty()) return "no events";
  if (!infill) {
    if (events.back() != "[DONE]") return "last event is not [DONE]: " + events.back();
    events.pop_back();
    if (events.empty()) return "no chunk before [DONE]";
  }
  std::vector<json> parsed;
  for (const std::string& e : events) {
    json j = json::parse(e, nullptr, false);
    if (j.is_discarded()) return "not JSON: " + e;
    parsed.push_back(std::move(j));
  }
  const json& last = parsed.back();
  if (infill) {
    if (!last.contains("stop") || last["stop"] != true) return "last /infill event lacks stop";
    for (size_t i = 0; i + 1 < parsed.size(); ++i)
      if (!parsed[i]["content"].is_string()) return "chunk without content: " + events[i];
  } else {
    const json& c = last["choices"][0];
    if (!c["finish_reason"].is_string()) return "last chunk lacks finish_reason";
    if (last["usage"]["completion_tokens"] != kMaxTokens) return "ignore_eos: not max_tokens";
    for (const json& j : parsed)
      if (!j["choices"][0]["text"].is_string()) return "chunk without text";
  }
  return "";
}

struct Outcome {
  enum Kind { completed, hung_up, rejected, broken } kind = broken;
  std::string detail;
};

Outcome run_client(const Served& s, const Plan& p) {
  auto c = s.client();
  httplib::Request req;
  req.method = "POST";
  req.path = p.infill ? "/infill" : "/v1/completions";
  req.body = p.body.dump();
  req.set_header("Content-Type", "application/json");
  std::string body;
  int pieces = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    ++pieces;
    return p.hang_up_after == 0 || pieces < p.hang_up_after;
  };
  auto res = c.send(req);
  Outcome o;
  if (p.hang_up_after > 0 && pieces >= p.hang_up_after) {
    o.kind = Outcome::hung_up;  // whether or not the server had already finished
    return o;
  }
  if (!res) {
    o.detail = "transport error " + httplib::to_string(res.error()) + " after " +
               std::to_string(pieces) + " pieces (hang-up planned after " +
               std::to_string(p.hang_up_after) + "): " + body;
    return o;
  }
  if (res->status == 503) {  // an overloaded server may shed load; never a broken stream
    o.kind = Outcome::rejected;
    return o;
  }
  if (res->status != 200) {
    o.detail = "status " + std::to_string(res->status) + ": " + body;
    return o;
  }
  o.detail = sse_problem(body, p.infill);
  o.kind = o.detail.empty() ? Outcome::completed : Outcome::broken;
  return o;
}

std::string greedy_text(const Served& s) {
  auto c = s.client();
  json req = {{"prompt", kShared + "    x1 = "}, {"max_tokens", 16}, {"temperature", 0},
              {"ignore_eos", true}};
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body)["choices"][0]["text"];
}

// All clients at once, each on its own thread, connecting in one burst (the server raises the
// listen backlog to SOMAXCONN: with httplib's 5, a burst of 32 SYNs got connections reset).
std::vector<Outcome> run_storm(const Served& s, const std::vector<Plan>& plans) {
  std::vector<Outcome> outcomes(plans.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < plans.size(); ++i) {
    threads.emplace_back([&, i] { outcomes[i] = run_client(s, plans[i]); });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

void expect_outcomes(const std::vector<Plan>& plans, const std::vector<Outcome>& outcomes) {
  int n[4] = {0, 0, 0, 0}, planned_hang_ups = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    ++n[outcomes[i].kind];
    planned_hang_ups += plans[i].hang_up_after > 0;
    EXPECT_NE(outcomes[i].kind, Outcome::broken)
        << "client " << i << (plans[i].infill ? " (infill): " : " (completion): ")
        << outcomes[i].detail;
  }
  std::printf("clients %d: completed %d, hung up %d (planned %d), rejected %d, broken %d\n",
              kClients, n[Outcome::completed], n[Outcome::hung_up], planned_hang_ups,
              n[Outcome::rejected], n[Outcome::broken]);
  EXPECT_GE(planned_hang_ups, kClients / 4) << "the seed gives a real mix";
  EXPECT_GE(n[Outcome::hung_up], planned_hang_ups / 2) << "hang-ups happened mid-stream";
  EXPECT_GE(n[Outcome::completed], kClients / 4);
}

// Cancels land between steps: polls until no sequence holds a block (or 20 s passed).
KvStats wait_unreferenced(Engine& engine) {
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  KvStats st = engine.kv_stats();
  while (st.used_blocks > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    st = engine.kv_stats();
  }
  return st;
}

TEST(Concurrency, StreamsWithHangUpsLeaveCleanState) {
  ASSERT_TRUE(std::filesystem::is_regular_file(kModel)) << kModel;
  const auto t0 = Clock::now();
  Served s;
  const KvStats start = s.engine->kv_stats();
  ASSERT_EQ(start.free_blocks, start.total_blocks);
  const std::string before = greedy_text(s);
  ASSERT_FALSE(before.empty());

  const std::vector<Plan> plans = make_plans();
  expect_outcomes(plans, run_storm(s, plans));

  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);

  const KvStats st = wait_unreferenced(*s.engine);
  EXPECT_EQ(st.used_blocks, 0) << "blocks still referenced after every client is gone";
  EXPECT_EQ(st.total_blocks, start.total_blocks);
  EXPECT_EQ(st.free_blocks + st.cached_blocks, st.total_blocks);
  EXPECT_GT(st.cached_blocks, 0) << "finished prompts stay in the prefix cache";
  EXPECT_NO_THROW(s.engine->check_invariants());

  // The cached blocks the storm wrote and shared still hold what they should.
  EXPECT_EQ(greedy_text(s), before) << "greedy text changed after the storm";

  s.engine->clear_cache();
  const KvStats end = s.engine->kv_stats();
  EXPECT_EQ(end.total_blocks, start.total_blocks);
  EXPECT_EQ(end.free_blocks, start.free_blocks) << "every block back in the free list";
  EXPECT_EQ(end.cached_blocks, 0);
  EXPECT_EQ(end.used_blocks, 0);
  EXPECT_NO_THROW(s.engine->check_invariants());
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("concurrency test: %.1f s, %lld engine steps\n", secs,
              static_cast<long long>(s.engine->steps()));
}

}  // namespace
}  // namespace efim
