// AVX-512 kernel of flash attention (detail::kFlashAvx512: every unit, prompt and decode).
// Decode at depth streams the whole K/V cache once per step for 1-48 rows (query tokens x the
// heads of one KV head), so its cost is per key: widening the key and value rows and, per row,
// the dot products and the weighted sum. In 16 lanes that is half the AVX2 kernel's
// instructions, and on CPUs with full-width AVX-512 units half its time. Scores are read
// straight from the key rows for prompts too: with 16 lanes that beats transposing the block
// (prefill of 256 tokens at depth 4096 on the 100M model: 665 -> 935 tok/s).
//
// Per key block of kFlashKeyBlock keys (the loop is flash_loop.h's):
//   S[r, j] = Q[r] . K[j]               up to 6 rows x 4 keys per pass, each key row widened
//                                       once per pass; a row's 16-lane sums reduced in a fixed
//                                       tree (reduce4)
//   online softmax per row              m, l, P = exp(S - m) (exp16: exactly 0 for masked keys)
//   O[r] = O[r] corr[r] + sum_j P[r, j] V[j]   up to 6 rows x 64 dimensions per pass
// Q8_0 caches cost more in widening their int8 than in reading them, so their block scales come
// converted once per key block (flash_loop.h's q8_row_scales): keys are scaled per 32 values
// with a broadcast from that table, and the values' scales are folded into P (values_tile).
// Every row's arithmetic is the same whichever rows share its passes and whatever unit it is in,
// which with attention() cutting every key range at fixed positions makes the kernel batch-
// invariant (detail::FlashKernel): a row does not depend on the chunking of its prompt, on the
// other sequences of the step or on the threads. It differs from the AVX2 kernel in rounding.
//
// This file is compiled twice: natively for AVX-512 CPUs, and for tests on SIMDe's emulation of
// the intrinsics (EFIM_AVX512_EMULATED, see backend/cpu/avx512_emulation.h).

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "model/ops_internal.h"
#include "tensor/quant.h"

#ifdef EFIM_AVX512_EMULATED
#include "backend/cpu/avx512_emulation.h"
#else
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif
#include "backend/cpu/avx512_helpers.h"
#include "model/flash_loop.h"

namespace efim::ops::detail {

namespace {

constexpr int64_t KB = kFlashKeyBlock;
constexpr int kMaxTileRows = 6;  // rows per pass: 6 x 4 sums (scores), 6 x 4 vectors (values)

// Values d .. d + 15 of one head's K or V row of an f32 or f16 cache, as f32. Q8_0 rows are
// widened a block of 32 values at a time by the tiles themselves (widen_q8), their scales
// converted once per key block (FlashBlock::kscale, vscale).
template <DType T>
inline __m512 load16(const uint8_t* row, int64_t d) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
  } else {
    static_assert(T == DType::F16);
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d)));
  }
}

// [sum a0, sum a1, sum a2, sum a3] of four 16-lane vectors: 128-bit quarters first, then
// within the quarter, always in this order.
inline __m128 reduce4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  // s01 quarters: a0 (q0 + q2), a0 (q1 + q3), a1 (q0 + q2), a1 (q1 + q3); s23 likewise.
  const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44),
                                   _mm512_shuffle_f32x4(a0, a1, 0xEE));
  const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44),
                                   _mm512_shuffle_f32x4(a2, a3, 0xEE));
  // Quarter c: 4 partial sums of a_c.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88),
                                 _mm512_shuffle_f32x4(s01, s23, 0xDD));
  const __m512 t = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 u = _mm512_add_ps(t, _mm512_shuffle_ps(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  // Every lane of quarter c now holds sum a_c: gather lanes 0, 4, 8, 12.
  const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
  return _mm512_castps512_ps128(_mm512_permutexvar_ps(idx, u));
}

// 16 int8 values of a q8_0 block from qs, as f32 (unscaled).
inline __m512 widen_q8(const int8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

// S[r, j] = Q[r] . K[j] for rows r0 .. r0 + NR - 1 and all KB keys, 4 keys per pass, each key
// widened once per pass; with `ahead`, its next block is prefetched as it goes. Q8_0 keys a
// block of 32 values at a time, its scale broadcast from kscale (the same products and sums).
template <DType T, int NR>
inline void scores_tile(const float* Q, const uint8_t* const* krow, const float* kscale, float* S,
                        int64_t r0, int64_t hd, const FlashBlock* ahead) {
  for (int64_t j = 0; j < KB; j += 4) {
    if (ahead) prefetch_next(*ahead, j);
    __m512 acc[NR][4];
#pragma GCC unroll 6
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[i][c] = _mm512_setzero_ps();
    if constexpr (T == DType::Q8_0) {
      const int64_t nbk = hd / 32;
      for (int64_t bk = 0; bk < nbk; ++bk) {
        const float* q = Q + 32 * bk;
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m512 s = _mm512_set1_ps(kscale[bk * KB + j + c]);
          const int8_t* qs = q8_block(krow[j + c], bk)->qs;
          const __m512 k0 = _mm512_mul_ps(s, widen_q8(qs));
          const __m512 k1 = _mm512_mul_ps(s, widen_q8(qs + 16));
#pragma GCC unroll 6
          for (int i = 0; i < NR; ++i) {
            acc[i][c] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (r0 + i) * hd), k0, acc[i][c]);
            acc[i][c] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (r0 + i) * hd + 16), k1, acc[i][c]);
          }
        }
      }
    } else {
      for (int64_t d = 0; d < hd; d += 16) {
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          const __m512 k = load16<T>(krow[j + c], d);
#pragma GCC unroll 6
          for (int i = 0; i < NR; ++i)
            acc[i][c] = _mm512_fmadd_ps(_mm512_loadu_ps(Q + (r0 + i) * hd + d), k, acc[i][c]);
        }
      }
    }
