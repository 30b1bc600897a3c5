// Integer forms of the block types (see quant_int.h) and the scalar Q8_K activation quantizer.
#include "backend/cpu/quant_int.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace efim::cpu {

namespace {

template <class Block>
const Block& block_at(const uint8_t* row, int64_t b) {
  return reinterpret_cast<const Block*>(row)[b];
}

// The 4-bit codes of a 16-byte nibble array (Q4_0 layout): element l < 16 is the low nibble of
// qs[l], element l + 16 the high nibble.
void nibbles(const uint8_t qs[16], int16_t q[32]) {
  for (int l = 0; l < 16; ++l) {
    q[l] = static_cast<int16_t>(qs[l] & 0x0f);
    q[l + 16] = static_cast<int16_t>(qs[l] >> 4);
  }
}

void five_bits(const uint8_t qs[16], const uint8_t qh[4], int16_t q[32]) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  nibbles(qs, q);
  for (int l = 0; l < 32; ++l) q[l] = static_cast<int16_t>(q[l] | (((h >> l) & 1) << 4));
}

// Q4_K / Q5_K: 32-element sub-block s has a 6-bit scale and min; both 16-halves share them.
void k4_scales(const uint8_t scales[12], IntSuperBlock& o) {
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, mn;
    q4k_scale_min(scales, s, &sc, &mn);
    o.sc[2 * s] = o.sc[2 * s + 1] = sc;
    o.mn[2 * s] = o.mn[2 * s + 1] = mn;
  }
}

}  // namespace

bool is_superblock_type(DType t) {
  return t == DType::Q2_K || t == DType::Q3_K || t == DType::Q4_K || t == DType::Q5_K ||
         t == DType::Q6_K || t == DType::IQ4_XS;
}

