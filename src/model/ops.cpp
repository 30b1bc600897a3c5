// Elementwise ops: the scalar references and the run-time choice of variant. The attention op is
// in attention.cpp, the AVX2 variants in ops_avx2.cpp.
#include "model/ops.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/ops_internal.h"

namespace efim::ops {

namespace {

void check_supported(CpuKernel k) {
  EFIM_CHECK(cpu::kernel_supported(k), "ops: kernel variant ", cpu::kernel_name(k),
             " is not supported by this CPU");
}

bool use_avx2() { return cpu::has_avx2(cpu::active_kernel()); }

// ---- references: plain loops; `#pragma omp simd` (-fopenmp-simd, no OpenMP runtime) lets the
// compiler vectorise the reductions without -ffast-math.

void rms_norm_ref(const float* x, const float* w, int64_t n, float eps, float* y) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void add_rms_norm_ref(float* x, const float* d, const float* w, int64_t n, float eps, float* y) {
  add_inplace(x, d, n);
  rms_norm_ref(x, w, n, eps, y);
}

void silu_mul_ref(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void rope_rows_ref(const RopeRows& rr, const RopeTable& table) {
  const int64_t half = rr.head_dim / 2;
  for (int64_t t = rr.t0; t < rr.t1; ++t) {
    const float* c = &table.cos[t * half];
    const float* s = &table.sin[t * half];
    for (int64_t h = 0; h < rr.n_heads; ++h) {
      float* v = rr.x + t * rr.row_stride + h * rr.head_dim;
      if (rr.pairing == RopePairing::RotateHalf) {  // pair (i, i + half)
        float* lo = v;
        float* hi = v + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * c[i] - b * s[i];
          hi[i] = b * c[i] + a * s[i];
        }
      } else {  // pair (2i, 2i + 1)
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, CpuKernel k) {
  check_supported(k);
  if (cpu::has_avx2(k)) return detail::rms_norm_avx2(x, w, n, eps, y);
  rms_norm_ref(x, w, n, eps, y);
}

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  if (use_avx2()) return detail::rms_norm_avx2(x, w, n, eps, y);
  rms_norm_ref(x, w, n, eps, y);
}

void add_rms_norm(float* x, const float* d, const float* w, int64_t n, float eps, float* y,
                  CpuKernel k) {
  check_supported(k);
  if (cpu::has_avx2(k)) return detail::add_rms_norm_avx2(x, d, w, n, eps, y);
  add_rms_norm_ref(x, d, w, n, eps, y);
}

void add_rms_norm(float* x, const float* d, const float* w, int64_t n, float eps, float* y) {
  if (use_avx2()) return detail::add_rms_norm_avx2(x, d, w, n, eps, y);
  add_rms_norm_ref(x, d, w, n, eps, y);
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  const float m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * inv * w[i] + b[i];
}

void gelu_tanh(float* x, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  gelu_tanh(gate, n);
  for (int64_t i = 0; i < n; ++i) gate[i] *= up[i];
}

void add_bias(float* y, const float* b, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) add_inplace(y + r * n, b, n);
}

void add_inplace(float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void silu_mul(float* gate, const float* up, int64_t n, CpuKernel k) {
  check_supported(k);
  if (cpu::has_avx2(k)) return detail::silu_mul_avx2(gate, up, n);
  silu_mul_ref(gate, up, n);
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (use_avx2()) return detail::silu_mul_avx2(gate, up, n);
  silu_mul_ref(gate, up, n);
}

void RopeTable::build(const std::vector<double>& inv_freq, const int32_t* positions,
                      int64_t n_tokens) {
  half = static_cast<int64_t>(inv_freq.size());
  cos.resize(static_cast<size_t>(n_tokens * half));
  sin.resize(cos.size());
  cos2.resize(2 * cos.size());
  sin2.resize(2 * cos.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * inv_freq[i];
      const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      cos[t * half + i] = c;
      sin[t * half + i] = s;
      cos2[2 * (t * half + i)] = c;
      cos2[2 * (t * half + i) + 1] = c;
      sin2[2 * (t * half + i)] = -s;
      sin2[2 * (t * half + i) + 1] = s;
    }
  }
}

void rope_rows(const RopeRows& r, const RopeTable& table, CpuKernel k) {
  check_supported(k);
  EFIM_CHECK(table.half == r.head_dim / 2 && r.head_dim % 2 == 0, "rope: table has ", table.half,
             " frequencies, head_dim ", r.head_dim);
  EFIM_CHECK(r.t1 * table.half <= static_cast<int64_t>(table.cos.size()) && r.t0 >= 0,
             "rope: rows [", r.t0, ", ", r.t1, ") outside the table's ",
             table.cos.size() / std::max<size_t>(1, static_cast<size_t>(table.half)), " tokens");
  if (cpu::has_avx2(k)) return detail::rope_rows_avx2(r, table);
  rope_rows_ref(r, table);
}

void rope_rows(const RopeRows& r, const RopeTable& table) {
  rope_rows(r, table, cpu::active_kernel());
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, RopePairing pairing,
          const RopeTable& table) {
  rope_rows({x, n_heads * head_dim, n_heads, head_dim, 0, n_tokens, pairing}, table);
}

}  // namespace efim::ops
