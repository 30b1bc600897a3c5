// AVX2 + FMA kernels for float weights (F32, F16 via F16C, BF16 via a 16-bit shift; any other
// dtype through dequantize_row). All products are f32 FMAs.
//
// GEMM (m >= kGemmMinRows): W is converted and packed per panel of 16 weight rows into
// panel[k][16] f32 (one 64-byte line per k), then an outer-product micro-kernel computes a
// 6 x 16 tile of y: for each k it loads 2 vectors of W (16 columns of y) and broadcasts x[i][k]
// for 6 rows, doing 12 FMAs into 12 accumulator registers (+2 W + 1 broadcast = 15 of 16 ymm).
// A packed panel is reused by every row of x, so the conversion cost is paid once per panel.
// The k loop runs in blocks of kKC = 256 (a 16 KB slice of the panel stays in L1 while all
// 6-row tiles pass over it; y tiles accumulate across k blocks). Threads take work items
// (panel, block of x rows) dynamically; x rows are split only when there are too few panels.
//
// GEMV (m < kGemmMinRows: decode, and speculative verify steps of up to 9 tokens): W is streamed
// once in its own dtype, with software prefetch two row groups (8 rows) ahead (rows of 1-4 KB are
// too short for the hardware prefetcher to ramp up; it lifted decode from ~70% to ~100% of the
// measured bandwidth). Row after row, 32 weights per step into 4 accumulators per row of x, so
// each thread reads one sequential stream (against 4 interleaved rows: decode +12% to +60% tok/s
// in A/B pairs on this 2-core VM, the DRAM-bound output head gaining most); up to 3 rows of x
// share each converted weight vector. Every row of x is summed in the one-row order, so below
// kGemmMinRows a row's logits do not depend on the other rows of the step.
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

namespace efim::cpu::detail {

namespace {

constexpr int kNR = 16;       // weight rows per packed panel (2 ymm of y columns)
constexpr int kMR = 6;        // rows of x per micro-tile
constexpr int64_t kKC = 256;  // k block of the micro-kernel loop
// Below this many rows of x, converting W on the fly in the GEMV beats packing it (measured on
// Zen 3, bf16 768 x 2048: packing costs ~1.5 GEMV passes; the crossover is near 8-10 rows). 10:
// a token and a draft of up to 8 (engine.h's max_draft) stay on the batch-invariant GEMV.
constexpr int64_t kGemmMinRows = 10;

// ---- conversion of 8 consecutive weights to f32 ----
template <DType T>
inline __m256 load8(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  } else {  // BF16: the f32 with the same top 16 bits
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

// panel[k][16] = rows[0..nr) of W in f32, columns beyond nr zero. rows[j] is row j's start.
template <DType T>
void pack_panel(const uint8_t* const* rows, int nr, int64_t k, float* panel) {
  const int64_t k8 = k / 8 * 8;
  // All loops over registers are unrolled so that v[] never goes through memory.
  for (int64_t kk = 0; kk < k8; kk += 8) {
#pragma GCC unroll 2
    for (int h = 0; h < kNR; h += 8) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        v[j] = h + j < nr ? load8<T>(rows[h + j], kk) : _mm256_setzero_ps();
      transpose8x8(v);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) _mm256_storeu_ps(panel + (kk + t) * kNR + h, v[t]);
    }
  }
  for (int64_t kk = k8; kk < k; ++kk)
    for (int j = 0; j < kNR; ++j) panel[kk * kNR + j] = j < nr ? load_weight<T>(rows[j], kk) : 0.0f;
}

// y[i][0..ncols) (+)= sum_kk x[i][kk] * panel[kk][0..ncols) for i < MR, kk < kc (see the file
// comment); `accumulate` adds to y (later k blocks) instead of overwriting it.
template <int MR>
void micro_tile(const float* x, int64_t ldx, const float* panel, int64_t kc, float* y, int64_t ldy,
                int ncols, bool accumulate) {
  // Every loop over MR is fully unrolled so that acc[][] lives in registers only (a rolled
  // loop makes GCC keep a memory copy of the array, stored on every k step).
  __m256 acc[MR][2];
  const float* xr[MR];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    xr[i] = x + i * ldx;
  }
  for (int64_t kk = 0; kk < kc; ++kk) {
    const __m256 w0 = _mm256_loadu_ps(panel + kk * kNR);
    const __m256 w1 = _mm256_loadu_ps(panel + kk * kNR + 8);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256 xb = _mm256_broadcast_ss(xr[i] + kk);
      acc[i][0] = _mm256_fmadd_ps(xb, w0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xb, w1, acc[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    alignas(32) float tmp[kNR];
    float* out = ncols == kNR ? y + i * ldy : tmp;
    if (accumulate) {
      if (ncols != kNR) std::memcpy(tmp, y + i * ldy, static_cast<size_t>(ncols) * sizeof(float));
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(out));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(out + 8));
    }
    _mm256_storeu_ps(out, acc[i][0]);
    _mm256_storeu_ps(out + 8, acc[i][1]);
    if (ncols != kNR) std::memcpy(y + i * ldy, tmp, static_cast<size_t>(ncols) * sizeof(float));
  }
}

