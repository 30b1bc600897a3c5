// AVX-512BW kernels for Q8_0 and Q4_0 weights: the integer scheme of matmul_quant_avx2.cpp
// (activations quantized once per call to int8 blocks of 32, maddubs + madd block dots, one f32
// FMA per block for the scales d_w * d_x) on 64-byte registers.
//
// GEMM (m >= kGemmMinRows): panels of 16 weight rows interleaved so that, for every block b and
// step s in 0..7, one 64-byte vector holds quants 4s..4s+3 of block b of each of the 16 rows:
//     panel[b][s] = | row0 q[4s..4s+3] | row1 q[4s..4s+3] | ... | row15 q[4s..4s+3] |
// (Q4_0 nibbles unpacked to bytes 0..15). Broadcasting the matching 4 quants of one x row to the
// 16 lanes, lane r of maddubs + madd is the partial dot of weight row r: after 8 steps one
// register holds 16 block dots, scaled by one vector FMA with the 16 row scales, stored as 16
// contiguous outputs. 4 x rows per panel load. Q4_0 (quants 0..15) needs no sign trick and
// subtracts its -8 offset as 8 * sum(x quants); Q8_0 multiplies |w| by x carrying w's sign.
//
// GEMV (m < kGemmMinRows: decode and verify steps of up to 9 tokens): W streamed once in its
// file layout, two blocks per register (one per 256-bit half, scales per half); Q4_0 nibbles
// become signed (q - 8) so both dtypes take the Q8_0 path. One row of x: weight rows one after
// another, 4 blocks per step; more rows: groups of 4 weight rows (in L1) against 2 rows of x at
// a time, each row of x summed in the one-row order.
//
// This file is compiled twice: natively for AVX-512 CPUs, and for tests on SIMDe's emulation of
// the intrinsics (EFIM_AVX512_EMULATED, see avx512_emulation.h).

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (`__m512 __Y = __Y;`), which
// -Wuninitialized reports once inlined into this file (GCC bug 105593, fixed in GCC 13). Set
// before every include: the warnings are located in immintrin.h's lines.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/drivers.h"
#include "backend/cpu/kernels.h"
#include "tensor/quant.h"

#ifdef EFIM_AVX512_EMULATED
#include "backend/cpu/avx512_emulation.h"
#else
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#endif
#include "backend/cpu/avx512_helpers.h"
#include "backend/cpu/quant_blocks_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kNR = 16;  // weight rows per interleaved panel
constexpr int kMR = 4;   // x rows per micro-tile
// 10: a token and a draft of up to 8 (engine.h's max_draft) stay on the GEMV, which gives every
// row of x the one-row bits; the packing GEMM (faster from 3 rows) sums in another order.
constexpr int64_t kGemmMinRows = 10;
constexpr int kPanelBlockBytes = kNR * kQBlock;  // 512 bytes per block of a panel

// x with the sign of w: x where w > 0, -x where w < 0 (where w == 0 the product is 0 anyway).
inline __m512i sign_of(__m512i x, __m512i w) {
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}

// ---- GEMM ----

// Interleaved panel of weight rows [n0, n0 + nr): quants [nb][8 steps][64 bytes] and scales
// [nb][16] f32; missing rows (nr < 16) are zero.
void pack_panel(const WeightMatrix& w, int64_t n0, int nr, uint8_t* quants, float* scales) {
  const int64_t nb = w.cols / kQBlock;
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data) + n0 * stride;
  const bool q4 = w.dtype == DType::Q4_0;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[kNR];  // loops over v[] unrolled: it stays in registers
#pragma GCC unroll 16
    for (int r = 0; r < kNR; ++r) {
      float& d = scales[b * kNR + r];
      if (r >= nr) {
        v[r] = _mm256_setzero_si256();
        d = 0.0f;
      } else {
        v[r] = q4 ? load_weight_block<DType::Q4_0>(base + r * stride, b, d)
                  : load_weight_block<DType::Q8_0>(base + r * stride, b, d);
      }
    }
    transpose8_epi32(v);      // v[s]: 4 quants of step s for rows 0..7
    transpose8_epi32(v + 8);  // v[8 + s]: rows 8..15
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s)
      _mm512_storeu_si512(quants + b * kPanelBlockBytes + 64 * s, join256(v[s], v[8 + s]));
  }
}

