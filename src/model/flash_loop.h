// The loop of one flash-attention unit over its key blocks, shared by the AVX2 kernel
// (ops_avx2.cpp) and the AVX-512 decode kernel (attention_avx512.cpp): the unit's rows,
// the pre-scaled queries, the visible key range of each row, the slots of each block and the
// final normalisation or partial (m, l, O) output. What a block computes (scores, online
// softmax, values) is the caller's `block` functor, in the caller's instruction set.
//
// Included by those two files only, after their `#pragma GCC target` and after <cmath>,
// <cstdint>, <limits>, the project headers included here and their intrinsics (<immintrin.h>
// or SIMDe's emulation: _mm_prefetch), so no standard header is compiled for their target here.
#pragma once

#include "model/ops_internal.h"
#include "tensor/quant.h"

namespace efim::ops::detail {
namespace {  // internal linkage: one copy per instruction set

// The unit's geometry and tiles in the work memory (layout of flash_work_floats).
struct FlashTiles {
  int64_t hd, R;
  float *Q, *O, *S, *m, *l, *corr;
  FlashTiles(float* work, int64_t rows, int64_t head_dim) : hd(head_dim), R(rows) {
    Q = work;                        // [R, hd] query rows times 1/sqrt(hd)
    O = Q + R * hd;                  // [R, hd] unnormalised output
    S = O + R * hd;                  // [R, KB] scores, then probabilities
    m = S + R * kFlashKeyBlock;      // [R] running max of each row's scores
    l = m + R;                       // [R] running sum of exp(score - m)
    corr = l + R;                    // [R] rescale factor of the current block
  }
};

// A padding key: zero bytes are 0 in every element type (q8_0: scale 0).
alignas(64) const uint8_t kZeroRow[kFlashMaxHeadDim * sizeof(float)] = {};

// One block of keys as the block functor sees it: rows [first, end) see at least one of its
// keys; row r sees keys lo[r] .. last[r] (positions); krow / vrow hold kFlashKeyBlock row
// pointers, padding keys (j >= nb) pointing at zero rows; knext / vnext the same for the unit's
// next block, for the kernel to prefetch (prefetch_next), null for its last block
// (next_row_bytes: the bytes of one row to prefetch).
struct FlashBlock {
  const uint8_t* const* krow;
  const uint8_t* const* vrow;
  int64_t kb0, nb, first, end;
  const int64_t* lo;
  const int64_t* last;
  const uint8_t* const* knext;
  const uint8_t* const* vnext;
  int64_t next_row_bytes;
  // Q8_0 caches: the f32 scale of block c of key / value row j at [c * kFlashKeyBlock + j]
  // (q8_row_scales), converted once per block of keys for all rows and passes; null for f32
  // and f16.
  const float* kscale;
  const float* vscale;
};

// Block b of a q8_0 K/V row (head_dim / 32 blocks, one after another).
inline const BlockQ8_0* q8_block(const uint8_t* row, int64_t b) {
  return reinterpret_cast<const BlockQ8_0*>(row) + b;
}

// out[c * KB + j] = the f32 scale of q8_0 block c of rows[j], for the KB rows of a block
// (padding rows: kZeroRow, scale 0): gathered as f16, then converted 8 at a time.
inline void q8_row_scales(const uint8_t* const* rows, int64_t nbk, float* out) {
  constexpr int64_t KB = kFlashKeyBlock;
  alignas(16) uint16_t h[KB * kFlashMaxHeadDim / 32];
  for (int64_t j = 0; j < KB; ++j)
    for (int64_t c = 0; c < nbk; ++c) std::memcpy(&h[c * KB + j], &q8_block(rows[j], c)->d, 2);
  for (int64_t i = 0; i < KB * nbk; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h + i))));
}

