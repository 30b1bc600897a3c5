// Shared between ops.cpp / attention.cpp (baseline code: planning, dispatch, references) and
// ops_avx2.cpp (the AVX2 + FMA kernels). Not part of the model's public API.
#pragma once

#include <cstdint>

#include "model/ops.h"

namespace efim::ops::detail {

// ---- flash attention (AVX2) ----

// Key block: scores of one block of keys for all rows of a unit stay in L1.
constexpr int64_t kFlashKeyBlock = 64;
// Rows (query tokens x heads of one KV group) per unit: their Q, O and S tiles stay in L1/L2.
constexpr int64_t kFlashMaxRows = 48;
constexpr int64_t kFlashMaxHeadDim = 256;
// Every unit's key range is cut at the multiples of this many key positions (fixed cells: the
// pieces run on any thread and are merged in a fixed order).
constexpr int64_t kFlashKeyCell = 512;

// The key cells a flash unit's keys [k0, k1) span (k1 > k0): one partial range each.
inline int64_t key_cells(int64_t k0, int64_t k1) {
  return (k1 - 1) / kFlashKeyCell - k0 / kFlashKeyCell + 1;
}

// The first key position a query at `pos` sees: 0, or the start of its sliding window.
inline int64_t first_visible(int64_t window, int64_t pos) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Floats of per-thread work memory flash_unit_avx2 needs for a unit of `rows` rows.
inline int64_t flash_work_floats(int64_t rows, int64_t head_dim) {
  return 2 * rows * head_dim                // Q (pre-scaled), O
         + rows * kFlashKeyBlock            // S / P of one key block
         + 3 * rows;                        // m, l, correction
}

// Runs one unit; `work` has flash_work_floats(u.rows(), head_dim) floats; a.kv_slot_stride and
// a.kv_head_stride are resolved (attention() fills them for slot-major rows).
void flash_unit_avx2(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial);
// The same in AVX-512 (attention_avx512.cpp: scores straight from the key rows for
// every unit), and its build on SIMDe's emulation of the intrinsics (test builds only).
void flash_unit_avx512(const AttentionArgs& a, const FlashUnit& u, float* work, float* partial);
void flash_unit_avx512_emulated(const AttentionArgs& a, const FlashUnit& u, float* work,
                                float* partial);

// The flash kernel of one instruction set. Each computes a row the same way whatever unit it
// is in (one path for decode and prompt units, rows independent of their tile), and
// attention_flash cuts every unit's keys at the multiples of kFlashKeyCell whatever the
// batch and the threads, so a row's output depends on its query, position and keys only: not
// on how the prompt was chunked, which other sequences share the step, or the thread count
// (batch invariance).
using FlashKernel = void (*)(const AttentionArgs&, const FlashUnit&, float*, float*);
inline constexpr FlashKernel kFlashAvx2 = flash_unit_avx2;
inline constexpr FlashKernel kFlashAvx512 = flash_unit_avx512;
inline constexpr FlashKernel kFlashAvx512Emulated = flash_unit_avx512_emulated;
// Flash attention with strides resolved. ops::attention chooses the kernel by CPU; tests call
// it with each.
void attention_flash(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch,
                     FlashKernel kernel);

// ---- elementwise (AVX2) ----
void rms_norm_avx2(const float* x, const float* w, int64_t n, float eps, float* y);
void add_rms_norm_avx2(float* x, const float* d, const float* w, int64_t n, float eps, float* y);
void silu_mul_avx2(float* gate, const float* up, int64_t n);
void rope_rows_avx2(const RopeRows& r, const RopeTable& table);

}  // namespace efim::ops::detail
