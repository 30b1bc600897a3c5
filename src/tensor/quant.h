// Block quantization formats shared with GGUF files (ggml layouts, bit-exact with llama.cpp's
// reference quantizers), and whole-tensor conversion helpers.
#pragma once

#include <cstdint>
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
// quantize supports F32, F16, BF16, Q8_0 and Q4_0 targets.
std::vector<uint8_t> quantize(const float* x, int64_t n, DType t);
// dequantize supports F32, F16, BF16, Q8_0, Q4_0 and Q4_K sources; data holds
// dtype_row_bytes(t, n) bytes.
void dequantize(const void* data, int64_t n, DType t, float* out);

}  // namespace efim
