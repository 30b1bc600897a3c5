// Block quantization formats shared with GGUF files (ggml layouts, bit-exact with llama.cpp's
// reference quantizers), and whole-tensor conversion helpers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/dtype.h"

namespace efim {

// Elements per block of the 32-element formats and of Q4_K super-blocks.
constexpr int kQBlock = 32;
constexpr int kQKBlock = 256;

// Q8_0: x[i] = d * qs[i], d = amax / 127 stored as IEEE half.
struct BlockQ8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];  // quants in [-127, 127]
};
static_assert(sizeof(BlockQ8_0) == 34);

// Q4_0: x[i] = d * (nibble_i - 8); qs[j] holds element j in its low nibble and element j + 16
// in its high nibble.
struct BlockQ4_0 {
  uint16_t d;      // f16 scale (negative when the largest-magnitude element is positive)
  uint8_t qs[16];  // 32 nibbles
};
static_assert(sizeof(BlockQ4_0) == 18);

// Q4_K super-block of 256 elements = 8 sub-blocks of 32. Sub-block s has a 6-bit scale sc_s
// and a 6-bit min m_s packed in `scales` (see q4k_scale_min); x = d*sc_s*q - dmin*m_s.
// Nibbles: bytes [32c, 32c+32) of qs hold sub-block 2c in low nibbles and 2c+1 in high nibbles.
struct BlockQ4_K {
  uint16_t d;          // f16 super-scale of the sub-block scales
  uint16_t dmin;       // f16 super-scale of the sub-block mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];     // 256 nibbles
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q4_1: x[i] = d * nibble_i + m (nibbles as in Q4_0).
struct BlockQ4_1 {
  uint16_t d, m;   // f16 scale and offset
  uint8_t qs[16];  // 32 nibbles
};
static_assert(sizeof(BlockQ4_1) == 20);

// Q5_0: x[i] = d * (q_i - 16), q_i = nibble_i | (bit i of qh) << 4 (qh read as little-endian
// uint32; nibbles as in Q4_0).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// Q5_1: x[i] = d * q_i + m, q_i as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL: x[i] = d * kIq4Values[nibble_i] (nibbles as in Q4_0): 4-bit codes of a non-uniform
// grid.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);
extern const int8_t kIq4Values[16];

// Q2_K: 16 sub-blocks of 16; x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q 2-bit.
// Element 128h + 32s + l (h < 2, s < 4, l < 32) is bits 2s..2s+1 of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16; x = d * (s_j - 32) * (q - 4), s_j 6-bit (see q3k_scale), q 3-bit:
// element 128h + 32s + l takes bits 2s..2s+1 of qs[32h + l] and, as bit 2, bit 4h + s of
// hmask[l].
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

// Q5_K: as Q4_K plus a fifth bit: element 64c + l (low nibbles) has bit 2c of qh[l], element
// 64c + 32 + l (high nibbles) bit 2c + 1.
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// Q6_K: 16 sub-blocks of 16; x = d * scales[j] * (q - 32), q 6-bit. In half h (128 elements),
// element 128h + 32t + l (t < 4) has its low 4 bits in ql[64h + l + 32 (t & 1)] (low nibble for
// t < 2, high for t >= 2) and its top 2 bits in bits 2t..2t+1 of qh[32h + l].
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// IQ4_XS: 8 sub-blocks of 32; x = d * (ls_j - 32) * kIq4Values[nibble], ls_j 6-bit: low 4 bits
// in scales_l[j / 2] (low nibble for even j), high 2 bits in bits 2j..2j+1 of scales_h. Sub-block
// j's nibbles are qs[16j..16j+16) as in Q4_0.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// Sub-block j (0..15) scale of a Q3_K block, in [0, 63] (subtract 32 for its value).
int q3k_scale(const uint8_t scales[12], int j);

// ---- one row (n must be a multiple of the block size; throws Error otherwise) ----
// Q8_0 rounds half away from zero, Q4_0 computes floor(x/d + 8.5) clamped to 15: both exactly
// as ggml's reference quantizers, so files we write match llama.cpp's byte for byte.
void quantize_row_q8_0(const float* x, int64_t n, BlockQ8_0* out);
void quantize_row_q4_0(const float* x, int64_t n, BlockQ4_0* out);
void dequantize_row_q8_0(const BlockQ8_0* in, int64_t n, float* out);
void dequantize_row_q4_0(const BlockQ4_0* in, int64_t n, float* out);
void dequantize_row_q4_k(const BlockQ4_K* in, int64_t n, float* out);

// Sub-block s (0..7) scale and min of a Q4_K block, each in [0, 63].
void q4k_scale_min(const uint8_t scales[12], int s, uint8_t* scale, uint8_t* min);

// ---- whole tensors of n elements (rows concatenated; n a multiple of the block size) ----
// quantize supports F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (ggml's reference rounding)
// and Q2_K..Q6_K, IQ4_NL, IQ4_XS (a scale search of efim's own, quant_k.cpp) targets.
// importance: empty, or one weight >= 0 per column of rows of importance.size() elements (an
// importance matrix's entry for this tensor): the quantized types but Q8_0 then fit their scales
// to the importance-weighted error (Q4_0..Q5_1 search instead of ggml's reference rounding).
std::vector<uint8_t> quantize(const float* x, int64_t n, DType t,
                              std::span<const float> importance = {});
// dequantize supports every dtype except I32 and I8 (Error for those); data holds
// dtype_row_bytes(t, n) bytes. Each block type's formula is the one ggml's dequantizer uses,
// in the same float operations, so the results equal llama.cpp's bit for bit.
void dequantize(const void* data, int64_t n, DType t, float* out);

}  // namespace efim
