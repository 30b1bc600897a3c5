// One `efim serve` child process per scheme, so no prefix cache carries across schemes: it
// starts on --port 0, the port is read from its log line "efim: serving ... on http://H:P",
// and it is ready once GET /health answers 200. The destructor stops it (SIGTERM, then SIGKILL).
// Or, as the peer, llama.cpp's llama-server on the same model: on a free port picked first,
// with one slot per user and the context they need, ready once /health answers 200.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace efim::bench {

struct ServeSpec {
  std::string exe = "/proc/self/exe";  // the efim binary
  std::string model;
  std::string infill_mode = "psm";
  std::string token_healing = "auto";
  std::string token_healing_variant;  // "" = the server's default
  bool prefix_cache = true;  // false: --no-prefix-cache
  int threads = 0;           // -t (0 = the server's default: all cores)
  int kv_cache_mb = 512;
  int max_requests = 0;  // > 0: --max-requests
  std::string speculative;  // --speculative ("" = the server's default)
  std::string draft_model;  // --draft-model ("" = none)
  std::string log_path;  // where the server's stderr goes
  double start_timeout_s = 120;
  // Non-empty: exe is llama.cpp's llama-server ("llama-server"), run with -np peer_slots and
  // -c peer_slots * peer_slot_ctx (its KV in its default f16); the efim-only fields are unused.
  std::string peer;
  int peer_slots = 1;
  int64_t peer_slot_ctx = 0;
  int port = 0;  // the peer's port (ServerProcess picks a free one)
};

// The argument vector ServerProcess runs (exe first), exposed for tests and the report.
std::vector<std::string> serve_argv(const ServeSpec& spec);

class ServerProcess {
 public:
  // Starts the server and waits until /health answers; throws Error with the log's tail when
  // it exits or does not become ready within start_timeout_s.
  explicit ServerProcess(const ServeSpec& spec);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }  // "http://127.0.0.1:PORT"
  // SIGTERM and wait (SIGKILL after a grace period); idempotent. Returns the exit status text.
  std::string stop();

 private:
  pid_t pid_ = -1;
  std::string url_;
  ServeSpec spec_;
};

// Polls GET url/health until it answers 200; false after timeout_s.
bool wait_healthy(const std::string& url, double timeout_s);

}  // namespace efim::bench
