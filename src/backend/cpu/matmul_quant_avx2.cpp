// AVX2 kernels for Q8_0 and Q4_0 weights: integer dot products against activations quantized
// once per call to int8 blocks of 32 (QuantizedRows), one f32 FMA per block to apply the
// scales d_w * d_x.
//
// GEMM (m >= kGemmMinRows): a panel of 8 weight rows is repacked into an "interleaved" form
// where, for every block b and step s in 0..7, one 32-byte vector holds 4 consecutive quants
// (k = 32b + 4s .. 32b + 4s + 3) of each of the 8 rows:
//     panel[b][s] = | row0 q[4s..4s+3] | row1 q[4s..4s+3] | ... | row7 q[4s..4s+3] |
// (Q4_0 nibbles are unpacked to bytes 0..15). Broadcasting the matching 4 quants of one x row
// to all 8 lanes, _mm256_maddubs_epi16 + _mm256_madd_epi16 give in lane r the partial dot of
// weight row r, so after a block each x row holds 8 block dots in one register and the scales
// apply as one vector FMA with the 8 row scales; y gets 8 contiguous outputs with no
// horizontal sums. The micro-kernel handles 4 x rows per panel load (weights reused 4 times).
//   Q4_0: quants are unsigned 0..15, so maddubs(w, x) needs no sign trick; its pair sums are
//         at most 2*15*127 = 3810, so 8 steps add up in int16 (<= 30480) before one madd; the
//         -8 offset is subtracted once per block as 8 * sum(x quants).
//   Q8_0: maddubs needs an unsigned operand: |w| times x with w's sign moved onto x
//         (_mm256_sign_epi8), pair sums <= 2*128*127 = 32512 fit int16, widened every step.
//
// GEMV (m < kGemmMinRows, decode): W is streamed once in its file layout; a block dot is
// maddubs + madd scaled by d_w * d_x. One row of x (single-sequence decode): weight rows one
// after another, so each thread reads one sequential stream (with it and huge-page weights,
// efim-base-py Q8_0 decode went from 1.11-1.36x to 1.64-1.89x llama.cpp in same-run comparisons on
// a 2-core Zen VM). 2-9 rows of x: 4 weight rows at a time sharing each loaded x block, each
// row of x summed in dot_row's order (batch-invariant: a row's result does not depend on m).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/drivers.h"
#include "backend/cpu/kernels.h"
#include "tensor/quant.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "backend/cpu/avx2_helpers.h"
#include "backend/cpu/quant_blocks_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kNR = 8;  // weight rows per interleaved panel
constexpr int kMR = 4;  // x rows per micro-tile
// 10: a speculative verify step (a token and a draft of up to 8) stays on the batch-invariant
// GEMV.
constexpr int64_t kGemmMinRows = 10;
constexpr int kPanelBlockBytes = kNR * kQBlock;  // 256 bytes per block of a panel

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// ---- GEMM ----

// Interleaved panel of weight rows [n0, n0 + nr): quants [nb][8 steps][32 bytes] and scales
// [nb][8] f32; missing rows (nr < 8) are zero.
void pack_panel(const WeightMatrix& w, int64_t n0, int nr, uint8_t* quants, float* scales) {
  const int64_t nb = w.cols / kQBlock;
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const auto* base = static_cast<const uint8_t*>(w.data) + n0 * stride;
  const bool q4 = w.dtype == DType::Q4_0;
  for (int64_t b = 0; b < nb; ++b) {
    __m256i v[8];  // loops over v[] unrolled: it stays in registers
#pragma GCC unroll 8
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
    transpose8_epi32(v);  // v[s] = 4 quants of step s for rows 0..7
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(quants + b * kPanelBlockBytes + 32 * s), v[s]);
  }
}


template <int MR>
void store_tile(const QuantTile& t, const __m256 acc[MR]) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    if (t.ncols == kNR) {
      _mm256_storeu_ps(t.y + i * t.ldy, acc[i]);
    } else {
      alignas(32) float tmp[kNR];
      _mm256_store_ps(tmp, acc[i]);
      std::memcpy(t.y + i * t.ldy, tmp, static_cast<size_t>(t.ncols) * sizeof(float));
    }
  }
}

