// Helpers shared by the matmul tests (matmul_test.cpp, matmul_invariance_test.cpp): random
// problems in every weight dtype, the kernels' tolerances against matmul_reference, and the
// entry points of the native and emulated (SIMDe) variants.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "base/thread_pool.h"
#include "tensor/quant.h"

namespace efim::cpu::test {

struct Shape {
  int64_t m, k, n;
};

inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Block types without a quantizer here (K-quants, I-quants, Q4_1, Q5_x): random blocks whose
// f16 scale fields hold moderate values (random bits there would give inf and NaN).
struct ScaleFields {
  int d, dmin;  // byte offsets of the f16 scale and min fields in the block (-1: none)
};
inline ScaleFields scale_fields(DType t) {
  switch (t) {
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
      return {0, -1};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108, -1};
    case DType::Q6_K:
      return {208, -1};
    default:
      return {-1, -1};
  }
}

inline std::vector<uint8_t> random_blocks(DType t, int64_t n_elems, uint32_t seed) {
  std::mt19937 rng(seed);
  const ScaleFields f = scale_fields(t);
  const size_t block = static_cast<size_t>(dtype_info(t).block_bytes);
  std::vector<uint8_t> bytes(dtype_row_bytes(t, static_cast<uint64_t>(n_elems)));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  // Scales so that weights are O(0.1): 256-element types multiply d by 6-8 bit sub-scales.
  const float unit = dtype_info(t).block_elems == 256 ? 0.001f : 0.02f;
  for (size_t off = 0; off < bytes.size(); off += block) {
    const uint16_t d = f32_to_f16(unit * (1.0f + 0.1f * static_cast<float>(rng() % 16)));
    const uint16_t dmin = f32_to_f16(unit * 0.5f * static_cast<float>(rng() % 8));
    std::memcpy(&bytes[off + static_cast<size_t>(f.d)], &d, 2);
    if (f.dmin >= 0) std::memcpy(&bytes[off + static_cast<size_t>(f.dmin)], &dmin, 2);
  }
  return bytes;
}

inline bool has_quantizer(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

struct Problem {
  Shape s;
  DType dtype;
  std::vector<float> x;       // [m][k]
  std::vector<uint8_t> wbuf;  // W bytes in dtype
  std::vector<float> wf;      // [n][k] dequantized W
  WeightMatrix w;
};

inline Problem make_problem(Shape s, DType t, uint32_t seed) {
  Problem p{s, t, random_vec(static_cast<size_t>(s.m * s.k), seed), {}, {}, {}};
  // Spread of magnitudes per row of x, as activations after a norm have.
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.k; ++j) p.x[static_cast<size_t>(i * s.k + j)] *= 1.0f + (j % 7);
  if (!has_quantizer(t)) {
    p.wbuf = random_blocks(t, s.n * s.k, seed + 1);
  } else {
    const auto wsrc = random_vec(static_cast<size_t>(s.n * s.k), seed + 1, 0.5f);
    p.wbuf = quantize(wsrc.data(), s.n * s.k, t);
  }
  p.w = WeightMatrix{t, s.n, s.k, p.wbuf.data()};
  p.wf.resize(static_cast<size_t>(s.n * s.k));
  for (int64_t r = 0; r < s.n; ++r) dequantize_row(p.w, r, p.wf.data() + r * s.k);
  return p;
}

// sum_k |x_k w_k| for output (i, r): the scale of rounding errors in a dot product.
inline double abs_dot(const Problem& p, int64_t i, int64_t r) {
  double s = 0;
  for (int64_t j = 0; j < p.s.k; ++j)
    s += std::fabs(p.x[static_cast<size_t>(i * p.s.k + j)] *
                   p.wf[static_cast<size_t>(r * p.s.k + j)]);
  return s;
}

// Bound on the error of quantizing x to int8 blocks (32 elements; 256 for the super-block
// types, whose activations are quantized as ggml's Q8_K): each x_k moves by at most
// d_x / 2 = amax_block / 254, so the dot moves by at most sum_b amax_b / 254 * sum_{k in b} |w_k|.
inline double act_quant_bound(const Problem& p, int64_t i, int64_t r) {
  const int block = dtype_info(p.dtype).block_elems == 256 ? kQKBlock : kQBlock;
  double bound = 0;
  for (int64_t b = 0; b < p.s.k / block; ++b) {
    double amax = 0, wsum = 0;
    for (int j = 0; j < block; ++j) {
      const int64_t kk = b * block + j;
      amax =
          std::max(amax, static_cast<double>(std::fabs(p.x[static_cast<size_t>(i * p.s.k + kk)])));
      wsum += std::fabs(p.wf[static_cast<size_t>(r * p.s.k + kk)]);
    }
    bound += amax / 254.0 * wsum;
  }
  return bound;
}

// Every block type runs on int8 dot products (Q4_K too since the block kernels).
inline bool is_int8_path(DType t) { return is_quantized(t); }

// Tolerance of a kernel against matmul_reference for output (i, r):
//   float paths: f32 accumulation, 2e-5 of sum |x w| (k <= 1024, error grows ~ sqrt(k) eps);
//   int8 paths: the activation quantization bound above plus the same f32 term.
inline double tolerance(const Problem& p, int64_t i, int64_t r) {
  double tol = 2e-5 * abs_dot(p, i, r) + 1e-6;
  if (is_int8_path(p.dtype)) tol += act_quant_bound(p, i, r);
  return tol;
}

inline std::vector<float> run(const Problem& p, CpuKernel kernel, int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<size_t>(p.s.m * p.s.n), NAN);
  matmul(pool, p.x.data(), p.s.m, p.w, y.data(), kernel);
  return y;
}

// The emulated build of the AVX-512 kernels, entered as matmul() would enter the native one.
inline std::vector<float> run_avx512_emulated(const Problem& p, int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<size_t>(p.s.m * p.s.n), NAN);
  if (detail::is_block_kernel_type(p.dtype))
    detail::matmul_blocks_avx512_emulated(pool, p.x.data(), p.s.m, p.w, y.data());
  else if (p.dtype == DType::Q8_0 || p.dtype == DType::Q4_0)
    detail::matmul_quant_avx512_emulated(pool, p.x.data(), p.s.m, p.w, y.data());
  else
    detail::matmul_float_avx512_emulated(pool, p.x.data(), p.s.m, p.w, y.data());
  return y;
}

// The emulated AVX-512 kernel of interleaved W (whole groups of 8 rows), routed as matmul routes
// the native ones.
inline void emulated_x8(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y,
                 int64_t ldy) {
  if (is_block32_x8(w.dtype)) return detail::matmul_b32x8_avx512_emulated(pool, x, m, w, y, ldy);
  detail::matmul_panel_avx512_emulated(pool, x, m, w, y, ldy);
}

}  // namespace efim::cpu::test
