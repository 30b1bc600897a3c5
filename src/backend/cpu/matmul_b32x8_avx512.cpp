// AVX-512 VNNI kernels for Q8_0, Q4_0 and IQ4_NL weights interleaved 8 rows at a time
// (interleave.h) against Q8_0 activations: an 8-row GEMV below kPanelMinRows rows of x and a
// GEMM on panels of 16 rows above, both with the weights as dpbusd's unsigned operand and x's
// block sum times the offset subtracted, so a row's result does not depend on m.
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
#include "backend/cpu/block_unpack_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kPanelRows = 16;  // weight rows per GEMM panel: one int32 lane each
constexpr int kTileRows = 8;    // rows of x per pass over a panel

// y[i][r] = x row i0 + i . weight row 8 group + r for MX rows of x. Per block b of 32 weights:
//     t_r = sum_g dpbusd(q_b[g][r] + 128, x_b[4g..4g+3]) - 128 sum x_b
//     y_r += (d_r dx_b) t_r
// t is the exact int32 dot (|t| <= 32 * 255 * 127). The block's 8 registers are loaded once for
// the MX rows, and each row's arithmetic is the same whatever MX is: a row's result does not
// depend on how many rows share the step (a speculative verify step gives every row what a
// one-token step gives it).
template <int MX>
void x8_group_q8(const BlockQ8_0x8* grp, const QuantizedRows& a, int64_t i0, float* y,
                 int64_t ldy) {
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const BlockQ8_0x8& blk = grp[b];
    prefetch_ahead(&blk, sizeof(blk));
    __m256i w[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) w[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[g]));
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const size_t ib = static_cast<size_t>((i0 + i) * a.nb + b);
      const int8_t* xq = a.q.data() + (i0 + i) * a.k + b * kQBlock;
      __m256i t0 = _mm256_setzero_si256(), t1 = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 8; g += 2) {
        t0 = _mm256_dpbusd_epi32(t0, w[g], _mm256_set1_epi32(load_i32(xq + 4 * g)));
        t1 = _mm256_dpbusd_epi32(t1, w[g + 1], _mm256_set1_epi32(load_i32(xq + 4 * g + 4)));
      }
      const __m256i t = _mm256_sub_epi32(_mm256_add_epi32(t0, t1), _mm256_set1_epi32(128 * a.sum[ib]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ib])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

// The same for 8 Q4_0 or IQ4_NL rows (kNL): their nibbles as dpbusd's unsigned operand, Q4_0's
// as they are (value + 8), IQ4_NL's through the grid plus 128 (a byte shuffle):
//     t_r = sum_g dpbusd(u_b[g][r], x_b[..]) - o sum x_b,  o = 8 (Q4_0) or 128 (IQ4_NL)
template <int MX, bool kNL>
void x8_group_q4(const BlockQ4_0x8* grp, const QuantizedRows& a, int64_t i0, float* y,
                 int64_t ldy) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i grid = iq4_table_u8();
  constexpr int32_t kOffset = kNL ? 128 : 8;
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const BlockQ4_0x8& blk = grp[b];
    prefetch_ahead(&blk, sizeof(blk));
    __m256i lo[4], hi[4];  // elements 4g.. and 16 + 4g.. of the 8 rows
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[g]));
      lo[g] = _mm256_and_si256(v, m4);
      hi[g] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kNL) {
        lo[g] = _mm256_shuffle_epi8(grid, lo[g]);
        hi[g] = _mm256_shuffle_epi8(grid, hi[g]);
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const size_t ib = static_cast<size_t>((i0 + i) * a.nb + b);
      const int8_t* xq = a.q.data() + (i0 + i) * a.k + b * kQBlock;
      __m256i t0 = _mm256_setzero_si256(), t1 = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        t0 = _mm256_dpbusd_epi32(t0, lo[g], _mm256_set1_epi32(load_i32(xq + 4 * g)));
        t1 = _mm256_dpbusd_epi32(t1, hi[g], _mm256_set1_epi32(load_i32(xq + 16 + 4 * g)));
      }
      const __m256i t =
          _mm256_sub_epi32(_mm256_add_epi32(t0, t1), _mm256_set1_epi32(kOffset * a.sum[ib]));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ib])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + i * ldy, acc[i]);
}

