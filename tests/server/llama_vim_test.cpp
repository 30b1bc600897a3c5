// The defects found by running the real llama.vim (ggml-org/llama.vim a1c8e6e) against efim,
// each replayed with the plugin's own request bodies (autoload/llama.vim: the ring-buffer
// warm-up of s:ring_update and the FIM request of llama#fim) and held to llama.cpp's server
// behaviour (tools/server/server-context.cpp): t_max_predict_ms, `stop`, `samplers`, the
// warm-up's prompt budget, tokens_cached, and OpenAI's `n`.
#include <gtest/gtest.h>

#include "infill/layout.h"
#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

// llama.vim's ring-buffer warm-up (s:ring_update): only the extra context, nothing predicted.
json vim_warmup(const json& extra) {
  return {{"id_slot", 0},         {"input_prefix", ""},    {"input_suffix", ""},
          {"input_extra", extra}, {"prompt", ""},          {"n_predict", 0},
          {"temperature", 0.0},   {"samplers", json::array()}, {"stream", false},
          {"cache_prompt", true}, {"t_max_prompt_ms", 1},  {"t_max_predict_ms", 1},
          {"response_fields", json::array({""})}};
}

// llama.vim's FIM request (llama#fim), with the response_fields it reads; efim's timings/cache_n
// (prompt tokens reused) and return_tokens are added where a test needs them.
json vim_fim(const std::string& prefix, const std::string& middle, const std::string& suffix,
             int64_t t_max_predict_ms, const json& extra = json::array()) {
  const size_t indent = std::min(middle.find_first_not_of(" \t"), middle.size());
  return {{"id_slot", 0},
          {"input_prefix", prefix},
          {"input_suffix", suffix},
          {"input_extra", extra},
          {"prompt", middle},
          {"n_predict", 48},
          {"stop", json::array()},
          {"n_indent", indent},
          {"top_k", 40},
          {"top_p", 0.90},
          {"samplers", {"top_k", "top_p", "infill"}},
          {"stream", false},
          {"cache_prompt", true},
          {"t_max_prompt_ms", 500},
          {"t_max_predict_ms", t_max_predict_ms},
          {"response_fields",
           {"content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
            "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
            "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated",
            "tokens_cached", "timings/cache_n", "tokens_evaluated", "tokens", "stop_type", "stopping_word"}},
          {"return_tokens", true}};
}

// llama.vim's FIM body drawing greedily: the random tiny model is no FIM model, and llama.cpp's
// infill stage (tested on constructed logits in sampling_test) ends its text within a token or
// two, too short to cut by time or by a stop string.
json greedy_fim(const std::string& prefix, const std::string& middle, const std::string& suffix,
                int64_t t_max_predict_ms) {
  json b = vim_fim(prefix, middle, suffix, t_max_predict_ms);
  b["samplers"] = {"top_k", "top_p", "temperature"};
  return b;
}

// A spot in the code where the (random) tiny model's completion carries a newline in a token
// after its first: the time limit can only end the text at such a token.
struct Spot {
  std::string prefix, middle, suffix;
  std::vector<int32_t> tokens;  // the completion without a time limit
  size_t newline_at = 0;        // first token after token 0 whose text holds '\n'
};

Spot find_spot(Running& s, httplib::Client& c) {
  const std::string suffix = "\n    return total\n";
  for (int i = 0; i < 40; ++i) {
    Spot spot;
    spot.prefix = "def f(items):\n    total = 0\n";
    spot.middle = "    x" + std::to_string(i) + " = ";
    spot.suffix = suffix;
    s.engine->clear_cache();
    json r = post(c, "/infill", greedy_fim(spot.prefix, spot.middle, spot.suffix, 600000));
    spot.tokens = r["tokens"].get<std::vector<int32_t>>();
    for (size_t k = 1; k < spot.tokens.size(); ++k) {
      if (s.tok->token_bytes(spot.tokens[k]).find('\n') != std::string::npos) {
        spot.newline_at = k;
        return spot;
      }
    }
  }
  ADD_FAILURE() << "no completion of the tiny model holds a newline after its first token";
  return {};
}

