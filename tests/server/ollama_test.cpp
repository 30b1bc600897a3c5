// Ollama's API in-process (the npm client and the plugins' bodies run in tests/e2e): model
// names, infill through `suffix` with the server's EFIM planning, options, keep_alive, errors.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

json ollama_post(httplib::Client& c, const std::string& path, const json& body, int expect) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  EXPECT_EQ(r->status, expect) << body.dump() << " -> " << r->body;
  return json::parse(r->body);
}

double series(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size() + 1));
}

TEST_F(ServerTest, OllamaNamesMatchWithTheLatestTag) {
  Running s(dir_->path());  // model id "tiny"
  auto c = s.client();
  for (const char* name : {"tiny", "tiny:latest", "TINY:Latest", " tiny "}) {
    json r = ollama_post(c, "/api/generate",
                         {{"model", name}, {"prompt", "def"}, {"stream", false},
                          {"options", {{"num_predict", 2}, {"temperature", 0}}}},
                         200);
    EXPECT_EQ(r["model"], name) << "echoed as asked";
    EXPECT_EQ(r["done"], true);
  }
  json e = ollama_post(c, "/api/generate", {{"model", "tiny:7b"}, {"prompt", "x"}}, 404);
  EXPECT_NE(e["error"].get<std::string>().find("model 'tiny:7b' not found"), std::string::npos);
  e = ollama_post(c, "/api/generate", {{"prompt", "x"}}, 404);
  EXPECT_EQ(e["error"].get<std::string>().rfind("model '' not found", 0), 0u);
  e = ollama_post(c, "/api/show", json::object(), 400);
  EXPECT_EQ(e["error"], "model is required");
  json show = ollama_post(c, "/api/show", {{"name", "tiny"}}, 200);  // Continue sends `name`
  EXPECT_NE(show["template"].get<std::string>().find(".Suffix"), std::string::npos);
}

// With `suffix` the request is an infill planned like /infill: typing at one spot extends the
// previous prompt (an EFIM hit), and the suffix stays cached.
TEST_F(ServerTest, OllamaSuffixIsAnInfillWithServerSideEfim) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string suffix = "\n\nprint(add(1, 2))\n";
  json body = {{"model", "tiny"}, {"prompt", "def add(a, b):\n"}, {"suffix", suffix},
               {"stream", false}, {"options", {{"num_predict", 3}, {"temperature", 0}}}};
  json r1 = ollama_post(c, "/api/generate", body, 200);
  body["prompt"] = "def add(a, b):\n    return a";
  json r2 = ollama_post(c, "/api/generate", body, 200);
  const size_t n1 = r1["context"].size() - r1["eval_count"].get<size_t>();
  const size_t n2 = r2["context"].size() - r2["eval_count"].get<size_t>();
  EXPECT_LT(r2["prompt_eval_count"].get<size_t>(), n2 - n1 + 4)
      << "only the typed text (and a block) is computed";
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(series(m->body, "efim_infill_requests_total{model_name=\"tiny\",layout=\"efim\",reason=\"hit\"}"), 1);
}

TEST_F(ServerTest, OllamaOptionsAndKeepAlive) {
  Running s(dir_->path());
  auto c = s.client();
  json base = {{"model", "tiny"}, {"prompt", "def"}, {"stream", false}};
  auto with = [&](json options) {
    json b = base;
    b["options"] = std::move(options);
    return b;
  };
  // Runtime options and unknown keys are accepted (Ollama ignores unknown keys too).
  ollama_post(c, "/api/generate",
              with({{"num_predict", 2}, {"num_thread", 2}, {"num_gpu", 0}, {"use_mmap", true},
                    {"penalize_newline", true}, {"repeat_penalty", 1.0}}),
              200);
  json e = ollama_post(c, "/api/generate", with({{"repeat_penalty", 1.1}}), 400);
  EXPECT_NE(e["error"].get<std::string>().find("repeat_penalty"), std::string::npos);
  e = ollama_post(c, "/api/generate", with({{"top_k", "many"}}), 400);
  EXPECT_EQ(e["error"], "option \"top_k\" must be of type integer, got string \"many\"");
  e = ollama_post(c, "/api/generate", with({{"stop", "x"}}), 400);
  EXPECT_EQ(e["error"], "option \"stop\" must be of type array, got string \"x\"");
  // num_predict and stop.
  json r = ollama_post(c, "/api/generate", with({{"num_predict", 5}, {"temperature", 0}}), 200);
  EXPECT_EQ(r["eval_count"], 5);
  EXPECT_EQ(r["done_reason"], "length");
  const std::string text = r["response"];
  if (text.size() >= 3) {
    json cut = ollama_post(c, "/api/generate",
                           with({{"num_predict", 5}, {"temperature", 0}, {"stop", {text.substr(1, 2)}}}),
                           200);
    EXPECT_EQ(cut["response"], text.substr(0, 1));
    EXPECT_EQ(cut["done_reason"], "stop");
  }
  // keep_alive: seconds or a duration; a bare number string is Ollama's error.
  for (json ka : {json(300), json("5m"), json("-1s"), json(-1)}) {
    json b = with({{"num_predict", 1}});
    b["keep_alive"] = ka;
    ollama_post(c, "/api/generate", b, 200);
  }
  json b = base;
  b["keep_alive"] = "300";
  e = ollama_post(c, "/api/generate", b, 400);
  EXPECT_EQ(e["error"], "field 'keep_alive': time: missing unit in duration \"300\"");
  b = {{"model", "tiny"}, {"prompt", ""}, {"keep_alive", 0}};
  EXPECT_EQ(ollama_post(c, "/api/generate", b, 200)["done_reason"], "unload");
  // What efim does not do is refused with Ollama's error shape.
  ollama_post(c, "/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"images", {"aGk="}}}, 400);
  ollama_post(c, "/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"format", "json"}}, 400);
  ollama_post(c, "/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"think", true}}, 400);
  ollama_post(c, "/api/generate",
              {{"model", "tiny"}, {"prompt", "x"}, {"raw", true}, {"system", "be brief"}}, 400);
  auto bad = c.Post("/api/generate", "{oops", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(json::parse(bad->body).contains("error"));
}

TEST_F(ServerTest, OllamaStreamsNdjsonLines) {
  Running s(dir_->path());
  auto c = s.client();
  auto r = c.Post("/api/generate",
                  json({{"model", "tiny"}, {"prompt", "def"},
                        {"options", {{"num_predict", 6}, {"temperature", 0}}}})
                      .dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-ndjson");
  ASSERT_FALSE(r->body.empty());
  EXPECT_EQ(r->body.back(), '\n');
  std::string text;
  json last;
  size_t pos = 0, lines = 0;
  while (pos < r->body.size()) {
    const size_t end = r->body.find('\n', pos);
    last = json::parse(r->body.substr(pos, end - pos));
    if (!last["done"].get<bool>()) text += last["response"].get<std::string>();
    pos = end + 1;
    ++lines;
  }
  EXPECT_GE(lines, 2u);
  EXPECT_EQ(last["done"], true);
  EXPECT_EQ(last["eval_count"], 6);
  json once = ollama_post(c, "/api/generate",
                          {{"model", "tiny"}, {"prompt", "def"}, {"stream", false},
                           {"options", {{"num_predict", 6}, {"temperature", 0}}}},
                          200);
  EXPECT_EQ(text, once["response"]);
}

}  // namespace
}  // namespace efim
