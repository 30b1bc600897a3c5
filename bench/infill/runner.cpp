#include "bench/infill/runner.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "bench/infill/server_process.h"

namespace efim::bench {
namespace {

using Clock = std::chrono::steady_clock;

// "  cache-efim   17/40 requests   12.3 s": redrawn in place on a terminal, printed once at
// the end otherwise (so logs get one line per scheme).
class ProgressLine {
 public:
  ProgressLine(Scheme s, size_t total, bool enabled)
      : scheme_(s), total_(total), enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0) {}
  void done_one(double elapsed_s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    if (enabled_ && tty_) draw(elapsed_s, "\r");
  }
  void finish(double elapsed_s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (enabled_) draw(elapsed_s, tty_ ? "\r" : "");
    if (enabled_) std::fputc('\n', stderr);
  }

 private:
  void draw(double elapsed_s, const char* lead) {
    std::fprintf(stderr, "%s  %-12s %4zu/%zu requests  %7.1f s", lead,
                 std::string(scheme_name(scheme_)).c_str(), done_, total_, elapsed_s);
    std::fflush(stderr);
  }
  Scheme scheme_;
  size_t total_, done_ = 0;
  bool enabled_, tty_;
  std::mutex mu_;
};

std::optional<PrefixCacheCounters> scrape(const ClientOptions& c) {
  auto text = fetch_metrics(c);
  if (!text) return std::nullopt;
  return prefix_cache_counters(*text);
}

// The user threads: each sends its rounds in order; the first error stops every user after
// its current request and is rethrown.
void drive_users(const std::vector<std::vector<nlohmann::json>>& bodies, const ClientOptions& c,
                 SchemeResult& out, ProgressLine& progress, Clock::time_point t0) {
  const size_t rounds = bodies.empty() ? 0 : bodies[0].size();
  out.requests.resize(bodies.size() * rounds);
  std::atomic<bool> stop{false};
  std::mutex err_mu;
  std::exception_ptr error;
  auto user = [&](size_t u) {
    for (size_t r = 0; r < rounds && !stop; ++r) {
      RequestRecord& rec = out.requests[u * rounds + r];
      rec.user = int(u);
      rec.round = int(r);
      try {
        const double start = std::chrono::duration<double>(Clock::now() - t0).count();
        rec.timing = run_request(c, bodies[u][r]);
        rec.timing.start_s = start;
      } catch (...) {
        std::lock_guard<std::mutex> lock(err_mu);
        if (!error) error = std::current_exception();
        stop = true;
      }
      progress.done_one(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  };
  std::vector<std::thread> threads;
  for (size_t u = 0; u < bodies.size(); ++u) threads.emplace_back(user, u);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

SchemeResult run_scheme(const FimLayout& layout, const Workload& w, Scheme s,
                        const RunOptions& opts) {
  SchemeResult out;
  out.scheme = s;
  out.speculative = opts.speculative;
  if (!opts.peer_llama_server.empty()) out.peer = "llama-server";
  out.max_tokens = opts.sampling.output_tokens;
  // Prompts are built before the clock starts: client-side tokenization is not served time.
  std::vector<std::vector<nlohmann::json>> bodies(w.users.size());
  uint64_t index = 0;
  for (size_t u = 0; u < w.users.size(); ++u)
    for (int r = 0; r < int(w.users[u].typed.size()); ++r)
      bodies[u].push_back(request_body(layout, s, w.users[u], r, opts.sampling, index++));

  std::unique_ptr<ServerProcess> server;
  ClientOptions c;
  c.api_key = opts.api_key;
  c.timeout_s = opts.request_timeout_s;
  if (opts.server_url.empty()) {
    ServeSpec spec;
    spec.exe = opts.exe;
    spec.model = opts.model;
    spec.infill_mode = scheme_server(s).infill_mode;
    spec.token_healing = scheme_server(s).token_healing;
    spec.token_healing_variant = scheme_server(s).token_healing_variant;
    spec.prefix_cache = scheme_server(s).prefix_cache;
    spec.threads = opts.threads;
    spec.kv_cache_mb = opts.kv_cache_mb;
    spec.max_requests = opts.max_requests;
    spec.speculative = opts.speculative;
    if (opts.speculative == "draft" || opts.speculative == "ngram+draft")
      spec.draft_model = opts.draft_model;
    if (!out.peer.empty()) {
      EFIM_CHECK(!is_auto(s), "the peer llama-server takes token prompts: scheme ",
                 scheme_name(s), " sends text with a suffix");
      spec.peer = out.peer;
      spec.exe = opts.peer_llama_server;
      spec.peer_slots = std::max<int>(1, int(w.users.size()));
      spec.peer_slot_ctx = opts.peer_slot_ctx;
    }
    std::string dir = opts.log_dir;
    if (dir.empty()) {  // one folder per run: concurrent runs do not share log files
      dir =
          (std::filesystem::temp_directory_path() / str("efim_bench_infill_", ::getpid())).string();
      std::filesystem::create_directories(dir);
    }
    spec.log_path = str(dir, "/serve-", scheme_name(s), out.peer.empty() ? "" : "-", out.peer, ".log");
    out.serve_command = serve_argv(spec);
    server = std::make_unique<ServerProcess>(spec);
    c.url = server->url();
  } else {
    c.url = opts.server_url;
  }
  out.server = c.url;

  out.metrics_before = scrape(c);
  ProgressLine progress(s, w.users.size() * (w.users.empty() ? 0 : w.users[0].typed.size()),
                        opts.progress);
  const auto t0 = Clock::now();
  drive_users(bodies, c, out, progress, t0);
  out.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  progress.finish(out.wall_s);
  out.metrics_after = scrape(c);
  return out;
}

}  // namespace efim::bench
