#include "infill/planner.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace efim {

namespace {

constexpr std::array<std::string_view, 4> kModeNames = {"psm", "spm", "efim", "auto"};

void append(std::vector<int32_t>& out, std::span<const int32_t> ids) {
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace

std::string_view mode_name(InfillMode m) {
  return kModeNames.at(static_cast<size_t>(m));
}

InfillMode parse_mode(std::string_view name) {
  for (size_t i = 0; i < kModeNames.size(); ++i) {
    if (kModeNames[i] == name) return static_cast<InfillMode>(i);
  }
  fail("unknown infill mode \"", name, "\" (expected psm, spm, efim or auto)");
}

std::string_view reason_name(InfillReason r) {
  static constexpr std::array<std::string_view, 6> names = {
      "forced", "miss", "hit", "inc_limit", "not_cached", "over_budget"};
  return names.at(static_cast<size_t>(r));
}

CachedPrefixFn probe_each(std::function<size_t(std::span<const int32_t>)> one) {
  return [one = std::move(one)](TokenSeqs seqs) {
    std::vector<size_t> out;
    for (const auto& s : seqs) out.push_back(one(s));
    return out;
  };
}

InfillPlanner::InfillPlanner(const FimLayout& layout, PlannerOptions opts)
    : layout_(&layout), opts_(opts), index_(opts.index) {}

InfillPlan InfillPlanner::plan(const InfillRequest& req) {
  const std::string key = AnchorIndex::context_key(layout_->format(), req.filename, req.extra);
  InfillPlan p = plan_for(req, key);
  p.place = AnchorIndex::place_hash(key, req.suffix);
  return p;
}

InfillPlan InfillPlanner::plan_for(const InfillRequest& req, const std::string& key) {
  if (req.mode == InfillMode::psm) return fresh(req, FimOrder::psm, InfillReason::forced, nullptr);
  if (req.mode == InfillMode::spm) return fresh(req, FimOrder::spm, InfillReason::forced, nullptr);

  const auto cands = index_.matches(key, req.suffix, req.prefix);
  if (cands.empty()) return fresh(req, FimOrder::psm, InfillReason::miss, &key);
  const Choice c = choose(cands, req);
  const Anchor& a = *c.anchor;
  std::vector<int32_t> inc = layout_->encode(req.prefix.substr(a.prefix.size()));

  if (req.mode == InfillMode::automatic) {
    if (req.cached && c.cached <= a.root->suffix_at) {
      return fresh(req, FimOrder::psm, InfillReason::not_cached, &key);
    }
    if (a.inc_tokens() + inc.size() > opts_.reanchor_inc_tokens) {
      return fresh(req, FimOrder::psm, InfillReason::inc_limit, &key);
    }
  }
  std::vector<int32_t> prompt = layout_->encode(req.prompt);
  if (req.max_prompt_tokens > 0 &&
      a.tokens.size() + inc.size() + prompt.size() > req.max_prompt_tokens) {
    return fresh(req, FimOrder::psm, InfillReason::over_budget, &key);
  }
  return efim_from(c, req, inc, prompt);
}

// Probes the cache for the longest candidates only: each probe walks the prefix cache.
InfillPlanner::Choice InfillPlanner::choose(const std::vector<const Anchor*>& cands,
                                            const InfillRequest& req) const {
  Choice best{cands.front(), 0};
  if (!req.cached) return best;
  const size_t probes = std::min(cands.size(), std::max<size_t>(opts_.cache_probe, 1));
  std::vector<std::span<const int32_t>> seqs;
  for (size_t i = 0; i < probes; ++i) seqs.emplace_back(cands[i]->tokens);
  const std::vector<size_t> cached = req.cached(seqs);
  EFIM_CHECK(cached.size() == probes, "cache probe answered ", cached.size(), " lengths for ",
             probes, " sequences");
  best.cached = cached[0];
  for (size_t i = 1; i < probes; ++i) {
    if (cached[i] > best.cached) best = {cands[i], cached[i]};
  }
  return best;
}

InfillPlan InfillPlanner::fresh(const InfillRequest& req, FimOrder order, InfillReason reason,
                                const std::string* anchor_key) {
  InfillPlan plan;
  plan.reason = reason;
  const FimParts parts{.prefix = req.prefix,
                       .suffix = req.suffix,
                       .inc = {},
                       .prompt = req.prompt,
                       .filename = req.filename,
                       .extra = req.extra};
  plan.prompt = layout_->build(parts, order, req.max_prompt_tokens);
  if (anchor_key != nullptr) {
    plan.new_anchor = index_.insert_root(*anchor_key, std::string(req.suffix),
                                         std::string(req.prefix), plan.prompt) != nullptr;
  }
  return plan;
}

InfillPlan InfillPlanner::efim_from(const Choice& c, const InfillRequest& req,
                                    std::span<const int32_t> inc, std::span<const int32_t> prompt) {
  const Anchor& a = *c.anchor;
  InfillPlan plan;
  plan.reason = InfillReason::hit;
  plan.anchor_tokens = a.tokens.size();
  plan.cached_tokens = c.cached;
  FimPrompt& p = plan.prompt;
  p.order = FimOrder::efim;
  p.truncated = a.truncated;
  p.extra_chunks = a.root->extra_chunks;
  p.middle_end = a.root->middle_end;
  p.tokens = a.tokens;
  p.ranges = a.ranges;
  auto add = [&](PromptPart part, std::span<const int32_t> ids) {
    if (ids.empty()) return;
    const auto begin = static_cast<uint32_t>(p.tokens.size());
    append(p.tokens, ids);
    const auto end = static_cast<uint32_t>(p.tokens.size());
    if (!p.ranges.empty() && p.ranges.back().part == part) {
      p.ranges.back().end = end;
    } else {
      p.ranges.push_back({part, begin, end});
    }
  };
  add(PromptPart::inc, inc);
  add(PromptPart::prompt, prompt);
  // Record the extension after building the prompt: inserting may evict `a`.
  if (opts_.extend_anchors && !inc.empty()) {
    index_.extend(a, std::string(req.prefix), inc);
  } else {
    index_.touch(a);
  }
  return plan;
}

}  // namespace efim
