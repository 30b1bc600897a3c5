// Runs the typing workload for each scheme: a fresh `efim serve` per scheme (or a given
// server), one thread per user sending its rounds one after another, all users at once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/infill/client.h"
#include "bench/infill/metrics_text.h"
#include "bench/infill/schemes.h"
#include "bench/infill/workload.h"
#include "infill/layout.h"

namespace efim::bench {

struct RunOptions {
  std::string model;                   // passed to `efim serve`
  std::string exe = "/proc/self/exe";  // the efim binary that serves
  std::string server_url;              // non-empty: bench this running server instead
  std::string api_key;
  SamplingSpec sampling;
  int threads = 0;  // server -t
  int kv_cache_mb = 512;
  int max_requests = 0;  // > 0: server --max-requests
  std::string speculative;  // server --speculative ("" = its default)
  std::string draft_model;  // server --draft-model ("" = none)
  std::string log_dir;   // server logs (serve-<scheme>.log)
  bool progress = true;  // a progress line on stderr
  double request_timeout_s = 600;
  // Non-empty: serve with llama.cpp's llama-server at this path instead of `efim serve` (the
  // peer), one slot per user of peer_slot_ctx tokens each.
  std::string peer_llama_server;
  int64_t peer_slot_ctx = 0;
};

struct RequestRecord {
  int user = 0, round = 0;
  RequestTiming timing;
};

struct SchemeResult {
  Scheme scheme = Scheme::cache_psm;
  std::string speculative;                 // the server's --speculative ("": its default)
  std::string peer;                        // "": efim served; "llama-server": the peer did
  std::string server;                      // URL benchmarked
  std::vector<std::string> serve_command;  // empty with RunOptions::server_url
  std::vector<RequestRecord> requests;     // ordered by user, then round
  double wall_s = 0;                       // first request sent to last stream closed
  int64_t max_tokens = 0;                  // output tokens each request asked for (ignore_eos)
  std::optional<PrefixCacheCounters> metrics_before, metrics_after;
};

SchemeResult run_scheme(const FimLayout& layout, const Workload& w, Scheme s,
                        const RunOptions& opts);

}  // namespace efim::bench
