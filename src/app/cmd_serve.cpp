// `efim serve MODEL`: loads the model, starts the engine and serves HTTP until killed.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
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
  std::string kv_type = "f16";
  // Off by default: on this 2-core AVX2 VM a verify step of k rows costs nearly k steps (int8
  // matmul is compute-bound here), so drafts did not pay (README, "Speculative decoding").
  std::string speculative;  // empty: draft with --draft-model, else off
  std::string draft_model;
  int draft_sessions = 4;
  int64_t draft_max_catch_up = 64;
  float draft_p_min = 0.75f;
  int draft_min = 1, draft_max = 8;
  int draft_memory = 4;
  bool no_prefix_cache = false;
  std::string alias;
  int64_t ctx_size = 0;  // 0: the model's context (or what the KV cache holds)
  int shutdown_timeout_s = 10;
  int drain_grace_s = 0;
  int64_t max_buffered_mb = 256;
  int64_t max_tokens_in_flight = -1;  // -1: four K/V caches' worth (at least one context)
  ServerOptions server;
};

std::string model_id(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  return p.filename().string();
}

// SIGINT / SIGTERM stop the server: the signals are blocked in every thread and a waiter
// thread turns them into Server::drain() and Server::stop() (no work inside a signal handler).
// The first signal drains: /health answers 503 and new generation requests 503 (a load balancer
// moves traffic and retries them elsewhere) while the requests in flight finish; once none is
// left (and at least the drain grace has passed, for balancers that probe /health slowly) the
// server stops accepting and exits. Past the shutdown deadline the requests still in flight are
// cancelled (each answer ends at once); a second signal exits at once.
class StopOnSignal {
 public:
  StopOnSignal() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // before any thread starts: inherited
  }
  void start(Server& server, Engine& engine, int shutdown_timeout_s, int drain_grace_s) {
    waiter_ = std::thread([this, &server, &engine, shutdown_timeout_s, drain_grace_s] {
      int sig = 0;
      while (!done_ && (sig = wait_signal()) == 0) {
      }
      if (done_) return;
      std::fprintf(stderr, "efim: signal %d: draining, then stopping (/health and new requests "
                   "answer 503; %d in flight get %d s; a second signal exits now)\n", sig,
                   server.in_flight(), shutdown_timeout_s);
      server.drain();
      const auto first = std::chrono::steady_clock::now();
      const auto deadline = first + std::chrono::seconds(shutdown_timeout_s);
      const auto grace = first + std::chrono::seconds(std::min(drain_grace_s, shutdown_timeout_s));
      bool cancelled = false, stopping = false;
      while (!done_) {
        const auto now = std::chrono::steady_clock::now();
        if (!stopping && ((server.in_flight() == 0 && now >= grace) || now >= deadline)) {
          std::fprintf(stderr, "efim: drained after %.1f s (%d requests in flight): stopping\n",
                       std::chrono::duration<double>(now - first).count(), server.in_flight());
          stopping = true;
        }
        // Repeat stop() until listen() returned: a stop that lands just before the server
        // starts listening could otherwise be lost.
        if (stopping) server.stop();
        // A signal within 250 ms of the first is the same stop delivered twice (`timeout`
        // signals its child and then its process group), not a second request.
        if (int again = wait_signal();
            again != 0 && std::chrono::steady_clock::now() - first > std::chrono::milliseconds(250)) {
          std::fprintf(stderr, "efim: second signal %d: exiting now\n", again);
          std::_Exit(128 + again);
        }
        if (!cancelled && std::chrono::steady_clock::now() >= deadline) {
          std::fprintf(stderr, "efim: shutdown deadline of %d s passed: cancelling the requests "
                       "in flight\n", shutdown_timeout_s);
          engine.cancel_all();
          cancelled = true;
        }
      }
    });
  }
  // Call before the server goes away; the waiter never touches it afterwards.
  void stop() {
    if (!waiter_.joinable()) return;
    done_ = true;
    waiter_.join();
  }
  ~StopOnSignal() { stop(); }

 private:
  // A blocked signal within 50 ms, or 0.
  int wait_signal() {
    const timespec wait{0, 50 * 1000 * 1000};
    const int sig = sigtimedwait(&set_, nullptr, &wait);
    return sig > 0 ? sig : 0;
  }
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

