// llama.cpp's native routes beyond /infill: POST /completion (string, token ids, a mix), its
// streamed form, GET /props, POST /tokenize and /detokenize.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

TEST_F(ServerTest, CompletionNativeMatchesOpenAiAndTakesTokensOrMixedPrompts) {
  Running s(dir_->path());
  auto c = s.client();
  json oai = post(c, "/v1/completions", {{"prompt", "def add(a, b):"}, {"max_tokens", 8}});
  json native = post(c, "/completion",
                     {{"prompt", "def add(a, b):"}, {"n_predict", 8}, {"return_tokens", true}});
  EXPECT_EQ(native["content"], oai["choices"][0]["text"]) << "both greedy by default";
  EXPECT_EQ(native["tokens_predicted"], 8);
  EXPECT_EQ(native["tokens"].size(), 8u);
  EXPECT_EQ(native["stop_type"], "limit");
  EXPECT_EQ(native["prompt"], "def add(a, b):");
  EXPECT_EQ(native["tokens_cached"], native["tokens_evaluated"].get<int>() + 7);
  // The same prompt as token ids, and as a mix of a string and ids.
  const std::vector<int32_t> ids = s.tok->encode("def add(a, b):", {.add_bos = s.tok->add_bos_default()});
  json by_ids = post(c, "/completion", {{"prompt", ids}, {"n_predict", 8}});
  EXPECT_EQ(by_ids["content"], native["content"]);
  const std::vector<int32_t> tail = s.tok->encode("(a, b):");
  json mixed_prompt = json::array({"def add"});
  for (int32_t t : tail) mixed_prompt.push_back(t);
  json mixed = post(c, "/completion", {{"prompt", mixed_prompt}, {"n_predict", 8}});
  EXPECT_EQ(mixed["tokens_evaluated"].get<size_t>(),
            s.tok->encode("def add", {.add_bos = s.tok->add_bos_default()}).size() + tail.size());
  // Streamed: the events' content adds up to the answer; the last one is the final object.
  auto r = c.Post("/completion", json({{"prompt", "def add(a, b):"}, {"n_predict", 8},
                                       {"stream", true}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  std::string streamed;
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 2u);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json e = json::parse(events[i]);
    EXPECT_EQ(e["stop"], false);
    streamed += e["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, native["content"]);
  EXPECT_EQ(json::parse(events.back())["stop"], true);
  // Bad prompts are 400s that name the problem.
  for (const json& bad : {json{{"n_predict", 2}}, json{{"prompt", json::array({"a", "b"})}},
                          json{{"prompt", json::array({1, 99999})}}, json{{"prompt", 3}}}) {
    auto b = c.Post("/completion", bad.dump(), "application/json");
    ASSERT_TRUE(b);
    EXPECT_EQ(b->status, 400) << bad.dump() << " -> " << b->body;
  }
}

TEST_F(ServerTest, PropsDescribeTheServedModel) {
  Running s(dir_->path(), {.max_requests = 5});
  auto c = s.client();
  auto r = c.Get("/props");
  ASSERT_TRUE(r);
  json p = json::parse(r->body);
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], s.model->config().max_position);
  EXPECT_EQ(p["total_slots"], 5);
  EXPECT_EQ(p["model_alias"], "tiny");
  EXPECT_EQ(p["infill"], true);
}

TEST_F(ServerTest, TokenizeAndDetokenizeLikeLlamaCpp) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string text = "def f():<fim_prefix> é";
  json t = post(c, "/tokenize", {{"content", text}});
  // parse_special defaults to true in llama.cpp: the sentinel is one token.
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), s.tok->encode(text, {.parse_special = true}));
  json plain = post(c, "/tokenize", {{"content", text}, {"parse_special", false}});
  EXPECT_EQ(plain["tokens"].get<std::vector<int32_t>>(), s.tok->encode(text));
  json pieces = post(c, "/tokenize", {{"content", text}, {"with_pieces", true}});
  std::string joined;
  for (const json& x : pieces["tokens"]) {
    ASSERT_TRUE(x.contains("id") && x.contains("piece"));
    if (x["piece"].is_string()) {
      joined += x["piece"].get<std::string>();
    } else {
      for (int b : x["piece"]) joined += char(b);  // not UTF-8 on its own: its bytes
    }
  }
  EXPECT_EQ(joined, text);
  json back = post(c, "/detokenize", {{"tokens", t["tokens"]}});
  EXPECT_EQ(back["content"], text);
  post(c, "/detokenize", {{"tokens", json::array({-1})}}, 400);
  post(c, "/detokenize", {{"tokens", "abc"}}, 400);
  EXPECT_EQ(post(c, "/tokenize", json::object())["tokens"], json::array());
}

}  // namespace
}  // namespace efim
