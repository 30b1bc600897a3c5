// The server's operational surface (see server_test_util.h): /metrics with exact counters,
// overload (503), unknown models (404), token-id prompts, --no-prefix-cache and the infill
// planner's view of the KV cache.
#include <gtest/gtest.h>

#include <future>
#include <sstream>

#include "infill/layout.h"
#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

// /metrics text and one series' value, e.g. series("vllm:prompt_tokens_total", "").
struct Metrics {
  std::string text;
  bool has(const std::string& line) const {
    return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
  }
  // The value of the series `name{model_name="tiny"<labels>}`; fails the test when absent.
  double get(const std::string& name, const std::string& labels = "") const {
    const std::string key = name + "{model_name=\"tiny\"" + labels + "} ";
    const size_t at = ("\n" + text).find("\n" + key);
    EXPECT_NE(at, std::string::npos) << "no series " << key;
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + key.size()));
  }
};

Metrics metrics(httplib::Client& c) {
  auto r = c.Get("/metrics");
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4");
  return {r->body};
}

json token_prompt(std::vector<int32_t> ids, int max_tokens) {
  return {{"prompt", ids}, {"max_tokens", max_tokens}, {"ignore_eos", true}};
}

int cached_tokens(const json& r) { return r["usage"]["prompt_tokens_details"]["cached_tokens"]; }

