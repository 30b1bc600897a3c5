// Q4_K weight rows interleaved 8 at a time, the layout of the decode GEMV of
// matmul_panel_avx512.cpp: in the file's layout each 32-weight chunk of a row costs the row
// kernels a madd and a scale shuffle; with 8 rows side by side, one 32-byte register holds 4
// bytes of each of 8 rows (int32 lane r = row r), so a dot instruction serves 8 rows and the
// sub-block scales cost one multiply per 8 dot instructions.
//
// Rows [8g, 8g + 8) form group g, stored as W.cols / 256 BlockQ4_Kx8 (one per super-block),
// the groups one after another: the same bytes as the file's rows, and any 8-aligned range of
// rows is still a contiguous sub-matrix. Only matmul and dequantize_row read the layout.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul.h"
#include "tensor/quant.h"

namespace efim::cpu {

// Super-block s of 8 Q4_K rows.
struct BlockQ4_Kx8 {
  uint16_t d[8], dmin[8];     // f16 super-scales of rows 0..7
  uint32_t scales[3][8];      // word i (scale bytes 4i..4i+3) of row r at [i][r]
  uint8_t qs[4][8][8][4];     // [p][g][r][b]: qs byte 32p + 4g + b of row r
};
static_assert(sizeof(BlockQ4_Kx8) == 8 * sizeof(BlockQ4_K));

constexpr int kInterleaveRows = 8;

// Whether matmul computes W interleaved natively on this CPU (the active kernel is AVX-512
// with VNNI) and W is Q4_K in the file's layout with rows % 8 == 0.
bool can_interleave(const WeightMatrix& w);

// Writes W's rows interleaved to out (W's byte size; out != W.data) and returns the matrix
// that reads them (interleave = 8). W must be Q4_K, file layout, rows % 8 == 0.
WeightMatrix interleave_rows8(const WeightMatrix& w, void* out);

// Super-block s of row r of an interleaved W in the file's layout.
BlockQ4_K deinterleave_block(const WeightMatrix& w, int64_t r, int64_t s);

}  // namespace efim::cpu
