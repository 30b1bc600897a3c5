// The session-free EFIM decision: which layout an infill request gets, chosen by the server
// from what earlier requests left in the AnchorIndex (no client change, no session id).
//
// Decision for a request (prefix p, suffix s, context = layout + current filename + extra):
//   1. Look up anchors with the same context and the same suffix (exact) whose prefix text
//      is a prefix of p. None: "miss" -> PSM, and this request becomes a new root anchor.
//   2. Pick one: with a `cached` callback, among the `cache_probe` longest candidates the one
//      with the longest cached token prefix; otherwise (and on ties) the longest prefix text,
//      then the most recent.
//   3. EFIM: tokens = anchor.tokens ++ encode(inc) ++ encode(prompt), inc = p[len(anchor
//      prefix):]. The anchor's tokens are reused byte-identically, so the KV prefix cache hits
//      them. With extend_anchors (default) the request is recorded as an extension anchor, so
//      the next round appends to it token for token: round r's tokens start with round r-1's
//      whole sequence minus its `prompt` part. (The cost: inc is tokenized in fragments, one
//      per round, which is what fragment-trained models are trained for. With extend_anchors
//      off only roots are kept and inc is tokenized whole each round.)
//   4. Fallback to PSM with a new root when the EFIM prompt would exceed max_prompt_tokens.
// Modes:
//   psm, spm    always that order; the index is neither read nor written.
//   efim        steps 1-4: EFIM whenever an anchor matches, however long inc grows and whether
//               or not the anchor is still cached (a non-cached anchor is recomputed once and
//               hits again next round).
//   auto        as efim, but also re-anchors (PSM, new root) when (a) the inc tokens after the
//               root would exceed reanchor_inc_tokens (1024): the typed text stops growing
//               without bound after the middle sentinel, and the model sees a canonical prompt
//               again (1024, not less: on the paper's typing workload a user types ~4/7 of half
//               a file in 4 rounds, and a limit of 256 re-anchored in round 3, recomputing the
//               suffix: reuse on rounds 1+ fell from 91% to 66% on efim-base-py); (b) a `cached` callback says the anchor is cached no further than its
//               suffix sentinel (none of the suffix is cached), so EFIM would save nothing over
//               PSM and PSM's canonical prompt is preferable. A partly cached suffix (a cache
//               that keeps whole blocks only) still counts as cached.
// /infill `prompt` (llama.cpp semantics, README: "added after the FIM_MID token"; note that
// llama.cpp's code actually appends it to the prefix before FIM_SUF): tokens = layout(p, s)
// ++ encode(prompt), in EFIM after inc. It is tokenized on its own and never stored in an
// anchor, so a client that keeps the current line in `prompt` reuses the whole layout.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "infill/anchor_index.h"
#include "infill/layout.h"

namespace efim {

enum class InfillMode : uint8_t { psm, spm, efim, automatic };
std::string_view mode_name(InfillMode m);      // "psm", "spm", "efim", "auto"
InfillMode parse_mode(std::string_view name);  // throws Error listing the valid names

enum class InfillReason : uint8_t {
  forced,       // psm / spm mode
  miss,         // no anchor matched: PSM, new root
  hit,          // EFIM on an anchor
  inc_limit,    // auto: inc past reanchor_inc_tokens: PSM, new root
  not_cached,   // auto: the anchor's suffix left the KV cache: PSM, new root
  over_budget,  // the EFIM prompt would not fit max_prompt_tokens: PSM, new root
};
std::string_view reason_name(InfillReason r);

// For each sequence, how many of its leading tokens are in the KV prefix cache. One call
// answers all candidates of a plan: a server asks its engine thread once per plan, not once
// per candidate (each ask waits for the engine's current step).
using TokenSeqs = std::span<const std::span<const int32_t>>;
using CachedPrefixFn = std::function<std::vector<size_t>(TokenSeqs)>;
// Adapts a one-sequence probe (tests, callers without batching).
CachedPrefixFn probe_each(std::function<size_t(std::span<const int32_t>)> one);

struct InfillRequest {
  std::string_view prefix = {}, suffix = {};
  std::string_view prompt = {};    // /infill `prompt`; tokens after the middle sentinel (and inc)
  std::string_view filename = {};  // current file for repo-level context
  std::span<const ExtraChunk> extra = {};
  InfillMode mode = InfillMode::automatic;
  size_t max_prompt_tokens = 0;  // 0 = no limit
  CachedPrefixFn cached = {};    // optional
};

struct InfillPlan {
  FimPrompt prompt;
  InfillReason reason = InfillReason::forced;
  size_t anchor_tokens = 0;  // leading tokens taken verbatim from the anchor (EFIM), else 0
  size_t cached_tokens = 0;  // `cached` of the chosen anchor (EFIM with a callback), else 0
  bool new_anchor = false;   // recorded as a new root anchor
  // Where the request asks (AnchorIndex::place_hash of its context and suffix, in every mode):
  // requests at one place while a user types share it (the server's draft memory key).
  uint64_t place = 0;
};

struct PlannerOptions {
  size_t reanchor_inc_tokens = 1024;  // auto mode, see above
  bool extend_anchors = true;
  size_t cache_probe = 4;  // candidates whose cached length is asked
  AnchorIndexOptions index = {};
};

class InfillPlanner {
 public:
  // `layout` must outlive the planner.
  explicit InfillPlanner(const FimLayout& layout, PlannerOptions opts = {});

  InfillPlan plan(const InfillRequest& req);

  const AnchorIndex& anchors() const { return index_; }
  void clear_anchors() { index_.clear(); }
  const FimLayout& layout() const { return *layout_; }

 private:
  struct Choice {
    const Anchor* anchor = nullptr;
    size_t cached = 0;
  };
  Choice choose(const std::vector<const Anchor*>& cands, const InfillRequest& req) const;
  InfillPlan plan_for(const InfillRequest& req, const std::string& key);
  InfillPlan fresh(const InfillRequest& req, FimOrder order, InfillReason reason,
                   const std::string* anchor_key);
  InfillPlan efim_from(const Choice& c, const InfillRequest& req, std::span<const int32_t> inc,
                       std::span<const int32_t> prompt);

  const FimLayout* layout_;
  PlannerOptions opts_;
  AnchorIndex index_;
};

}  // namespace efim