TEST_F(ServerTest, MetricsFormatAndInitialValues) {
  Running s(dir_->path());
  auto c = s.client();
  Metrics m = metrics(c);
  for (const char* family :
       {"vllm:num_requests_running gauge", "vllm:num_requests_waiting gauge",
        "vllm:kv_cache_usage_perc gauge", "vllm:prefix_cache_queries_total counter",
        "vllm:prefix_cache_hits_total counter", "vllm:prompt_tokens_total counter",
        "vllm:generation_tokens_total counter", "vllm:request_success_total counter",
        "vllm:time_to_first_token_seconds histogram",
        "vllm:e2e_request_latency_seconds histogram", "efim_infill_requests_total counter",
        "efim_kv_blocks_total gauge", "efim_kv_blocks_referenced gauge",
        "efim_kv_blocks_cached gauge", "efim_kv_blocks_free gauge",
        "efim_requests_rejected_total counter", "efim_draining gauge",
        "vllm:cache_config_info gauge"}) {
    EXPECT_TRUE(m.has(std::string("# TYPE ") + family)) << family;
    const std::string name = std::string(family).substr(0, std::string(family).find(' '));
    EXPECT_NE(m.text.find("# HELP " + name + " "), std::string::npos) << name;
  }
  // Every sample line carries the model label.
  std::istringstream lines(m.text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    EXPECT_NE(line.find("{model_name=\"tiny\""), std::string::npos) << line;
  }
  EXPECT_EQ(m.get("efim_kv_blocks_total"), 256);
  EXPECT_EQ(m.get("efim_kv_blocks_free"), 256);
  EXPECT_EQ(m.get("efim_kv_blocks_cached"), 0);
  EXPECT_EQ(m.get("vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(m.get("vllm:prefix_cache_queries_total"), 0);
  EXPECT_EQ(m.get("vllm:time_to_first_token_seconds_bucket", ",le=\"+Inf\""), 0);
  EXPECT_EQ(m.get("vllm:e2e_request_latency_seconds_count"), 0);
  EXPECT_EQ(m.get("efim_infill_requests_total", ",layout=\"psm\",reason=\"not_cached\""), 0);
  EXPECT_EQ(m.get("efim_requests_rejected_total", ",reason=\"overload\""), 0);
  EXPECT_EQ(m.get("efim_requests_rejected_total", ",reason=\"draining\""), 0);
  EXPECT_EQ(m.get("efim_draining"), 0);
  // The cache shape the Gateway API Inference Extension's endpoint picker reads (block size
  // 2 and 256 blocks in this fixture; the engine library's default f32 K/V).
  EXPECT_EQ(m.get("vllm:cache_config_info", ",block_size=\"2\",cache_dtype=\"f32\","
                  "enable_prefix_caching=\"True\",num_gpu_blocks=\"256\",num_cpu_blocks=\"0\""), 1);
}

// Known prompts (token ids, block size 2): the counters are exact.
TEST_F(ServerTest, MetricsCountPrefixReuseExactly) {
  Running s(dir_->path());
  auto c = s.client();
  std::vector<int32_t> a(10);
  for (int32_t i = 0; i < 10; ++i) a[i] = 10 + i;
  std::vector<int32_t> b(a.begin(), a.begin() + 6);  // diverges at a row boundary
  for (int32_t t : {200, 201, 202, 203, 204}) b.push_back(t);
  EXPECT_EQ(cached_tokens(post(c, "/v1/completions", token_prompt(a, 3))), 0);
  EXPECT_EQ(cached_tokens(post(c, "/v1/completions", token_prompt(a, 3))), 9);  // n - 1 at most
  EXPECT_EQ(cached_tokens(post(c, "/v1/completions", token_prompt(b, 2))), 6);
  Metrics m = metrics(c);
  EXPECT_EQ(m.get("vllm:prefix_cache_queries_total"), 10 + 10 + 11);
  EXPECT_EQ(m.get("vllm:prefix_cache_hits_total"), 0 + 9 + 6);
  EXPECT_EQ(m.get("vllm:prompt_tokens_total"), 31);
  EXPECT_EQ(m.get("vllm:generation_tokens_total"), 3 + 3 + 2);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"length\""), 3);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"stop\""), 0);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"abort\""), 0);
  EXPECT_EQ(m.get("vllm:num_requests_running"), 0);
  EXPECT_EQ(m.get("vllm:num_requests_waiting"), 0);
  EXPECT_EQ(m.get("vllm:kv_cache_usage_perc"), 0);
  EXPECT_EQ(m.get("efim_kv_blocks_referenced"), 0);
  EXPECT_GT(m.get("efim_kv_blocks_cached"), 0);
  EXPECT_EQ(m.get("efim_kv_blocks_cached") + m.get("efim_kv_blocks_free"), 256);
  for (const char* h : {"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"}) {
    const std::string name = h;
    EXPECT_EQ(m.get(name + "_count"), 3) << h;
    EXPECT_EQ(m.get(name + "_bucket", ",le=\"+Inf\""), 3) << h;
    EXPECT_GT(m.get(name + "_sum"), 0) << h;
    // Cumulative buckets never decrease.
    double last = 0;
    for (size_t at = m.text.find(name + "_bucket{"); at != std::string::npos;
         at = m.text.find(name + "_bucket{", at + 1)) {
      const double v = std::stod(m.text.substr(m.text.find("} ", at) + 2));
      EXPECT_GE(v, last) << m.text.substr(at, 80);
      last = v;
    }
  }
}

// A stop string ends the request as a stop, not an abort (the server cancels the engine
// request with reason stop). Slow steps, so the cancel lands long before max_tokens.
TEST_F(ServerTest, MetricsCountStopStringsAsStops) {
  Running s(dir_->path(), {.step_delay_ms = 10});
  auto c = s.client();
  const std::vector<int32_t> a = {10, 11, 12, 13};
  const std::string text = post(c, "/v1/completions", token_prompt(a, 4))["choices"][0]["text"];
  ASSERT_FALSE(text.empty());
  size_t len = 1;  // the first whole UTF-8 character
  while (len < text.size() && (uint8_t(text[len]) & 0xC0) == 0x80) ++len;
  json req = token_prompt(a, 60);
  req["stop"] = text.substr(0, len);
  json r = post(c, "/v1/completions", req);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["text"], "");
  Metrics m = metrics(c);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"stop\""), 1);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"length\""), 1);
  EXPECT_EQ(m.get("vllm:request_success_total", ",finished_reason=\"abort\""), 0);
  EXPECT_LT(m.get("vllm:generation_tokens_total"), 4 + 60);
}

