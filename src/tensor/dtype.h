// Element types of weights and activations, with their storage layout.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace efim {

// Quantized types store blocks in ggml's layouts (tensor/quant.h has each one): 32-element
// blocks Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and 256-element super-blocks Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K, IQ4_XS. The codes are efim's own (ggml ids: format/gguf_value.cpp).
enum class DType : uint8_t {
  F32, F16, BF16, Q8_0, Q4_0, Q4_K, I32, I8,
  Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS,
};

// Whether t is one of the block-quantized weight types above.
bool is_quantized(DType t);

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int block_elems;   // elements per block (1 for plain types)
  int block_bytes;   // bytes per block
};

const DTypeInfo& dtype_info(DType t);
std::string_view dtype_name(DType t);
// Parses names as printed by dtype_name ("f32", "bf16", "q8_0", ...); throws Error otherwise.
DType dtype_from_name(std::string_view name);

// Bytes needed for n elements; throws Error if n is not a multiple of the block size or the
// product overflows.
uint64_t dtype_row_bytes(DType t, uint64_t n_elems);

// ---- scalar conversions (IEEE half and bfloat16) ----
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace efim
