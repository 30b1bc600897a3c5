// AVX2 + FMA exp for the training softmaxes and SiLU (train_ops.h exp_inplace).
#include <immintrin.h>

#include <cmath>

#include "train/nn/train_ops.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace efim::train::ops::detail {

// exp(x) = 2^n exp(r), n = round(x / ln2), r = x - n ln2 (ln2 in two parts so that n ln2 is
// exact), |r| <= ln2 / 2; exp(r) ~ 1 + r + r^2 P(r) with Cephes' degree-5 expf polynomial
// (about 1 ulp). x is clamped to [-87.3, 88.7] so that 2^n stays a normal float: inputs below
// give ~1e-38 instead of a denormal or 0, which no caller can tell from 0 in a sum.
void exp_inplace_avx2(float* x, int64_t n) {
  const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.7f);
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f), ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  const __m256 c0 = _mm256_set1_ps(1.9875691500e-4f), c1 = _mm256_set1_ps(1.3981999507e-3f);
  const __m256 c2 = _mm256_set1_ps(8.3334519073e-3f), c3 = _mm256_set1_ps(4.1665795894e-2f);
  const __m256 c4 = _mm256_set1_ps(1.6666665459e-1f), c5 = _mm256_set1_ps(5.0000001201e-1f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(x + i), lo), hi);
    const __m256 k =
        _mm256_round_ps(_mm256_mul_ps(v, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_fnmadd_ps(k, ln2_hi, v);
    v = _mm256_fnmadd_ps(k, ln2_lo, v);
    __m256 p = _mm256_fmadd_ps(c0, v, c1);
    p = _mm256_fmadd_ps(p, v, c2);
    p = _mm256_fmadd_ps(p, v, c3);
    p = _mm256_fmadd_ps(p, v, c4);
    p = _mm256_fmadd_ps(p, v, c5);
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(v, v), _mm256_add_ps(v, one));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
  for (; i < n; ++i) x[i] = std::exp(x[i]);
}

}  // namespace efim::train::ops::detail

#pragma GCC pop_options