// Streams `req` to /v1/completions on a thread of its own and returns once the first chunk
// has arrived (the request holds its place in flight); the thread expects a 200.
std::thread stream_in_background(const Running& s, json req) {
  auto first_chunk = std::make_shared<std::promise<void>>();
  std::future<void> arrived = first_chunk->get_future();
  std::thread t([&s, req = std::move(req), first_chunk] {
    auto c = s.client();
    httplib::Request hr;
    hr.method = "POST";
    hr.path = "/v1/completions";
    hr.body = req.dump();
    hr.set_header("Content-Type", "application/json");
    bool signalled = false;
    hr.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (!signalled) first_chunk->set_value();
      signalled = true;
      return true;
    };
    auto r = c.send(hr);
    EXPECT_TRUE(r);
    if (r) {
      EXPECT_EQ(r->status, 200);
    }
  });
  arrived.wait();
  return t;
}

// Limit 1: while a streamed request is in flight another generation request gets 503; once it
// has ended the next one is served.
TEST_F(ServerTest, OverloadAnswers503AndRecovers) {
  Running s(dir_->path(), {.step_delay_ms = 20, .max_requests = 1});
  std::thread long_request = stream_in_background(
      s, {{"prompt", "abc"}, {"max_tokens", 40}, {"ignore_eos", true}, {"stream", true}});
  auto c = s.client();
  auto r = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["type"], "server_overloaded");
  EXPECT_EQ(e["code"], "overloaded");
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("1 generation requests in flight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit is 1"), std::string::npos) << msg;
  auto ri = c.Post("/infill", R"({"input_prefix": "x", "n_predict": 2})", "application/json");
  ASSERT_TRUE(ri);
  EXPECT_EQ(ri->status, 503);
  auto h = c.Get("/health");  // other routes are not limited
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  long_request.join();
  json ok = post(c, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}});
  EXPECT_EQ(ok["usage"]["completion_tokens"], 2);
  EXPECT_EQ(post(c, "/infill", {{"input_prefix", "x"}, {"n_predict", 1}})["stop"], true);
  EXPECT_EQ(metrics(c).get("efim_requests_rejected_total", ",reason=\"overload\""), 2);
}

TEST_F(ServerTest, UnknownModelGets404) {
  Running s(dir_->path());
  auto c = s.client();
  json req = {{"model", "gpt-4"}, {"prompt", "a"}, {"max_tokens", 1}};
  json e = post(c, "/v1/completions", req, 404)["error"];
  EXPECT_EQ(e["message"], "model 'gpt-4' not found; this server serves 'tiny'");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["code"], "model_not_found");
  for (const json& model : {json("tiny"), json(""), json(nullptr)}) {
    req["model"] = model;
    EXPECT_EQ(post(c, "/v1/completions", req)["model"], "tiny") << model;
  }
  req.erase("model");
  post(c, "/v1/completions", req);
  req["model"] = 5;
  post(c, "/v1/completions", req, 400);
}

