// `efim serve MODEL`: loads the model, starts the engine and serves HTTP until killed.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <memory>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "engine/engine.h"
#include "server/server.h"

namespace efim::app {
namespace {

struct ServeArgs {
  std::string model;
  std::string infill_mode = "auto";
  std::string token_healing = "auto";
  std::string heal_variant = "constrained";
  int threads = 0;
  int64_t kv_cache_mb = 256;
  bool no_prefix_cache = false;
  std::string alias;
  ServerOptions server;
};

std::string model_id(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  return p.filename().string();
}

// SIGINT / SIGTERM stop the server cleanly: the signals are blocked in every thread and a
// waiter thread turns them into Server::stop() (no work inside a signal handler).
class StopOnSignal {
 public:
  StopOnSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any thread starts: inherited
  }
  void start(Server& server) {
    waiter_ = std::thread([this, &server] {
      int sig = 0;
      sigwait(&set_, &sig);
      // Repeat until listen() returned: a stop that lands just before the server starts
      // listening could otherwise be lost (and every later signal is blocked).
      while (!done_) {
        server.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
  }
  // Call before the server goes away; the waiter never touches it afterwards.
  void stop() {
    if (!waiter_.joinable()) return;
    done_ = true;
    pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes it when no signal came
    waiter_.join();
  }
  ~StopOnSignal() { stop(); }

 private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

void run_serve(ServeArgs& a) {
  EFIM_CHECK(a.kv_cache_mb > 0, "--kv-cache-mb must be positive, got ", a.kv_cache_mb);
  EFIM_CHECK(a.server.max_concurrent_requests > 0, "--max-requests must be positive, got ",
             a.server.max_concurrent_requests);
  EFIM_CHECK(a.server.port >= 0 && a.server.port <= 65535, "--port must be in [0, 65535], got ",
             a.server.port);
  a.server.infill_mode = parse_mode(a.infill_mode);
  a.server.healing.mode = parse_healing_mode(a.token_healing);
  EFIM_CHECK(a.heal_variant == "constrained" || a.heal_variant == "exact",
             "--token-healing-variant takes constrained or exact, got '", a.heal_variant, "'");
  a.server.healing.exact = a.heal_variant == "exact";
  a.server.model_id = a.alias.empty() ? model_id(a.model) : a.alias;
  a.server.model_path = a.model;
  StopOnSignal signals;
  LoadedModel m = load_model(a.model, a.threads);
  a.server.healing.fragment_trained = m.model->config().fragment_tokenization;
  a.server.card = model_card(a.model, *m.model);
  EngineOptions eo;
  eo.kv_cache_bytes = a.kv_cache_mb << 20;
  eo.kv.prefix_cache = !a.no_prefix_cache;
  eo.tokenizer = &m.tokenizer;
  Engine engine(*m.model, eo);
  Server server(engine, m.tokenizer, int32_t(m.model->config().max_position), a.server);
  const int port = server.bind();
  std::fprintf(stderr,
               "efim: serving %s on http://%s:%d (infill mode %s, token healing %s%s, prefix "
               "cache %s)\n",
               a.server.model_id.c_str(), a.server.host.c_str(), port, a.infill_mode.c_str(),
               a.token_healing.c_str(),
               a.server.healing.fragment_trained ? " (fragment-trained model)" : "",
               a.no_prefix_cache ? "off" : "on");
  signals.start(server);
  server.listen();
  signals.stop();
  std::fprintf(stderr, "efim: server stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "Serve OpenAI /v1/completions, llama.cpp /infill and /completion, Ollama /api/generate");
  cmd->add_option("model", a->model, "HF folder or .gguf file")->required();
  cmd->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->server.port, "Port (0 = any free one)")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-cache-mb", a->kv_cache_mb, "K/V cache memory in MiB")
      ->capture_default_str();
  cmd->add_option("--infill-mode", a->infill_mode, "psm, spm, efim or auto")
      ->capture_default_str();
  cmd->add_option("--token-healing", a->token_healing,
                  "auto (heal the text after the middle sentinel unless the model is "
                  "fragment-trained, and plain prompts ending inside a word), on or off")
      ->capture_default_str();
  cmd->add_option("--token-healing-variant", a->heal_variant,
                  "constrained (mask each step to the removed bytes) or exact (draw from every "
                  "covering of them, weighed by the model: +0.5 edit similarity on efim-base-py, "
                  "but its probe sequences cost 13-19% of mean latency under load)")
      ->capture_default_str();
  cmd->add_option("--api-key", a->server.api_key, "Require Authorization: Bearer KEY");
  cmd->add_option("--alias", a->alias,
                  "Model name the APIs answer to (default: the file name); e.g. "
                  "qwen2.5-coder:1.5b for clients configured for Ollama");
  cmd->add_option("--max-requests", a->server.max_concurrent_requests,
                  "Generation requests in flight at most; more get 503")
      ->capture_default_str();
  cmd->add_option("--reanchor-tokens", a->server.planner.reanchor_inc_tokens,
                  "auto mode: typed tokens after the middle sentinel before a fresh PSM anchor")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache,
                "Compute every prompt in full (baseline for measuring prefix reuse)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace efim::app
