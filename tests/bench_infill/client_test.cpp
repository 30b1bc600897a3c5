// The streaming client and the metrics scrape against an in-process cpp-httplib server that
// plays canned SSE streams (timed, split at odd places, broken in various ways).
#include "bench/infill/client.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <thread>

#include "base/error.h"
#include "bench/infill/metrics_text.h"

namespace efim::bench {
namespace {

using namespace std::chrono_literals;

// Pieces of a stream, each written as one chunk after `delay`.
struct Piece {
  std::string bytes;
  std::chrono::milliseconds delay;
};

class FakeServer {
 public:
  FakeServer() {
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      last_body_ = req.body;
      if (status_ != 200) {
        res.status = status_;
        res.set_content(R"({"error":{"message":"bad request"}})", "application/json");
        return;
      }
      auto pieces = pieces_;
      res.set_chunked_content_provider("text/event-stream",
                                       [pieces](size_t, httplib::DataSink& sink) {
                                         for (const auto& p : pieces) {
                                           std::this_thread::sleep_for(p.delay);
                                           sink.write(p.bytes.data(), p.bytes.size());
                                         }
                                         sink.done();
                                         return true;
                                       });
    });
    http_.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          "vllm:prefix_cache_queries_total{model_name=\"m\"} 10\n"
          "vllm:prefix_cache_hits_total{model_name=\"m\"} 4\n",
          "text/plain");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    EXPECT_TRUE(wait_ready());
  }
  ~FakeServer() {
    http_.stop();
    thread_.join();
  }
  ClientOptions client() const {
    ClientOptions o;
    o.url = "http://127.0.0.1:" + std::to_string(port_);
    o.timeout_s = 10;
    return o;
  }
  bool wait_ready() {
    for (int i = 0; i < 200 && !http_.is_running(); ++i) std::this_thread::sleep_for(5ms);
    return http_.is_running();
  }
  std::vector<Piece> pieces_;
  int status_ = 200;
  std::string last_body_;

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
};

std::string event(const std::string& text) {
  return "data: {\"choices\":[{\"text\":\"" + text + "\",\"index\":0}]}\n\n";
}
const std::string kUsage =
    "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{"
    "\"prompt_tokens\":50,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":"
    "20}}}\n\n";

TEST(BenchClient, TimesAStream) {
  FakeServer s;
  const std::string e2 = event("b");
  s.pieces_ = {{event(""), 0ms},  // an empty first chunk does not count as the first token
               {event("a"), 100ms}, {e2.substr(0, 7), 50ms},  // an event split across chunks
               {e2.substr(7), 0ms}, {event("c"), 50ms},      {kUsage + "data: [DONE]\n\n", 0ms}};
  RequestTiming t = run_request(s.client(), {{"prompt", "x"}, {"stream", true}});
  EXPECT_EQ(s.last_body_, R"({"prompt":"x","stream":true})");
  EXPECT_EQ(t.text, "abc");
  EXPECT_EQ(t.prompt_tokens, 50);
  EXPECT_EQ(t.completion_tokens, 3);
  EXPECT_EQ(t.cached_tokens, 20);
  ASSERT_EQ(t.chunk_s.size(), 3u);
  EXPECT_GE(t.ttft_s, 0.095);
  EXPECT_GE(t.chunk_s[1] - t.chunk_s[0], 0.045);
  EXPECT_GE(t.latency_s, t.chunk_s[2]);
  EXPECT_GE(t.latency_s, 0.195);
  ASSERT_TRUE(t.tpot_s());
  EXPECT_DOUBLE_EQ(*t.tpot_s(), (t.latency_s - t.ttft_s) / 2);
}

void expect_error(FakeServer& s, const std::string& fragment) {
  try {
    run_request(s.client(), {{"stream", true}});
    ADD_FAILURE() << "no error, wanted '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(BenchClient, BrokenStreamsAreErrors) {
  FakeServer s;
  s.status_ = 400;
  expect_error(s, "server answered HTTP 400: {\"error\":{\"message\":\"bad request\"}}");
  s.status_ = 200;
  s.pieces_ = {{event("a") + kUsage, 0ms}};
  expect_error(s, "without [DONE]");
  s.pieces_ = {{event("a") + "data: [DONE]\n\n", 0ms}};
  expect_error(s, "no usage");
  s.pieces_ = {{"data: {not json\n\n", 0ms}};
  expect_error(s, "malformed chunk");
  s.pieces_ = {{"data: {\"usage\":{\"prompt_tokens\":\"many\"}}\n\n", 0ms}};
  expect_error(s, "malformed chunk");
  s.pieces_ = {{"data: {\"error\":{\"message\":\"boom\"}}\n\n", 0ms}};
  expect_error(s, "error mid-stream: {\"message\":\"boom\"}");
  ClientOptions nowhere;
  nowhere.url = "http://127.0.0.1:1";
  EXPECT_THROW(run_request(nowhere, {{"stream", true}}), Error);
}

TEST(BenchClient, ScrapesMetrics) {
  FakeServer s;
  auto text = fetch_metrics(s.client());
  ASSERT_TRUE(text);
  auto c = prefix_cache_counters(*text);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->queries, 10);
  EXPECT_EQ(c->hits, 4);
  ClientOptions nowhere;
  nowhere.url = "http://127.0.0.1:1";
  EXPECT_FALSE(fetch_metrics(nowhere));
}

}  // namespace
}  // namespace efim::bench
