// Runner: executes one StepPlan on the model. It runs the plan's slot copies on the KvCache,
// builds one Batch (slots rebuilt from the KV manager every step, because commits can switch a
// row to a deduplicated block), calls Model::forward once, commits the computed tokens and
// samples the next token of every sequence whose chunk reached its last wanted token.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace efim {

struct SampledToken {
  SeqId id = 0;
  int32_t token = 0;
  // An accepted draft token: it is already the sequence's next token (computed), so the
  // caller emits it but does not append it again.
  bool in_sequence = false;
};

class Runner {
 public:
  // Both borrowed; `cache` must have n_blocks * block_size slots of the KV manager.
  Runner(Model& model, KvCache& cache);

  // Chooses the next token of a sequence from its logits ([vocab], which it may change: a
  // constraint masks them before its sampler draws).
  using SamplerFor = std::function<int32_t(SeqId, std::span<float>)>;
  // Runs `plan` (non-empty), commits its tokens through `sched`, returns the sampled tokens in
  // plan order. The sampled tokens are not yet appended to the sequences.
  // A chunk with a draft d[0..k) is verified: the token after each position is drawn by
  // `sampler` in order, as plain decoding would draw it (same logits, same generator state),
  // while the drawn token equals the draft at that position; the first one that differs, or the
  // one after a fully accepted draft, ends it. So the tokens returned are exactly those plain
  // decoding would have produced, and the sampler runs once per token returned.
  std::vector<SampledToken> run(const StepPlan& plan, Scheduler& sched, const SamplerFor& sampler);

  // The batch `plan` turns into (exposed for tests).
  static Batch build_batch(const StepPlan& plan, const Scheduler& sched, const KvManager& kv);

 private:
  Model& model_;
  KvCache& cache_;
  std::vector<float> logits_;  // [rows with logits, vocab]
};

}  // namespace efim
