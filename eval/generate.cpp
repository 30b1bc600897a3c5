#include "eval/generate.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/progress.h"
#include "engine/engine.h"
#include "infill/healing.h"
#include "infill/stop.h"

namespace efim::eval {

std::string Scheme::name() const {
  return std::string(order_name(order)) + (heal ? "-heal" : "") + (heal && exact ? "-exact" : "");
}

Scheme parse_scheme(std::string_view name) {
  for (FimOrder o : {FimOrder::psm, FimOrder::efim}) {
    for (const auto& [heal, exact] : {std::pair{false, false}, {true, false}, {true, true}}) {
      const Scheme s{o, heal, exact};
      if (s.name() == name) return s;
    }
  }
  fail("unknown scheme '", name,
       "' (expected psm, efim, psm-heal, efim-heal, psm-heal-exact or efim-heal-exact)");
}

namespace {

// The prompt of one job, trimmed to the budget (the layout keeps the text nearest the hole).
FimPrompt build_prompt(const FimLayout& layout, const InfillJob& j, size_t budget) {
  FimParts parts;
  if (j.scheme.order == FimOrder::efim) {
    const size_t split = std::min(j.split, j.prefix.size());
    parts.prefix = std::string_view(j.prefix).substr(0, split);
    parts.inc = std::string_view(j.prefix).substr(split);
  } else {
    parts.prefix = j.prefix;
  }
  parts.suffix = j.suffix;
  return layout.build(parts, j.scheme.order, budget);
}

}  // namespace

std::vector<InfillOutput> generate_infills(Model& model, const Tokenizer& tok,
                                           const std::vector<InfillJob>& jobs,
                                           const GenerateOptions& o) {
  EFIM_CHECK(o.max_new_tokens > 0, "max_new_tokens must be > 0, got ", o.max_new_tokens);
  const int64_t ctx = o.context_tokens > 0
                          ? std::min<int64_t>(o.context_tokens, model.config().max_position)
                          : model.config().max_position;
  EFIM_CHECK(ctx > o.max_new_tokens + 16, "context of ", ctx, " tokens leaves no room for a ",
             "prompt next to ", o.max_new_tokens, " new tokens");
  const size_t budget = static_cast<size_t>(ctx - o.max_new_tokens);

  FimLayout layout(tok, make_format(tok));
  EngineOptions eo;
  eo.tokenizer = &tok;
  eo.kv_cache_bytes = o.kv_cache_bytes;
  eo.kv_type = o.kv_type;
  eo.scheduler.max_running = o.max_running;
  eo.scheduler.max_step_tokens = 1024;
  const std::vector<int32_t> stops = infill_stop_tokens(tok, layout.format());
  eo.eos_tokens = stops;

  std::vector<InfillOutput> out(jobs.size());
  std::vector<std::shared_ptr<RequestStream>> streams(jobs.size());
  Engine engine(model, eo);
  for (size_t i = 0; i < jobs.size(); ++i) {
    FimPrompt p = build_prompt(layout, jobs[i], budget);
    out[i].truncated = p.truncated;
    Request r;
    r.prompt = std::move(p.tokens);
    r.sampling = o.sampling;
    r.sampling.seed = jobs[i].seed;
    r.max_tokens = o.max_new_tokens;
    r.stop_tokens = stops;
    if (jobs[i].scheme.heal) {  // as the server heals: the removed tokens go to max_tokens
      const HealBackoff h =
          heal_request(*engine.vocab_index(), r, p.middle_end, jobs[i].scheme.exact);
      out[i].n_healed = int32_t(h.n_tokens);
    }
    out[i].n_prompt = static_cast<int32_t>(r.prompt.size());
    streams[i] = engine.submit(std::move(r));
  }
  std::optional<ProgressBar> bar;
  if (!o.progress_label.empty()) bar.emplace(jobs.size(), ProgressOptions{o.progress_label, "req"});
  for (size_t i = 0; i < jobs.size(); ++i) {
    RequestResult r = streams[i]->wait();
    EFIM_CHECK(r.finish == FinishReason::stop || r.finish == FinishReason::length,
               "infill request ", i, " ended with ", to_string(r.finish), ": ", r.error);
    out[i].text = std::move(r.text);
    out[i].n_generated = static_cast<int32_t>(r.tokens.size());
    out[i].finish = to_string(r.finish);
    if (bar) bar->add(1);
  }
  return out;
}

}  // namespace efim::eval