// A client-built PSM prompt with sentinels, sent as token ids, reaches the engine exactly:
// it hits every token the server's own PSM plan of the same request left in the cache, and
// its text is the engine's greedy continuation of those ids.
TEST_F(ServerTest, TokenIdPromptIsSentAsGiven) {
  Running s(dir_->path(), {.mode = InfillMode::psm});
  auto c = s.client();
  const std::string prefix = "def add(a, b):\n    return ", suffix = "\n\nprint(add(1, 2))\n";
  post(c, "/v1/completions", {{"prompt", prefix}, {"suffix", suffix}, {"max_tokens", 1}});
  FimLayout layout(*s.tok, make_format(*s.tok));
  const std::vector<int32_t> ids = layout.build({.prefix = prefix, .suffix = suffix},
                                                FimOrder::psm).tokens;
  for (int32_t sentinel : {layout.format().pre, layout.format().suf, layout.format().mid})
    EXPECT_NE(std::find(ids.begin(), ids.end(), sentinel), ids.end()) << sentinel;
  json r = post(c, "/v1/completions", token_prompt(ids, 6));
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(cached_tokens(r), int(ids.size()) - 1);
  Request direct;
  direct.prompt = ids;
  direct.max_tokens = 6;
  direct.ignore_eos = true;
  EXPECT_EQ(r["choices"][0]["text"], s.engine->submit(direct)->wait().text);

  const int n_ctx = int(s.model->config().max_position);
  const std::vector<std::string> bad = {
      R"({"prompt": []})",
      R"({"prompt": [5, -1]})",
      R"({"prompt": [300]})",
      R"({"prompt": [1.5]})",
      R"({"prompt": ["a"]})",
      R"({"prompt": [[1, 2]]})",
      R"({"prompt": [1, 2], "suffix": "x"})",
      R"({"prompt": [18446744073709551615]})",
      json{{"prompt", std::vector<int32_t>(n_ctx, 7)}, {"max_tokens", 1}}.dump(),
  };
  for (const std::string& body : bad) {
    auto res = c.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body;
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "invalid_request_error") << res->body;
  }
  auto res = c.Post("/v1/completions", R"({"prompt": [300]})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("token id 300 at 0 is outside the vocabulary [0, 300)"),
            std::string::npos)
      << res->body;
  res = c.Post("/v1/completions", R"({"prompt": [1], "suffix": "x"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("must be a string when 'suffix' is given"), std::string::npos)
      << res->body;
}

TEST_F(ServerTest, NoPrefixCacheComputesEveryPromptInFull) {
  Running s(dir_->path(), {.prefix_cache = false});
  auto c = s.client();
  json req = {{"prompt", "def fib(n):"}, {"max_tokens", 4}, {"ignore_eos", true}};
  json r1 = post(c, "/v1/completions", req);
  json r2 = post(c, "/v1/completions", req);
  EXPECT_EQ(cached_tokens(r1), 0);
  EXPECT_EQ(cached_tokens(r2), 0);
  EXPECT_EQ(r1["choices"][0]["text"], r2["choices"][0]["text"]);
  const int n = r1["usage"]["prompt_tokens"];
  Metrics m = metrics(c);
  EXPECT_EQ(m.get("vllm:prefix_cache_queries_total"), 2 * n);
  EXPECT_EQ(m.get("vllm:prefix_cache_hits_total"), 0);
  EXPECT_EQ(m.get("efim_kv_blocks_cached"), 0);
  EXPECT_EQ(m.get("efim_kv_blocks_free"), 256);
}

// auto mode asks the engine what is cached: round 2 extends round 1 (EFIM hit); after the
// cache is cleared, round 3's anchor is no longer cached and it re-anchors with PSM.
TEST_F(ServerTest, InfillReanchorsWhenTheAnchorLeftTheCache) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string suffix = "\n\nprint(add(1, 2))\n", p1 = "def add(a, b):\n";
  json req = {{"input_prefix", p1}, {"input_suffix", suffix}, {"n_predict", 2}};
  post(c, "/infill", req);
  req["input_prefix"] = p1 + "    return";
  json r2 = post(c, "/infill", req);
  EXPECT_GT(r2["timings"]["cache_n"].get<int>(), 0);
  s.engine->clear_cache();
  req["input_prefix"] = p1 + "    return a";
  json r3 = post(c, "/infill", req);
  EXPECT_EQ(r3["timings"]["cache_n"], 0);
  Metrics m = metrics(c);
  EXPECT_EQ(m.get("efim_infill_requests_total", ",layout=\"psm\",reason=\"miss\""), 1);
  EXPECT_EQ(m.get("efim_infill_requests_total", ",layout=\"efim\",reason=\"hit\""), 1);
  EXPECT_EQ(m.get("efim_infill_requests_total", ",layout=\"psm\",reason=\"not_cached\""), 1);
  EXPECT_GE(m.get("efim_infill_cache_probes_total"), 2);
  // Round 4 extends round 3's new root while it is cached: a hit again.
  req["input_prefix"] = p1 + "    return a +";
  post(c, "/infill", req);
  EXPECT_EQ(metrics(c).get("efim_infill_requests_total", ",layout=\"efim\",reason=\"hit\""), 2);
}