// Asks for the cache lines of rows j .. j + 3 of the next block's keys and values (row_bytes
// each), for a kernel to call once per 4 keys of the current block: decode at depth reads its
// K/V from memory, and the hardware prefetcher alone leaves the kernel waiting for it between
// its bursts of arithmetic (efim_bench_attention at depth 4096, 2 threads, medians of 8
// alternated runs, AVX-512 kernel: f16 100M shape 2.56 -> 2.11 ms, 1.5B shape 6.95 -> 5.79,
// f32 4.60 -> 3.46; AVX2 kernel: f16 3.55 -> 2.55, 11.5 -> 8.2). Spread over the block like
// this: all of a block's lines asked for at its start was slower than none. Q8_0 rows too, once
// their widening had been cut down (scale tables, scales folded into P: 2026-12-08, Xeon VM,
// AVX-512 kernel, medians of 3 alternated runs: 100M shape 2.23 -> 2.00 ms, 1.5B shape 7.35 ->
// 6.30; before that cut, 0.98x). Rows of 68 or 136 bytes packed one after the other: asking
// for row + 0, row + 64, ... of each reaches every line of the run. always_inline: a function
// that only prefetches counts as free of side effects, and GCC 12 drops the calls to it that it
// has not inlined (the prefetches were gone from the binary without it).
__attribute__((always_inline)) inline void prefetch_rows(const uint8_t* const* krows,
                                                         const uint8_t* const* vrows, int64_t j,
                                                         int64_t row_bytes) {
  for (int c = 0; c < 4; ++c)
    for (int64_t o = 0; o < row_bytes; o += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(krows[j + c] + o), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(vrows[j + c] + o), _MM_HINT_T0);
    }
}

// The rows one call of prefetch_next asks for.
enum class Prefetch { kKeysAndValues, kKeys, kValues };

// Keys j .. j + 3 of b's next block (their key rows, value rows or both), if b has one to
// prefetch.
__attribute__((always_inline)) inline void prefetch_next(const FlashBlock& b, int64_t j,
                                                         Prefetch what = Prefetch::kKeysAndValues) {
  if (!b.knext) return;
  if (what == Prefetch::kKeysAndValues) return prefetch_rows(b.knext, b.vnext, j, b.next_row_bytes);
  const uint8_t* const* rows = what == Prefetch::kKeys ? b.knext : b.vnext;
  for (int c = 0; c < 4; ++c)
    for (int64_t o = 0; o < b.next_row_bytes; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(rows[j + c] + o), _MM_HINT_T0);
}

