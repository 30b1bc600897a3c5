// What a client asks the engine for (Request) and what it gets back (RequestResult).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infill/healing.h"
#include "sampling/sampler.h"

namespace efim {

using RequestId = int64_t;

enum class FinishReason { none, length, stop, cancelled, error };
const char* to_string(FinishReason r);

struct Request {
  std::vector<int32_t> prompt;      // token ids, non-empty
  SamplingParams sampling;          // temperature 0 = greedy
  int32_t max_tokens = 16;          // new tokens to generate at most (> 0)
  std::vector<int32_t> stop_tokens;  // generation ends when one is sampled (not emitted)
  bool ignore_eos = false;          // true: the model's EOS tokens do not end generation
  // Token healing (infill/healing.h, sampling/token_healing.h): the caller removed the last
  // tokens of the prompt; generation must first reproduce their bytes, which are then left out
  // of the streamed and returned text (the text starts at the cursor). The tokens that
  // reproduce them are generated tokens (counted in max_tokens and `tokens`). Needs
  // EngineOptions.tokenizer.
  std::string heal_bytes;
  // The exact variant (sampling/covering.h): the first tokens are drawn from the coverings of
  // heal_bytes, weighed by their probability under the model (short probe sequences compute
  // the logits after proper-prefix tokens), instead of one masked step at a time.
  bool heal_exact = false;
  // Speculative decoding (EngineOptions.speculative): false turns it off for this request.
  // While healing it is off. It never changes the output, only how many steps it takes.
  bool speculative = true;
  int32_t max_draft = 0;  // > 0: drafts at most this long (within the engine's range)
  // >= 0: a draft model's draft ends before a token it gives less probability than this
  // (llama.cpp's speculative.p_min); < 0: the engine's (SpeculativeOptions.draft.p_min).
  float draft_p_min = -1.0f;
  // More text the drafts may be copied from besides the prompt and the output.
  std::vector<std::vector<int32_t>> draft_documents;
  // The previous completions at the same place (sampling/ngram_draft.h DraftMemory, kept by
  // the engine): a request with draft_place != 0 drafts from what earlier requests with the
  // same place generated, and leaves prompt[draft_typed_from:] ++ its own tokens for the next.
  uint64_t draft_place = 0;
  size_t draft_typed_from = 0;  // where the typed text starts (after the middle sentinel)
};

// Token healing of r.prompt's tail at or after `from` (infill/healing.h): removes the backed-off
// tokens, sets heal_bytes / heal_exact and gives max_tokens the removed tokens back. The server
// and the evaluation heal through this one function. Returns what was backed off.
HealBackoff heal_request(const VocabIndex& index, Request& r, size_t from, bool exact);

struct RequestTimings {
  double queue_ms = 0;        // submit -> first admission (KV blocks allocated)
  double first_token_ms = 0;  // submit -> first generated token; 0 when none
  double total_ms = 0;        // submit -> finish
};

struct RequestResult {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // generated tokens (a stop/EOS token that ended it excluded)
  std::string text;             // their decoding (UTF-8), when the engine has a tokenizer
  FinishReason finish = FinishReason::none;
  int32_t stop_token = -1;     // the token that ended a `stop` finish
  int32_t n_cached = 0;        // prompt tokens reused from the prefix cache at first admission
  int32_t n_preemptions = 0;   // times the request was preempted (recomputed)
  int32_t n_heal_tokens = 0;   // generated tokens spent reproducing heal_bytes
  int32_t n_steps = 0;         // engine steps that sampled a token for it
  int32_t n_draft_tokens = 0;  // speculative draft tokens verified
  int32_t n_accepted = 0;      // of those, accepted
  RequestTimings timings;
  std::string error;           // set when finish == error
};

}  // namespace efim
