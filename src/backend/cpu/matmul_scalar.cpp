// Portable kernels (no SIMD intrinsics): the fallback for CPUs without AVX2 and the
// arithmetic the SIMD variants are checked against in the differential tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "tensor/quant.h"

namespace efim::cpu::detail {

void QuantizedRows::resize(int64_t rows, int64_t cols) {
  m = rows;
  k = cols;
  nb = cols / kQBlock;
  q.resize(static_cast<size_t>(rows * cols));
  d.resize(static_cast<size_t>(rows * nb));
  sum.resize(static_cast<size_t>(rows * nb));
}

void quantize_rows_scalar(const float* x, int64_t m, int64_t k, QuantizedRows& out) {
  out.resize(m, k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t b = 0; b < out.nb; ++b) {
      const float* xb = x + i * k + b * kQBlock;
      float amax = 0.0f;
      for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int8_t* q = out.q.data() + i * k + b * kQBlock;
      int32_t sum = 0;
      for (int j = 0; j < kQBlock; ++j) {
        q[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));  // ties to even
        sum += q[j];
      }
      out.d[static_cast<size_t>(i * out.nb + b)] = d;
      out.sum[static_cast<size_t>(i * out.nb + b)] = sum;
    }
  }
}

namespace {

// One output of the integer path: sum over blocks of (int dot of the block) * d_w * d_x.
float dot_quant_row(const uint8_t* wrow, DType t, const QuantizedRows& a, int64_t i) {
  const int8_t* xq = a.q.data() + i * a.k;
  const float* xd = a.d.data() + i * a.nb;
  float acc = 0.0f;
  for (int64_t b = 0; b < a.nb; ++b) {
    const int8_t* xb = xq + b * kQBlock;
    int32_t dot = 0;
    float dw;
    if (t == DType::Q8_0) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(wrow) + b;
      for (int j = 0; j < kQBlock; ++j) dot += blk->qs[j] * xb[j];
      dw = f16_to_f32(blk->d);
    } else {  // Q4_0
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(wrow) + b;
      for (int j = 0; j < kQBlock / 2; ++j) {
        dot += ((blk->qs[j] & 0x0f) - 8) * xb[j];
        dot += ((blk->qs[j] >> 4) - 8) * xb[j + kQBlock / 2];
      }
      dw = f16_to_f32(blk->d);
    }
    acc += static_cast<float>(dot) * (dw * xd[b]);
  }
  return acc;
}

}  // namespace

void matmul_scalar(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  if (w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0) {
    static thread_local QuantizedRows buffer;  // reused across calls of this thread
    QuantizedRows& acts = buffer;  // the workers must see this thread's instance, not theirs
    quantize_rows_scalar(x, m, k, acts);
    pool.parallel_for(n, balanced_grain(n, pool.size(), 4), [&](int, int64_t n0, int64_t n1) {
      for (int64_t r = n0; r < n1; ++r) {
        const uint8_t* wrow = weight_row(w, r);
        for (int64_t i = 0; i < m; ++i) y[i * n + r] = dot_quant_row(wrow, w.dtype, acts, i);
      }
    });
    return;
  }
  pool.parallel_for(n, balanced_grain(n, pool.size(), 4), [&](int, int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(k));  // [k] one weight row in f32
    for (int64_t r = n0; r < n1; ++r) {
      dequantize_row(w, r, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * k;
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) acc += xi[j] * row[static_cast<size_t>(j)];
        y[i * n + r] = acc;
      }
    }
  });
}

}  // namespace efim::cpu::detail
