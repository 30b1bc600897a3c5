// AVX-512 VNNI GEMV (few rows of x) for Q3_K and Q2_K weights interleaved 8 rows at a time
// (interleave.h) against Q8_K activations, two super-blocks of a group per 512-bit register
// (q23_x8_avx512.h). It forms the panel GEMM's exact integer sum per super-block and applies
// it with the panel's f32 steps (matmul_panel_avx512.cpp), so GEMV and GEMM give a row the same
// bits at any m.
//
// This file is compiled twice: natively for AVX-512 CPUs, and for tests on SIMDe's emulation of
// the intrinsics (EFIM_AVX512_EMULATED, see avx512_emulation.h).

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (GCC bug 105593, see
// matmul_quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "base/thread_pool.h"
#include "tensor/quant.h"

#ifdef EFIM_AVX512_EMULATED
#include "backend/cpu/avx512_emulation.h"
#else
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif
#include "backend/cpu/avx512_helpers.h"
#include "backend/cpu/q23_x8_avx512.h"

namespace efim::cpu::detail {

namespace {

// x's operands for the zipped super-blocks 2P and 2P + 1 of the Q3_K / Q2_K GEMV (even int32
// lane: 2P, odd: 2P + 1; a missing 2P + 1 as 0), as 64-bit words that one broadcast spreads.
struct XPairs {
  int64_t np = 0;              // pairs per row of x: ns / 2 rounded up
  std::vector<uint64_t> q;     // [m][np][64]: quants 4G..4G+3 (G = element / 4)
  std::vector<uint64_t> off;   // [m][np][16]: Q3_K's folded offsets 4 bsum_j (Q3_K only)
  std::vector<uint64_t> bsum;  // [m][np][8]: Q2_K's sums of 16-element sub-blocks 2p, 2p + 1
                               //   as int16 pairs (Q2_K only)
  std::vector<uint64_t> dx;    // [m][np]: the scales of x as f32
};
inline uint64_t zip32(uint32_t even, uint32_t odd) { return even | static_cast<uint64_t>(odd) << 32; }

void make_x_pairs(const QuantizedRowsK& a, bool q3, XPairs& xp) {
  xp.np = (a.ns + 1) / 2;
  const auto n = static_cast<size_t>(a.m * xp.np);
  xp.q.resize(n * 64);
  xp.off.resize(q3 ? n * 16 : 0);
  xp.bsum.resize(q3 ? 0 : n * 8);
  xp.dx.resize(n);
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t P = 0; P < xp.np; ++P) {
      const size_t at = static_cast<size_t>(i * xp.np + P);
      const int64_t s0 = 2 * P, s1 = 2 * P + 1;
      auto word = [&](int64_t s, auto f) -> uint32_t { return s < a.ns ? f(s) : 0u; };
      for (int G = 0; G < 64; ++G) {
        auto quants = [&](int64_t s) { return static_cast<uint32_t>(load_i32(a.q.data() + i * a.k + s * kQKBlock + 4 * G)); };
        xp.q[at * 64 + G] = zip32(word(s0, quants), word(s1, quants));
      }
      const int16_t* bs = a.bsum.data() + i * a.ns * 16;
      for (int j = 0; q3 && j < 16; ++j) {
        auto off = [&](int64_t s) { return static_cast<uint32_t>(4 * bs[s * 16 + j]); };
        xp.off[at * 16 + j] = zip32(word(s0, off), word(s1, off));
      }
      for (int p = 0; !q3 && p < 8; ++p) {
        auto pair = [&](int64_t s) { return static_cast<uint32_t>(load_i32(bs + s * 16 + 2 * p)); };
        xp.bsum[at * 8 + p] = zip32(word(s0, pair), word(s1, pair));
      }
      auto dx = [&](int64_t s) {
        uint32_t u;
        std::memcpy(&u, &a.d[static_cast<size_t>(i * a.ns + s)], 4);
        return u;
      };
      xp.dx[at] = zip32(word(s0, dx), word(s1, dx));
    }
}

// The even (first super-block's) and odd int32 lanes of v, as 8 lanes.
inline __m256 even_lanes(__m512 v) {
  return _mm256_castsi256_ps(_mm512_cvtepi64_epi32(_mm512_castps_si512(v)));
}
inline __m256 odd_lanes(__m512 v) {
  return _mm256_castsi256_ps(_mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_castps_si512(v), 32)));
}

