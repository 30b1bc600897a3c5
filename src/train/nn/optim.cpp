#include "train/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "base/error.h"

namespace efim::train {

double LrSchedule::at(int64_t step) const {
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  const double decay = double(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, double(step - warmup) / decay);
  const double floor = peak * floor_ratio;
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

double clip_grad_norm(ThreadPool& pool, float* g, int64_t n, double max_norm) {
  // Partial sums per fixed chunk, added in chunk order: the norm (and so the whole step) does
  // not depend on which thread ran which chunk.
  const int64_t chunk = int64_t{1} << 16;  // fixed: also independent of the thread count
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  pool.parallel_for(chunks, 1, [&](int, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) s += double(g[i]) * g[i];
      part[c] = s;
    }
  });
  double ss = 0;
  for (double s : part) ss += s;
  const double norm = std::sqrt(ss);
  if (max_norm > 0 && norm > max_norm) {
    const float coef = float(max_norm / (norm + 1e-6));
    pool.parallel_for(n, chunk, [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) g[i] *= coef;
    });
  }
  return norm;
}

AdamW::AdamW(const ParamLayout& layout, const AdamWOptions& opts)
    : o_(opts),
      m_(static_cast<size_t>(layout.total), 0.0f),
      v_(static_cast<size_t>(layout.total), 0.0f) {
  EFIM_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1 && o_.eps > 0 &&
                 o_.weight_decay >= 0,
             "train: bad AdamW options beta1 ", o_.beta1, ", beta2 ", o_.beta2, ", eps ", o_.eps,
             ", weight_decay ", o_.weight_decay);
  for (const ParamTensor& t : layout.tensors) ranges_.push_back({t.offset, t.numel, t.is_matrix()});
}

void AdamW::restore(int64_t t, std::vector<float> m, std::vector<float> v) {
  EFIM_CHECK(t >= 0 && m.size() == m_.size() && v.size() == v_.size(), "train: AdamW state of ",
             m.size(), " / ", v.size(), " moments at step ", t, ", expected ", m_.size());
  t_ = t;
  m_ = std::move(m);
  v_ = std::move(v);
}

void AdamW::step(ThreadPool& pool, float* w, const float* g, double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(o_.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(o_.beta2, double(t_));
  const float b1 = float(o_.beta1), b2 = float(o_.beta2), eps = float(o_.eps);
  const float step_size = float(lr / bc1), inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  for (const Range& r : ranges_) {
    const float keep = r.decay ? float(1.0 - lr * o_.weight_decay) : 1.0f;
    const int64_t grain = std::max<int64_t>(4096, r.numel / (8 * pool.size()));
    pool.parallel_for(r.numel, grain, [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = r.offset + i0; i < r.offset + i1; ++i) {
        m_[i] = b1 * m_[i] + (1.0f - b1) * g[i];
        v_[i] = b2 * v_[i] + (1.0f - b2) * g[i] * g[i];
        const float denom = std::sqrt(v_[i]) * inv_sqrt_bc2 + eps;
        w[i] = w[i] * keep - step_size * m_[i] / denom;
      }
    });
  }
}

}  // namespace efim::train
