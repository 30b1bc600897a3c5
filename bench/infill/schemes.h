// The five serving schemes the benchmark compares, and the request each one sends for a round
// of a user. Client-built prompts (psm / spm / efim) are token ids in the model's own FIM
// layout (infill/layout.h): prefix, suffix and typed text are tokenized as separate pieces and
// joined with the sentinel ids, exactly as the server's planner would; they go to the server
// as a plain completion whose `prompt` is the id array. cache-auto sends text (prompt + suffix)
// and lets the server choose the layout (session-free EFIM).
//
//   scheme        server                 request prompt (p = prefix, t = typed, s = suffix)
//   nocache-psm   --no-prefix-cache      PSM ids of (p + t, s)       the paper's baseline
//   cache-psm     prefix cache           PSM ids of (p + t, s)       the paper's "FIM"
//   cache-spm     prefix cache           SPM ids of (p + t, s)
//   cache-efim    prefix cache           EFIM ids: P p S s M t       the paper's "EFIM"
//   cache-auto    --infill-mode auto     {"prompt": p + t, "suffix": s}
//   cache-auto-noheal  the same with --token-healing off (not in "all": it measures what
//                 token healing costs cache-auto; for a fragment-trained model both are equal)
//   cache-auto-exact   the same with --token-healing-variant exact (not in "all")
// As in the authors' scripts, p + t is one piece in PSM/SPM (the user's whole prefix) and t is
// one piece in EFIM (tokenized whole each round).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/infill/workload.h"
#include "infill/layout.h"

namespace efim::bench {

enum class Scheme : uint8_t {
  nocache_psm, cache_psm, cache_spm, cache_efim, cache_auto, cache_auto_noheal, cache_auto_exact
};

std::string_view scheme_name(Scheme s);                          // "nocache-psm", ...
Scheme parse_scheme(std::string_view name);                      // throws Error listing the names
std::vector<Scheme> parse_schemes(std::string_view comma_list);  // "all" = every scheme
const std::vector<Scheme>& all_schemes();  // the five above; "all"
bool is_auto(Scheme s);  // cache-auto, cache-auto-noheal or cache-auto-exact (text requests)

struct SchemeServer {
  bool prefix_cache = true;
  std::string infill_mode = "psm";  // --infill-mode (matters only for cache-auto's text requests)
  std::string token_healing = "auto";  // --token-healing
  std::string token_healing_variant;   // --token-healing-variant ("": the server's default)
};
SchemeServer scheme_server(Scheme s);
// Human-readable layout, for the report ("PSM ids", "server auto", ...).
std::string_view scheme_layout(Scheme s);

struct SamplingSpec {
  int output_tokens = 32;
  double temperature = 0.2, top_p = 0.95;
  int top_k = 20;
  uint64_t seed = 0;  // each request gets seed + its index, so a run is reproducible
};

// Token ids of a client-built prompt (every scheme but cache-auto) for round r of user u.
std::vector<int32_t> scheme_tokens(const FimLayout& layout, Scheme s, const UserDoc& u, int r);

// The /v1/completions body of round r of user u (streamed, ignore_eos). `request_index` makes
// the sampling seed unique per request.
nlohmann::json request_body(const FimLayout& layout, Scheme s, const UserDoc& u, int r,
                            const SamplingSpec& sp, uint64_t request_index);

// Largest prompt (tokens) any client-built scheme sends in this workload; the server plans
// cache-auto's prompts from the same texts and fits them to its context itself.
size_t max_prompt_tokens(const FimLayout& layout, const std::vector<UserDoc>& users);

}  // namespace efim::bench
