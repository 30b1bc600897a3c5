#include "engine/runner.h"

#include "base/error.h"

namespace efim {

Runner::Runner(Model& model, KvCache& cache) : model_(model), cache_(cache) {}

Batch Runner::build_batch(const StepPlan& plan, const Scheduler& sched, const KvManager& kv) {
  Batch b;
  for (const PlannedSeq& p : plan.seqs) {
    const int32_t end = p.start + p.n_tokens;
    std::vector<int32_t> slots = kv.slots(p.id);  // [n_tokens in the KV manager]
    EFIM_CHECK(static_cast<int32_t>(slots.size()) >= end, "Runner: sequence ", p.id, " has ",
               slots.size(), " KV slots, the step needs ", end);
    slots.resize(end);  // attention context: positions [0, end)
    const int32_t si = b.add_sequence(std::move(slots));
    const std::span<const int32_t> toks = sched.tokens(p.id);
    for (int32_t pos = p.start; pos < end; ++pos) {
      b.add_token(toks[pos], pos, si, p.sample && pos >= end - 1 - p.n_draft);
    }
  }
  return b;
}

std::vector<SampledToken> Runner::run(const StepPlan& plan, Scheduler& sched,
                                      const SamplerFor& sampler) {
  EFIM_CHECK(!plan.empty(), "Runner::run: empty plan");
  // Copy-on-write of partly cached blocks must land before any token reads or writes them.
  for (const SlotCopy& c : plan.copies) cache_.copy_slot(c.from, c.to);
  const Batch batch = build_batch(plan, sched, sched.kv());
  const int64_t vocab = model_.config().vocab;
  logits_.resize(batch.logits_rows.size() * vocab);
  model_.forward(batch, cache_, logits_.data());

  std::vector<SampledToken> out;
  size_t row = 0;
  for (const PlannedSeq& p : plan.seqs) {
    if (p.n_draft == 0) sched.on_computed(p);
    if (!p.sample) continue;
    const std::span<const int32_t> draft =
        sched.tokens(p.id).subspan(size_t(p.start + p.n_tokens - p.n_draft));
    int32_t accepted = 0;
    for (int32_t j = 0; j <= p.n_draft; ++j) {
      const std::span<float> l(logits_.data() + (row + size_t(j)) * vocab, size_t(vocab));
      const int32_t token = sampler(p.id, l);
      const bool hit = j < p.n_draft && token == draft[size_t(j)];
      out.push_back({p.id, token, hit});
      if (!hit) break;
      ++accepted;
    }
    if (p.n_draft > 0) sched.on_verified(p, accepted);
    row += size_t(p.n_draft) + 1;
  }
  return out;
}

}  // namespace efim
