// AVX2 + FMA variants of the forward-pass ops (chosen at run time, see ops.h). The references
// they are tested against are in ops.cpp and attention.cpp.
//
// The target pragma comes after every include, so inline functions of shared headers are never
// emitted with AVX2 instructions (the rest of the library still runs on baseline x86-64).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model/ops_internal.h"
#include "tensor/quant.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "backend/cpu/avx2_helpers.h"
#include "model/flash_loop.h"

namespace efim::ops::detail {

namespace {

// ---------------------------------------------------------------- vector helpers

using cpu::hmax;
using cpu::hsum;

// exp(x), within 2 ulp over the normal range: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in
// two parts so n ln2 is exact), exp(r) by a degree-7 polynomial (the classic Cephes expf
// coefficients), times 2^n built in the exponent bits. Inputs are clamped to [-88, 88.7]:
// below, n = -127 gives exponent bits 0, i.e. exactly 0 (exp(-inf) = 0, used for masked
// scores); above, n = 128 gives +inf. NaN propagates (max/min return their second operand).
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(88.7f), _mm256_max_ps(_mm256_set1_ps(-88.0f), x));
  const __m256 fx =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_cvttps_epi32(fx);
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

// Sum of squares of x[0, n) with four accumulators.
inline float sum_squares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    const __m256 x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
    a1 = _mm256_fmadd_ps(x1, x1, a1);
    a2 = _mm256_fmadd_ps(x2, x2, a2);
    a3 = _mm256_fmadd_ps(x3, x3, a3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
  }
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

// y = x * inv * w (the reference's order of operations).
inline void scale_by_weight(const float* x, float inv, const float* w, int64_t n, float* y) {
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) y[i] = x[i] * inv * w[i];
}

}  // namespace

// ---------------------------------------------------------------- elementwise

void rms_norm_avx2(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, n) / static_cast<float>(n) + eps);
  scale_by_weight(x, inv, w, n, y);
}

void add_rms_norm_avx2(float* x, const float* d, const float* w, int64_t n, float eps, float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(d + i));
    const __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(d + i + 8));
    _mm256_storeu_ps(x + i, x0);
    _mm256_storeu_ps(x + i + 8, x1);
    a0 = _mm256_fmadd_ps(x0, x0, a0);
    a1 = _mm256_fmadd_ps(x1, x1, a1);
  }
  float ss = hsum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) {
    x[i] += d[i];
    ss += x[i] * x[i];
  }
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  scale_by_weight(x, inv, w, n, y);
}

