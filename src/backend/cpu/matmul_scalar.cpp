// Portable kernels (no SIMD intrinsics): the fallback for CPUs without AVX2 and the
// arithmetic the SIMD variants are checked against in the differential tests.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "tensor/quant.h"

namespace efim::cpu::detail {

void QuantizedRows::resize(int64_t rows, int64_t cols) {
  m = rows;
  k = cols;
  nb = cols / kQBlock;
  q.resize(static_cast<size_t>(rows * cols));
  d.resize(static_cast<size_t>(rows * nb));
  sum.resize(static_cast<size_t>(rows * nb));
  s.resize(static_cast<size_t>(rows * nb));
}

void quantize_row_q8_ggml_scalar(const float* x, int64_t i, QuantizedRows& out) {
  for (int64_t b = 0; b < out.nb; ++b) {
    const float* xb = x + i * out.k + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int8_t* q = out.q.data() + i * out.k + b * kQBlock;
    int32_t sum = 0;
    for (int j = 0; j < kQBlock; ++j) {
      q[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
      sum += q[j];
    }
    const size_t at = static_cast<size_t>(i * out.nb + b);
    out.d[at] = f16_to_f32(f32_to_f16(d));
    out.sum[at] = sum;
    out.s[at] = f16_to_f32(f32_to_f16(d * static_cast<float>(sum)));
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

// Weight row (super-block type) . x row i over the integer forms: per super-block the exact
// integer sums sum_j sc_j sum_{i in j} q_i qa_i and sum_j mn_j bsum_j, then their scales.
float dot_superblock_row(const std::vector<IntSuperBlock>& w, const QuantizedRowsK& a, int64_t i) {
  float acc = 0.0f;
  for (int64_t s = 0; s < a.ns; ++s) {
    const IntSuperBlock& b = w[static_cast<size_t>(s)];
    const int8_t* qa = a.q.data() + i * a.k + s * kQKBlock;
    const int16_t* bsum = a.bsum.data() + (i * a.ns + s) * 16;
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += b.q[16 * j + l] * qa[16 * j + l];
      isum += b.sc[j] * sub;
      msum += b.mn[j] * bsum[j];
    }
    const float dx = a.d[static_cast<size_t>(i * a.ns + s)];
    if (b.folded)
      acc += static_cast<float>(isum - msum) * (b.d * dx);
    else
      acc += static_cast<float>(isum) * (b.d * dx) - static_cast<float>(msum) * (b.dmin * dx);
  }
  return acc;
}

// Weight row (32-element type) . x row i: d_w d_a (sum q qa - o sum qa) + m_w s_a per block.
float dot_block32_row(const std::vector<IntBlock32>& w, const QuantizedRows& a, int64_t i) {
  float acc = 0.0f;
  for (int64_t b = 0; b < a.nb; ++b) {
    const IntBlock32& blk = w[static_cast<size_t>(b)];
    const int8_t* qa = a.q.data() + i * a.k + b * kQBlock;
    const size_t at = static_cast<size_t>(i * a.nb + b);
    int32_t dot = -blk.o * a.sum[at];
    for (int l = 0; l < kQBlock; ++l) dot += blk.q[l] * qa[l];
    acc += static_cast<float>(dot) * (blk.d * a.d[at]) + blk.m * a.s[at];
  }
  return acc;
}

// The integer path of one block family: x quantized (quantize_row), then each weight row
// decoded once (decode, `per_row` blocks) and dotted with every row of x (dot).
template <class Acts, class Int>
void blocks_scalar(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y,
                   int64_t per_row, void (*quantize_row)(const float*, int64_t, Acts&),
                   void (*decode)(DType, const uint8_t*, int64_t, Int&),
                   float (*dot)(const std::vector<Int>&, const Acts&, int64_t)) {
  static thread_local Acts buffer;
  Acts& acts = buffer;
  acts.resize(m, w.cols);
  for (int64_t i = 0; i < m; ++i) quantize_row(x, i, acts);
  const int64_t n = w.rows;
  pool.parallel_for(n, balanced_grain(n, pool.size(), 4), [&](int, int64_t n0, int64_t n1) {
    std::vector<Int> row(static_cast<size_t>(per_row));
    for (int64_t r = n0; r < n1; ++r) {
      for (int64_t b = 0; b < per_row; ++b) decode(w.dtype, weight_row(w, r), b, row[b]);
      for (int64_t i = 0; i < m; ++i) y[i * n + r] = dot(row, acts, i);
    }
  });
}

void matmul_blocks_scalar(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                          float* y) {
  if (is_superblock_type(w.dtype))
    return blocks_scalar<QuantizedRowsK, IntSuperBlock>(pool, x, m, w, y, w.cols / kQKBlock,
                                                        quantize_row_k_scalar, decode_superblock,
                                                        dot_superblock_row);
  blocks_scalar<QuantizedRows, IntBlock32>(pool, x, m, w, y, w.cols / kQBlock,
                                           quantize_row_q8_ggml_scalar, decode_block32,
                                           dot_block32_row);
}

}  // namespace

bool is_block_kernel_type(DType t) {
  return is_superblock_type(t) || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::IQ4_NL;
}

void matmul_scalar(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  if (is_block_kernel_type(w.dtype)) return matmul_blocks_scalar(pool, x, m, w, y);
  if (w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0) {
    static thread_local QuantizedRows buffer;  // reused across calls of this thread
    QuantizedRows& acts = buffer;  // the workers must see this thread's instance, not theirs
    acts.resize(m, k);
    for (int64_t i = 0; i < m; ++i) quantize_row_q8_ggml_scalar(x, i, acts);
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
