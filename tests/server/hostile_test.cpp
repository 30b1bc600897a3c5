// Hostile and mistaken requests (issue: reliability under hostile load): bodies over the limit
// get 413 with the JSON error, texts no context can hold are refused before tokenizing (or cut,
// for an infill's prefix and suffix), a request the KV cache can never hold is a 400 with the
// numbers, OpenAI fields efim does not implement are refused by name, and an infill that
// leaves no room names the client's field.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_test_util.h"

namespace efim {
namespace {

using namespace servertest;

std::string error_message(const std::string& body) {
  json j = json::parse(body);
  return j["error"].is_object() ? j["error"]["message"].get<std::string>()
                                : j["error"].get<std::string>();
}

TEST_F(ServerTest, BodyOverTheLimitGets413WithTheJsonError) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string big(17u << 20, 'x');  // over the 16 MiB default
  auto r = c.Post("/v1/completions", "{\"prompt\": \"" + big + "\"}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(error_message(r->body).find("over the limit of 16777216 bytes"), std::string::npos)
      << r->body;
  r = c.Post("/api/generate", "{\"prompt\": \"" + big + "\"}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(json::parse(r->body)["error"].is_string()) << "Ollama's error shape under /api/";
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto none = c.Get("/no/such/route");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_NE(error_message(none->body).find("no route GET /no/such/route"), std::string::npos);
}

// Request bytes held at once are capped over all connections: while one client holds 700 KB of
// an unfinished body, another's 500 KB gets 503 with the JSON error; once the first is gone the
// second goes through.
TEST_F(ServerTest, RequestBytesInFlightAreCappedServerWide) {
  Running s(dir_->path(), {.max_buffered_bytes = 1u << 20});
  auto c = s.client();
  httplib::Client slow("127.0.0.1", s.port);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(s.port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 800000\r\n\r\n";
  const std::string part = head + std::string(700000, ' ');
  ASSERT_EQ(::send(fd, part.data(), part.size(), 0), ssize_t(part.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the gate has buffered it
  const std::string body = json({{"prompt", std::string(500000, 'a')}, {"max_tokens", 1}}).dump();
  auto r = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(error_message(r->body).find("bytes of requests in flight, the cap is 1048576"),
            std::string::npos)
      << r->body;
  ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto again = s.client().Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(again);
  EXPECT_NE(again->status, 503) << "the first client's bytes were released";
}

TEST_F(ServerTest, TextNoContextCanHoldIsRefusedOrCutBeforeTokenizing) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string line = "value = compute(value, 1)\n";
  std::string huge;
  while (huge.size() < (2u << 20)) huge += line;  // 2 MB
  for (const char* path : {"/v1/completions", "/completion"}) {
    auto r = c.Post(path, json({{"prompt", huge}, {"max_tokens", 2}}).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413) << path;
    EXPECT_NE(error_message(r->body).find("cannot fit the context of 128 tokens"),
              std::string::npos)
        << r->body;
  }
  auto r = c.Post("/api/generate", json({{"model", "tiny"}, {"prompt", huge}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  // An editor's whole file before the cursor is an infill prefix: cut, then trimmed by tokens.
  json ok = post(c, "/infill", {{"input_prefix", huge}, {"input_suffix", huge}, {"n_predict", 2}});
  EXPECT_EQ(ok["truncated"], true);
  EXPECT_LE(ok["tokens_evaluated"].get<int>(), 128);
}

TEST_F(ServerTest, RequestTheKvCacheCanNeverHoldIs400WithTheNumbers) {
  // 16 blocks of 2 tokens: 32 slots, less than the model's 128-token context.
  Running s(dir_->path(), {.n_blocks = 16});
  auto c = s.client();
  auto r = c.Post("/v1/completions",
                  json({{"prompt", std::vector<int32_t>(30, 7)}, {"max_tokens", 10}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(error_message(r->body).find("need 40 KV cache slots, but the cache holds 32"),
            std::string::npos)
      << r->body;
  post(c, "/v1/completions", {{"prompt", std::vector<int32_t>(20, 7)}, {"max_tokens", 10}});
}

TEST_F(ServerTest, UnimplementedOpenAiFieldsAreRefusedByName) {
  Running s(dir_->path());
  auto c = s.client();
  const json base = {{"prompt", "def"}, {"max_tokens", 2}};
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"logprobs", 5},
                                                 {"echo", true},
                                                 {"best_of", 3},
                                                 {"presence_penalty", 0.5},
                                                 {"frequency_penalty", 1.0},
                                                 {"logit_bias", {{"5", 10}}}}) {
    json b = base;
    b[field] = value;
    auto r = c.Post("/v1/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << field;
    EXPECT_NE(error_message(r->body).find("'" + field + "'"), std::string::npos) << r->body;
  }
  // Their off values are fine, and n: 3 gives three choices.
  json b = base;
  b["logprobs"] = nullptr;
  b["echo"] = false;
  b["best_of"] = 1;
  b["presence_penalty"] = 0;
  b["n"] = 3;
  json three = post(c, "/v1/completions", b);
  EXPECT_EQ(three["choices"].size(), 3u);
}

TEST_F(ServerTest, InfillThatLeavesNoRoomNamesTheClientsField) {
  Running s(dir_->path());
  auto c = s.client();
  auto r = c.Post("/v1/completions",
                  json({{"prompt", "def f():\n"}, {"suffix", "\n"}, {"max_tokens", 127}}).dump(),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const std::string m = error_message(r->body);
  EXPECT_NE(m.find("max_tokens = 127 leaves 1 of the 128-token context for the prompt"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("max_tokens is"), std::string::npos) << "the budget is not called max_tokens";
}

// Every 400 for a field of the wrong type or range names the field and quotes the client's
// value (cut to 64 bytes), on each API.
TEST_F(ServerTest, WrongFieldsNameTheFieldAndTheValue) {
  Running s(dir_->path());
  auto c = s.client();
  const std::string long_text(200, 'y');
  const struct {
    const char* path;
    json body;
    std::string expected;
  } cases[] = {
      {"/v1/completions", {{"prompt", "x"}, {"max_tokens", "ten"}},
       "field 'max_tokens' must be an integer, got string \"ten\""},
      {"/v1/completions", {{"prompt", "x"}, {"temperature", {1}}},
       "field 'temperature' must be a number, got array [1]"},
      {"/v1/completions", {{"prompt", "x"}, {"max_tokens", -3}},
       "field 'max_tokens' = -3 is out of range"},
      {"/v1/completions", {{"prompt", {1, "a"}}},
       "field 'prompt': element 1 must be an integer token id, got string \"a\""},
      {"/infill", {{"input_prefix", 5}}, "field 'input_prefix' must be a string, got number 5"},
      {"/infill", {{"input_prefix", "x"}, {"input_extra", "x"}},
       "field 'input_extra' must be a list, got string \"x\""},
      {"/completion", {{"prompt", "x"}, {"stop", 3}},
       "field 'stop' must be a string or a list of strings, got number 3"},
      {"/completion", {{"prompt", "x"}, {"n_predict", long_text}},
       "field 'n_predict' must be an integer, got string \"" + long_text.substr(0, 60) + "..."},
      {"/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"options", {{"top_p", true}}}},
       "option \"top_p\" must be of type float32, got boolean true"},
      {"/api/generate", {{"model", "tiny"}, {"prompt", "x"}, {"keep_alive", {{"a", 1}}}},
       "field 'keep_alive': unsupported type: object {\"a\":1}"},
  };
  for (const auto& k : cases) {
    auto r = c.Post(k.path, k.body.dump(), "application/json");
    ASSERT_TRUE(r) << k.path;
    EXPECT_EQ(r->status, 400) << k.path << " " << k.body.dump();
    const std::string msg = error_message(r->body);
    EXPECT_NE(msg.find(k.expected), std::string::npos) << k.path << ": " << msg;
    EXPECT_LT(msg.size(), 300u) << msg;
  }
}

}  // namespace
}  // namespace efim