void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(zero, g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void rope_rows_avx2(const RopeRows& rr, const RopeTable& table) {
  const int64_t hd = rr.head_dim, half = hd / 2;
  for (int64_t t = rr.t0; t < rr.t1; ++t) {
    float* row = rr.x + t * rr.row_stride;
    for (int64_t h = 0; h < rr.n_heads; ++h) {
      float* v = row + h * hd;
      if (rr.pairing == RopePairing::Interleaved) {  // pairs (2i, 2i + 1)
        const float* c2 = &table.cos2[t * hd];
        const float* s2 = &table.sin2[t * hd];
        int64_t i = 0;
        for (; i + 8 <= hd; i += 8) {
          const __m256 x = _mm256_loadu_ps(v + i);
          const __m256 swapped = _mm256_permute_ps(x, 0xB1);  // (b, a) of each pair
          _mm256_storeu_ps(v + i, _mm256_fmadd_ps(swapped, _mm256_loadu_ps(s2 + i),
                                                  _mm256_mul_ps(x, _mm256_loadu_ps(c2 + i))));
        }
        for (; i < hd; i += 2) {
          const float a = v[i], b = v[i + 1];
          v[i] = a * c2[i] + b * s2[i];
          v[i + 1] = b * c2[i + 1] + a * s2[i + 1];
        }
      } else {  // pairs (i, i + half)
        const float* c = &table.cos[t * half];
        const float* s = &table.sin[t * half];
        float* lo = v;
        float* hi = v + half;
        int64_t i = 0;
        for (; i + 8 <= half; i += 8) {
          const __m256 a = _mm256_loadu_ps(lo + i), b = _mm256_loadu_ps(hi + i);
          const __m256 vc = _mm256_loadu_ps(c + i), vs = _mm256_loadu_ps(s + i);
          _mm256_storeu_ps(lo + i, _mm256_fnmadd_ps(b, vs, _mm256_mul_ps(a, vc)));
          _mm256_storeu_ps(hi + i, _mm256_fmadd_ps(a, vs, _mm256_mul_ps(b, vc)));
        }
        for (; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * c[i] - b * s[i];
          hi[i] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- flash attention

namespace {

constexpr int64_t KB = kFlashKeyBlock;

// Values d .. d + 7 of one head's K or V row of an f32 or f16 cache, as f32. Q8_0 rows are
// widened a block of 32 values at a time by the tiles themselves (direct_scores,
// value_tile), their scales converted once per key block (FlashBlock::kscale, vscale).
template <DType T>
inline __m256 load8(const uint8_t* row, int64_t d) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  } else {
    static_assert(T == DType::F16);
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d)));
  }
}

// 8 int8 values of a q8_0 block from qs, as f32 (unscaled).
inline __m256 widen8_q8(const int8_t* qs) {
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}

// O[r] = O[r] * corr[r] + sum_j P[r, j] V[j] for NR rows, NC * 8 dimensions per pass: per key
// the NR probabilities broadcast once, then each 8 values of V widened once for all NR rows
// (NR * NC accumulators, NR broadcasts and one widened V vector in registers: 16 for 3 x 4).
// Q8_0: each block's scale is folded into the probabilities, P'[i, b, j] = P[r0 + i, j]
// d[j, block bk0 + b], so that a value row's int8 are only widened, not multiplied by their
// scale per 8 values (as in the AVX-512 kernel); a pass from c0 lies in NBK blocks from c0 / 32,
// and each FMA broadcasts its P' (no room for NR of them in the 16 registers).
template <DType T, int NR, int NC>
inline void value_tile(const float* P, const uint8_t* const* vrow, const float* vscale,
                       int64_t nb, const float* corr, float* O, int64_t r0, int64_t hd) {
  constexpr bool q8 = T == DType::Q8_0;
  constexpr int NBK = q8 ? (NC * 8 + 31) / 32 : 1;
  [[maybe_unused]] alignas(32) float Ps[q8 ? NR : 1][NBK][KB];
  for (int64_t c0 = 0; c0 < hd; c0 += NC * 8) {
    const int64_t bk0 = c0 / 32;
    if constexpr (q8)
      for (int i = 0; i < NR; ++i)
        for (int b = 0; b < NBK; ++b)
          for (int64_t j = 0; j < KB; j += 8)
            _mm256_store_ps(&Ps[i][b][j],
                            _mm256_mul_ps(_mm256_loadu_ps(P + (r0 + i) * KB + j),
                                          _mm256_load_ps(vscale + (bk0 + b) * KB + j)));
    __m256 acc[NR][NC];
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i) {
      const __m256 s = _mm256_set1_ps(corr[r0 + i]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[i][c] = _mm256_mul_ps(_mm256_loadu_ps(O + (r0 + i) * hd + c0 + 8 * c), s);
    }
    for (int64_t j = 0; j < nb; ++j) {
      [[maybe_unused]] __m256 p[NR];
      if constexpr (!q8) {
#pragma GCC unroll 8
        for (int i = 0; i < NR; ++i) p[i] = _mm256_broadcast_ss(P + (r0 + i) * KB + j);
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const int64_t d = c0 + 8 * c;
        __m256 v;
        if constexpr (q8) v = widen8_q8(q8_block(vrow[j], d / 32)->qs + d % 32);
        else v = load8<T>(vrow[j], d);
#pragma GCC unroll 8
        for (int i = 0; i < NR; ++i) {
          __m256 pi;
          if constexpr (q8) pi = _mm256_broadcast_ss(&Ps[i][d / 32 - bk0][j]);
          else pi = p[i];
          acc[i][c] = _mm256_fmadd_ps(pi, v, acc[i][c]);
        }
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) _mm256_storeu_ps(O + (r0 + i) * hd + c0 + 8 * c, acc[i][c]);
  }
}

// The sums of four vectors, [sum a0, sum a1, sum a2, sum a3], by unpacks and shuffles (on
// Zen 3 a little cheaper than three vhaddps: +1% for the whole decode kernel).
inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x44), _mm256_shuffle_ps(t0, t1, 0xEE));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// S[r, j] = Q[r] . K[j] for NR rows from r0 and all KB keys of a block, read straight from the
// key rows 4 keys at a time (12 sums for 3 rows), each widened once for all rows (for decode
// about half the cost of transposing the block first; for prompts at depth 2048 on the 100M
// model as fast: prefill 875 / 867 against 866 / 803 tok/s with transposed tiles). HD: the
// head_dim when known at compile time (the loop over d unrolled), else 0 and hd_rt.
template <DType T, int NR, int HD>
inline void direct_scores(const float* Q, const uint8_t* const* krow, const float* kscale, float* S,
                          int64_t r0, int64_t hd_rt, const FlashBlock* ahead, Prefetch what) {
  const int64_t hd = HD ? HD : hd_rt;
  for (int64_t j = 0; j < KB; j += 4) {
    if (ahead) prefetch_next(*ahead, j, what);
    __m256 acc[NR][4];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[i][c] = _mm256_setzero_ps();
    if constexpr (T == DType::Q8_0) {
      // A block of 32 values at a time, its scale broadcast from kscale once per key; the
      // queries as the FMAs' memory operands (12 accumulators, a key and its scale in the 16
      // registers). The same products and sums as load8<Q8_0>.
#pragma GCC unroll 4
      for (int64_t b = 0; b < hd / 32; ++b)
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m256 s = _mm256_broadcast_ss(kscale + b * KB + j + c);
          const int8_t* qs = q8_block(krow[j + c], b)->qs;
#pragma GCC unroll 4
          for (int64_t d = 0; d < 32; d += 8) {
            const __m256 k = _mm256_mul_ps(s, widen8_q8(qs + d));
#pragma GCC unroll 4
            for (int i = 0; i < NR; ++i)
              acc[i][c] =
                  _mm256_fmadd_ps(_mm256_loadu_ps(Q + (r0 + i) * hd + 32 * b + d), k, acc[i][c]);
          }
        }
    } else {
#pragma GCC unroll 8
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 q[NR];
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) q[i] = _mm256_loadu_ps(Q + (r0 + i) * hd + d);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256 k = load8<T>(krow[j + c], d);
#pragma GCC unroll 4
          for (int i = 0; i < NR; ++i) acc[i][c] = _mm256_fmadd_ps(q[i], k, acc[i][c]);
        }
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i)
      _mm_storeu_ps(S + (r0 + i) * KB + j, hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
  }
}

