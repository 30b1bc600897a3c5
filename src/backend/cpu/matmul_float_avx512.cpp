// AVX-512F kernels for float weights (F32, F16, BF16; any other dtype through dequantize_row):
// the AVX2 kernels of matmul_float_avx2.cpp on 16-lane registers, all products f32 FMAs.
//
// GEMM (m >= kGemmMinRows): W is converted and packed per panel of 32 weight rows into
// panel[k][32] f32 (two 16 x 16 transposes per 16 k), then an outer-product micro-kernel
// computes an 8 x 32 tile of y: per k, 2 zmm of W and a broadcast of x[i][k] for 8 rows,
// 16 FMAs into 16 accumulators (of the 32 zmm registers). The k loop runs in blocks of kKC = 128
// (a 16 KB slice of the panel stays in L1 while the row tiles pass over it).
//
// GEMV (m < kGemmMinRows: decode and verify steps of up to 9 tokens): W is streamed once in its
// own dtype with software prefetch two row groups ahead; row after row, 64 weights per step into
// 4 accumulators per row of x, up to 3 rows of x sharing each converted weight vector, every
// row summed in the one-row order (batch invariant below kGemmMinRows).
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

namespace efim::cpu::detail {

namespace {

constexpr int kNR = 32;       // weight rows per packed panel (2 zmm of y columns)
constexpr int kMR = 8;        // rows of x per micro-tile
constexpr int64_t kKC = 128;  // k block of the micro-kernel loop
constexpr int64_t kGemmMinRows = 10;  // as matmul_float_avx2.cpp's

// ---- conversion of 16 consecutive weights to f32 ----
template <DType T>
inline __m512 load16(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (T == DType::F16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  } else {  // BF16: the f32 with the same top 16 bits
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

// panel[k][32] = rows[0..nr) of W in f32, columns beyond nr zero. rows[j] is row j's start.
template <DType T>
void pack_panel(const uint8_t* const* rows, int nr, int64_t k, float* panel) {
  const int64_t k16 = k / 16 * 16;
  for (int64_t kk = 0; kk < k16; kk += 16) {
    for (int h = 0; h < nr; h += 16) {  // halves of the panel that hold rows
      __m512 v[16];                     // loops over v[] unrolled: it stays in registers
#pragma GCC unroll 16
      for (int j = 0; j < 16; ++j)
        v[j] = h + j < nr ? load16<T>(rows[h + j], kk) : _mm512_setzero_ps();
      transpose16x16(v);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) _mm512_storeu_ps(panel + (kk + t) * kNR + h, v[t]);
    }
    if (nr <= 16)  // the empty half
      for (int t = 0; t < 16; ++t) _mm512_storeu_ps(panel + (kk + t) * kNR + 16, _mm512_setzero_ps());
  }
  for (int64_t kk = k16; kk < k; ++kk)
    for (int j = 0; j < kNR; ++j) panel[kk * kNR + j] = j < nr ? load_weight<T>(rows[j], kk) : 0.0f;
}

// y[i][0..ncols) (+)= sum_kk x[i][kk] * panel[kk][0..ncols) for i < MR, kk < kc;
// `accumulate` adds to y (later k blocks) instead of overwriting it.
template <int MR>
void micro_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y, int64_t ldy,
                int ncols, bool accumulate) {
  __m512 acc[MR][2];  // every loop over MR unrolled: acc lives in registers only
  const float* xr[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    xr[i] = x + i * ldx;
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m512 w0 = _mm512_loadu_ps(panel + kk * kNR);
    const __m512 w1 = _mm512_loadu_ps(panel + kk * kNR + 16);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(xr[i][kk]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xb, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    alignas(64) float tmp[kNR];
    float* out = ncols == kNR ? y + i * ldy : tmp;
    if (accumulate) {
      if (ncols != kNR) std::memcpy(tmp, y + i * ldy, static_cast<size_t>(ncols) * sizeof(float));
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(out));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(out + 16));
    }
    _mm512_storeu_ps(out, acc[i][0]);
    _mm512_storeu_ps(out + 16, acc[i][1]);
    if (ncols != kNR) std::memcpy(y + i * ldy, tmp, static_cast<size_t>(ncols) * sizeof(float));
  }
}

template <int MR>
void tail_tile(int64_t rows, const float* x, int64_t ldx, const float* panel, int64_t kc, float* y,
               int64_t ldy, int ncols, bool acc) {
  if constexpr (MR > 0) {
    if (rows == MR) return micro_tile<MR>(x, ldx, panel, kc, y, ldy, ncols, acc);
    tail_tile<MR - 1>(rows, x, ldx, panel, kc, y, ldy, ncols, acc);
  }
}

// One k block [k0, k0 + kc) of the tiles of `rows` rows of x (row stride ldx) against a panel.
void tile_rows(const float* x, int64_t rows, int64_t ldx, const float* panel, int64_t kc, float* y,
               int64_t ldy, int ncols, bool acc) {
  int64_t i = 0;
  for (; i + kMR <= rows; i += kMR)
    micro_tile<kMR>(x + i * ldx, ldx, panel, kc, y + i * ldy, ldy, ncols, acc);
  tail_tile<kMR - 1>(rows - i, x + i * ldx, ldx, panel, kc, y + i * ldy, ldy, ncols, acc);
}

// The GEMM pieces for float_gemm (drivers.h).
struct Gemm {
  static constexpr int kMR = detail::kMR, kNR = detail::kNR;
  static constexpr int64_t kKC = detail::kKC;
  template <DType T>
  static void pack_panel(const uint8_t* const* rows, int nr, int64_t k, float* panel) {
    detail::pack_panel<T>(rows, nr, k, panel);
  }
  static void tile_rows(const float* x, int64_t rows, int64_t ldx, const float* panel, int64_t kc,
                        float* y, int64_t ldy, int ncols, bool acc) {
    detail::tile_rows(x, rows, ldx, panel, kc, y, ldy, ncols, acc);
  }
};

// out[i][r] = x[i] . W row r, for MX (1-3) rows of x (row stride k) and R (1-2) weight rows:
// 64 weights per step into 4 accumulators per (row of x, weight row) pair, one software prefetch
// per 64-byte line of weights `prefetch` bytes ahead. Each pair is summed in the same order
// whatever MX and R are (batch invariance below kGemmMinRows); R = 2 shares each load of x
// between two weight rows (up to 24 accumulators).
template <DType T, int MX, int R>
void dot_rows(const float* x, int64_t k, const uint8_t* const rows[R], int64_t prefetch,
              float out[MX][R]) {
  constexpr int64_t kBytes = T == DType::F32 ? 4 : 2;
  __m512 acc[4][R][MX];  // [chain][weight row][row of x]; loops unrolled: acc stays in registers
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int i = 0; i < MX; ++i) acc[c][r][i] = _mm512_setzero_ps();
  const int64_t k64 = k / 64 * 64;
  for (int64_t kk = 0; kk < k64; kk += 64) {
    if (prefetch) {
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const char* line = reinterpret_cast<const char*>(rows[r]) + prefetch + kk * kBytes;
#pragma GCC unroll 4
        for (int64_t l = 0; l < 64 * kBytes; l += 64) _mm_prefetch(line + l, _MM_HINT_T0);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512 wv[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) wv[r] = load16<T>(rows[r], kk + 16 * c);
#pragma GCC unroll 3
      for (int i = 0; i < MX; ++i) {
        __m512 xv = _mm512_loadu_ps(x + i * k + kk + 16 * c);
        // One load for the R rows: keeps GCC from folding a load of x into every FMA (the
        // loads, not the FMAs, then bound the kernel: m = 2-6 ran 1.5x slower).
#ifndef EFIM_AVX512_EMULATED  // (SIMDe's __m512 is a struct, not a register)
        if constexpr (R > 1) asm("" : "+v"(xv));
#endif
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) acc[c][r][i] = _mm512_fmadd_ps(wv[r], xv, acc[c][r][i]);
      }
    }
  }
  for (int64_t kk = k64; kk + 16 <= k; kk += 16) {
    __m512 wv[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) wv[r] = load16<T>(rows[r], kk);
#pragma GCC unroll 3
    for (int i = 0; i < MX; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * k + kk);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) acc[0][r][i] = _mm512_fmadd_ps(wv[r], xv, acc[0][r][i]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int i = 0; i < MX; ++i) {
      float s = hsum(_mm512_add_ps(_mm512_add_ps(acc[0][r][i], acc[1][r][i]), _mm512_add_ps(acc[2][r][i], acc[3][r][i])));
      for (int64_t kk = k / 16 * 16; kk < k; ++kk) s += x[i * k + kk] * load_weight<T>(rows[r], kk);
      out[i][r] = s;
    }
}

// The GEMV piece for float_gemv (drivers.h).
struct GemvGroup {
  static constexpr int kRows = 2;  // weight rows per call when m > 1 (m = 1: one)
  template <DType T, int MX, int R>
  static void dot_rows(const float* x, int64_t k, const uint8_t* const rows[R], int64_t prefetch,
                       float out[MX][R]) {
    detail::dot_rows<T, MX, R>(x, k, rows, prefetch, out);
  }
};

}  // namespace

void EFIM_AVX512_ENTRY(matmul_float_avx512)(ThreadPool& pool, const float* x, int64_t m,
                                            const WeightMatrix& w, float* y) {
  if (m < kGemmMinRows) return float_gemv<GemvGroup>(pool, x, m, w, y);
  float_gemm<Gemm>(pool, x, m, w, y);
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
