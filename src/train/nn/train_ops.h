// Row-wise operations of the training forward pass and their hand-written backward passes, on
// f32 row-major activations. Each call handles one token row; callers parallelise over rows.
// Derivations are written next to each backward in train_ops.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace efim::train::ops {

// y = x * r * w with r = 1 / sqrt(mean(x^2) + eps), n elements; returns r (saved for backward).
float rms_norm_forward(const float* x, const float* w, int64_t n, float eps, float* y);
// Given dy = dL/dy: writes dx = dL/dx (dx may alias dy) and adds dL/dw to dw.
void rms_norm_backward(const float* dy, const float* x, const float* w, float r, int64_t n,
                       float* dx, float* dw);

// RoPE angles of positions 0..T-1: cos/sin [T, head_dim / 2] of pos * inv_freq[i] (in double).
struct RopeAngles {
  int64_t half = 0;
  std::vector<float> cos, sin;
  void build(const std::vector<double>& inv_freq, int64_t T);
};
// Rotate-half pairs (x[i], x[i + half]) of each of n_heads heads of one token row (heads
// head_dim apart) by the angles of row `pos`; backward rotates by the negative angle (the
// transpose of a rotation).
void rope_forward(float* x, int64_t n_heads, int64_t head_dim, const RopeAngles& a, int64_t pos);
void rope_backward(float* dx, int64_t n_heads, int64_t head_dim, const RopeAngles& a, int64_t pos);

// out = silu(gate) * up, silu(z) = z * sigmoid(z); n elements.
void swiglu_forward(const float* gate, const float* up, int64_t n, float* out);
// dgate = dout * up * silu'(gate), dup = dout * silu(gate).
void swiglu_backward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                     float* dup);

// x[i] = exp(x[i]), n elements: AVX2 (about 1 ulp; inputs below -87.3 give ~1e-38, not 0) when
// cpu::active_kernel() is Avx2, else std::exp.
void exp_inplace(float* x, int64_t n);

// Cross-entropy of one row of logits [V] against `target`: returns log(sum exp) - logit[target].
// The row is overwritten: with softmax(logits) when want_probs, else with scratch values.
double softmax_xent(float* logits, int64_t V, int32_t target, bool want_probs);

namespace detail {
void exp_inplace_avx2(float* x, int64_t n);
}

}  // namespace efim::train::ops
