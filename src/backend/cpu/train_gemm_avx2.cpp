// AVX2 + FMA micro-kernel of train_gemm: a 6 x 16 tile of C in 12 ymm accumulators; per k step
// 2 loads of the packed B sliver, 6 broadcasts from the packed A sliver, 12 FMAs. Also the
// transposing packers (8 x 8 register transposes instead of strided scalar stores).
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/train_gemm_kernels.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include "backend/cpu/avx2_helpers.h"

namespace efim::cpu::detail {

void train_micro_avx2(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int rows,
                      int cols, bool accumulate) {
  // Loops over the 6 rows are fully unrolled so that acc[][] lives in registers only.
  __m256 acc[kTrainMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kTrainMR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + p * kTrainNR);
    const __m256 b1 = _mm256_loadu_ps(bp + p * kTrainNR + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kTrainMR; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + p * kTrainMR + i);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
  }
  if (rows == kTrainMR && cols == kTrainNR) {
#pragma GCC unroll 6
    for (int i = 0; i < kTrainMR; ++i) {
      float* ci = c + i * ldc;
      if (accumulate) {
        acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(ci));
        acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, acc[i][0]);
      _mm256_storeu_ps(ci + 8, acc[i][1]);
    }
    return;
  }
  // Edge tile: spill, then write only the rows and columns inside C.
  alignas(32) float tmp[kTrainMR][kTrainNR];
#pragma GCC unroll 6
  for (int i = 0; i < kTrainMR; ++i) {
    _mm256_store_ps(tmp[i], acc[i][0]);
    _mm256_store_ps(tmp[i] + 8, acc[i][1]);
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + tmp[i][j] : tmp[i][j];
}

// 8 k values of each of the 6 rows, transposed: column p holds rows 0..7 of k = p0 + p. Each
// column is stored whole (8 floats at ap + 6 p): its last 2 floats spill into column p + 1, which
// the next store overwrites, and past the last column into the 2 floats after the sliver (see
// kTrainPackSlack). A masked 6-float store instead is microcoded and slow on AMD cores.
void train_pack_a_avx2(const float* a, int64_t lda, int rows, int64_t kc, float* ap) {
  const int64_t k8 = kc / 8 * 8;
  for (int64_t p = 0; p < k8; p += 8) {
    __m256 v[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r)
      v[r] = r < rows ? _mm256_loadu_ps(a + r * lda + p) : _mm256_setzero_ps();
    transpose8x8(v);
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) _mm256_storeu_ps(ap + (p + q) * kTrainMR, v[q]);
  }
  for (int64_t p = k8; p < kc; ++p)
    for (int r = 0; r < kTrainMR; ++r) ap[p * kTrainMR + r] = r < rows ? a[r * lda + p] : 0.0f;
}

void train_pack_b_avx2(const float* b, int64_t ldb, int cols, int64_t kc, float* bp) {
  const int64_t k8 = kc / 8 * 8;
  for (int64_t p = 0; p < k8; p += 8) {
#pragma GCC unroll 2
    for (int h = 0; h < kTrainNR; h += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        v[c] = h + c < cols ? _mm256_loadu_ps(b + (h + c) * ldb + p) : _mm256_setzero_ps();
      transpose8x8(v);
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(bp + (p + q) * kTrainNR + h, v[q]);
    }
  }
  for (int64_t p = k8; p < kc; ++p)
    for (int c = 0; c < kTrainNR; ++c) bp[p * kTrainNR + c] = c < cols ? b[c * ldb + p] : 0.0f;
}

}  // namespace efim::cpu::detail

#pragma GCC pop_options
