#include "train/nn/train_ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/matmul.h"

namespace efim::train::ops {

float rms_norm_forward(const float* x, const float* w, int64_t n, float eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float r = float(1.0 / std::sqrt(ss / double(n) + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r * w[i];
  return r;
}

// y_i = x_i r w_i, r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / n, so
// dx_j = r w_j dy_j - (r^3 / n) x_j sum_i dy_i w_i x_i;  dw_i += dy_i x_i r.
void rms_norm_backward(const float* dy, const float* x, const float* w, float r, int64_t n,
                       float* dx, float* dw) {
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    dot += double(dy[i]) * w[i] * x[i];
    dw[i] += dy[i] * x[i] * r;
  }
  const float c = float(dot * double(r) * r * r / double(n));
  for (int64_t i = 0; i < n; ++i) dx[i] = r * w[i] * dy[i] - c * x[i];
}

void RopeAngles::build(const std::vector<double>& inv_freq, int64_t T) {
  half = static_cast<int64_t>(inv_freq.size());
  cos.resize(static_cast<size_t>(T * half));
  sin.resize(static_cast<size_t>(T * half));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(t) * inv_freq[i];
      cos[t * half + i] = float(std::cos(a));
      sin[t * half + i] = float(std::sin(a));
    }
}

namespace {

// (x_i, x_{i+h}) <- (x_i c - x_{i+h} s, x_{i+h} c + x_i s), s multiplied by `sign`.
void rotate(float* x, int64_t n_heads, int64_t head_dim, const RopeAngles& a, int64_t pos,
            float sign) {
  const int64_t h = a.half;
  const float* c = a.cos.data() + pos * h;
  const float* s = a.sin.data() + pos * h;
  for (int64_t head = 0; head < n_heads; ++head) {
    float* v = x + head * head_dim;
    for (int64_t i = 0; i < h; ++i) {
      const float x0 = v[i], x1 = v[i + h], si = sign * s[i];
      v[i] = x0 * c[i] - x1 * si;
      v[i + h] = x1 * c[i] + x0 * si;
    }
  }
}

}  // namespace

void rope_forward(float* x, int64_t n_heads, int64_t head_dim, const RopeAngles& a, int64_t pos) {
  rotate(x, n_heads, head_dim, a, pos, 1.0f);
}

void rope_backward(float* dx, int64_t n_heads, int64_t head_dim, const RopeAngles& a, int64_t pos) {
  rotate(dx, n_heads, head_dim, a, pos, -1.0f);
}

void exp_inplace(float* x, int64_t n) {
  static const bool avx2 = cpu::has_avx2(cpu::active_kernel());
  if (avx2) return detail::exp_inplace_avx2(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

namespace {
constexpr int64_t kChunk = 256;  // elements per stack buffer of exp(-gate)
}

void swiglu_forward(const float* gate, const float* up, int64_t n, float* out) {
  float e[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) e[i] = -gate[i0 + i];
    exp_inplace(e, m);
    for (int64_t i = 0; i < m; ++i) out[i0 + i] = gate[i0 + i] / (1.0f + e[i]) * up[i0 + i];
  }
}

// silu(g) = g s with s = sigmoid(g); silu'(g) = s + g s (1 - s) = s (1 + g (1 - s)).
void swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                     float* dup) {
  float e[kChunk];
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    for (int64_t i = 0; i < m; ++i) e[i] = -gate[i0 + i];
    exp_inplace(e, m);
    for (int64_t i = 0; i < m; ++i) {
      const float g = gate[i0 + i], s = 1.0f / (1.0f + e[i]), d = dout[i0 + i];
      dup[i0 + i] = d * g * s;
      dgate[i0 + i] = d * up[i0 + i] * s * (1.0f + g * (1.0f - s));
    }
  }
}

double softmax_xent(float* z, int64_t V, int32_t target, bool want_probs) {
  const float zt = z[target];
  float m = z[0];
  for (int64_t i = 1; i < V; ++i) m = std::max(m, z[i]);
  for (int64_t i = 0; i < V; ++i) z[i] -= m;
  exp_inplace(z, V);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += z[i];
  if (want_probs) {
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < V; ++i) z[i] *= inv;
  }
  return double(m) + std::log(sum) - double(zt);
}

}  // namespace efim::train::ops
