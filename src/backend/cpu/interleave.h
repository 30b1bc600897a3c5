// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_NL and IQ4_XS weight rows interleaved 8 at a
// time, the layout of
// the decode GEMVs of matmul_panel_avx512.cpp: in the file's layout each 32-weight chunk of a row costs the row
// kernels a madd and a scale shuffle; with 8 rows side by side, one 32-byte register holds 4
// bytes of each of 8 rows (int32 lane r = row r), so a dot instruction serves 8 rows and the
// sub-block scales cost one multiply per 4 (Q6_K) or 8 (Q4_K) dot instructions.
//
// Rows [8g, 8g + 8) form group g, stored as one block of 8 rows per block of the dtype
// (BlockQ2_Kx8 .. BlockQ6_Kx8, BlockIQ4_XSx8 per super-block, BlockQ8_0x8 or
// BlockQ4_0x8 per 32 weights), the groups one after another; the last rows % 8 rows (a vocabulary of 151669 tokens leaves 5)
// follow in the file's layout. The same bytes as the file's rows (Q8_0's quants with their
// sign bit flipped), and any 8-aligned range of rows is still a contiguous sub-matrix. Only
// matmul and dequantize_row read the layout.
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

// Super-block s of 8 Q6_K rows. ql bytes 64h + 32c + 4g.. and qh bytes 32h + 4g.. hold
// elements 128h + 32k + 4g.. (k = 0..3: ql low nibbles of c = 0, of c = 1, high nibbles of
// c = 0, of c = 1; qh bit pair k). The three registers of one (h, g) lie side by side, in the
// order the GEMV reads them (three streams 256 bytes apart measured 3.5x slower from DRAM).
struct BlockQ6_Kx8 {
  uint16_t d[8];              // f16 super-scales of rows 0..7
  int8_t scales[16][8];       // scale of 16-element sub-block j of row r at [j][r]
  uint8_t q[2][8][3][8][4];   // [h][g][0, 1: ql of c = 0, 1; 2: qh][r][b]: byte 4g + b of row r
};
static_assert(sizeof(BlockQ6_Kx8) == 8 * sizeof(BlockQ6_K));

// Super-block s of 8 Q5_K rows: Q4_K's layout plus the fifth bits, qh bytes 4g..4g+3 of the 8
// rows in one register (bit c of qh byte j is element 32c + j: register g serves every
// sub-block of its 4 bytes). The fifth bits come first, read with the first sub-block.
struct BlockQ5_Kx8 {
  uint16_t d[8], dmin[8];     // f16 super-scales of rows 0..7
  uint32_t scales[3][8];      // word i (scale bytes 4i..4i+3) of row r at [i][r]
  uint8_t qh[8][8][4];        // [g][r][b]: qh byte 4g + b of row r
  uint8_t qs[4][8][8][4];     // [p][g][r][b]: qs byte 32p + 4g + b of row r
};
static_assert(sizeof(BlockQ5_Kx8) == 8 * sizeof(BlockQ5_K));

// Block b (weights 32b..32b+31) of 8 Q8_0 rows. The quants are stored biased, q + 128 (the
// sign bit flipped), as the unsigned operand of dpbusd: sum (q + 128) x = q.x + 128 sum x.
struct BlockQ8_0x8 {
  uint16_t d[8];              // f16 scales of rows 0..7
  uint8_t qs[8][8][4];        // [g][r][b]: quant 4g + b of row r, plus 128
};
static_assert(sizeof(BlockQ8_0x8) == 8 * sizeof(BlockQ8_0));

// Block b (weights 32b..32b+31) of 8 Q4_0 or IQ4_NL rows (the same 18-byte blocks): qs byte
// 4g + i of a row holds element 4g + i (low nibble) and 16 + 4g + i (high nibble).
struct BlockQ4_0x8 {
  uint16_t d[8];              // f16 scales of rows 0..7
  uint8_t qs[4][8][4];        // [g][r][i]: qs byte 4g + i of row r
};
static_assert(sizeof(BlockQ4_0x8) == 8 * sizeof(BlockQ4_0));

// Super-block s of 8 IQ4_XS rows: qs bytes 16j + 4g.. of the 8 rows in one register, whose
// low nibbles are elements 32j + 4g.. and high nibbles 32j + 16 + 4g.. of sub-block j.
struct BlockIQ4_XSx8 {
  uint16_t d[8];              // f16 super-scales of rows 0..7
  uint16_t scales_h[8];       // scales_h of row r
  uint32_t scales_l[8];       // the 4 scales_l bytes of row r as one word
  uint8_t qs[8][4][8][4];     // [j][g][r][b]: qs byte 16j + 4g + b of row r
};
static_assert(sizeof(BlockIQ4_XSx8) == 8 * sizeof(BlockIQ4_XS));

// Super-block s of 8 Q3_K rows. Register (g, h) holds qs bytes 32h + 4g.. of the 8 rows and
// register (g, hmask) their hmask bytes 4g..: element 128h + 32k + 4g + b (k = 0..3, chunk
// c = 4h + k) takes bits 2k, 2k + 1 of the first and, as bit 2, bit c of the second. The three
// registers of one g lie side by side (as Q6_K's), read together for all 8 chunks.
struct BlockQ3_Kx8 {
  uint16_t d[8];              // f16 super-scales of rows 0..7
  uint32_t scales[3][8];      // word i (scale bytes 4i..4i+3) of row r at [i][r]
  uint8_t q[8][3][8][4];      // [g][0: hmask, 1 + h: qs of h][r][b]: byte 4g + b (+ 32h) of row r
};
static_assert(sizeof(BlockQ3_Kx8) == 8 * sizeof(BlockQ3_K));

// Super-block s of 8 Q2_K rows: Q3_K's qs registers without the hmask, and the 16 scale bytes
// (scale low nibble, min high nibble of 16-element sub-block j) as 4 words per row.
struct BlockQ2_Kx8 {
  uint16_t d[8], dmin[8];     // f16 super-scales of rows 0..7
  uint32_t scales[4][8];      // word i (scale bytes 4i..4i+3) of row r at [i][r]
  uint8_t qs[8][2][8][4];     // [g][h][r][b]: qs byte 32h + 4g + b of row r
};
static_assert(sizeof(BlockQ2_Kx8) == 8 * sizeof(BlockQ2_K));

constexpr int kInterleaveRows = 8;

// Whether t has an interleaved layout (Q2_K..Q6_K, Q8_0, Q4_0, IQ4_NL, IQ4_XS).
bool has_interleaved_layout(DType t);
// Whether t is one of the 32-element block types with a layout (Q8_0, Q4_0, IQ4_NL).
bool is_block32_x8(DType t);

// Whether matmul computes W interleaved natively on this CPU and W is in the file's layout with
// at least 8 rows: every type with a layout wherever the active kernel is AVX2 or AVX-512.
bool computes_interleaved(DType t, CpuKernel kernel);
bool can_interleave(const WeightMatrix& w);

// Writes W's rows interleaved to out (W's byte size: W's own bytes, rewritten in place, or
// memory apart from them) and returns the matrix that reads them (interleave = 8). W must be
// one of those types, file layout, rows >= 8. With a pool, groups are rewritten in
// parallel.
WeightMatrix interleave_rows8(const WeightMatrix& w, void* out, ThreadPool* pool = nullptr);

// Row r of an interleaved W in the file's layout: dtype_row_bytes(W.dtype, W.cols) bytes.
void deinterleave_row(const WeightMatrix& w, int64_t r, void* out);

}  // namespace efim::cpu
