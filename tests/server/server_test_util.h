// The HTTP server end to end: a tiny random Llama (scripts/make_tiny_model.py) with a tiny
// FIM tokenizer (scripts/make_tiny_tokenizer.py, 300 ids, <fim_prefix>=1 <fim_middle>=2
// <fim_suffix>=3), served in-process on a free port and talked to with httplib::Client.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../model/model_test_util.h"
#include "infill/planner.h"
#include "server/server.h"

namespace efim::servertest {

using nlohmann::json;

struct RunOptions {
  InfillMode mode = InfillMode::automatic;
  std::string api_key = {};
  int step_delay_ms = 0;  // > 0 slows every engine step, so a request outlives a client action
  int prompt_delay_ms = 0;  // > 0 slows each step that admits a request (its prompt) up front
  bool prefix_cache = true;
  int max_requests = 64;
  int32_t n_blocks = 256;
  int32_t block_size = 2;  // fine-grained prefix reuse, so cached counts are near exact
  std::string model_id = "tiny";
  int read_timeout_s = 60;  // of client()
  size_t max_buffered_bytes = size_t(256) << 20;
  int64_t max_tokens_in_flight = 0;
  bool speculative = false;  // the engine's n-gram speculation (efim serve's default is on)
  std::string draft_dir = {};  // a model folder that drafts instead (speculation on)
};

struct Running {  // one model + engine + server; the server listens on its own thread
  // A model folder with tokenizer.json (the tiny test models), on one thread.
  Running(const std::string& dir, const RunOptions& ro = {})
      : Running(Model::load(dir, LoadOptions{.n_threads = 1}),
                std::make_unique<Tokenizer>(Tokenizer::from_json_file(dir + "/tokenizer.json")),
                ro) {}
  Running(std::unique_ptr<Model> m, std::unique_ptr<Tokenizer> t, const RunOptions& ro = {})
      : model(std::move(m)), tok(std::move(t)), read_timeout_s(ro.read_timeout_s) {
    EngineOptions eo;
    eo.tokenizer = tok.get();
    eo.kv.block_size = ro.block_size;
    eo.kv.n_blocks = ro.n_blocks;
    eo.kv.prefix_cache = ro.prefix_cache;
    eo.speculative.enabled = ro.speculative;
    if (!ro.draft_dir.empty()) {
      draft = Model::load(ro.draft_dir, LoadOptions{.n_threads = 1});
      eo.speculative.enabled = true;
      eo.speculative.ngram = false;
      eo.speculative.draft_model = draft.get();
    }
    if (ro.step_delay_ms > 0)
      eo.on_step = [ms = ro.step_delay_ms](const StepPlan&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      };
    if (ro.prompt_delay_ms > 0)
      eo.before_step = [ms = ro.prompt_delay_ms](const StepPlan& plan) {
        if (!plan.admitted.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      };
    engine = std::make_unique<Engine>(*model, eo);
    ServerOptions so;
    so.port = 0;
    so.infill_mode = ro.mode;
    so.api_key = ro.api_key;
    so.model_id = ro.model_id;
    so.max_concurrent_requests = ro.max_requests;
    so.max_buffered_bytes = ro.max_buffered_bytes;
    so.max_tokens_in_flight = ro.max_tokens_in_flight;
    server = std::make_unique<Server>(*engine, *tok, int32_t(model->config().max_position), so);
    port = server->bind();
    thread = std::thread([this] { server->listen(); });
  }
  ~Running() {
    server->stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(read_timeout_s, 0);
    c.set_connection_timeout(30, 0);
    return c;
  }
  std::unique_ptr<Model> model;
  std::unique_ptr<Model> draft;  // with RunOptions.draft_dir
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;
  int port = 0;
  int read_timeout_s = 60;
  std::thread thread;
};

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::require_numpy();
    test::make_tiny_model(dir_->path(), "llama", "f32");
    ASSERT_TRUE(test::run_command(test::kPython + " " +
                                  test::source_path("scripts/make_tiny_tokenizer.py") + " " +
                                  (*dir_ / "tokenizer.json") + " --vocab 300"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  inline static test::TempDir* dir_ = nullptr;
};

inline json post(httplib::Client& c, const std::string& path, const json& body,
                 int expect = 200) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return {};
  EXPECT_EQ(r->status, expect) << r->body;
  return json::parse(r->body);
}

// SSE events "data: ...\n\n" of a streamed response, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

}  // namespace efim::servertest