template <int MR>
void store_tile(const QuantTile& t, const __m512 acc[MR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    if (t.ncols == kNR) {
      _mm512_storeu_ps(t.y + i * t.ldy, acc[i]);
    } else {
      alignas(64) float tmp[kNR];
      _mm512_store_ps(tmp, acc[i]);
      std::memcpy(t.y + i * t.ldy, tmp, static_cast<size_t>(t.ncols) * sizeof(float));
    }
  }
}

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Q4_0 and Q8_0 tiles differ only in the step (see the file comment): int16 pair sums for Q4_0
// (at most 8 * 2 * 15 * 127 = 30480 after 8 steps), int32 per step for Q8_0.
template <int MR, bool kQ4>
void tile(const QuantTile& t) {
  const QuantizedRows& a = *t.a;
  const __m512i ones = _mm512_set1_epi16(1);
  __m512 acc[MR];  // every loop over MR is unrolled: arrays stay in registers
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* wp = t.quants + b * kPanelBlockBytes;
    __m512i dot[MR];  // Q4_0: int16 pair sums; Q8_0: int32
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int s = 0; s < 8; ++s) {
      const __m512i wv = _mm512_loadu_si512(wp + 64 * s);
      const __m512i aw = kQ4 ? wv : _mm512_abs_epi8(wv);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m512i xv = bcast4(a.q.data() + (t.i0 + i) * a.k + b * kQBlock + 4 * s);
        if constexpr (kQ4)
          dot[i] = _mm512_add_epi16(dot[i], _mm512_maddubs_epi16(wv, xv));
        else
          dot[i] = _mm512_add_epi32(dot[i],
                                    _mm512_madd_epi16(_mm512_maddubs_epi16(aw, sign_of(xv, wv)), ones));
      }
    }
    const __m512 dw = _mm512_loadu_ps(t.scales + b * kNR);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const size_t ib = static_cast<size_t>((t.i0 + i) * a.nb + b);
      __m512i d = dot[i];
      if constexpr (kQ4)  // pair sums to int32, minus the nibble offset 8 * sum(x quants)
        d = _mm512_sub_epi32(_mm512_madd_epi16(d, ones), _mm512_set1_epi32(8 * a.sum[ib]));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(dw, _mm512_set1_ps(a.d[ib])),
                               acc[i]);
    }
  }
  store_tile<MR>(t, acc);
}

template <int MR>
void tile_any(DType dt, const QuantTile& t) {
  if (dt == DType::Q4_0)
    tile<MR, true>(t);
  else
    tile<MR, false>(t);
}

// The GEMM pieces for quant_gemm (drivers.h).
struct Gemm {
  static constexpr int kMR = detail::kMR, kNR = detail::kNR;
  static constexpr int kPanelBlockBytes = detail::kPanelBlockBytes;
  static void pack_panel(const WeightMatrix& w, int64_t n0, int nr, uint8_t* quants,
                         float* scales) {
    detail::pack_panel(w, n0, nr, quants, scales);
  }
  template <int MR>
  static void tile(DType dt, const QuantTile& t) {
    tile_any<MR>(dt, t);
  }
};

// ---- GEMV ----

// Blocks b and b + 1 of a weight row (kTwo), or block b alone (upper half zero), as signed int8
// quants (Q4_0: nibble - 8) in the two 256-bit halves; dw gets their scales in lanes 0-7 / 8-15.
template <DType T, bool kTwo>
inline __m512i weight_blocks(const uint8_t* row, int64_t b, __m512& dw) {
  __m256i q[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  float d[2] = {0.0f, 0.0f};
#pragma GCC unroll 2
  for (int h = 0; h < (kTwo ? 2 : 1); ++h) {
    q[h] = load_weight_block<T>(row, b + h, d[h]);
    if constexpr (T == DType::Q4_0) q[h] = _mm256_sub_epi8(q[h], _mm256_set1_epi8(8));
  }
  dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
  return join256(q[0], q[1]);
}

// The same blocks of x row i: quants, and in dx their scales per half.
template <bool kTwo>
inline __m512i x_blocks(const QuantizedRows& a, int64_t i, int64_t b, __m512& dx) {
  const int8_t* q = a.q.data() + i * a.k + b * kQBlock;
  const float* d = a.d.data() + i * a.nb + b;
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (kTwo) {
    dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
    return join256(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + kQBlock)));
  } else {
    dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d[0]), _mm512_setzero_ps());
    return join256(lo, _mm256_setzero_si256());
  }
}

// acc + (block dots of wq and xv, per 256-bit half) * scales, in 16 f32 lanes.
inline __m512 blocks_fma(__m512i wq, __m512i xv, __m512 scales, __m512 acc) {
  const __m512i dot = _mm512_madd_epi16(
      _mm512_maddubs_epi16(_mm512_abs_epi8(wq), sign_of(xv, wq)), _mm512_set1_epi16(1));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scales, acc);
}