// llama.vim asks for flat "timings/prompt_n"-style keys (llama.cpp's response_fields) and
// limits indentation with n_indent.
TEST_F(ServerTest, InfillResponseFieldsAndIndentLimit) {
  Running s(dir_->path());
  auto c = s.client();
  json req = {{"input_prefix", "def f(x):\n    return"}, {"input_suffix", "\n"},
              {"n_predict", 24}, {"n_indent", 1000},
              {"response_fields",
               {"content", "timings/prompt_n", "timings/predicted_n", "tokens_cached", "nope/x"}}};
  json r = post(c, "/infill", req);
  ASSERT_TRUE(r.is_object()) << r.dump();
  EXPECT_EQ(r.size(), 4u) << r.dump();  // the absent path is left out
  EXPECT_TRUE(r.contains("timings/prompt_n") && r["timings/prompt_n"].is_number());
  EXPECT_TRUE(r.contains("timings/predicted_n") && r.contains("tokens_cached"));
  // n_indent 1000: no line after the first may hold text.
  const std::string content = r["content"];
  const size_t nl = content.find('\n');
  if (nl != std::string::npos) {
    EXPECT_EQ(content.find_first_not_of(" \t\r\n", nl), std::string::npos) << content;
  }
  req["n_indent"] = -1;
  httplib::Result bad = c.Post("/infill", req.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
}

// ignore_eos on an infill means max_tokens tokens: neither the infill end tokens nor the
// suffix-repeat cut end it (the benchmark relies on this). At temperature 1.5 on the tiny
// random model, 256 samples would hit one of its stop ids with probability ~99% otherwise.
TEST_F(ServerTest, InfillWithIgnoreEosGeneratesMaxTokens) {
  Running s(dir_->path());
  auto c = s.client();
  for (int seed = 0; seed < 8; ++seed) {
    json req = {{"prompt", "def f(x):\n    return"}, {"suffix", "\n"}, {"max_tokens", 32},
                {"ignore_eos", true}, {"temperature", 1.5}, {"seed", seed}};
    json r = post(c, "/v1/completions", req);
    EXPECT_EQ(r["usage"]["completion_tokens"], 32) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << r.dump();
  }
}


// Token healing through the HTTP routes: the request field turns it on and off, the answer says
// what was backed off, the streamed text equals the one-shot text, the prompt shrinks by the
// removed tokens and /metrics counts the healed requests.
TEST_F(ServerTest, TokenHealingFieldResponseAndMetrics) {
  Running s(dir_->path());
  auto c = s.client();
  const json plain = {{"prompt", "def add(a, b):\n    ret"}, {"max_tokens", 6}, {"temperature", 0}};
  json off = plain;
  off["token_healing"] = false;
  const json r_off = post(c, "/v1/completions", off);
  EXPECT_FALSE(r_off.contains("token_healing"));
  const json r_on = post(c, "/v1/completions", plain);  // auto: ends inside a word
  ASSERT_TRUE(r_on.contains("token_healing")) << r_on.dump();
  const int64_t removed = r_on["token_healing"]["tokens_removed"];
  EXPECT_GE(removed, 1);
  EXPECT_LE(removed, 4);
  EXPECT_GE(r_on["token_healing"]["bytes_removed"].get<int64_t>(), removed);
  EXPECT_EQ(r_on["usage"]["prompt_tokens"].get<int64_t>(),
            r_off["usage"]["prompt_tokens"].get<int64_t>() - removed);
  // The tokens that reproduce the removed bytes count as generated: at most 6 + removed.
  EXPECT_LE(r_on["usage"]["completion_tokens"].get<int64_t>(), 6 + removed);
  json streamed = plain;
  streamed["stream"] = true;
  auto sr = c.Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(sr);
  std::string text;
  json last;
  for (const std::string& ev : sse_events(sr->body)) {
    if (ev == "[DONE]") break;
    last = json::parse(ev);
    text += last["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, r_on["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(last["token_healing"], r_on["token_healing"]);
  // Not inside a word: auto leaves a plain prompt alone; the field forces it.
  const json paren = {{"prompt", "print("}, {"max_tokens", 2}, {"temperature", 0}};
  EXPECT_FALSE(post(c, "/v1/completions", paren).contains("token_healing"));
  // /infill: the text after the middle sentinel (the `prompt` field) is healed in auto mode.
  const json infill = {{"input_prefix", "def f(x):\n"}, {"input_suffix", "\n"},
                       {"prompt", "    retu"}, {"n_predict", 4}, {"temperature", 0}};
  const json i_on = post(c, "/infill", infill);
  EXPECT_GE(i_on["token_healing"]["tokens_removed"].get<int64_t>(), 1) << i_on.dump();
  json i_off_body = infill;
  i_off_body["token_healing"] = false;
  const json i_off = post(c, "/infill", i_off_body);
  EXPECT_EQ(i_off["token_healing"]["tokens_removed"], 0);
  EXPECT_EQ(i_on["tokens_evaluated"].get<int64_t>(),
            i_off["tokens_evaluated"].get<int64_t>() -
                i_on["token_healing"]["tokens_removed"].get<int64_t>());
  Metrics m = metrics(c);
  EXPECT_EQ(m.get("efim_token_healing_total"), 3);  // plain, streamed, infill
  EXPECT_EQ(m.get("efim_token_healing_bytes_count"), 3);
  EXPECT_GE(m.get("efim_token_healing_bytes_sum"), 3);
  // A field of the wrong type is a 400 naming it.
  json bad = plain;
  bad["token_healing"] = "yes";
  const json err = post(c, "/v1/completions", bad, 400);
  EXPECT_NE(err.dump().find("token_healing"), std::string::npos) << err.dump();
}

// --max-tokens-in-flight 40: a 30-token prompt streaming holds 30; a 20-token prompt beside it
// gets 503 naming both counts, a 50-token prompt 413 at once; once the first has ended the
// 20-token prompt is served (the tokens were given back).
TEST_F(ServerTest, TokensInFlightCapAnswers503And413) {
  Running s(dir_->path(), {.step_delay_ms = 20, .max_tokens_in_flight = 40});
  auto ids = [](int n) {
    json a = json::array();
    for (int i = 0; i < n; ++i) a.push_back(10 + i % 50);
    return a;
  };
  std::thread long_request = stream_in_background(
      s, {{"prompt", ids(30)}, {"max_tokens", 30}, {"ignore_eos", true}, {"stream", true}});
  auto c = s.client();
  json e = post(c, "/v1/completions", {{"prompt", ids(20)}, {"max_tokens", 2}}, 503)["error"];
  EXPECT_EQ(e["code"], "overloaded");
  std::string msg = e["message"];
  EXPECT_NE(msg.find("30 prompt tokens in flight and prompt needs 20, the cap is 40"),
            std::string::npos)
      << msg;
  e = post(c, "/completion", {{"prompt", ids(50)}, {"n_predict", 2}}, 413)["error"];
  msg = e["message"];
  EXPECT_NE(msg.find("prompt is 50 tokens, more than the server holds in flight at once (40"),
            std::string::npos)
      << msg;
  long_request.join();
  json ok = post(c, "/v1/completions", {{"prompt", ids(20)}, {"max_tokens", 2}});
  EXPECT_EQ(ok["usage"]["prompt_tokens"], 20);
  ok = post(c, "/v1/completions", {{"prompt", ids(40)}, {"max_tokens", 2}});  // exactly the cap
  EXPECT_EQ(ok["usage"]["prompt_tokens"], 40);
}

// Speculation through the HTTP API: the same text with it on, off for one request
// (`speculative: false`, llama.cpp's `speculative.n_max: 0`), and vLLM's counters.
TEST_F(ServerTest, SpeculativeDecodingKeepsTheTextAndIsCounted) {
  RunOptions ro;
  ro.speculative = true;
  Running s(dir_->path(), ro);
  auto c = s.client();
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 40; ++i) ids.push_back(10 + (i % 6) * 7);  // repeats: drafts exist
  json on = token_prompt(ids, 40);
  const std::string text = post(c, "/v1/completions", on)["choices"][0]["text"];
  const Metrics m1 = metrics(c);
  const double drafted = m1.get("vllm:spec_decode_num_draft_tokens_total");
  EXPECT_GT(m1.get("vllm:spec_decode_num_drafts_total"), 0);
  EXPECT_GT(drafted, 0);
  EXPECT_LE(m1.get("vllm:spec_decode_num_accepted_tokens_total"), drafted);
  for (const json& off : {json{{"speculative", false}}, json{{"speculative.n_max", 0}}}) {
    json body = on;
    body.update(off);
    EXPECT_EQ(post(c, "/v1/completions", body)["choices"][0]["text"], text) << off.dump();
    EXPECT_EQ(metrics(c).get("vllm:spec_decode_num_draft_tokens_total"), drafted) << off.dump();
  }
  // llama.cpp's own route and fields: drafts of at most 2 tokens, the same text.
  EXPECT_EQ(post(c, "/completion", {{"prompt", ids}, {"n_predict", 40}, {"ignore_eos", true},
                                    {"speculative.n_max", 2}, {"speculative.n_min", 1}})["content"],
            text);
  EXPECT_GT(metrics(c).get("vllm:spec_decode_num_draft_tokens_total"), drafted);
  json bad = on;
  bad["speculative"] = "yes";
  const json err = post(c, "/v1/completions", bad, 400);
  EXPECT_NE(err.dump().find("speculative"), std::string::npos) << err.dump();
  bad = on;
  bad["speculative.n_max"] = -1;
  EXPECT_NE(post(c, "/v1/completions", bad, 400).dump().find("speculative.n_max"),
            std::string::npos);
}

// A draft model (here the model itself, so every draft is right): the same text as without,
// llama.cpp's speculative.p_min honoured (1: the draft model is never that sure, nothing is
// drafted), and the draft model's tokens counted.
TEST_F(ServerTest, DraftModelKeepsTheTextHonoursPMinAndIsCounted) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 24; ++i) ids.push_back(5 + (i * 37) % 250);
  const json body = token_prompt(ids, 30);
  std::string plain;
  {
    Running s(dir_->path());
    auto c = s.client();
    plain = post(c, "/v1/completions", body)["choices"][0]["text"];
  }
  RunOptions ro;
  ro.draft_dir = dir_->path();
  Running s(dir_->path(), ro);
  auto c = s.client();
  json low = body;
  low["speculative.p_min"] = 0.0;
  EXPECT_EQ(post(c, "/v1/completions", low)["choices"][0]["text"], plain);
  const Metrics m1 = metrics(c);
  const double drafted = m1.get("vllm:spec_decode_num_draft_tokens_total");
  EXPECT_GT(drafted, 0);
  EXPECT_EQ(m1.get("vllm:spec_decode_num_accepted_tokens_total"), drafted);
  EXPECT_GT(m1.get("efim_draft_model_tokens_total", ",kind=\"evaluated\""), 0);
  json sure = body;
  sure["speculative.p_min"] = 1.0;
  EXPECT_EQ(post(c, "/v1/completions", sure)["choices"][0]["text"], plain);
  const Metrics m2 = metrics(c);
  EXPECT_EQ(m2.get("vllm:spec_decode_num_draft_tokens_total"), drafted);
  // The second request found the first one's prompt in the draft model's session.
  EXPECT_GE(m2.get("efim_draft_model_tokens_total", ",kind=\"reused\""), double(ids.size()) - 1);
  json bad = body;
  bad["speculative.p_min"] = 1.5;
  EXPECT_NE(post(c, "/v1/completions", bad, 400).dump().find("speculative.p_min"),
            std::string::npos);
}

}  // namespace
}  // namespace efim