template <int MR>
void tile_q4(const QuantTile& t) {
  const QuantizedRows& a = *t.a;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];  // every loop over MR is unrolled: arrays stay in registers
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* wp = t.quants + b * kPanelBlockBytes;
    __m256i dot16[MR];  // int16 pair sums, <= 8 * 3810 (see the file comment)
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) dot16[i] = _mm256_setzero_si256();
// Unrolled by 2 only: GCC reassociates fully unrolled integer sums into a tree whose
// partial results spill to the stack (measured 1.3-1.5x slower).
#pragma GCC unroll 2
    for (int s = 0; s < 8; ++s) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * s));
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i xv = bcast4(a.q.data() + (t.i0 + i) * a.k + b * kQBlock + 4 * s);
        dot16[i] = _mm256_add_epi16(dot16[i], _mm256_maddubs_epi16(wv, xv));
      }
    }
    const __m256 dw = _mm256_loadu_ps(t.scales + b * kNR);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const size_t ib = static_cast<size_t>((t.i0 + i) * a.nb + b);
      __m256i dot = _mm256_madd_epi16(dot16[i], ones);
      dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(8 * a.sum[ib]));  // nibble offset -8
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_set1_ps(a.d[ib])),
                               acc[i]);
    }
  }
  store_tile<MR>(t, acc);
}

template <int MR>
void tile_q8(const QuantTile& t) {
  const QuantizedRows& a = *t.a;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];  // every loop over MR is unrolled: arrays stay in registers
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* wp = t.quants + b * kPanelBlockBytes;
    __m256i dot[MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) dot[i] = _mm256_setzero_si256();
// Unrolled by 2 only: GCC reassociates fully unrolled integer sums into a tree whose
// partial results spill to the stack (measured 1.3-1.5x slower).
#pragma GCC unroll 2
    for (int s = 0; s < 8; ++s) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 32 * s));
      const __m256i aw = _mm256_abs_epi8(wv);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256i xv = bcast4(a.q.data() + (t.i0 + i) * a.k + b * kQBlock + 4 * s);
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
        dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(p, ones));
      }
    }
    const __m256 dw = _mm256_loadu_ps(t.scales + b * kNR);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const float dx = a.d[static_cast<size_t>((t.i0 + i) * a.nb + b)];
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(dw, _mm256_set1_ps(dx)),
                               acc[i]);
    }
  }
  store_tile<MR>(t, acc);
}

template <int MR>
void tile(DType dt, const QuantTile& t) {
  if (dt == DType::Q4_0)
    tile_q4<MR>(t);
  else
    tile_q8<MR>(t);
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
    detail::tile<MR>(dt, t);
  }
};

// ---- GEMV ----

// Integer dot of one weight block with one block of x quants, in 8 int32 lanes whose sum is
// the dot. x_sum: the sum of the x block's quants (Q4_0's -8 offset: one lane carries
// 8 * x_sum, the lane sum is what counts).
template <DType T>
inline __m256i block_idot(__m256i wq, __m256i xv, int32_t x_sum) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T == DType::Q4_0) {
    return _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wq, xv), ones),
                            _mm256_zextsi128_si256(_mm_cvtsi32_si128(8 * x_sum)));
  } else {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wq), _mm256_sign_epi8(xv, wq)),
                             ones);
  }
}

// out[i][r0 + r] = x row i . weight row r0 + r for MX x rows and NW weight rows, MX * NW = 4,
// in dot_row's order: even blocks into one accumulator, odd blocks into another (the last
// block of an odd count into the even one), their sum, then one horizontal sum. Every row of x
// so gets the value it gets alone: a verify step's rows equal those of one-token decode steps.
template <DType T, int MX, int NW>
void gemv_rows(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4], int r0,
               int64_t prefetch, float out[2][4]) {
  __m256 acc[NW][MX][2];  // all loops unrolled: 8 accumulators stay in registers
#pragma GCC unroll 4
  for (int r = 0; r < NW; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i) acc[r][i][0] = acc[r][i][1] = _mm256_setzero_ps();
  constexpr int64_t kBlockBytes = T == DType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  auto step = [&](int64_t b, int parity) {
    __m256i xv[MX];
    float dx[MX];
    int32_t xsum[MX];
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i) {
      const size_t ib = static_cast<size_t>((i0 + i) * a.nb + b);
      xv[i] = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(a.q.data() + (i0 + i) * a.k + b * kQBlock));
      dx[i] = a.d[ib];
      xsum[i] = a.sum[ib];
    }