// acc + blocks b (and b + 1) of `row` . the same blocks of x row 0.
template <DType T, bool kTwo>
inline __m512 row_blocks_fma(const QuantizedRows& a, const uint8_t* row, int64_t b, __m512 acc) {
  __m512 dw, dx;
  const __m512i wq = weight_blocks<T, kTwo>(row, b, dw);
  const __m512i xv = x_blocks<kTwo>(a, 0, b, dx);
  return blocks_fma(wq, xv, _mm512_mul_ps(dw, dx), acc);
}

// Decode (one row of x): one weight row at a time (one sequential stream per thread), 4 blocks
// per step into two accumulators, two prefetches per step `prefetch` bytes ahead (136 bytes of
// Q8_0, 72 of Q4_0).
template <DType T>
float dot_row(const QuantizedRows& a, const uint8_t* row, int64_t prefetch) {
  constexpr int64_t kBlockBytes = T == DType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t b = 0;
  for (; b + 4 <= a.nb; b += 4) {
    if (prefetch) {
      const char* line = reinterpret_cast<const char*>(row) + prefetch + b * kBlockBytes;
      _mm_prefetch(line, _MM_HINT_T0);
      _mm_prefetch(line + 64, _MM_HINT_T0);
    }
    acc0 = row_blocks_fma<T, true>(a, row, b, acc0);
    acc1 = row_blocks_fma<T, true>(a, row, b + 2, acc1);
  }
  if (b + 2 <= a.nb) acc0 = row_blocks_fma<T, true>(a, row, b, acc0), b += 2;
  if (b < a.nb) acc1 = row_blocks_fma<T, false>(a, row, b, acc1);
  return hsum(_mm512_add_ps(acc0, acc1));
}

// acc[r][i] + blocks b (and b + 1) of weight row r . the same blocks of x row i0 + i.
template <DType T, int MX, bool kTwo>
inline void rows4_blocks(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4],
                         int64_t b, int64_t prefetch, __m512 acc[4][MX]) {
  __m512i xv[MX];
  __m512 dx[MX];
#pragma GCC unroll 2
  for (int i = 0; i < MX; ++i) xv[i] = x_blocks<kTwo>(a, i0 + i, b, dx[i]);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {
    // Short rows defeat the hardware prefetcher: fetch the rows `prefetch` bytes ahead.
    _mm_prefetch(reinterpret_cast<const char*>(rows[r]) + prefetch +
                     b * int64_t{T == DType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0)},
                 _MM_HINT_T0);
    __m512 dw;
    const __m512i wq = weight_blocks<T, kTwo>(rows[r], b, dw);
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i)
      acc[r][i] = blocks_fma(wq, xv[i], _mm512_mul_ps(dw, dx[i]), acc[r][i]);
  }
}

// out[i][r] = x row i0 + i . weight row r for MX (1 or 2) x rows and 4 weight rows, each in
// dot_row's order (blocks b, b + 1 into acc0 and b + 2, b + 3 into acc1, the same tail), so a
// row of x gets the bits it gets alone (batch invariance below kGemmMinRows).
template <DType T, int MX>
void gemv_4rows(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4], int64_t prefetch,
                float out[MX][4]) {
  __m512 acc0[4][MX], acc1[4][MX];  // all loops over r and i unrolled: acc stays in registers
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i) acc0[r][i] = acc1[r][i] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 4 <= a.nb; b += 4) {
    rows4_blocks<T, MX, true>(a, i0, rows, b, prefetch, acc0);
    rows4_blocks<T, MX, true>(a, i0, rows, b + 2, prefetch, acc1);
  }
  if (b + 2 <= a.nb) rows4_blocks<T, MX, true>(a, i0, rows, b, prefetch, acc0), b += 2;
  if (b < a.nb) rows4_blocks<T, MX, false>(a, i0, rows, b, prefetch, acc1);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i) out[i][r] = hsum(_mm512_add_ps(acc0[r][i], acc1[r][i]));
}

// The GEMV pieces for quant_gemv (drivers.h).
struct GemvGroup {
  template <DType T>
  static float dot_row(const QuantizedRows& a, const uint8_t* row, int64_t prefetch) {
    return detail::dot_row<T>(a, row, prefetch);
  }
  template <DType T, int MX>
  static void rows4(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4],
                    int64_t prefetch, float out[MX][4]) {
    gemv_4rows<T, MX>(a, i0, rows, prefetch, out);
  }
};

}  // namespace

void EFIM_AVX512_ENTRY(matmul_quant_avx512)(ThreadPool& pool, const float* x, int64_t m,
                                            const WeightMatrix& w, float* y) {
  quant_matmul<Gemm, GemvGroup>(pool, x, m, w, y, kGemmMinRows);
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