// y[r] = x row i . weight row 8 group + r for interleaved Q3_K or Q2_K, super-blocks two at a
// time (zipped). Per 16-element sub-block j (chunk c = j / 2, 4-byte groups 4 (j % 2)..+3):
//     Q3_K: S += sc_j (t_j - 4 bsum_j)          (the panel's folded offset, exact in int32)
//     Q2_K: S += sc_j t_j,  M += mn_j bsum_j    (madd on the mins' int16 pairs)
// then, super-block by super-block, y += d dx S (- dmin dx M): the panel GEMM's integer sums
// and f32 steps, so both give a row the same bits.
template <class B>
void x8_group_q23(const B* grp, const QuantizedRowsK& a, const XPairs& xp, int64_t i, float* y) {
  constexpr bool kQ3 = std::is_same_v<B, BlockQ3_Kx8>;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t P = 0; P < xp.np; ++P) {
    const int64_t s0 = 2 * P, s1 = std::min(s0 + 1, a.ns - 1);
    const BlockPair<B, true> b{grp[s0], grp[s1]};
    prefetch_ahead(grp + s0, 2 * sizeof(B));  // one stream: measured 29 -> 43 GB/s (Q3_K)
    const size_t at = static_cast<size_t>(i * xp.np + P);
    const uint64_t* xq = &xp.q[at * 64];
    using Sc = std::conditional_t<kQ3, Q3Scales, Q2Words>;
    Sc sc;
    if constexpr (kQ3)
      sc = q3_scales(b);
    else
      sc = q2_words(b);
    __m512i S = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {  // groups 4 half..+3: sub-blocks 2c + half
      __m512i t[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) t[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int g = 4 * half; g < 4 * half + 4; ++g)
        x16_chunks(b, g, [&](auto c, __m512i e) {
          t[c] = _mm512_dpbusd_epi32(t[c], e, _mm512_set1_epi64(static_cast<long long>(xq[8 * c + g])));
        });
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const int j = 2 * c + half;
        if constexpr (kQ3) {
          const __m512i dot = _mm512_sub_epi32(t[c], _mm512_set1_epi64(static_cast<long long>(xp.off[at * 16 + j])));
          S = _mm512_add_epi32(S, _mm512_mullo_epi32(dot, q3_scale(sc, j)));
        } else {
          S = _mm512_add_epi32(S, _mm512_mullo_epi32(t[c], q2_scale(sc, j)));
        }
      }
    }
    const __m512 dx = _mm512_castsi512_ps(_mm512_set1_epi64(static_cast<long long>(xp.dx[at])));
    const __m512 sf = _mm512_cvtepi32_ps(S), dd = _mm512_mul_ps(b.d(), dx);
    __m512 mf = _mm512_setzero_ps(), dm = _mm512_setzero_ps();
    if constexpr (!kQ3) {
      __m512i M = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) {
        const __m512i mins = p % 2 == 0 ? q2_min_pair<0>(sc, p / 2) : q2_min_pair<1>(sc, p / 2);
        M = _mm512_add_epi32(M, _mm512_madd_epi16(mins, _mm512_set1_epi64(static_cast<long long>(xp.bsum[at * 8 + p]))));
      }
      mf = _mm512_cvtepi32_ps(M);
      dm = _mm512_mul_ps(b.f16x16(b.lo.dmin, b.hi.dmin), dx);
    }
    acc = _mm256_fmadd_ps(even_lanes(sf), even_lanes(dd), acc);
    if constexpr (!kQ3) acc = _mm256_fnmadd_ps(even_lanes(mf), even_lanes(dm), acc);
    if (s1 != s0) {
      acc = _mm256_fmadd_ps(odd_lanes(sf), odd_lanes(dd), acc);
      if constexpr (!kQ3) acc = _mm256_fnmadd_ps(odd_lanes(mf), odd_lanes(dm), acc);
    }
  }
  _mm256_storeu_ps(y, acc);
}

}  // namespace

void EFIM_AVX512_ENTRY(x8_gemv_q23_avx512)(ThreadPool& pool, const QuantizedRowsK& a,
                                           const WeightMatrix& w, float* y, int64_t ldy) {
  const int64_t groups = w.rows / kInterleaveRows;
  static thread_local XPairs xp_buf;
  XPairs& xp = xp_buf;  // the caller's, read by every worker
  make_x_pairs(a, w.dtype == DType::Q3_K, xp);
  auto run = [&]<class B>(const B* blocks) {
    pool.parallel_for(groups, grain_for(groups, a.m * w.rows * a.k, pool.size()),
                      [&](int, int64_t g0, int64_t g1) {
                        for (int64_t g = g0; g < g1; ++g)
                          for (int64_t i = 0; i < a.m; ++i)
                            x8_group_q23(blocks + g * a.ns, a, xp, i, y + i * ldy + g * kInterleaveRows);
                      });
  };
  if (w.dtype == DType::Q3_K) return run(static_cast<const BlockQ3_Kx8*>(w.data));
  run(static_cast<const BlockQ2_Kx8*>(w.data));
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
