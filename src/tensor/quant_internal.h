// Shared between the files of tensor/: not part of its interface.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/dtype.h"

namespace efim {

// Dequantizes n elements of the block types in quant_blocks.cpp (Q4_1, Q5_0, Q5_1, IQ4_NL,
// Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS); false for any other dtype. n is whole blocks (checked by
// the caller).
bool dequantize_more_blocks(const void* in, int64_t n, DType t, float* out);

// Quantizes n elements (whole blocks, checked by the caller) into Q2_K..Q6_K, IQ4_NL, IQ4_XS,
// Q4_1, Q5_0, Q5_1, and with importance Q4_0 (quant_k.cpp); false for any other dtype (and for
// Q4_0 without importance). importance: empty, or one weight per column of rows of
// importance.size() elements (a multiple of the block size, checked by the caller).
bool quantize_more_blocks(const float* x, int64_t n, DType t, void* out,
                          std::span<const float> importance = {});

}  // namespace efim