// The group kernel of interleaved T for MX rows of x.
template <DType T, int MX>
void x8_group_b32(const uint8_t* grp, const QuantizedRows& a, int64_t i0, float* y, int64_t ldy) {
  if constexpr (T == DType::Q8_0)
    x8_group_q8<MX>(reinterpret_cast<const BlockQ8_0x8*>(grp), a, i0, y, ldy);
  else
    x8_group_q4<MX, T == DType::IQ4_NL>(reinterpret_cast<const BlockQ4_0x8*>(grp), a, i0, y, ldy);
}

// 32 bytes of group g in the low half, 32 of group g + 1 in the high half.
inline __m512i load_pair(const void* lo, const void* hi) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_loadu_si256(static_cast<const __m256i*>(lo))),
      _mm256_loadu_si256(static_cast<const __m256i*>(hi)), 1);
}

// The same for two groups g and g + 1 (16 weight rows) in 64-byte registers: lanes 0-7 group
// g's rows, lanes 8-15 group g + 1's, so each dpbusd and each broadcast of x serves 16 rows (half
// the instructions per row of x of the 8-row kernels above). Per lane the steps are those of
// x8_group_*: the same exact t, the same f32 updates in block order, hence the same bits.
template <DType T, int MX>
void x16_pair_b32(const uint8_t* grp0, const uint8_t* grp1, const QuantizedRows& a, int64_t i0,
                  float* y, int64_t ldy) {
  constexpr bool kQ8 = T == DType::Q8_0;
  constexpr int kSteps = 8;  // dpbusd steps per block: 4 bytes of each row per step
  constexpr int32_t kOffset = T == DType::Q4_0 ? 8 : 128;
  using X8 = std::conditional_t<kQ8, BlockQ8_0x8, BlockQ4_0x8>;
  const auto* g0 = reinterpret_cast<const X8*>(grp0);
  const auto* g1 = reinterpret_cast<const X8*>(grp1);
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i grid = _mm512_broadcast_i32x4(_mm256_castsi256_si128(iq4_table_u8()));
  __m512 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    __m512i w[kSteps];  // step s: elements 4s..4s+3 of the 16 rows (Q4: s < 4 low nibbles)
    if constexpr (kQ8) {
#pragma GCC unroll 8
      for (int s = 0; s < kSteps; ++s) w[s] = load_pair(g0[b].qs[s], g1[b].qs[s]);
    } else {
#pragma GCC unroll 4
      for (int s = 0; s < 4; ++s) {
        const __m512i v = load_pair(g0[b].qs[s], g1[b].qs[s]);
        w[s] = _mm512_and_si512(v, m4);
        w[4 + s] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (T == DType::IQ4_NL) {
          w[s] = _mm512_shuffle_epi8(grid, w[s]);
          w[4 + s] = _mm512_shuffle_epi8(grid, w[4 + s]);
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g0[b].d))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(g1[b].d)), 1));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const size_t ib = static_cast<size_t>((i0 + i) * a.nb + b);
      const int8_t* xq = a.q.data() + (i0 + i) * a.k + b * kQBlock;
      // x bytes of step s: 4s.. (Q8_0); Q4: 4s.. for the low nibbles, 16 + 4(s - 4).. the high.
      auto xs = [&](int s) { return load_i32(xq + (kQ8 || s < 4 ? 4 * s : 16 + 4 * (s - 4))); };
      __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
      if constexpr (kQ8) {
#pragma GCC unroll 4
        for (int s = 0; s < kSteps; s += 2) {
          t0 = _mm512_dpbusd_epi32(t0, w[s], _mm512_set1_epi32(xs(s)));
          t1 = _mm512_dpbusd_epi32(t1, w[s + 1], _mm512_set1_epi32(xs(s + 1)));
        }
      } else {  // the 8-row kernel's order: t0 the low nibbles, t1 the high
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) {
          t0 = _mm512_dpbusd_epi32(t0, w[s], _mm512_set1_epi32(xs(s)));
          t1 = _mm512_dpbusd_epi32(t1, w[4 + s], _mm512_set1_epi32(xs(4 + s)));
        }
      }
      const __m512i t =
          _mm512_sub_epi32(_mm512_add_epi32(t0, t1), _mm512_set1_epi32(kOffset * a.sum[ib]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ib]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm512_storeu_ps(y + i * ldy, acc[i]);
}