// One k block [k0, k0 + kc) of the tiles of `rows` rows of x (row stride ldx) against a panel.
void tile_rows(const float* x, int64_t rows, int64_t ldx, const float* panel, int64_t kc, float* y,
               int64_t ldy, int ncols, bool acc) {
  int64_t i = 0;
  for (; i + kMR <= rows; i += kMR)
    micro_tile<kMR>(x + i * ldx, ldx, panel, kc, y + i * ldy, ldy, ncols, acc);
  const float* xi = x + i * ldx;
  float* yi = y + i * ldy;
  switch (rows - i) {
    case 5:
      return micro_tile<5>(xi, ldx, panel, kc, yi, ldy, ncols, acc);
    case 4:
      return micro_tile<4>(xi, ldx, panel, kc, yi, ldy, ncols, acc);
    case 3:
      return micro_tile<3>(xi, ldx, panel, kc, yi, ldy, ncols, acc);
    case 2:
      return micro_tile<2>(xi, ldx, panel, kc, yi, ldy, ncols, acc);
    case 1:
      return micro_tile<1>(xi, ldx, panel, kc, yi, ldy, ncols, acc);
    default:
      return;
  }
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
// 32 weights per step into 4 accumulators per (row of x, weight row) pair, one software prefetch
// per 64-byte line of weights `prefetch` bytes ahead. Each pair is summed in the same order
// whatever MX and R are (batch invariance below kGemmMinRows). With 16 registers R is 1 (12
// accumulators), so every FMA loads its x: for 2-9 rows of x these GEMVs take 1.2-1.4x the time
// of the former kernel (4 weight rows against 3 rows of x, one accumulator per pair, whose
// one-row kernel summed in another order). Two accumulators per pair with R = 2 matched the
// former kernel there but made one-row decode 14% slower.
template <DType T, int MX, int R>
void dot_rows(const float* x, int64_t k, const uint8_t* const rows[R], int64_t prefetch,
              float out[MX][R]) {
  constexpr int64_t kBytes = T == DType::F32 ? 4 : 2;
  __m256 acc[4][R][MX];  // [chain][weight row][row of x]; loops unrolled: acc stays in registers
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
      for (int i = 0; i < MX; ++i) acc[c][r][i] = _mm256_setzero_ps();
  const int64_t k32 = k / 32 * 32;
  for (int64_t kk = 0; kk < k32; kk += 32) {
    if (prefetch) {
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) {
        const char* line = reinterpret_cast<const char*>(rows[r]) + prefetch + kk * kBytes;
#pragma GCC unroll 4
        for (int64_t l = 0; l < 32 * kBytes; l += 64) _mm_prefetch(line + l, _MM_HINT_T0);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256 wv[R];
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) wv[r] = load8<T>(rows[r], kk + 8 * c);
#pragma GCC unroll 3
      for (int i = 0; i < MX; ++i) {
        const __m256 xv = _mm256_loadu_ps(x + i * k + kk + 8 * c);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) acc[c][r][i] = _mm256_fmadd_ps(wv[r], xv, acc[c][r][i]);
      }
    }
  }
  for (int64_t kk = k32; kk + 8 <= k; kk += 8) {
    __m256 wv[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) wv[r] = load8<T>(rows[r], kk);
#pragma GCC unroll 3
    for (int i = 0; i < MX; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * k + kk);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) acc[0][r][i] = _mm256_fmadd_ps(wv[r], xv, acc[0][r][i]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 3
    for (int i = 0; i < MX; ++i) {
      float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0][r][i], acc[1][r][i]), _mm256_add_ps(acc[2][r][i], acc[3][r][i])));
      for (int64_t kk = k / 8 * 8; kk < k; ++kk) s += x[i * k + kk] * load_weight<T>(rows[r], kk);
      out[i][r] = s;
    }
}

// The GEMV piece for float_gemv (drivers.h).
struct GemvGroup {
  static constexpr int kRows = 1;  // weight rows per call when m > 1 (m = 1: one)
  template <DType T, int MX, int R>
  static void dot_rows(const float* x, int64_t k, const uint8_t* const rows[R], int64_t prefetch,
                       float out[MX][R]) {
    detail::dot_rows<T, MX, R>(x, k, rows, prefetch, out);
  }
};

}  // namespace

void matmul_float_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                       float* y) {
  if (m < kGemmMinRows) return float_gemv<GemvGroup>(pool, x, m, w, y);
  float_gemm<Gemm>(pool, x, m, w, y);
}

}  // namespace efim::cpu::detail

#pragma GCC pop_options
