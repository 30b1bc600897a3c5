// GET /metrics: Prometheus text exposition format 0.0.4. vLLM's names (vllm:...) where vLLM has
// the series, so dashboards and benchmark clients written for vLLM read efim too; efim_... for
// the infill planner, the KV block states and overload rejections. Every series carries
// model_name="<served model id>" as vLLM's do.
#include <charconv>
#include <limits>
#include <initializer_list>

#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

// Shortest round-trip decimal; Prometheus spells infinity +Inf.
std::string number(double x) {
  if (x == std::numeric_limits<double>::infinity()) return "+Inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, r.ptr);
}

// A label value: backslash, double quote and newline are escaped.
std::string escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

using Labels = std::initializer_list<std::pair<const char*, std::string_view>>;

class PromText {
 public:
  explicit PromText(std::string_view model_id) : model_(escape(model_id)) {}

  void family(const char* name, const char* type, const char* help) {
    out_ += str("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void sample(std::string_view name, Labels labels, const std::string& value) {
    out_ += str(name, "{model_name=\"", model_, "\"");
    for (const auto& [k, v] : labels) out_ += str(",", k, "=\"", escape(v), "\"");
    out_ += str("} ", value, "\n");
  }
  void sample(std::string_view name, Labels labels, int64_t value) {
    sample(name, labels, std::to_string(value));
  }
  void one(const char* name, const char* type, const char* help, int64_t value) {
    family(name, type, help);
    sample(name, {}, value);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    family(name.c_str(), "histogram", help);
    for (size_t i = 0; i < h.upper.size(); ++i)
      sample(name + "_bucket", {{"le", number(h.upper[i])}}, h.cumulative(i));
    sample(name + "_bucket", {{"le", "+Inf"}}, h.count);
    sample(name + "_sum", {}, number(h.sum));
    sample(name + "_count", {}, h.count);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string model_;
  std::string out_;
};

void engine_series(PromText& p, const EngineMetrics& m) {
  p.one("vllm:num_requests_running", "gauge",
        "Requests admitted to the engine (holding KV blocks) and not finished.", m.n_running);
  p.one("vllm:num_requests_waiting", "gauge",
        "Requests queued for admission (never admitted, or preempted).", m.n_waiting);
  p.family("vllm:kv_cache_usage_perc", "gauge",
           "Fraction of KV blocks referenced by running requests (1 = full).");
  p.sample("vllm:kv_cache_usage_perc", {}, number(m.kv.usage()));
  p.one("vllm:prefix_cache_queries_total", "counter",
        "Prompt tokens looked up in the prefix cache, at each request's first admission.",
        m.prefix_query_tokens);
  p.one("vllm:prefix_cache_hits_total", "counter",
        "Of the queried prompt tokens, those found in the prefix cache.", m.prefix_hit_tokens);
  p.one("vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
        m.prompt_tokens);
  p.one("vllm:generation_tokens_total", "counter",
        "Sampled tokens (a stop or EOS token that ended a request included).",
        m.generation_tokens);
  p.one("vllm:spec_decode_num_drafts_total", "counter",
        "Speculative drafts verified (one per sequence and step that had one).", m.spec_drafts);
  p.one("vllm:spec_decode_num_draft_tokens_total", "counter", "Tokens in the verified drafts.",
        m.spec_draft_tokens);
  p.one("vllm:spec_decode_num_accepted_tokens_total", "counter",
        "Draft tokens accepted (equal to the token drawn at their position).",
        m.spec_accepted_tokens);
  p.family("efim_draft_model_tokens_total", "counter",
           "Tokens the draft model computed (catching up with a request and drafting) and those "
           "a request found in the draft session it took, left there by an earlier one (reused).");
  p.sample("efim_draft_model_tokens_total", {{"kind", "evaluated"}}, m.draft_model_evaluated);
  p.sample("efim_draft_model_tokens_total", {{"kind", "reused"}}, m.draft_model_reused);
  p.family("efim_draft_model_idle_tokens_total", "counter",
           "Of the tokens the draft model computed, those it computed while the engine had "
           "nothing else to run (a long catch-up put off by --draft-max-catch-up).");
  p.sample("efim_draft_model_idle_tokens_total", {}, m.draft_model_idle);
  p.family("vllm:request_success_total", "counter", "Finished requests by finish reason.");
  p.sample("vllm:request_success_total", {{"finished_reason", "stop"}}, m.finished_stop);
  p.sample("vllm:request_success_total", {{"finished_reason", "length"}}, m.finished_length);
  p.sample("vllm:request_success_total", {{"finished_reason", "abort"}}, m.finished_abort);
  p.sample("vllm:request_success_total", {{"finished_reason", "error"}}, m.finished_error);
  p.histogram("vllm:time_to_first_token_seconds",
              "Time from arrival at the engine to the first sampled token.", m.ttft_seconds);
  p.histogram("vllm:e2e_request_latency_seconds",
              "Time from arrival at the engine to the end of the request.", m.e2e_seconds);
  p.one("efim_token_healing_total", "counter",
        "Requests whose prompt tail was backed off and regenerated (token healing).",
        m.token_healing);
  p.histogram("efim_token_healing_bytes",
              "Bytes each token-healed request had to regenerate before its answer.",
              m.heal_bytes);
}

void kv_series(PromText& p, const KvStats& kv) {
  p.one("efim_kv_blocks_total", "gauge", "KV cache blocks in the pool.", kv.total_blocks);
  p.one("efim_kv_blocks_referenced", "gauge", "KV blocks referenced by running requests.",
        kv.used_blocks);
  p.one("efim_kv_blocks_cached", "gauge",
        "Unreferenced KV blocks holding prefix-cache content (hittable, evictable).",
        kv.cached_blocks);
  p.one("efim_kv_blocks_free", "gauge", "KV blocks holding nothing.", kv.free_blocks);
}

// The layout / reason pairs the planner can produce (spm only when forced, efim only on a hit).
void infill_series(PromText& p, const InfillCounts& c, int64_t rejected_overload,
                   int64_t rejected_draining, bool draining) {
  p.family("efim_infill_requests_total", "counter",
           "Infill prompts planned, by layout and the planner's reason for it.");
  const std::pair<FimOrder, InfillReason> pairs[] = {
      {FimOrder::psm, InfillReason::forced},     {FimOrder::psm, InfillReason::miss},
      {FimOrder::psm, InfillReason::inc_limit},  {FimOrder::psm, InfillReason::not_cached},
      {FimOrder::psm, InfillReason::over_budget}, {FimOrder::spm, InfillReason::forced},
      {FimOrder::efim, InfillReason::hit}};
  static constexpr std::string_view kOrder[] = {"psm", "spm", "efim"};
  for (const auto& [order, reason] : pairs) {
    p.sample("efim_infill_requests_total",
             {{"layout", kOrder[size_t(order)]}, {"reason", reason_name(reason)}},
             c.plans[size_t(order)][size_t(reason)]);
  }
  p.one("efim_infill_cache_probes_total", "counter",
        "Times infill planning asked the engine how much of its candidate anchors is cached (one ask per plan).",
        c.cache_probes);
  p.family("efim_infill_cache_probe_seconds_total", "counter",
           "Time infill planning waited for those answers (each waits for the current step).");
  p.sample("efim_infill_cache_probe_seconds_total", {}, number(c.cache_probe_seconds));
  p.family("efim_requests_rejected_total", "counter",
           "Generation requests answered 503: max-requests were in flight (overload) or the "
           "server was draining before shutdown (draining).");
  p.sample("efim_requests_rejected_total", {{"reason", "overload"}}, rejected_overload);
  p.sample("efim_requests_rejected_total", {{"reason", "draining"}}, rejected_draining);
  p.one("efim_draining", "gauge",
        "1 while the server drains before shutdown (SIGTERM): /health answers 503.",
        draining ? 1 : 0);
}

// vLLM's info series of the cache configuration: the Gateway API Inference Extension's endpoint
// picker reads block_size from it (prefix-cache aware scoring) and the pool size; vLLM calls
// the pool's blocks num_gpu_blocks whatever the device, so the label keeps that name.
void cache_config_series(PromText& p, const Engine::CacheConfig& c) {
  p.family("vllm:cache_config_info", "gauge", "Information of the K/V cache configuration.");
  p.sample("vllm:cache_config_info",
           {{"block_size", std::to_string(c.block_size)},
            {"cache_dtype", dtype_name(c.kv_type)},
            {"enable_prefix_caching", c.prefix_cache ? "True" : "False"},
            {"num_gpu_blocks", std::to_string(c.n_blocks)},
            {"num_cpu_blocks", "0"}},
           1);
}

}  // namespace

void add_metrics_routes(Server::Impl& s) {
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      const EngineMetrics m = s.engine.metrics();
      PromText p(s.opt.model_id);
      engine_series(p, m);
      kv_series(p, m.kv);
      cache_config_series(p, s.engine.cache_config());
      infill_series(p, s.infill_snapshot(), s.rejected_overload.load(),
                    s.rejected_draining.load(), s.draining.load());
      res.set_content(p.take(), "text/plain; version=0.0.4");
    });
  });
}

}  // namespace efim