void decode_superblock(DType t, const uint8_t* row, int64_t b, IntSuperBlock& o) {
  o.folded = t == DType::Q3_K || t == DType::Q6_K;
  switch (t) {
    case DType::Q2_K: {
      const auto& k = block_at<BlockQ2_K>(row, b);
      o.d = f16_to_f32(k.d);
      o.dmin = f16_to_f32(k.dmin);
      for (int j = 0; j < 16; ++j) {
        o.sc[j] = k.scales[j] & 15;
        o.mn[j] = k.scales[j] >> 4;
      }
      for (int i = 0; i < 256; ++i)  // i = 128h + 32s + l
        o.q[i] = static_cast<int16_t>((k.qs[32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3);
      return;
    }
    case DType::Q3_K: {
      const auto& k = block_at<BlockQ3_K>(row, b);
      o.d = o.dmin = f16_to_f32(k.d);
      for (int j = 0; j < 16; ++j) {
        o.sc[j] = static_cast<int16_t>(q3k_scale(k.scales, j) - 32);
        o.mn[j] = static_cast<int16_t>(4 * o.sc[j]);
      }
      for (int i = 0; i < 256; ++i) {
        const int h = i / 128, s = (i / 32) % 4, l = i % 32;
        const int low = (k.qs[32 * h + l] >> (2 * s)) & 3;
        const int high = (k.hmask[l] >> (4 * h + s)) & 1;
        o.q[i] = static_cast<int16_t>(low | (high << 2));
      }
      return;
    }
    case DType::Q4_K: {
      const auto& k = block_at<BlockQ4_K>(row, b);
      o.d = f16_to_f32(k.d);
      o.dmin = f16_to_f32(k.dmin);
      k4_scales(k.scales, o);
      for (int i = 0; i < 256; ++i) {  // i = 64c + 32 half + l
        const uint8_t byte = k.qs[32 * (i / 64) + i % 32];
        o.q[i] = static_cast<int16_t>((i / 32) % 2 ? byte >> 4 : byte & 0x0f);
      }
      return;
    }
    case DType::Q5_K: {
      const auto& k = block_at<BlockQ5_K>(row, b);
      o.d = f16_to_f32(k.d);
      o.dmin = f16_to_f32(k.dmin);
      k4_scales(k.scales, o);
      for (int i = 0; i < 256; ++i) {
        const int c = i / 64, half = (i / 32) % 2, l = i % 32;
        const uint8_t byte = k.qs[32 * c + l];
        const int low = half ? byte >> 4 : byte & 0x0f;
        o.q[i] = static_cast<int16_t>(low | (((k.qh[l] >> (2 * c + half)) & 1) << 4));
      }
      return;
    }
    case DType::Q6_K: {
      const auto& k = block_at<BlockQ6_K>(row, b);
      o.d = o.dmin = f16_to_f32(k.d);
      for (int j = 0; j < 16; ++j) {
        o.sc[j] = k.scales[j];
        o.mn[j] = static_cast<int16_t>(32 * k.scales[j]);
      }
      for (int i = 0; i < 256; ++i) {  // i = 128h + 32t + l
        const int h = i / 128, t4 = (i / 32) % 4, l = i % 32;
        const uint8_t byte = k.ql[64 * h + 32 * (t4 & 1) + l];
        const int low = t4 < 2 ? byte & 0x0f : byte >> 4;
        o.q[i] = static_cast<int16_t>(low | (((k.qh[32 * h + l] >> (2 * t4)) & 3) << 4));
      }
      return;
    }
    case DType::IQ4_XS: {
      const auto& k = block_at<BlockIQ4_XS>(row, b);
      o.d = f16_to_f32(k.d);
      o.dmin = 0.0f;
      for (int s = 0; s < 8; ++s) {
        const int ls = ((k.scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) |
                       (((k.scales_h >> (2 * s)) & 3) << 4);
        o.sc[2 * s] = o.sc[2 * s + 1] = static_cast<int16_t>(ls - 32);
        o.mn[2 * s] = o.mn[2 * s + 1] = 0;
        int16_t codes[32];
        nibbles(k.qs + 16 * s, codes);
        for (int l = 0; l < 32; ++l) o.q[32 * s + l] = kIq4Values[codes[l]];
      }
      return;
    }
    default:
      fail("decode_superblock: ", dtype_name(t), " has no 256-element super-blocks");
  }
}

void decode_block32(DType t, const uint8_t* row, int64_t b, IntBlock32& o) {
  o.o = 0;
  switch (t) {
    case DType::Q4_0: {
      const auto& k = block_at<BlockQ4_0>(row, b);
      o.d = f16_to_f32(k.d);
      o.o = 8;
      o.m = 0.0f;
      return nibbles(k.qs, o.q);
    }
    case DType::Q4_1: {
      const auto& k = block_at<BlockQ4_1>(row, b);
      o.d = f16_to_f32(k.d);
      o.m = f16_to_f32(k.m);
      return nibbles(k.qs, o.q);
    }
    case DType::Q5_0: {
      const auto& k = block_at<BlockQ5_0>(row, b);
      o.d = f16_to_f32(k.d);
      o.o = 16;
      o.m = 0.0f;
      return five_bits(k.qs, k.qh, o.q);
    }
    case DType::Q5_1: {
      const auto& k = block_at<BlockQ5_1>(row, b);
      o.d = f16_to_f32(k.d);
      o.m = f16_to_f32(k.m);
      return five_bits(k.qs, k.qh, o.q);
    }
    case DType::IQ4_NL: {
      const auto& k = block_at<BlockIQ4_NL>(row, b);
      o.d = f16_to_f32(k.d);
      o.m = 0.0f;
      nibbles(k.qs, o.q);
      for (auto& q : o.q) q = kIq4Values[q];
      return;
    }
    case DType::Q8_0: {
      const auto& k = block_at<BlockQ8_0>(row, b);
      o.d = f16_to_f32(k.d);
      o.m = 0.0f;
      for (int l = 0; l < 32; ++l) o.q[l] = k.qs[l];
      return;
    }
    default:
      fail("decode_block32: ", dtype_name(t), " is not a 32-element block type");
  }
}

void paired_sub_block_sums(const QuantizedRowsK& a, std::vector<int32_t>& bpair) {
  bpair.resize(static_cast<size_t>(a.m * a.ns * 4));
  for (int64_t i = 0; i < a.m; ++i)
    for (int64_t s = 0; s < a.ns; ++s) {
      const int16_t* bs = a.bsum.data() + (i * a.ns + s) * 16;
      int32_t b32[8];
      for (int j = 0; j < 8; ++j) b32[j] = bs[2 * j] + bs[2 * j + 1];
      int32_t* out = &bpair[static_cast<size_t>((i * a.ns + s) * 4)];
      for (int q = 0; q < 4; ++q) {  // pairs (0, 2), (1, 3), (4, 6), (5, 7)
        const int j = (q / 2) * 4 + q % 2;
        out[q] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(b32[j])) |
                                      (static_cast<uint32_t>(static_cast<uint16_t>(b32[j + 2])) << 16));
      }
    }
}

void QuantizedRowsK::resize(int64_t rows, int64_t cols) {
  EFIM_CHECK(cols % kQKBlock == 0, "QuantizedRowsK: ", cols, " columns are not whole super-blocks");
  m = rows;
  k = cols;
  ns = cols / kQKBlock;
  q.resize(static_cast<size_t>(rows * cols));
  d.resize(static_cast<size_t>(rows * ns));
  bsum.resize(static_cast<size_t>(rows * cols / 16));
}

// Exactly ggml's reference Q8_K quantizer (the one its x86 CPU backend runs): the signed value
// of largest magnitude (the first on ties) maps to -127, iscale = -127 / max, q = round(iscale x)
// to nearest even, d = 1 / iscale. Same activations as llama.cpp, so the two engines' K-quant
// products differ only by float summation order.
namespace {
float q8k_iscale(const float* xs) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQKBlock; ++j) {
    if (std::fabs(xs[j]) > amax) {
      amax = std::fabs(xs[j]);
      max = xs[j];
    }
  }
  return amax != 0.0f ? -127.0f / max : 0.0f;
}
}  // namespace

void quantize_row_k_scalar(const float* x, int64_t i, QuantizedRowsK& out) {
  for (int64_t s = 0; s < out.ns; ++s) {
    const float* xs = x + i * out.k + s * kQKBlock;
    const float iscale = q8k_iscale(xs);
    int8_t* q = out.q.data() + i * out.k + s * kQKBlock;
    for (int j = 0; j < kQKBlock; ++j)
      q[j] = static_cast<int8_t>(std::min(127.0f, std::nearbyint(iscale * xs[j])));
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q[16 * g + j];
      out.bsum[static_cast<size_t>((i * out.ns + s) * 16 + g)] = static_cast<int16_t>(sum);
    }
    out.d[static_cast<size_t>(i * out.ns + s)] = iscale != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

}  // namespace efim::cpu
