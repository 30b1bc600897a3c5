// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW update, step for step), the
// learning-rate schedule (linear warmup, cosine decay to a floor) and global-norm clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "train/nn/params.h"

namespace efim::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  // applied to matrices only (2-D tensors: projections, embedding)
};

// lr(step), step = 0, 1, ... (the step about to be taken):
//   step < warmup:  peak * (step + 1) / warmup
//   otherwise:      floor + (peak - floor) * (1 + cos(pi * min(1, (step - warmup) / decay))) / 2
//                   with decay = max(1, total - warmup), floor = peak * floor_ratio.
struct LrSchedule {
  double peak = 3e-4;
  int64_t warmup = 0, total = 1;
  double floor_ratio = 0.1;
  double at(int64_t step) const;
};

// Scales g[n] so its L2 norm is at most max_norm (coefficient max_norm / (norm + 1e-6), as
// PyTorch's clip_grad_norm_; nothing when max_norm <= 0); returns the norm before clipping.
double clip_grad_norm(ThreadPool& pool, float* g, int64_t n, double max_norm);

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWOptions& opts);
  // One update of w [layout.total] with gradients g at learning rate lr:
  //   t += 1; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //   w *= 1 - lr * wd (matrices);  w -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps).
  void step(ThreadPool& pool, float* w, const float* g, double lr);
  int64_t steps_taken() const { return t_; }
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }
  // Resumes from a checkpoint: t updates taken, moments m and v [layout.total].
  void restore(int64_t t, std::vector<float> m, std::vector<float> v);

 private:
  AdamWOptions o_;
  int64_t t_ = 0;
  std::vector<float> m_, v_;  // [layout.total]
  struct Range {
    int64_t offset, numel;
    bool decay;
  };
  std::vector<Range> ranges_;
};

}  // namespace efim::train
