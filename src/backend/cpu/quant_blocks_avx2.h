// Loading Q8_0 / Q4_0 weight blocks into AVX2 registers, shared by the AVX2 and AVX-512 int8
// kernels. Include it as avx2_helpers.h is included (after the target pragma), and include
// tensor/quant.h before that pragma, so its inline functions are never compiled for AVX2.
#pragma once

#include <cstdint>

#include "backend/cpu/avx2_helpers.h"
#include "tensor/quant.h"

namespace efim::cpu {
namespace {  // internal linkage, as in avx2_helpers.h

// An f16 value (a Q8_0 / Q4_0 block scale) in f32.
inline float f16(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Block b of a Q8_0 or Q4_0 weight row: its 32 quants (Q4_0 nibbles unpacked to 0..15) and, in
// dw, its scale.
template <DType T>
inline __m256i load_weight_block(const uint8_t* row, int64_t b, float& dw) {
  if constexpr (T == DType::Q4_0) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    dw = f16(blk->d);
    return unpack_q4(blk->qs);
  } else {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    dw = f16(blk->d);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  }
}

}  // namespace
}  // namespace efim::cpu
