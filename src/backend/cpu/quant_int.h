// Integer forms of the weight block types, as the int8-dot kernels compute with them, and the
// activation quantizer for 256-element super-blocks (ggml's Q8_K).
//
// Every super-block type (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) is, per 256 elements,
//     x_i = d * sc_j * q_i - dmin * mn_j,   j = i / 16 (sub-blocks of 16),
// with small integers q_i, sc_j, mn_j. Offsets fold into the min term: Q6_K's q - 32 becomes
// q in 0..63 with mn_j = 32 sc_j and dmin = d, Q3_K's q - 4 becomes q in 0..7 with mn_j = 4 sc_j.
// Against activations a_i = d_a * qa_i quantized per super-block (sums of each 16 kept), a dot is
//     d_a * (d * sum_j sc_j * sum_{i in j} q_i qa_i  -  dmin * sum_j mn_j * bsum_j),
// two exact integer sums per super-block. Every 32-element type (Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, Q8_0) is x_i = d * (q_i - o) + m per block (o = 8 for Q4_0, 16 for Q5_0, else 0;
// m != 0 for Q4_1 and Q5_1); against a_i = d_a * qa_i per 32 (s = d_a * sum_i qa_i):
//     d_a * d * (sum_i q_i qa_i - o * sum_i qa_i) + m * s.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace efim::cpu {

// x_i = d * sc[i / 16] * q[i] - dmin * mn[i / 16].
struct IntSuperBlock {
  int16_t q[256];  // Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63, IQ4_XS -127..113
  int16_t sc[16];  // Q6_K -128..127, Q3_K -32..31, IQ4_XS -32..31, Q4_K / Q5_K 0..63, Q2_K 0..15
  int16_t mn[16];  // Q6_K 32 sc, Q3_K 4 sc, Q2_K / Q4_K / Q5_K their mins, IQ4_XS 0
  float d = 0, dmin = 0;
  // dmin == d and the mins are the folded offset (Q6_K, Q3_K): kernels subtract the two integer
  // sums before converting to float, since they nearly cancel (q - 32 around 0 is q around 32).
  bool folded = false;
};

// x_i = d * (q[i] - o) + m.
struct IntBlock32 {
  int16_t q[32];  // Q4_0 / Q4_1 0..15, Q5_0 / Q5_1 0..31, IQ4_NL -127..113, Q8_0 -127..127
  int16_t o = 0;
  float d = 0, m = 0;
};

// Whether t has 256-element super-blocks.
bool is_superblock_type(DType t);

// Block b of one weight row (row: its first byte) in integer form; t as above.
void decode_superblock(DType t, const uint8_t* row, int64_t b, IntSuperBlock& out);
void decode_block32(DType t, const uint8_t* row, int64_t b, IntBlock32& out);

// Activations quantized per 256-element super-block exactly as ggml's Q8_K:
// x[i][256 s + j] ~= d[i][s] * q[i][256 s + j], q = round(x * iscale) to nearest even with
// iscale = -127 / (the signed value of largest magnitude), d = 1 / iscale (0 for a zero block).
struct QuantizedRowsK {
  int64_t m = 0, k = 0, ns = 0;  // ns = k / 256 super-blocks per row
  std::vector<int8_t> q;         // [m][k]
  std::vector<float> d;          // [m][ns]
  std::vector<int16_t> bsum;     // [m][k / 16] sums of each 16 quants

  void resize(int64_t rows, int64_t cols);
};

// Row i of x [.][out.k] into row i of out (already sized); the scalar and the AVX2 versions
// write identical bytes.
void quantize_row_k_scalar(const float* x, int64_t i, QuantizedRowsK& out);

// The x operand of the mins of interleaved Q4_K / Q5_K (interleave.h): a's 32-element sums of
// sub-blocks j and j + 2 of each super-block as an int16 pair, for j = 0, 1, 4, 5 (the even and
// odd bytes of a mins word), into out[i][s][0..3] (resized to [m][ns][4]).
void paired_sub_block_sums(const QuantizedRowsK& a, std::vector<int32_t>& out);
void quantize_row_k_avx2(const float* x, int64_t i, QuantizedRowsK& out);

}  // namespace efim::cpu
