// How the matmul kernels split their work over threads, shared by the SIMD variants (AVX2,
// AVX-512): each variant supplies its register-level pieces as a struct of static functions and
// these templates do the rest. Generic code: include it before a variant's `#pragma GCC target`
// (the instantiations are generic functions that call the variant's target-specific pieces).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/kernels.h"

namespace efim::cpu::detail {

// ---- float weights (F32, F16, BF16; other dtypes dequantized to F32 rows first) ----

// Packs weight rows [n0, n0 + nr) into panel [k][K::kNR] f32 with K::pack_panel<T>(rows, nr, k,
// panel) (rows[j]: start of row j); dtypes other than F32/F16/BF16 are dequantized to f32 rows
// (in `scratch`) first.
template <class K>
void pack_float_rows(const WeightMatrix& w, int64_t n0, int nr, float* panel,
                     std::vector<float>& scratch) {
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const uint8_t* rows[K::kNR];
  for (int j = 0; j < nr; ++j) rows[j] = static_cast<const uint8_t*>(w.data) + (n0 + j) * stride;
  switch (w.dtype) {
    case DType::F32:
      return K::template pack_panel<DType::F32>(rows, nr, w.cols, panel);
    case DType::F16:
      return K::template pack_panel<DType::F16>(rows, nr, w.cols, panel);
    case DType::BF16:
      return K::template pack_panel<DType::BF16>(rows, nr, w.cols, panel);
    default: {
      scratch.resize(static_cast<size_t>(K::kNR * w.cols));  // [kNR][k]
      for (int j = 0; j < nr; ++j) {
        dequantize_row(w, n0 + j, scratch.data() + j * w.cols);
        rows[j] = reinterpret_cast<const uint8_t*>(scratch.data() + j * w.cols);
      }
      return K::template pack_panel<DType::F32>(rows, nr, w.cols, panel);
    }
  }
}

// GEMM over panels of K::kNR weight rows packed to f32, reused by every row tile of x.
//   K::kMR, K::kNR, K::kKC: rows of x per tile, weight rows per panel, k block
//   K::pack_panel<T>: see pack_float_rows
//   K::tile_rows(x, rows, ldx, panel, kc, y, ldy, ncols, accumulate): one k block of the tiles
// Threads take work items (panel, block of x rows); x rows are split only when there are too
// few panels. A thread packs a panel once for its consecutive items of that panel.
template <class K>
void float_gemm(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  const GemmSplit split = split_gemm(m, n, K::kMR, K::kNR, pool.size());
  const int64_t m_blocks = split.m_blocks, m_block = split.m_block, items = split.items();
  pool.parallel_for(items, grain_for(items, m * n * k, pool.size()),
                    [&](int, int64_t it0, int64_t it1) {
                      static thread_local std::vector<float> panel, scratch;  // panel: [k][kNR]
                      panel.resize(static_cast<size_t>(k * K::kNR));
                      int64_t packed = -1;
                      for (int64_t it = it0; it < it1; ++it) {
                        const int64_t p = it / m_blocks, mb = it % m_blocks;
                        const int64_t n0 = p * K::kNR;
                        const int nr = static_cast<int>(std::min<int64_t>(K::kNR, n - n0));
                        if (packed != p) {
                          pack_float_rows<K>(w, n0, nr, panel.data(), scratch);
                          packed = p;
                        }
                        const int64_t i0 = mb * m_block, rows = std::min(m_block, m - i0);
                        // k blocks keep a slice of the panel in L1 and the rows' x slice in L2.
                        for (int64_t k0 = 0; k0 < k; k0 += K::kKC)
                          K::tile_rows(x + i0 * k + k0, rows, k, panel.data() + k0 * K::kNR,
                                       std::min<int64_t>(K::kKC, k - k0), y + i0 * n + n0, n, nr,
                                       k0 > 0);
                      }
                    });
}

// One group of 4 weight rows (rows[] always holds 4 pointers: missing rows of the last group
// repeat the last valid row, their outputs are dropped): y[i][r] = x row i . rows[r], r < nr.
// One row of x (decode): row after row, so a thread's reads form one sequential stream. More:
// G::kRows weight rows at a time (they stay in L1 while up to 3 rows of x at a time pass over
// them, and each load of x serves kRows rows). G::dot_rows<T, MX, R>(x, k, rows, prefetch,
// out[MX][R]) sums every row of x in the one-row order whatever MX and R are, so y's rows do not
// depend on m.
template <class G, DType T>
void float_gemv_group(const float* x, int64_t m, int64_t k, const uint8_t* const rows[4], int nr,
                      int64_t prefetch, float* y, int64_t ldy) {
  if (m == 1) {  // decode: one row after another, one sequential stream per thread
    for (int r = 0; r < nr; ++r) {
      float out[1][1];
      G::template dot_rows<T, 1, 1>(x, k, rows + r, prefetch, out);
      y[r] = out[0][0];
    }
    return;
  }
  constexpr int R = G::kRows;  // weight rows per call (1 or 2; 4 is a multiple)
  for (int r = 0; r < nr; r += R) {  // against up to 3 rows of x at a time
    for (int64_t i = 0; i < m; i += 3) {
      float out[3][R];
      const int64_t mx = std::min<int64_t>(3, m - i);
      if (mx == 3)
        G::template dot_rows<T, 3, R>(x + i * k, k, rows + r, prefetch, out);
      else if (mx == 2)
        G::template dot_rows<T, 2, R>(x + i * k, k, rows + r, prefetch, out);
      else
        G::template dot_rows<T, 1, R>(x + i * k, k, rows + r, prefetch, out);
      for (int64_t ii = 0; ii < mx; ++ii)
        for (int rr = 0; rr < R && r + rr < nr; ++rr) y[(i + ii) * ldy + r + rr] = out[ii][rr];
    }
  }
}

// GEMV: W streamed once in its own dtype, groups of 4 weight rows handed to threads (see
// float_gemv_group). `prefetch`: bytes ahead to prefetch (two groups), 0 near W's end.
template <class G>
void float_gemv(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const int64_t n = w.rows, k = w.cols;
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(k));
  const int64_t groups = (n + 3) / 4;
  pool.parallel_for(
      groups, grain_for(groups, m * n * k, pool.size()), [&](int, int64_t g0, int64_t g1) {
        static thread_local std::vector<float> scratch;  // [4][k] dequantized rows (other dtypes)
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t n0 = 4 * g;
          const int nr = static_cast<int>(std::min<int64_t>(4, n - n0));
          const uint8_t* rows[4];
          for (int r = 0; r < 4; ++r)
            rows[r] = static_cast<const uint8_t*>(w.data) + (n0 + std::min(r, nr - 1)) * stride;
          DType t = w.dtype;
          if (t != DType::F32 && t != DType::F16 && t != DType::BF16) {
            scratch.resize(static_cast<size_t>(4 * k));
            for (int r = 0; r < 4; ++r) {
              dequantize_row(w, n0 + std::min(r, nr - 1), scratch.data() + r * k);
              rows[r] = reinterpret_cast<const uint8_t*>(scratch.data() + r * k);
            }
            t = DType::F32;
          }
          float* yg = y + n0;
          // Two groups ahead (within W: the last groups read nothing past its end).
          const int64_t pf = t == w.dtype && n0 + 12 <= n ? 8 * static_cast<int64_t>(stride) : 0;
          if (t == DType::F32)
            float_gemv_group<G, DType::F32>(x, m, k, rows, nr, pf, yg, n);
          else if (t == DType::F16)
            float_gemv_group<G, DType::F16>(x, m, k, rows, nr, pf, yg, n);
          else
            float_gemv_group<G, DType::BF16>(x, m, k, rows, nr, pf, yg, n);
        }
      });
}

