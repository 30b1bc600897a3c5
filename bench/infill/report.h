// What the benchmark reports per scheme (vLLM benchmark_serving conventions), and the three
// renderings: JSON (everything, per request too), a Markdown table and an SVG bar chart.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/infill/runner.h"

namespace efim::bench {

// numpy-style statistics over samples; 0 for an empty list.
double mean_of(const std::vector<double>& v);
double percentile_of(std::vector<double> v, double q);  // q in [0, 100], linear interpolation

struct SchemeSummary {
  std::string name;
  size_t requests = 0;
  double wall_s = 0;
  double ttft_mean_ms = 0, ttft_median_ms = 0, ttft_p90_ms = 0;
  double tpot_mean_ms = 0, tpot_median_ms = 0;
  double itl_mean_ms = 0;  // mean gap between text chunks
  double latency_mean_s = 0, latency_median_s = 0;
  double request_throughput = 0;                                    // requests / wall_s
  double output_token_throughput = 0;                               // completion tokens / wall_s
  int64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;  // sums over requests
  // Requests that got fewer tokens than they asked for despite ignore_eos (the server ended
  // them: a stop token or rule): their latency is not comparable with full-length ones.
  size_t short_requests = 0;
  int64_t max_tokens = 0;            // output tokens asked for per request
  std::optional<double> reuse_rate;  // /metrics: delta hits / delta queries
  double usage_cached_rate = 0;      // usage: cached_tokens / prompt_tokens
  // usage, rounds 1.. only: the typing rounds after each user's cold first request. Round 0
  // is a miss in every scheme, which caps the overall rate (R = 5: at ~76%); this is the
  // reuse an editor sees while the user types.
  double followup_cached_rate = 0;
  // Against cache-psm (when it ran): mean latency / cache-psm's, request throughput / its.
  std::optional<double> latency_ratio, throughput_ratio;
  // Speculative decoding, from /metrics deltas: accepted / drafted tokens, and tokens per
  // sampling step (every step draws one token plus the drafts it accepted: G / (G - A)).
  bool speculative = false;
  std::optional<double> acceptance_rate, tokens_per_step;
  // Against efim's row of the same scheme without speculation (when it ran): requests whose
  // text is the same. (With both, the caller names the speculating row "<scheme>+spec".)
  std::optional<size_t> same_text;
};

// For each "+spec" row with efim's plain row: same_text (requests in the same order).
void add_same_text(const std::vector<SchemeResult>& results, std::vector<SchemeSummary>& rows);

SchemeSummary summarize(const SchemeResult& r);
// Fills latency_ratio and throughput_ratio from the cache-psm row, if there is one.
void add_ratios(std::vector<SchemeSummary>& rows);

nlohmann::json summary_json(const SchemeSummary& s);
// The whole report: config (given by the caller), one entry per scheme with its summary,
// server command and every request.
nlohmann::json report_json(const nlohmann::json& config, const std::vector<SchemeResult>& results,
                           const std::vector<SchemeSummary>& rows);
// The table, then a note line for each scheme with short requests.
std::string markdown_table(const std::vector<SchemeSummary>& rows);
std::string svg_chart(const std::vector<SchemeSummary>& rows, const std::string& title);

}  // namespace efim::bench