// The context the server offers: the model's, or --ctx-size, and never more than the KV cache
// holds (a sequence longer than the cache could never run: it would fail mid-request). A KV
// cache smaller than the model's context narrows the context with a warning; a --ctx-size it
// cannot hold is an error that gives the --kv-cache-mb needed.
int32_t served_context(const ServeArgs& a, const ModelConfig& c, int64_t kv_slots) {
  const int64_t model_ctx = c.max_position;
  const int64_t per_token = Engine::kv_bytes_per_token(c, parse_kv_type(a.kv_type));
  auto mib_for = [&](int64_t tokens) { return (tokens * per_token + (1 << 20) - 1) >> 20; };
  if (a.ctx_size > 0) {
    EFIM_CHECK(a.ctx_size <= model_ctx, "--ctx-size ", a.ctx_size,
               " is over the model's context of ", model_ctx, " tokens");
    EFIM_CHECK(a.ctx_size <= kv_slots, "--ctx-size ", a.ctx_size, " needs a KV cache of ",
               mib_for(a.ctx_size), " MiB (", per_token, " bytes per token); --kv-cache-mb ",
               a.kv_cache_mb, " holds ", kv_slots, " tokens");
    return int32_t(a.ctx_size);
  }
  if (kv_slots >= model_ctx) return int32_t(model_ctx);
  std::fprintf(stderr,
               "efim: warning: --kv-cache-mb %lld holds %lld tokens, less than the model's "
               "context of %lld: serving a context of %lld tokens (--kv-cache-mb %lld holds the "
               "full context)\n",
               (long long)a.kv_cache_mb, (long long)kv_slots, (long long)model_ctx,
               (long long)kv_slots, (long long)mib_for(model_ctx));
  return int32_t(kv_slots);
}