// llama.cpp counts t_max_predict_ms from the first generated token and ends only at a newline
// after the limit. llama.vim sends 250 ms on the first request at a new position: a prompt
// slower than that used to get 0-2 tokens (the time ran from the submission).
TEST_F(ServerTest, LlamaVimTimeLimitCountsFromTheFirstTokenAndEndsAtANewline) {
  Running s(dir_->path(), {.step_delay_ms = 40, .prompt_delay_ms = 60});
  auto c = s.client();
  const Spot spot = find_spot(s, c);
  ASSERT_GT(spot.newline_at, 0u);
  // Cold prompt (cache cleared): its step takes 60 ms > the 30 ms limit.
  s.engine->clear_cache();
  json r = post(c, "/infill", greedy_fim(spot.prefix, spot.middle, spot.suffix, 30));
  EXPECT_GT(r["timings/prompt_ms"].get<double>(), 30.0) << "the prompt is slower than the limit";
  const auto got = r["tokens"].get<std::vector<int32_t>>();
  // Every token after the first comes 40 ms later, past the limit: the text ends with the first
  // later token that carries a newline, that token included.
  const std::vector<int32_t> want(spot.tokens.begin(),
                                  spot.tokens.begin() + ptrdiff_t(spot.newline_at) + 1);
  EXPECT_EQ(got, want);
  EXPECT_GE(got.size(), 2u) << "a multi-token suggestion";
  EXPECT_NE(r["content"].get<std::string>().find('\n'), std::string::npos);
  EXPECT_EQ(r["stop_type"], "limit");
  // Without a newline in the text the limit does not cut: n_indent / n_predict / EOG end it.
  EXPECT_GE(spot.tokens.size(), got.size());
}