// Runs unit u: block(tiles, FlashBlock) for each key block the unit's rows see, then writes
// the normalised rows (u.partial < 0) or each row's (m, l, O) at partial + u.partial. A unit
// with partial output may run through several key cells (kFlashKeyCell): it starts each cell
// afresh (m = -inf, l = 0, O = 0) and writes the (m, l, O) of its c-th cell at u.partial + c
// ranges of [rows, 2 + head_dim] floats, so each cell's sums are those of a unit of that cell
// alone, while the prefetch of the next block runs on across the cell's end.
template <class Block>
void flash_unit_loop(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial,
                     Block&& block) {
  constexpr int64_t KB = kFlashKeyBlock;
  const int64_t hd = a.head_dim, n_h = u.h1 - u.h0, R = u.rows();
  const int64_t qs = a.q_stride ? a.q_stride : a.n_heads * hd;
  const int64_t os = a.out_stride ? a.out_stride : a.n_heads * hd;
  FlashTiles w(work, R, hd);
  int64_t last[kFlashMaxRows];  // position of each row's query: its last visible key
  int64_t lo[kFlashMaxRows];    // its first visible key (sliding window)
  float* out[kFlashMaxRows];
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t tok = u.seq->tokens[u.t0 + r / n_h], h = u.h0 + r % n_h;
    last[r] = a.pos[tok];
    lo[r] = first_visible(a.window, last[r]);
    out[r] = a.out + tok * os + h * hd;
    const float* q = a.q + tok * qs + h * hd;
    for (int64_t d = 0; d < hd; ++d) {
      w.Q[r * hd + d] = q[d] * scale;
      w.O[r * hd + d] = 0.0f;
    }
    w.m[r] = -std::numeric_limits<float>::infinity();
    w.l[r] = 0;
  }
  const int64_t k_end = u.k1 < last[R - 1] + 1 ? u.k1 : last[R - 1] + 1;
  const uint8_t* kbase = static_cast<const uint8_t*>(a.k) + u.kvh * a.kv_head_stride;
  const uint8_t* vbase = static_cast<const uint8_t*>(a.v) + u.kvh * a.kv_head_stride;
  // Row pointers of the block at kb0 into rows[b][0] (keys) and rows[b][1] (values); each
  // block's are computed once, before the block ahead of it runs (as that one's next).
  const uint8_t* rows[2][2][KB];
  auto point = [&](int64_t kb0, int b) {
    const int64_t nb = k_end - kb0 < KB ? k_end - kb0 : KB;
    const int32_t* slots = u.seq->ctx + kb0;
    for (int64_t j = 0; j < nb; ++j) {
      rows[b][0][j] = kbase + slots[j] * a.kv_slot_stride;
      rows[b][1][j] = vbase + slots[j] * a.kv_slot_stride;
    }
    for (int64_t j = nb; j < KB; ++j) rows[b][0][j] = rows[b][1][j] = kZeroRow;  // padding, masked
  };
  const auto row_bytes =
      static_cast<int64_t>(dtype_row_bytes(a.kv_type, static_cast<uint64_t>(hd)));
  if (u.k0 < k_end) {
    point(u.k0, 0);
    // The unit's first block has no block before it to prefetch it: all of its lines now
    // (efim_bench_attention, depth 4096, medians of 6-8 alternated runs: f32 100M shape 3.32 ->
    // 3.02 ms; f16 within the noise, 1.00-1.08x in three runs on the 100M shape, 1.02x on the
    // 1.5B shape; a quarter of the block: no gain).
    for (int64_t j = 0; j < KB; j += 4) prefetch_rows(rows[0][0], rows[0][1], j, row_bytes);
  }
  // Writes the rows' (m, l, O) of the run's cell c and starts the next cell afresh.
  const int64_t cell0 = u.k0 / kFlashKeyCell;
  int64_t cell = 0;  // cells of the run written so far
  auto write_cell = [&] {
    float* p = partial + u.partial + cell * R * (2 + hd);
    for (int64_t r = 0; r < R; ++r, p += 2 + hd) {
      p[0] = w.m[r];
      p[1] = w.l[r];
      for (int64_t d = 0; d < hd; ++d) {
        p[2 + d] = w.O[r * hd + d];
        w.O[r * hd + d] = 0.0f;
      }
      w.m[r] = -std::numeric_limits<float>::infinity();
      w.l[r] = 0;
    }
    ++cell;
  };
  alignas(64) float kscale[KB * kFlashMaxHeadDim / 32], vscale[KB * kFlashMaxHeadDim / 32];
  const bool q8 = a.kv_type == DType::Q8_0;
  int64_t first = 0;  // rows [0, first) see no key from kb0 on
  for (int64_t kb0 = u.k0, b = 0; kb0 < k_end; kb0 += KB, b ^= 1) {
    if (u.partial >= 0)
      while (cell < kb0 / kFlashKeyCell - cell0) write_cell();
    const int64_t nb = k_end - kb0 < KB ? k_end - kb0 : KB;
    const bool has_next = kb0 + KB < k_end;
    if (has_next) point(kb0 + KB, static_cast<int>(b ^ 1));
    while (last[first] < kb0) ++first;  // the last row always sees kb0 < k_end
    int64_t end = R;  // rows [end, R) see no key before kb0 + nb (their window starts later)
    while (end > first && lo[end - 1] >= kb0 + nb) --end;
    if (end == first) continue;
    if (q8) {
      q8_row_scales(rows[b][0], hd / 32, kscale);
      q8_row_scales(rows[b][1], hd / 32, vscale);
    }
    block(w, FlashBlock{rows[b][0], rows[b][1], kb0, nb, first, end, lo, last,
                        has_next ? rows[b ^ 1][0] : nullptr, has_next ? rows[b ^ 1][1] : nullptr,
                        row_bytes, q8 ? kscale : nullptr, q8 ? vscale : nullptr});
  }
  if (u.partial >= 0) {  // (m, l, O) per row and cell, merged with the other key ranges later
    while (cell < key_cells(u.k0, u.k1)) write_cell();
    return;
  }
  for (int64_t r = 0; r < R; ++r) {
    const float inv = 1.0f / w.l[r];
    for (int64_t d = 0; d < hd; ++d) out[r][d] = w.O[r * hd + d] * inv;
  }
}

}  // namespace
}  // namespace efim::ops::detail