// Rows [b.first, b.end) against one key block read straight from the key rows, 3 rows at a
// time (each row's sums are the same whichever rows share its pass). The first pass prefetches
// the next block; with more than 3 rows (6 heads per KV head, a verify step's tokens) the first
// pass its keys and the second its values, so the same lines are asked for over twice the
// time. Attention at depth 4096 from memory, 2 threads, the two ways alternated in one
// process (2026-12-07, AVX2 VM): 1.5B shape (28 x 12/2 x 128) decode 1.14x, 4 tokens 1.07x;
// 100M shape (12 x 12/4 x 64) 2 tokens 1.06x, 4 tokens 1.03x. Values prefetched during the
// value tiles instead were slower (0.89-0.96x), also for 3 rows.
template <DType T, int HD>
inline void block_scores_direct(const float* Q, const FlashBlock& b, float* S, int64_t hd) {
  const bool split = b.end - b.first > 3;
  for (int64_t r = b.first; r < b.end; r += 3) {
    const FlashBlock* ahead = r == b.first || (split && r == b.first + 3) ? &b : nullptr;
    const Prefetch what = !split           ? Prefetch::kKeysAndValues
                          : r == b.first   ? Prefetch::kKeys
                                           : Prefetch::kValues;
    switch (std::min<int64_t>(3, b.end - r)) {
      case 3: direct_scores<T, 3, HD>(Q, b.krow, b.kscale, S, r, hd, ahead, what); break;
      case 2: direct_scores<T, 2, HD>(Q, b.krow, b.kscale, S, r, hd, ahead, what); break;
      default: direct_scores<T, 1, HD>(Q, b.krow, b.kscale, S, r, hd, ahead, what); break;
    }
  }
}