// ---- Q8_0 / Q4_0 weights against int8-quantized activations ----

// One GEMM work item of the int8 kernels: rows of x against an interleaved weight panel.
struct QuantTile {
  const QuantizedRows* a;
  int64_t i0;             // first x row of the tile
  const uint8_t* quants;  // interleaved panel (layout of the variant)
  const float* scales;    // [nb][kNR]
  float* y;               // y + i0 * ldy + n0
  int64_t ldy;
  int ncols;  // valid weight rows of the panel
};

// `rows` x rows from t.i0 against one panel, in tiles of K::kMR = 4 rows then one of 1-3:
// K::tile<MR>(dtype, tile).
template <class K>
void quant_tile_rows(DType dt, QuantTile t, int64_t rows) {
  static_assert(K::kMR == 4, "the remainder below handles tiles of 1-3 rows");
  const int64_t end = t.i0 + rows;
  for (; t.i0 + K::kMR <= end; t.i0 += K::kMR, t.y += K::kMR * t.ldy)
    K::template tile<K::kMR>(dt, t);
  switch (end - t.i0) {
    case 3:
      return K::template tile<3>(dt, t);
    case 2:
      return K::template tile<2>(dt, t);
    case 1:
      return K::template tile<1>(dt, t);
    default:
      return;
  }
}