#pragma GCC unroll 4
    for (int r = 0; r < NW; ++r) {
      float dw;
      const __m256i wq = load_weight_block<T>(rows[r0 + r], b, dw);
#pragma GCC unroll 2
      for (int i = 0; i < MX; ++i)
        acc[r][i][parity] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_idot<T>(wq, xv[i], xsum[i])),
                            _mm256_set1_ps(dw * dx[i]), acc[r][i][parity]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= a.nb; b += 2) {
    // Short rows defeat the hardware prefetcher: fetch the rows `prefetch` bytes ahead.
#pragma GCC unroll 4
    for (int r = 0; r < NW; ++r)
      _mm_prefetch(reinterpret_cast<const char*>(rows[r0 + r]) + prefetch + b * kBlockBytes,
                   _MM_HINT_T0);
    step(b, 0);
    step(b + 1, 1);
  }
  if (b < a.nb) step(b, 0);
#pragma GCC unroll 4
  for (int r = 0; r < NW; ++r)
#pragma GCC unroll 2
    for (int i = 0; i < MX; ++i)
      out[i][r0 + r] = hsum(_mm256_add_ps(acc[r][i][0], acc[r][i][1]));
}

// out[i][r] = x row i . weight row r for MX (1 or 2) x rows and 4 weight rows (two passes of
// two weight rows for two x rows: the accumulators of both parities fit the 16 registers).
template <DType T, int MX>
void gemv_4rows(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4], int64_t prefetch,
                float out[2][4]) {
  if constexpr (MX == 1) {
    gemv_rows<T, 1, 4>(a, i0, rows, 0, prefetch, out);
  } else {
    gemv_rows<T, 2, 2>(a, i0, rows, 0, prefetch, out);
    gemv_rows<T, 2, 2>(a, i0, rows, 2, prefetch, out);
  }
}

// acc + (weight block b of `row` . block b of x row 0) * d_w * d_x, in 8 f32 lanes.
template <DType T>
inline __m256 block_fma(const QuantizedRows& a, const uint8_t* row, int64_t b, __m256 acc) {
  float dw;
  const __m256i wq = load_weight_block<T>(row, b, dw);
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + b * kQBlock));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_idot<T>(wq, xv, a.sum[b])),
                         _mm256_set1_ps(dw * a.d[b]), acc);
}

// Decode (one row of x): one weight row at a time, so a thread's reads form one sequential
// stream (as in the float GEMV), two blocks per step into two accumulators, one prefetch per
// two blocks (68 bytes of Q8_0, 36 of Q4_0) `prefetch` bytes ahead.
template <DType T>
float dot_row(const QuantizedRows& a, const uint8_t* row, int64_t prefetch) {
  constexpr int64_t kBlockBytes = T == DType::Q4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
  int64_t b = 0;
  for (; b + 2 <= a.nb; b += 2) {
    if (prefetch)
      _mm_prefetch(reinterpret_cast<const char*>(row) + prefetch + b * kBlockBytes, _MM_HINT_T0);
    acc0 = block_fma<T>(a, row, b, acc0);
    acc1 = block_fma<T>(a, row, b + 1, acc1);
  }
  if (b < a.nb) acc0 = block_fma<T>(a, row, b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

// The GEMV pieces for quant_gemv (drivers.h).
struct GemvGroup {
  template <DType T>
  static float dot_row(const QuantizedRows& a, const uint8_t* row, int64_t prefetch) {
    return detail::dot_row<T>(a, row, prefetch);
  }
  template <DType T, int MX>
  static void rows4(const QuantizedRows& a, int64_t i0, const uint8_t* const rows[4],
                    int64_t prefetch, float out[2][4]) {
    gemv_4rows<T, MX>(a, i0, rows, prefetch, out);
  }
};

}  // namespace

void matmul_quant_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                       float* y) {
  quant_matmul<Gemm, GemvGroup>(pool, x, m, w, y, kGemmMinRows);
}

}  // namespace efim::cpu::detail

#pragma GCC pop_options
