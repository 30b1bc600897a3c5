// The HTTP server end to end (see server_test_util.h): the routes, streaming, infill planning,
// validation, cancellation, time limits and API keys.
#include <gtest/gtest.h>

#include "infill/layout.h"
#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

TEST_F(ServerTest, HealthAndModels) {
  Running s(dir_->path());
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  json j = json::parse(m->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
}

TEST_F(ServerTest, CompletionStreamMatchesNonStream) {
  Running s(dir_->path());
  auto c = s.client();
  json req = {{"prompt", "def fib(n):"}, {"max_tokens", 12}, {"temperature", 0},
              {"ignore_eos", true}};
  json once = post(c, "/v1/completions", req);
  EXPECT_EQ(once["object"], "text_completion");
  EXPECT_EQ(once["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(once["usage"]["completion_tokens"], 12);
  const std::string text = once["choices"][0]["text"];
  EXPECT_FALSE(text.empty());

  req["stream"] = true;
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string joined;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    joined += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, text);
  // The second, identical prompt hits the prefix cache.
  EXPECT_GT(json::parse(events[events.size() - 2])["usage"]["prompt_tokens_details"]
                ["cached_tokens"].get<int>(), 0);

  // A stop string cuts the text before its first occurrence.
  // One whole UTF-8 character from the middle (the random model writes any bytes).
  size_t at = text.size() / 2, len = 1;
  while (at > 0 && (uint8_t(text[at]) & 0xC0) == 0x80) --at;
  while (at + len < text.size() && (uint8_t(text[at + len]) & 0xC0) == 0x80) ++len;
  const std::string stop = text.substr(at, len);
  req["stream"] = false;
  req["stop"] = json::array({stop});
  json cut = post(c, "/v1/completions", req);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
}

// Round 2 types more text after round 1's prefix, same suffix. auto mode reuses round 1's
// whole prompt (EFIM); psm mode can reuse at most round 1's prefix tokens.
void infill_rounds(const std::string& dir, InfillMode mode, bool expect_reuse) {
  Running s(dir, {.mode = mode});
  auto c = s.client();
  const std::string p1 = "def add(a, b):\n", p2 = p1 + "    return a";
  const std::string suffix = "\n\nprint(add(1, 2))\n";
  json req = {{"input_prefix", p1}, {"input_suffix", suffix}, {"n_predict", 4},
              {"input_extra", json::array()}, {"cache_prompt", true}};
  json r1 = post(c, "/infill", req);
  ASSERT_TRUE(r1.contains("content"));
  EXPECT_EQ(r1["timings"]["predicted_n"].get<int>() > 0, true);
  EXPECT_EQ(r1["tokens_predicted"], r1["timings"]["predicted_n"]);
  req["input_prefix"] = p2;
  json r2 = post(c, "/infill", req);
  // Round 1's PSM prompt: where its prefix and its suffix end.
  FimLayout layout(*s.tok, make_format(*s.tok));
  FimPrompt first = layout.build({.prefix = p1, .suffix = suffix}, FimOrder::psm);
  size_t prefix_end = 0, suffix_end = 0;
  for (const PartRange& r : first.ranges) {
    if (r.part == PromptPart::prefix) prefix_end = r.end;
    if (r.part == PromptPart::suffix) suffix_end = r.end;
  }
  const int cached = r2["timings"]["cache_n"];
  std::printf("mode %s: round 2 cached %d, round 1 prefix ends at %zu, suffix at %zu\n",
              std::string(mode_name(mode)).c_str(), cached, prefix_end, suffix_end);
  if (expect_reuse) {
    EXPECT_GE(cached, int(suffix_end) - 1) << "block size 2 may drop one token";
    EXPECT_GT(cached, int(prefix_end));
  } else {
    EXPECT_LE(cached, int(prefix_end));
  }
}

TEST_F(ServerTest, InfillAutoReusesPreviousPrompt) {
  infill_rounds(dir_->path(), InfillMode::automatic, true);
}

TEST_F(ServerTest, InfillPsmReusesOnlyPrefix) {
  infill_rounds(dir_->path(), InfillMode::psm, false);
}

TEST_F(ServerTest, InfillStreamAndFillOnly) {
  Running s(dir_->path());
  auto c = s.client();
  json req = {{"input_prefix", "x = "}, {"input_suffix", "\n"}, {"n_predict", 0}};
  json fill = post(c, "/infill", req);
  EXPECT_EQ(fill["content"], "");
  EXPECT_EQ(fill["tokens_predicted"], 0);
  req["n_predict"] = 5;
  req["stream"] = true;
  auto r = c.Post("/infill", req.dump(), "application/json");
  ASSERT_TRUE(r);
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 1u);
  json last = json::parse(events.back());
  EXPECT_EQ(last["stop"], true);
  EXPECT_GT(last["timings"]["cache_n"].get<int>(), 0) << "n_predict 0 filled the cache";
}

TEST_F(ServerTest, BadInputGets400AndServerKeepsServing) {
  Running s(dir_->path());
  auto c = s.client();
  const std::vector<std::string> bad = {
      "{not json",
      "[1, 2]",
      R"({"prompt": 5})",
      R"({"prompt": ""})",
      R"({"max_tokens": 4})",
      R"({"prompt": "a", "max_tokens": -1})",
      R"({"prompt": "a", "max_tokens": 99999999999999999999})",
      R"({"prompt": "a", "max_tokens": 1000000})",
      R"({"prompt": "a", "temperature": "hot"})",
      R"({"prompt": "a", "temperature": -1})",
      R"({"prompt": "a", "stop": [1]})",
      R"({"prompt": "a", "stream": "yes"})",
      "{\"prompt\": \"\xff\xfe\"}",
      R"({"prompt": ")" + std::string(400, 'z') + R"("})",
  };
  for (const std::string& body : bad) {
    auto r = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body;
    json e = json::parse(r->body);
    EXPECT_EQ(e["error"]["type"], "invalid_request_error") << body;
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
    EXPECT_TRUE(e["error"]["code"].is_null());
  }
  auto longp = c.Post("/v1/completions", json{{"prompt", std::string(400, 'z')}}.dump(),
                      "application/json");
  ASSERT_TRUE(longp);
  EXPECT_NE(longp->body.find("context"), std::string::npos) << longp->body;
  for (const std::string& body : {std::string(R"({"input_prefix": 3})"),
                                  std::string(R"({"n_predict": -5})"),
                                  std::string(R"({"input_extra": "x"})")}) {
    auto r = c.Post("/infill", body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body;
  }
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// Concurrent requests are batched by the engine; greedy output must not depend on it.
TEST_F(ServerTest, ConcurrentCompletionsMatchSequential) {
  Running s(dir_->path());
  const std::vector<std::string> prompts = {"def a():", "class B:", "import os\n", "x = [1,"};
  auto body = [](const std::string& p) {
    return json{{"prompt", p}, {"max_tokens", 10}, {"ignore_eos", true}};
  };
  std::vector<std::string> sequential, concurrent(prompts.size());
  {
    auto c = s.client();
    for (const auto& p : prompts)
      sequential.push_back(post(c, "/v1/completions", body(p))["choices"][0]["text"]);
  }
  s.engine->clear_cache();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto c = s.client();
      auto r = c.Post("/v1/completions", body(prompts[i]).dump(), "application/json");
      if (r && r->status == 200) concurrent[i] = json::parse(r->body)["choices"][0]["text"];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(concurrent, sequential);
}

TEST_F(ServerTest, StreamedStopString) {
  Running s(dir_->path());
  auto c = s.client();
  json req = {{"prompt", "abc"}, {"max_tokens", 20}, {"ignore_eos", true}};
  const std::string text = post(c, "/v1/completions", req)["choices"][0]["text"];
  ASSERT_GE(text.size(), 6u);
  // The first ASCII byte after the first 3: a stop string the streamed text must end before.
  size_t at = 3;
  while (at < text.size() && uint8_t(text[at]) >= 0x80) ++at;
  ASSERT_LT(at, text.size()) << "no ASCII character in " << text;
  req["stop"] = text.substr(at, 1);
  req["stream"] = true;
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 2u);
  std::string joined;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    joined += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(joined, text.substr(0, text.find(text[at])));
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "stop");
}

// A client that goes away mid-stream cancels its request: the engine stops stepping long
// before max_tokens and every KV block is released.
TEST_F(ServerTest, ClientDisconnectCancels) {
  Running s(dir_->path(), {.step_delay_ms = 20});
  auto c = s.client();
  json req = {{"prompt", "abc"}, {"max_tokens", 100}, {"ignore_eos", true}, {"stream", true}};
  int chunks = 0;
  httplib::Request hr;
  hr.method = "POST";
  hr.path = "/v1/completions";
  hr.body = req.dump();
  hr.set_header("Content-Type", "application/json");
  hr.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  auto r = c.send(hr);
  EXPECT_FALSE(r) << "the client aborted the transfer";
  EXPECT_EQ(chunks, 2);
  // 100 steps would take 2 s; the cancel lands within a few steps.
  for (int i = 0; i < 100 && s.engine->kv_stats().used_blocks > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(s.engine->kv_stats().used_blocks, 0);
  EXPECT_LT(s.engine->steps(), 50);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

// Server::drain (what SIGTERM starts): /health and new generation requests answer 503, the
// request in flight completes whole, in_flight() counts it down to 0, /metrics still answers.
TEST_F(ServerTest, DrainRefusesNewWorkAndFinishesTheRequestInFlight) {
  Running s(dir_->path(), {.step_delay_ms = 10});
  json long_answer;
  std::thread in_flight([&] {
    auto c = s.client();
    long_answer = post(c, "/v1/completions", {{"prompt", "abc"}, {"max_tokens", 60}, {"ignore_eos", true}});
  });
  for (int i = 0; i < 500 && s.server->in_flight() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(s.server->in_flight(), 1);
  EXPECT_FALSE(s.server->draining());
  s.server->drain();
  EXPECT_TRUE(s.server->draining());
  auto c = s.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["status"], "draining");
  for (const char* path : {"/v1/completions", "/completion"}) {
    auto r = c.Post(path, json{{"prompt", "abc"}, {"max_tokens", 2}}.dump(), "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 503) << path << " " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "draining") << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  }
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("efim_draining{model_name=\"tiny\"} 1"), std::string::npos);
  EXPECT_NE(m->body.find("efim_requests_rejected_total{model_name=\"tiny\",reason=\"draining\"} 2"),
            std::string::npos);
  in_flight.join();
  EXPECT_EQ(long_answer["usage"]["completion_tokens"], 60) << long_answer.dump();
  EXPECT_EQ(s.server->in_flight(), 0);
}

TEST_F(ServerTest, ApiKey) {
  Running s(dir_->path(), {.api_key = "secret"});
  auto c = s.client();
  json req = {{"prompt", "a"}, {"max_tokens", 2}};
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  std::string msg = json::parse(r->body)["error"]["message"];
  EXPECT_NE(msg.find("no Authorization header"), std::string::npos) << msg;
  c.set_bearer_token_auth("wrong");
  r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  msg = json::parse(r->body)["error"]["message"];
  EXPECT_NE(msg.find("bearer key is not this server's API key"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("wrong"), std::string::npos) << "the key tried is not echoed: " << msg;
  c.set_bearer_token_auth("secret");
  r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace efim
