// A reader for the Prometheus text exposition format (what GET /metrics answers on efim, vLLM
// and SGLang), enough to read counters: `name{label="value",...} number [timestamp]`.
// The text is untrusted: malformed lines give an Error naming the line number and the line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace efim::bench {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;  // label values unescaped (\\, \", \n)
  double value = 0;                           // NaN / +Inf / -Inf accepted
};

// Every sample line; comments (# HELP, # TYPE, ...) and blank lines are skipped.
std::vector<MetricSample> parse_metrics(std::string_view text);

// Sum of the values of every sample called `name` (all label sets); nullopt when none is.
std::optional<double> metric_sum(const std::vector<MetricSample>& samples, std::string_view name);

// The prefix-cache counters of a scrape (vLLM's names): prompt tokens looked up and found.
// With them, speculative decoding's (0 when the server has none): tokens generated, draft
// tokens verified and accepted.
struct PrefixCacheCounters {
  double queries = 0, hits = 0;
  double generated = 0, draft_tokens = 0, accepted = 0;
};
inline constexpr std::string_view kGeneratedMetric = "vllm:generation_tokens_total";
inline constexpr std::string_view kDraftTokensMetric = "vllm:spec_decode_num_draft_tokens_total";
inline constexpr std::string_view kAcceptedMetric = "vllm:spec_decode_num_accepted_tokens_total";
inline constexpr std::string_view kQueriesMetric = "vllm:prefix_cache_queries_total";
inline constexpr std::string_view kHitsMetric = "vllm:prefix_cache_hits_total";
// nullopt when the scrape has neither counter.
std::optional<PrefixCacheCounters> prefix_cache_counters(std::string_view metrics_text);

}  // namespace efim::bench