void run_serve(ServeArgs& a) {
  // Large request buffers (a long prompt's JSON, its code points) go to mmap and back to the
  // system when freed: glibc's default raises this threshold after each such free, after which
  // they stay in the handler threads' arenas for good.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
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
  EFIM_CHECK(a.max_buffered_mb >= 17, "--max-buffered-mb must hold one 16 MiB body: >= 17, got ",
             a.max_buffered_mb);
  a.server.max_buffered_bytes = size_t(a.max_buffered_mb) << 20;
  a.server.model_path = a.model;
  const SpeculativeOptions speculative =  // a bad value fails before the model loads
      speculative_options(a.speculative, a.draft_min, a.draft_max, !a.draft_model.empty());
  const std::string spec_mode =
      !a.speculative.empty() ? a.speculative : a.draft_model.empty() ? "off" : "draft";
  StopOnSignal signals;
  LoadedModel m = load_model(a.model, a.threads);
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty()) draft = load_draft_model(a.draft_model, m);
  a.server.healing.fragment_trained = m.model->config().fragment_tokenization;
  a.server.card = model_card(a.model, *m.model);
  EngineOptions eo;
  eo.kv_cache_bytes = a.kv_cache_mb << 20;
  eo.kv_type = parse_kv_type(a.kv_type);
  eo.kv.prefix_cache = !a.no_prefix_cache;
  eo.tokenizer = &m.tokenizer;
  eo.speculative = speculative;
  eo.speculative.memory.docs_per_place = size_t(a.draft_memory);
  eo.speculative.draft_model = draft.get();
  eo.speculative.draft.max_sessions = a.draft_sessions;
  eo.speculative.draft.max_catch_up = a.draft_max_catch_up;
  eo.speculative.draft.p_min = a.draft_p_min;
  Engine engine(*m.model, eo);
  const int32_t n_ctx = served_context(a, m.model->config(), engine.kv_slots());
  EFIM_CHECK(a.max_tokens_in_flight >= -1,
             "--max-tokens-in-flight must be -1 (auto), 0 (no cap) or positive, got ",
             a.max_tokens_in_flight);
  // Queued prompts beyond a few caches' worth only wait: refusing them (503) tells the client
  // to retry instead of holding its tokens and connection for minutes.
  a.server.max_tokens_in_flight = a.max_tokens_in_flight >= 0
                                      ? a.max_tokens_in_flight
                                      : std::max<int64_t>(4 * engine.kv_slots(), n_ctx);
  Server server(engine, m.tokenizer, n_ctx, a.server);
  const int port = server.bind();
  std::fprintf(stderr,
               "efim: serving %s on http://%s:%d (infill mode %s, token healing %s%s, prefix "
               "cache %s, %lld-token %s K/V cache, speculative %s)\n",
               a.server.model_id.c_str(), a.server.host.c_str(), port, a.infill_mode.c_str(),
               a.token_healing.c_str(),
               a.server.healing.fragment_trained ? " (fragment-trained model)" : "",
               a.no_prefix_cache ? "off" : "on", (long long)engine.kv_slots(), a.kv_type.c_str(),
               spec_mode.c_str());
  signals.start(server, engine, a.shutdown_timeout_s, a.drain_grace_s);
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
  cmd->add_option("--speculative", a->speculative,
                  "Speculative decoding: ngram (drafts copied from the request's own text, verified "
                  "in one step; the text is unchanged), draft (a draft model's greedy "
                  "continuation), ngram+draft (the draft model where the n-gram finds none) or "
                  "off; default: draft with --draft-model, else off");
  cmd->add_option("--draft-model,--model-draft", a->draft_model,
                  "A small model with the same tokenizer that drafts (HF folder or .gguf)");
  cmd->add_option("--draft-sessions", a->draft_sessions,
                  "Draft model K/V caches: requests that draft at once (each kept for the next "
                  "request at the same place)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--draft-max-catch-up", a->draft_max_catch_up,
                  "A request whose tokens the draft model would first have to evaluate more "
                  "than this many of gets no drafts; they are evaluated while the server is idle, "
                  "for the next request at that place (0: at once, however many)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--draft-p-min", a->draft_p_min,
                  "A draft model's draft ends before a token it gives less probability than this "
                  "(requests may say speculative.p_min)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--draft-min", a->draft_min, "Shortest speculative draft")->capture_default_str();
  cmd->add_option("--draft-max", a->draft_max, "Longest speculative draft")->capture_default_str();
  cmd->add_option("--draft-memory", a->draft_memory,
                  "Previous completions kept per place (same context and suffix) to draft the "
                  "next requests there from; 0: none")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type,
                  "K/V cache element type: f16 (half of f32's bytes), q8_0 (about a quarter) or "
                  "f32")
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "Context in tokens (0: the model's, or what the K/V cache holds)")
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
  cmd->add_option("--shutdown-timeout", a->shutdown_timeout_s,
                  "Seconds in-flight requests get after SIGTERM before they are cancelled")
      ->capture_default_str();
  cmd->add_option("--drain-grace", a->drain_grace_s,
                  "Seconds after SIGTERM that /health answers 503 before the server exits, even "
                  "with nothing in flight (time for a load balancer's health check to notice)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  cmd->add_option("--write-timeout", a->server.write_timeout_s,
                  "Seconds a client may stop reading before it is dropped (and its request "
                  "cancelled)")
      ->capture_default_str();
  cmd->add_option("--request-timeout", a->server.read_timeout_s,
                  "Seconds a request may take to arrive whole (slow clients are closed with 408)")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", a->server.idle_timeout_s,
                  "Seconds a keep-alive connection may idle between requests")
      ->capture_default_str();
  cmd->add_option("--max-connections", a->server.max_connections,
                  "Open connections at most; one more gets 503")
      ->capture_default_str();
  cmd->add_option("--max-buffered-mb", a->max_buffered_mb,
                  "MiB of request bytes held at once over all connections; past it 503")
      ->capture_default_str();
  cmd->add_option("--max-tokens-in-flight", a->max_tokens_in_flight,
                  "Prompt tokens of the generation requests in flight at most; past it 503 "
                  "(-1: four K/V caches' worth, 0: no cap)")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache,
                "Compute every prompt in full (baseline for measuring prefix reuse)");
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace efim::app
