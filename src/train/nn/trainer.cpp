#include "train/nn/trainer.h"

#include <algorithm>
#include <chrono>

#include "base/error.h"

namespace efim::train {

Trainer::Trainer(Params& params, ThreadPool& pool, const TrainOptions& opts)
    : p_(params),
      pool_(pool),
      o_(opts),
      net_(params.layout, pool, opts.net),
      adam_(params.layout, opts.adam),
      grads_(static_cast<size_t>(params.layout.total), 0.0f) {
  EFIM_CHECK(o_.accum >= 1, "train: accum ", o_.accum, " must be >= 1");
}

void Trainer::restore(int64_t step, int64_t adam_steps, std::vector<float> m,
                      std::vector<float> v) {
  EFIM_CHECK(step >= 0, "train: cannot resume at step ", step);
  adam_.restore(adam_steps, std::move(m), std::move(v));
  step_ = step;
}

StepStats Trainer::step(BatchSource& source) {
  const auto t0 = std::chrono::steady_clock::now();
  micro_.resize(static_cast<size_t>(o_.accum));
  StepStats s;
  for (TokenBatch& b : micro_) {
    source.next(b);
    s.targets += b.n_targets();
    s.tokens += b.B * b.T;
  }
  EFIM_CHECK(s.targets > 0, "train: step ", step_, " has no masked targets in its ", o_.accum,
             " micro-batches");
  // Each micro-batch adds d(its loss sum)/dparams / (all targets): their sum is the gradient of
  // the mean over the whole step, however the targets are spread over micro-batches.
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  double loss_sum = 0;
  for (const TokenBatch& b : micro_)
    loss_sum += net_.forward_backward(p_.w.data(), b, grads_.data(), 1.0f / float(s.targets)).sum;
  s.step = step_;
  s.loss = loss_sum / double(s.targets);
  s.grad_norm = clip_grad_norm(pool_, grads_.data(), p_.layout.total, o_.clip);
  s.lr = o_.lr.at(step_);
  adam_.step(pool_, p_.w.data(), grads_.data(), s.lr);
  ++step_;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace efim::train