// `stop` (llama.vim's stop_strings) ends the /infill text before the stop string.
TEST_F(ServerTest, LlamaVimStopStringsEndTheInfill) {
  Running s(dir_->path());
  auto c = s.client();
  json body = greedy_fim("def f(items):\n    total = 0\n", "    x = ", "\n    return total\n", 600000);
  json full = post(c, "/infill", body);
  const std::string text = full["content"];
  ASSERT_GE(text.size(), 4u) << "the tiny model's completion is long enough to cut";
  const std::string stop = text.substr(2, 2);
  body["stop"] = json::array({stop});
  json cut = post(c, "/infill", body);
  EXPECT_EQ(cut["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["stop_type"], "word");
  EXPECT_EQ(cut["stopping_word"], stop);
  body["stop"] = 7;
  post(c, "/infill", body, 400);
}

// The warm-up (n_predict 0, only input_extra) and the FIM request after it (n_predict 48, a
// long prefix and suffix) lay out the same extra context: the FIM request finds the warm-up's
// [B] X P cached even though its own prefix and suffix must be cut to fit.
TEST_F(ServerTest, LlamaVimWarmupThenRequestFindsTheWarmupCached) {
  Running s(dir_->path());
  auto c = s.client();
  const json extra = json::array(
      {{{"text", "def sq(x): return x*x\n"}, {"time", 1}, {"filename", "a.py"}},
       {{"text", "T = 6\n"}, {"time", 2}, {"filename", "b.py"}}});
  json warm = post(c, "/infill", vim_warmup(extra));
  EXPECT_EQ(warm, json::object()) << "response_fields [\"\"] answers {} as llama.cpp does";
  std::string prefix, suffix;
  for (int i = 0; i < 12; ++i) prefix += "    v" + std::to_string(i) + " = f(" + std::to_string(i) + ")\n";
  for (int i = 0; i < 12; ++i) suffix += "    w" + std::to_string(i) + " = g(" + std::to_string(i) + ")\n";
  json body = vim_fim(prefix, "    x = ", suffix, 600000, extra);
  body["n_predict"] = 16;  // llama.vim's 128 of a real context: under a quarter of it
  json r = post(c, "/infill", body);
  EXPECT_EQ(r["truncated"], true) << "prefix and suffix exceed the budget";
  // The warm-up's prompt [B] X P S M under the same budget (context 128 - a quarter).
  FimLayout layout(*s.tok, make_format(*s.tok));
  std::vector<ExtraChunk> chunks = {{"a.py", "def sq(x): return x*x\n"},
                                    {"b.py", "T = 6\n"}};
  const FimPrompt w = layout.build({.extra = chunks}, FimOrder::psm, 96);
  ASSERT_EQ(w.extra_chunks, 2u);
  EXPECT_GE(r["timings/cache_n"].get<int>(), int(w.tokens.size()) - 2)
      << "the warm-up's tokens up to its S M sentinels are reused";
}

// tokens_cached is llama.cpp's n_past: the tokens in the sequence's cache at the end (the
// prompt and the generated tokens fed back), which llama.vim's info line shows; efim's reuse
// count is timings/cache_n.
TEST_F(ServerTest, LlamaVimTokensCachedIsTheSlotsNPast) {
  Running s(dir_->path());
  auto c = s.client();
  json body = vim_fim("def f(items):\n", "    x = ", "\n", 600000);
  body["n_predict"] = 5;
  json r = post(c, "/infill", body);
  const int n_prompt = r["tokens_evaluated"], n_gen = int(r["tokens"].size());
  const int fed = r["stop_type"] == "limit" ? n_gen - 1 : n_gen;
  EXPECT_EQ(r["tokens_cached"].get<int>(), n_prompt + fed);
  EXPECT_EQ(r["timings/cache_n"].get<int>(), 0) << "a cold prompt reused nothing";
  json again = post(c, "/infill", body);
  EXPECT_GT(again["timings/cache_n"].get<int>(), 0);
}

// `samplers` is honoured: the names and the one-letter form; llama.cpp's other stages are
// accepted only where they are no-ops, and options efim lacks are refused, not ignored.
TEST_F(ServerTest, LlamaVimSamplersAreHonouredOrRefused) {
  Running s(dir_->path());
  auto c = s.client();
  json body = vim_fim("def f(items):\n", "    x = ", "\n", 600000);
  body["n_predict"] = 8;
  json greedy = body;
  greedy["samplers"] = {"top_k", "temperature"};
  json g1 = post(c, "/infill", greedy), g2 = post(c, "/infill", greedy);
  EXPECT_EQ(g1["tokens"], g2["tokens"]) << "temperature 0 listed: greedy";
  json letters = body;
  letters["samplers"] = "kpi";
  json a = post(c, "/infill", letters), b = post(c, "/infill", body);
  EXPECT_EQ(a["tokens"], b["tokens"]) << "\"kpi\" is top_k, top_p, infill";
  body["samplers"] = {"top_k", "dry", "penalties", "infill"};
  post(c, "/infill", body);
  body["samplers"] = {"mirostat"};
  auto r = c.Post("/infill", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("mirostat"), std::string::npos) << r->body;
  body["samplers"] = {"top_k"};
  body["repeat_penalty"] = 1.1;
  r = c.Post("/infill", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("repeat_penalty"), std::string::npos) << r->body;
  body["repeat_penalty"] = 1.0;
  post(c, "/infill", body);
}

// llama.vscode asks /infill for n_cmpl 3 completions and reads a list; OpenAI's n < 1 is 400.
TEST_F(ServerTest, CompletionCountsNAndNCmpl) {
  Running s(dir_->path());
  auto c = s.client();
  json body = vim_fim("def f(items):\n", "    x = ", "\n", 600000);
  body["n_predict"] = 4;
  body["n_cmpl"] = 3;
  body.erase("response_fields");
  json list = post(c, "/infill", body);
  ASSERT_TRUE(list.is_array());
  EXPECT_EQ(list.size(), 3u);
  for (const json& x : list) EXPECT_TRUE(x.contains("content"));
  json req = {{"prompt", "def"}, {"max_tokens", 3}, {"n", 0}};
  auto r = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  req["n"] = 2;
  req["temperature"] = 1.0;
  json two = post(c, "/v1/completions", req);
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(two["choices"][1]["index"], 1);
  const int n_completion = two["usage"]["completion_tokens"];
  EXPECT_GE(n_completion, 2) << "summed over the choices";
  EXPECT_LE(n_completion, 6);
}

}  // namespace
}  // namespace efim
