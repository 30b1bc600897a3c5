// The training loop's step: gradient accumulation over micro-batches, global-norm clipping,
// the learning-rate schedule and AdamW, on one Params object.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "train/nn/batch.h"
#include "train/nn/network.h"
#include "train/nn/optim.h"
#include "train/nn/params.h"

namespace efim::train {

struct TrainOptions {
  int64_t accum = 1;  // micro-batches per optimizer step
  LrSchedule lr;
  AdamWOptions adam;
  double clip = 1.0;  // max global gradient norm; <= 0: no clipping
  NetworkOptions net;
};

struct StepStats {
  int64_t step = 0;      // index of the step just taken (0-based)
  double loss = 0;       // mean over the masked targets of all micro-batches
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t tokens = 0;   // B * T * accum
  int64_t targets = 0;  // masked targets
  double seconds = 0;
};

class Trainer {
 public:
  Trainer(Params& params, ThreadPool& pool, const TrainOptions& opts);

  // Reads `accum` batches, then: grads = d(mean loss over all their masked targets)/dparams,
  // clipped; params updated by AdamW at lr.at(step). A step without masked targets throws.
  StepStats step(BatchSource& source);

  Network& network() { return net_; }
  const AdamW& optimizer() const { return adam_; }
  const std::vector<float>& grads() const { return grads_; }
  int64_t steps_taken() const { return step_; }
  // Resumes a checkpoint: `step` optimizer steps taken, AdamW at adam_steps with moments m, v.
  void restore(int64_t step, int64_t adam_steps, std::vector<float> m, std::vector<float> v);

 private:
  Params& p_;
  ThreadPool& pool_;
  TrainOptions o_;
  Network net_;
  AdamW adam_;
  std::vector<float> grads_;  // [layout.total]
  std::vector<TokenBatch> micro_;
  int64_t step_ = 0;
};

}  // namespace efim::train