// From this many rows of x the GEMV takes groups in pairs (x16_pair_b32): a verify step of
// speculative decoding is then bound by the dpbusd and broadcast work per row, which the pairs
// halve. Below it the one-group kernels stay: decode's 1-4 rows are bound by reading the
// weights, and one sequential stream per thread reads them faster than two (100M model, Q8_0,
// one row: 2.0 ms per step with one group at a time, 2.4-2.9 ms with pairs).
constexpr int64_t kPairMinRows = 5;

// GEMV on interleaved Q8_0 / Q4_0 / IQ4_NL: threads take ranges of groups, or of group pairs
// (16 rows; a last odd group alone) from kPairMinRows rows of x; rows of x 4 at a time per
// group or pair, then 1-3.
template <DType T>
void x8_gemv_b32(ThreadPool& pool, const QuantizedRows& a, const WeightMatrix& w, float* y,
                 int64_t ldy) {
  const int64_t groups = w.rows / kInterleaveRows;
  const int64_t span = a.m < kPairMinRows ? 1 : 2;  // groups per unit of work
  const int64_t units = (groups + span - 1) / span;
  const size_t group_bytes =
      static_cast<size_t>(kInterleaveRows) * dtype_row_bytes(T, static_cast<uint64_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool.parallel_for(units, grain_for(units, a.m * w.rows * a.k, pool.size()),
                    [&](int, int64_t u0, int64_t u1) {
                      for (int64_t g = u0 * span; g < std::min(u1 * span, groups); g += span) {
                        const uint8_t* grp = base + static_cast<size_t>(g) * group_bytes;
                        float* yg = y + g * kInterleaveRows;
                        const bool pair = span == 2 && g + 1 < groups;
                        for_row_tiles<4>(0, a.m, [&]<int MX>(int64_t i) {
                          if (pair) {
                            x16_pair_b32<T, MX>(grp, grp + group_bytes, a, i, yg + i * ldy, ldy);
                          } else {
                            x8_group_b32<T, MX>(grp, a, i, yg + i * ldy, ldy);
                          }
                        });
                      }
                    });
}

// GEMM (m >= kPanelMinRows) on interleaved Q8_0 / Q4_0 / IQ4_NL: panels of two groups (16
// rows), unpacked once per thread to the unsigned operand, 4 bytes of each of the 16 rows per
// 64-byte register (step s: elements 4s..4s+3), so one dpbusd serves 16 rows and a row of x:
//     t_r = sum_s dpbusd(u[s][r], x_b[4s..4s+3]) - o sum x_b;  y_r += (d_r dx_b) t_r
// The same exact t and the same f32 steps as the GEMV: a row's result does not depend on m.
constexpr int kB32Steps = 8;
struct B32Panel {
  uint8_t q[kB32Steps][kPanelRows][4];  // unsigned operand: q + 128, nibble, or grid + 128
  float d[kPanelRows];                  // scales (0 for the missing rows of a last half panel)
};

template <DType T>
void pack_b32_panel(const WeightMatrix& w, int64_t g0, int ngroups, int64_t nb, B32Panel* panel) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i grid = iq4_table_u8();
  using X8 = std::conditional_t<T == DType::Q8_0, BlockQ8_0x8, BlockQ4_0x8>;
  const auto* groups = static_cast<const X8*>(w.data) + g0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    B32Panel& p = panel[b];
    for (int h = 0; h < 2; ++h) {
      const int r0 = kInterleaveRows * h;
      if (h >= ngroups) {
        for (int st = 0; st < kB32Steps; ++st) std::memset(p.q[st][r0], 0, 32);
        for (int r = 0; r < kInterleaveRows; ++r) p.d[r0 + r] = 0.0f;
        continue;
      }
      const X8& blk = groups[h * nb + b];
      for (int st = 0; st < kB32Steps; ++st) {
        __m256i v;
        if constexpr (T == DType::Q8_0) {
          v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[st]));
        } else {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs[st % 4]));
          v = _mm256_and_si256(st < 4 ? q : _mm256_srli_epi16(q, 4), m4);
          if constexpr (T == DType::IQ4_NL) v = _mm256_shuffle_epi8(grid, v);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.q[st][r0]), v);
      }
      _mm256_storeu_ps(p.d + r0, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.d))));
    }
  }
}

