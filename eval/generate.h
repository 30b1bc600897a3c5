// Infilling completions for many items through one efim Engine: all requests are submitted
// at once, so the engine batches them (continuous batching); prompts are built by the infill
// layer (FimLayout, the model's own sentinels) and end on the infill stop tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infill/layout.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace efim::eval {

// A prompt scheme of the evaluation: the layout, and whether the text after <MID> is
// token-healed (infill/healing.h), constrained step by step or with the exact variant
// (sampling/covering.h). Names: psm, efim, psm-heal, efim-heal, psm-heal-exact,
// efim-heal-exact. psm-heal is a control: a PSM prompt has no text after <MID>, so healing
// must change nothing.
struct Scheme {
  FimOrder order = FimOrder::psm;
  bool heal = false;
  bool exact = false;  // with heal
  std::string name() const;
  bool operator==(const Scheme&) const = default;
};
Scheme parse_scheme(std::string_view name);  // throws Error listing the names

// One hole to fill. EFIM: prefix[:split] goes before <SUF> (the cached p0), prefix[split:]
// after <MID> (inc), as the EFIM paper evaluates; PSM ignores split.
struct InfillJob {
  std::string prefix, suffix;
  Scheme scheme;
  size_t split = 0;
  uint64_t seed = 0;  // sampling seed of this request
};

struct GenerateOptions {
  SamplingParams sampling;        // seed is replaced by each job's seed
  int32_t max_new_tokens = 128;
  int64_t context_tokens = 0;     // prompt + new tokens at most; 0 = the model's context
  int64_t kv_cache_bytes = 1ll << 30;
  DType kv_type = DType::F16;     // as efim serve
  int32_t max_running = 64;       // sequences decoded together
  std::string progress_label;     // "" = no progress bar
};

struct InfillOutput {
  std::string text;          // the completion (stop token excluded)
  int32_t n_prompt = 0;      // prompt tokens after trimming to the context
  int32_t n_generated = 0;
  std::string finish;        // "stop" (a stop token) or "length"
  bool truncated = false;    // the layout cut prefix or suffix to fit the context
  int32_t n_healed = 0;      // prompt tokens token healing backed off (0: none)
};

// Results in job order. Deterministic for the same jobs, model and options.
std::vector<InfillOutput> generate_infills(Model& model, const Tokenizer& tok,
                                           const std::vector<InfillJob>& jobs,
                                           const GenerateOptions& opts);

}  // namespace efim::eval
