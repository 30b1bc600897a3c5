// EngineMetrics: counters and gauges the engine thread keeps for monitoring (the server turns a
// snapshot into Prometheus text at /metrics; the names in the comments are those series).
// Counters only grow; they are updated on the engine thread, so they need no locks, and
// Engine::metrics() copies them between steps.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_manager.h"

namespace efim {

// A fixed-bucket histogram of non-negative values (seconds).
struct Histogram {
  std::vector<double> upper;    // bucket upper bounds, ascending; +Inf is implicit
  std::vector<int64_t> counts;  // [upper.size() + 1] observations per bucket, not cumulative
  double sum = 0;
  int64_t count = 0;

  Histogram() = default;
  explicit Histogram(std::vector<double> bounds);  // throws Error unless strictly ascending
  void observe(double x);  // into the first bucket with x <= upper (the last one past all)
  // Observations <= upper[i] (Prometheus' cumulative `le` count).
  int64_t cumulative(size_t i) const;
};

// Bucket bounds in seconds. Code completion on CPU: first tokens from ~5 ms (cached prompt,
// small model) to seconds (long cold prompt on a large model).
std::vector<double> ttft_buckets();
std::vector<double> e2e_buckets();
// Bytes a token-healing request had to reproduce (1 byte to a few words).
std::vector<double> heal_bytes_buckets();

struct EngineMetrics {
  // Gauges at the time of the snapshot.
  int32_t n_running = 0;  // vllm:num_requests_running: admitted, not finished
  int32_t n_waiting = 0;  // vllm:num_requests_waiting: queued, never admitted or preempted
  KvStats kv;             // blocks (vllm:kv_cache_usage_perc = kv.usage())

  // Counters over the engine's lifetime.
  int64_t prefix_query_tokens = 0;  // vllm:prefix_cache_queries_total: prompt tokens of each
                                    // request, counted at its first admission
  int64_t prefix_hit_tokens = 0;    // vllm:prefix_cache_hits_total: of those, found cached
  int64_t prompt_tokens = 0;        // vllm:prompt_tokens_total (at first admission)
  int64_t generation_tokens = 0;    // vllm:generation_tokens_total: every sampled token,
                                    // a stop/EOS token that ended generation included
  // vllm:request_success_total{finished_reason}: stop (stop/EOS token, stop string), length
  // (max_tokens, time limit), abort (cancelled: client gone, shutdown); errors separately.
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0, finished_error = 0;
  Histogram ttft_seconds{ttft_buckets()};  // vllm:time_to_first_token_seconds (submit -> first
                                           // sampled token)
  Histogram e2e_seconds{e2e_buckets()};    // vllm:e2e_request_latency_seconds (submit -> finish,
                                           // every finished request)
  // efim_token_healing_total: requests admitted with heal_bytes (at first admission);
  // efim_token_healing_bytes: how many bytes each had to reproduce.
  int64_t token_healing = 0;
  Histogram heal_bytes{heal_bytes_buckets()};
  // Speculative decoding (vLLM's series): vllm:spec_decode_num_drafts_total (drafts verified),
  // vllm:spec_decode_num_draft_tokens_total (tokens in them),
  // vllm:spec_decode_num_accepted_tokens_total (of those, accepted).
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  // efim_draft_model_tokens_total{kind}: tokens the draft model computed (evaluated: catching
  // up with a sequence and drafting) and those a request found in the session it took, left
  // there by an earlier request (reused).
  // Of the evaluated, those evaluated while the engine had nothing else to run (idle).
  int64_t draft_model_evaluated = 0, draft_model_reused = 0, draft_model_idle = 0;
};

}  // namespace efim