// GEMM over interleaved panels of K::kNR weight rows.
//   K::kMR, K::kNR, K::kPanelBlockBytes: x rows per tile, weight rows per panel, bytes of one
//   block of a panel; K::pack_panel(w, n0, nr, quants, scales); K::tile<MR>: quant_tile_rows
template <class K>
void quant_gemm(ThreadPool& pool, const QuantizedRows& a, const WeightMatrix& w, float* y) {
  const int64_t m = a.m, n = w.rows;
  const GemmSplit split = split_gemm(m, n, K::kMR, K::kNR, pool.size());
  const int64_t m_blocks = split.m_blocks, m_block = split.m_block, items = split.items();
  pool.parallel_for(items, grain_for(items, m * n * a.k, pool.size()),
                    [&](int, int64_t it0, int64_t it1) {
                      static thread_local std::vector<uint8_t> quants;  // [nb][panel block]
                      static thread_local std::vector<float> scales;    // [nb][kNR]
                      quants.resize(static_cast<size_t>(a.nb * K::kPanelBlockBytes));
                      scales.resize(static_cast<size_t>(a.nb * K::kNR));
                      int64_t packed = -1;
                      for (int64_t it = it0; it < it1; ++it) {
                        const int64_t p = it / m_blocks, mb = it % m_blocks;
                        const int64_t n0 = p * K::kNR;
                        const int nr = static_cast<int>(std::min<int64_t>(K::kNR, n - n0));
                        if (packed != p) {
                          K::pack_panel(w, n0, nr, quants.data(), scales.data());
                          packed = p;
                        }
                        const int64_t i0 = mb * m_block;
                        QuantTile t{&a, i0, quants.data(), scales.data(), y + i0 * n + n0, n, nr};
                        quant_tile_rows<K>(w.dtype, t, std::min(m_block, m - i0));
                      }
                    });
}

// One group of 4 weight rows (as in float_gemv_group), T = Q8_0 or Q4_0: one row of x by
// G::dot_row<T>(a, row, prefetch), row after row; more rows two at a time by
// G::rows4<T, MX>(a, i0, rows, prefetch, out[MX][4]).
template <class G, DType T>
void quant_gemv_group(const QuantizedRows& a, const uint8_t* const rows[4], int nr,
                      int64_t prefetch, float* y, int64_t ldy) {
  if (a.m == 1) {
    for (int r = 0; r < nr; ++r) y[r] = G::template dot_row<T>(a, rows[r], prefetch);
    return;
  }
  for (int64_t i = 0; i < a.m; i += 2) {
    float out[2][4];
    const int64_t mx = std::min<int64_t>(2, a.m - i);
    if (mx == 2)
      G::template rows4<T, 2>(a, i, rows, prefetch, out);
    else
      G::template rows4<T, 1>(a, i, rows, prefetch, out);
    for (int64_t ii = 0; ii < mx; ++ii)
      for (int r = 0; r < nr; ++r) y[(i + ii) * ldy + r] = out[ii][r];
  }
}

// GEMV: W streamed once in its file layout, groups of 4 weight rows handed to threads (see
// quant_gemv_group).
template <class G>
void quant_gemv(ThreadPool& pool, const QuantizedRows& a, const WeightMatrix& w, float* y) {
  const int64_t n = w.rows;
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const int64_t groups = (n + 3) / 4;
  pool.parallel_for(
      groups, grain_for(groups, a.m * n * a.k, pool.size()), [&](int, int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          const int64_t n0 = 4 * g;
          const int nr = static_cast<int>(std::min<int64_t>(4, n - n0));
          const uint8_t* rows[4];
          for (int r = 0; r < 4; ++r)
            rows[r] = static_cast<const uint8_t*>(w.data) + (n0 + std::min(r, nr - 1)) * stride;
          // Two groups ahead (within W: the last groups read nothing past its end).
          const int64_t pf = n0 + 12 <= n ? 8 * static_cast<int64_t>(stride) : 0;
          if (w.dtype == DType::Q4_0)
            quant_gemv_group<G, DType::Q4_0>(a, rows, nr, pf, y + n0, n);
          else
            quant_gemv_group<G, DType::Q8_0>(a, rows, nr, pf, y + n0, n);
        }
      });
}

// The int8 matmul: x quantized once per call as ggml's quantize_row_q8_0 does
// (quantize_activations), then the GEMV below `gemm_min_rows` rows of x, else the GEMM.
template <class Gemm, class Gemv>
void quant_matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y,
                  int64_t gemm_min_rows) {
  const QuantizedRows& acts =
      quantize_activations<QuantizedRows, quantize_row_q8_ggml_avx2>(pool, x, m, w.cols);
  if (m < gemm_min_rows) return quant_gemv<Gemv>(pool, acts, w, y);
  quant_gemm<Gemm>(pool, acts, w, y);
}

}  // namespace efim::cpu::detail