// Rows [i0, i0 + MR) of x against one panel; nr = 16 or 8 valid rows.
template <DType T, int MR>
void b32_tile(const B32Panel* panel, const QuantizedRows& a, int64_t i0, float* y, int64_t ldy,
              int nr) {
  constexpr int32_t kOffset = T == DType::Q4_0 ? 8 : 128;
  __m512 acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const B32Panel& p = panel[b];
    __m512i dot[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int st = 0; st < kB32Steps; ++st) {
      const __m512i wv = _mm512_loadu_si512(p.q[st]);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i)
        dot[i] = _mm512_dpbusd_epi32(
            dot[i], wv, _mm512_set1_epi32(load_i32(a.q.data() + (i0 + i) * a.k + b * kQBlock + 4 * st)));
    }
    const __m512 dw = _mm512_loadu_ps(p.d);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const size_t ib = static_cast<size_t>((i0 + i) * a.nb + b);
      const __m512i t = _mm512_sub_epi32(dot[i], _mm512_set1_epi32(kOffset * a.sum[ib]));
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ib]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), scale, acc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    if (nr == kPanelRows)
      _mm512_storeu_ps(y + (i0 + i) * ldy, acc[i]);
    else
      _mm256_storeu_ps(y + (i0 + i) * ldy, _mm512_castps512_ps256(acc[i]));
  }
}

template <DType T>
void b32_gemm(ThreadPool& pool, const QuantizedRows& a, const WeightMatrix& w, float* y,
              int64_t ldy) {
  const int64_t m = a.m, groups = w.rows / kInterleaveRows;
  const GemmSplit split = split_gemm(m, w.rows, kTileRows, kPanelRows, pool.size());
  const int64_t m_blocks = split.m_blocks, m_block = split.m_block, items = split.items();
  pool.parallel_for(items, grain_for(items, m * w.rows * a.k, pool.size()),
                    [&](int, int64_t it0, int64_t it1) {
                      static thread_local std::vector<B32Panel> panel;  // [nb]
                      panel.resize(static_cast<size_t>(a.nb));
                      int64_t packed = -1;
                      for (int64_t it = it0; it < it1; ++it) {
                        const int64_t p = it / m_blocks, mb = it % m_blocks;
                        const int64_t g0 = 2 * p;
                        const int ngroups = static_cast<int>(std::min<int64_t>(2, groups - g0));
                        if (packed != p) {
                          pack_b32_panel<T>(w, g0, ngroups, a.nb, panel.data());
                          packed = p;
                        }
                        const int64_t i0 = mb * m_block;
                        for_row_tiles<kTileRows>(i0, i0 + std::min(m_block, m - i0), [&]<int MR>(int64_t i) {
                          b32_tile<T, MR>(panel.data(), a, i, y + g0 * kInterleaveRows, ldy,
                                          ngroups * kInterleaveRows);
                        });
                      }
                    });
}

}  // namespace

void EFIM_AVX512_ENTRY(matmul_b32x8_avx512)(ThreadPool& pool, const float* x, int64_t m,
                                            const WeightMatrix& w, float* y, int64_t ldy) {
  const QuantizedRows& q8 =
      quantize_activations<QuantizedRows, quantize_row_q8_ggml_avx2>(pool, x, m, w.cols);
  auto run = [&]<DType T>() {
    if (m < kPanelMinRows) return x8_gemv_b32<T>(pool, q8, w, y, ldy);
    b32_gemm<T>(pool, q8, w, y, ldy);
  };
  if (w.dtype == DType::Q8_0) return run.template operator()<DType::Q8_0>();
  if (w.dtype == DType::Q4_0) return run.template operator()<DType::Q4_0>();
  return run.template operator()<DType::IQ4_NL>();
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