template <DType T>
inline void block_values(const float* P, const uint8_t* const* vrow, const float* vscale,
                         int64_t nb, const float* corr, float* O, int64_t first, int64_t R,
                         int64_t hd) {
  int64_t r = first;
  // Q8_0 rows, whose widening costs more than their reading: 6 rows at a time where they come
  // in 6s, so that each value row is widened once (12 accumulators, 16 dimensions per pass;
  // 1.5B shape, depth 4096, 2 threads, 3 alternated runs on the Xeon VM: 8.93 -> 8.29 ms).
  if constexpr (T == DType::Q8_0)
    for (; r + 6 <= R; r += 6) value_tile<T, 6, 2>(P, vrow, vscale, nb, corr, O, r, hd);
  // Rows in 3s when they come in 3s (6 heads per KV head, a verify step of the 100M model):
  // 12 accumulators per pass instead of the 4-row tile's 8 (1.5B shape decode 1.02x in L3 on
  // 1 thread, 1.04x from memory on 2; 100M shape 2 tokens 1.03x; in-process alternation).
  if (hd % 32 == 0 && (R - r) % 3 == 0)
    for (; r + 3 < R; r += 3) value_tile<T, 3, 4>(P, vrow, vscale, nb, corr, O, r, hd);
  for (; r + 4 <= R; r += 4) value_tile<T, 4, 2>(P, vrow, vscale, nb, corr, O, r, hd);
  const int64_t rest = R - r;
  if (rest == 3) {  // decode with 3 heads per KV head (the 100M and bundled models' GQA)
    // 12 accumulators, 2 passes over head_dim 64 (3 x 2: 6, 4 passes, each FMA chain waiting
    // on the one before: 1.055x for the whole decode kernel, depth 1024, 1 thread).
    if (hd % 32 == 0)
      value_tile<T, 3, 4>(P, vrow, vscale, nb, corr, O, r, hd);
    else
      value_tile<T, 3, 2>(P, vrow, vscale, nb, corr, O, r, hd);
  } else if (rest == 2) {
    if (hd % 32 == 0)
      value_tile<T, 2, 4>(P, vrow, vscale, nb, corr, O, r, hd);
    else
      value_tile<T, 2, 2>(P, vrow, vscale, nb, corr, O, r, hd);
  } else if (rest == 1) {
    if (hd % 64 == 0)
      value_tile<T, 1, 8>(P, vrow, vscale, nb, corr, O, r, hd);
    else if (hd % 32 == 0)
      value_tile<T, 1, 4>(P, vrow, vscale, nb, corr, O, r, hd);
    else
      value_tile<T, 1, 2>(P, vrow, vscale, nb, corr, O, r, hd);
  }
}

// Online softmax of rows [first, R) over one block (keys kb0 .. kb0 + nb): masks the keys each
// row may not see (before lo, after last), updates the running max m and sum l, turns S into
// P = exp(S - m) and leaves the factor exp(m_old - m_new) that rescales the row's output in
// corr. Every row sees at least one key of the block.
inline void block_softmax(float* S, const int64_t* lo, const int64_t* last, int64_t first,
                          int64_t R, int64_t kb0, int64_t nb, float* m, float* l, float* corr) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = first; r < R; ++r) {
    float* s = S + r * KB;
    const int64_t visible = last[r] - kb0 + 1 < nb ? last[r] - kb0 + 1 : nb;  // >= 1
    for (int64_t j = 0; j < lo[r] - kb0; ++j) s[j] = neg_inf;  // < visible
    for (int64_t j = visible; j < KB; ++j) s[j] = neg_inf;
    __m256 mx = _mm256_loadu_ps(s);
    for (int64_t j = 8; j < KB; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
    const float m_new = std::fmax(m[r], hmax(mx));
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < KB; j += 8) {
      const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
      _mm256_storeu_ps(s + j, p);
      sum = _mm256_add_ps(sum, p);
    }
    corr[r] = std::exp(m[r] - m_new);  // 0 on the first block (m = -inf)
    l[r] = l[r] * corr[r] + hsum(sum);
    m[r] = m_new;
  }
}

}  // namespace

template <DType T, int HD>
void flash_unit(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial) {
  const int64_t hd = a.head_dim;
  // Scores straight from the key rows for every unit (decode and prompt): a row's sums do not
  // depend on the unit it is in (FlashKernel::invariant).
  flash_unit_loop(a, u, work, partial, [&](FlashTiles& w, const FlashBlock& b) {
    block_scores_direct<T, HD>(w.Q, b, w.S, hd);
    block_softmax(w.S, b.lo, b.last, b.first, b.end, b.kb0, b.nb, w.m, w.l, w.corr);
    block_values<T>(w.S, b.vrow, b.vscale, b.nb, w.corr, w.O, b.first, b.end, hd);
  });
}

// head_dim 64 and 128 (the bundled and the Qwen2.5-Coder models) known at compile time, so
// the score loop over d unrolls (1.025x for the whole decode kernel, depth 1024, 1 thread).
// Together with the value tile and hsum4 above: 1.09-1.12x, in-process alternation, depth
// 2048 in L2 and depth 4096 over 12 layers from memory, 1 and 2 threads, 2026-12-07.
template <DType T>
void flash_unit_dims(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial) {
  if (a.head_dim == 64) return flash_unit<T, 64>(a, u, work, partial);
  if (a.head_dim == 128) return flash_unit<T, 128>(a, u, work, partial);
  flash_unit<T, 0>(a, u, work, partial);
}

void flash_unit_avx2(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial) {
  switch (a.kv_type) {
    case DType::F16: return flash_unit_dims<DType::F16>(a, u, work, partial);
    case DType::Q8_0: return flash_unit_dims<DType::Q8_0>(a, u, work, partial);
    default: return flash_unit_dims<DType::F32>(a, u, work, partial);
  }
}

}  // namespace efim::ops::detail

#pragma GCC pop_options