#pragma GCC unroll 6
    for (int i = 0; i < NR; ++i)
      _mm_storeu_ps(S + (r0 + i) * KB + j, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
  }
}

// The first tile of rows prefetches the next block.
template <DType T>
inline void block_scores(const float* Q, const FlashBlock& b, float* S, int64_t hd) {
  for (int64_t r = b.first; r < b.end; r += kMaxTileRows) {
    const FlashBlock* ahead = r == b.first ? &b : nullptr;
    switch (std::min<int64_t>(kMaxTileRows, b.end - r)) {
      case 6: scores_tile<T, 6>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
      case 5: scores_tile<T, 5>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
      case 4: scores_tile<T, 4>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
      case 3: scores_tile<T, 3>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
      case 2: scores_tile<T, 2>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
      default: scores_tile<T, 1>(Q, b.krow, b.kscale, S, r, hd, ahead); break;
    }
  }
}

// exp(x) in 16 lanes, the AVX2 kernel's exp8 (same polynomial and clamps): exactly 0 for
// -inf (masked keys), +inf above 88.7.
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-88.0f), x));
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i n = _mm512_cvttps_epi32(fx);
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
}

// Online softmax of rows [first, end) over one block, as the AVX2 kernel's block_softmax:
// masks the keys a row may not see, updates m and l, turns S into P and leaves each row's
// rescale factor in corr.
inline void block_softmax(float* S, const FlashBlock& b, float* m, float* l, float* corr) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t r = b.first; r < b.end; ++r) {
    float* s = S + r * KB;
    const int64_t visible = b.last[r] - b.kb0 + 1 < b.nb ? b.last[r] - b.kb0 + 1 : b.nb;
    for (int64_t j = 0; j < b.lo[r] - b.kb0; ++j) s[j] = neg_inf;  // < visible
    for (int64_t j = visible; j < KB; ++j) s[j] = neg_inf;
    __m512 mx = _mm512_loadu_ps(s);
    for (int64_t j = 16; j < KB; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
    const __m256 mx8 = _mm256_max_ps(_mm512_castps512_ps256(mx),
                                     _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mx), 1)));
    const float m_new = std::fmax(m[r], cpu::hmax(mx8));
    const __m512 vm = _mm512_set1_ps(m_new);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < KB; j += 16) {
      const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
      _mm512_storeu_ps(s + j, p);
      sum = _mm512_add_ps(sum, p);
    }
    // 0 on the first block (m = -inf); exactly 1 when the max did not move (exp(0) = 1).
    corr[r] = m_new == m[r] ? 1.0f : std::exp(m[r] - m_new);
    l[r] = l[r] * corr[r] + cpu::hsum(sum);
    m[r] = m_new;
  }
}

// O[r] = O[r] corr[r] + sum_j P[r, j] V[j] for rows r0 .. r0 + NR - 1, NC * 16 dimensions per
// pass, each value row widened once per pass. Q8_0: each block's scale is folded into the
// probabilities, P'[i, b, j] = P[r0 + i, j] d[j, block bk0 + b], so that a value row's int8 are
// only widened (no multiply by their scale per 16 values; NC even, a pass covers NC / 2 blocks).
template <DType T, int NR, int NC>
inline void values_tile(const float* P, const uint8_t* const* vrow, const float* vscale,
                        int64_t nb, const float* corr, float* O, int64_t r0, int64_t hd) {
  constexpr bool q8 = T == DType::Q8_0;
  static_assert(!q8 || NC % 2 == 0);
  constexpr int NBK = q8 ? NC / 2 : 1;  // q8_0 blocks per pass
  [[maybe_unused]] alignas(64) float Ps[q8 ? NR : 1][NBK][KB];
  for (int64_t c0 = 0; c0 < hd; c0 += NC * 16) {
    const int64_t bk0 = c0 / 32;
    if constexpr (q8)
      for (int i = 0; i < NR; ++i)
        for (int b = 0; b < NBK; ++b)
          for (int64_t j = 0; j < KB; j += 16)
            _mm512_store_ps(&Ps[i][b][j],
                            _mm512_mul_ps(_mm512_loadu_ps(P + (r0 + i) * KB + j),
                                          _mm512_load_ps(vscale + (bk0 + b) * KB + j)));
    __m512 acc[NR][NC];
#pragma GCC unroll 6
    for (int i = 0; i < NR; ++i) {
      const __m512 s = _mm512_set1_ps(corr[r0 + i]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(O + (r0 + i) * hd + c0 + 16 * c), s);
    }
    for (int64_t j = 0; j < nb; ++j) {
      __m512 v[NC];
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        if constexpr (q8)
          v[c] = widen_q8(q8_block(vrow[j], bk0 + c / 2)->qs + 16 * (c % 2));
        else
          v[c] = load16<T>(vrow[j], c0 + 16 * c);
      }
#pragma GCC unroll 6
      for (int i = 0; i < NR; ++i)
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          float p;
          if constexpr (q8) p = Ps[i][c / 2][j];
          else p = P[(r0 + i) * KB + j];
          acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(p), v[c], acc[i][c]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) _mm512_storeu_ps(O + (r0 + i) * hd + c0 + 16 * c, acc[i][c]);
  }
}

template <DType T, int NC>
inline void block_values_nc(const float* P, const uint8_t* const* vrow, const float* vscale,
                            int64_t nb, const float* corr, float* O, int64_t first, int64_t end,
                            int64_t hd) {
  for (int64_t r = first; r < end; r += kMaxTileRows) {
    switch (std::min<int64_t>(kMaxTileRows, end - r)) {
      case 6: values_tile<T, 6, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
      case 5: values_tile<T, 5, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
      case 4: values_tile<T, 4, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
      case 3: values_tile<T, 3, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
      case 2: values_tile<T, 2, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
      default: values_tile<T, 1, NC>(P, vrow, vscale, nb, corr, O, r, hd); break;
    }
  }
}

// 64 dimensions of up to 6 rows per pass where head_dim allows, else 32, else 16: each value
// row widened once for up to 6 query rows. For head_dim 128 and 256 that reads half rows, and
// passes of 3 rows x 128 dimensions, which read whole rows in order, used to win (12% on the
// 1.5B shape, 2026-12-04 on the AMD AVX-512 VM, when only the hardware prefetched the K/V; not
// measured there since); with the next block prefetched
// (flash_loop.h) the 6-row passes are as fast or faster (2026-12-08, Xeon VM, depth 4096, 2
// threads, alternated runs: f16 1.5B shape 28 x 12/2 x 128 faster in 6 of 6 pairs, 1.01-1.14x;
// CodeGemma's 18 x 8/1 x 256 1.01-1.05x; f32 0.94-1.01x; q8_0 6.28 -> 5.85 ms, its value rows
// widened once instead of twice).
template <DType T>
inline void block_values(const float* P, const uint8_t* const* vrow, const float* vscale,
                         int64_t nb, const float* corr, float* O, int64_t first, int64_t end,
                         int64_t hd) {
  if (hd % 64 == 0)
    block_values_nc<T, 4>(P, vrow, vscale, nb, corr, O, first, end, hd);
  else if (hd % 32 == 0)
    block_values_nc<T, 2>(P, vrow, vscale, nb, corr, O, first, end, hd);
  else if constexpr (T != DType::Q8_0)  // q8_0: head_dim is whole blocks of 32
    block_values_nc<T, 1>(P, vrow, vscale, nb, corr, O, first, end, hd);
}

template <DType T>
void flash_unit(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial) {
  const int64_t hd = a.head_dim;
  flash_unit_loop(a, u, work, partial, [&](FlashTiles& w, const FlashBlock& b) {
    block_scores<T>(w.Q, b, w.S, hd);
    block_softmax(w.S, b, w.m, w.l, w.corr);
    block_values<T>(w.S, b.vrow, b.vscale, b.nb, w.corr, w.O, b.first, b.end, hd);
  });
}

}  // namespace

void EFIM_AVX512_ENTRY(flash_unit_avx512)(const AttentionArgs& a, const FlashUnit& u,
                                                 float* work, float* partial) {
  switch (a.kv_type) {
    case DType::F16: return flash_unit<DType::F16>(a, u, work, partial);
    case DType::Q8_0: return flash_unit<DType::Q8_0>(a, u, work, partial);
    default: return flash_unit<DType::F32>(a, u, work, partial);
  }
}

}  // namespace efim::ops::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
