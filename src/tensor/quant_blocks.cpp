// Dequantizers of the block types llama.cpp's quantizer writes beside Q8_0 / Q4_0 / Q4_K
// (layouts in tensor/quant.h). Each computes x with the float operations of ggml's reference
// dequantizer, in the same order, so its output equals llama.cpp's to_float bit for bit
// (tests/backend/quant_blocks_test.cpp checks that against the library).
#include <cstring>

#include "base/error.h"
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

namespace efim {

const int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

int q3k_scale(const uint8_t scales[12], int j) {
  // Low 4 bits: nibbles of bytes 0..7 (j < 8: low nibble of byte j, else high nibble of byte
  // j - 8); high 2 bits: bits 2 (j / 4) .. of byte 8 + j % 4.
  const int low = j < 8 ? scales[j] & 15 : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | (high << 4);
}

namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 5-bit quants of a Q5_0 / Q5_1 block: element j < 16 is the low nibble of qs[j] with bit j
// of qh, element j + 16 the high nibble with bit j + 16.
void q5_quants(const uint8_t qs[16], const uint8_t qh[4], int q[32]) {
  const uint32_t h = load_u32(qh);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((h >> j) << 4) & 0x10);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>((h >> (j + 12)) & 0x10);
  }
}

void dequantize_q4_1(const BlockQ4_1* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += 32) {
    const float d = f16_to_f32(in[b].d), m = f16_to_f32(in[b].m);
    for (int j = 0; j < 16; ++j) {
      out[j] = static_cast<float>(in[b].qs[j] & 0x0f) * d + m;
      out[j + 16] = static_cast<float>(in[b].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += 32) {
    const float d = f16_to_f32(in[b].d);
    int q[32];
    q5_quants(in[b].qs, in[b].qh, q);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j] - 16) * d;
  }
}

void dequantize_q5_1(const BlockQ5_1* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += 32) {
    const float d = f16_to_f32(in[b].d), m = f16_to_f32(in[b].m);
    int q[32];
    q5_quants(in[b].qs, in[b].qh, q);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q[j]) * d + m;
  }
}

void dequantize_iq4_nl(const BlockIQ4_NL* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b, out += 32) {
    const float d = f16_to_f32(in[b].d);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * kIq4Values[in[b].qs[j] & 0x0f];
      out[j + 16] = d * kIq4Values[in[b].qs[j] >> 4];
    }
  }
}

void dequantize_q2_k(const BlockQ2_K* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d), dmin = f16_to_f32(in[b].dmin);
    for (int j = 0; j < 16; ++j, out += 16) {  // sub-block j = 128h + 32s + 16 (j & 1)
      const int h = j / 8, s = (j / 2) % 4, l0 = 16 * (j & 1);
      const float dl = d * static_cast<float>(in[b].scales[j] & 15);
      const float ml = dmin * static_cast<float>(in[b].scales[j] >> 4);
      for (int l = 0; l < 16; ++l)
        out[l] = dl * static_cast<float>((in[b].qs[32 * h + l0 + l] >> (2 * s)) & 3) - ml;
    }
  }
}

void dequantize_q3_k(const BlockQ3_K* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int j = 0; j < 16; ++j, out += 16) {
      const int h = j / 8, s = (j / 2) % 4, l0 = 16 * (j & 1);
      const float dl = d * static_cast<float>(q3k_scale(in[b].scales, j) - 32);
      for (int l = 0; l < 16; ++l) {
        const int low = (in[b].qs[32 * h + l0 + l] >> (2 * s)) & 3;
        const bool high = (in[b].hmask[l0 + l] >> (4 * h + s)) & 1;
        out[l] = dl * static_cast<float>(low - (high ? 0 : 4));
      }
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d), dmin = f16_to_f32(in[b].dmin);
    for (int c = 0; c < 4; ++c) {  // 64 elements: low nibbles, then high nibbles
      const uint8_t* ql = in[b].qs + 32 * c;
      for (int half = 0; half < 2; ++half, out += 32) {
        uint8_t sc, m;
        q4k_scale_min(in[b].scales, 2 * c + half, &sc, &m);
        const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          const int low = half ? ql[l] >> 4 : ql[l] & 0x0f;
          const int high = (in[b].qh[l] >> (2 * c + half)) & 1 ? 16 : 0;
          out[l] = dl * static_cast<float>(low + high) - ml;
        }
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 4; ++t, out += 32) {
        const uint8_t* ql = in[b].ql + 64 * h + 32 * (t & 1);
        const uint8_t* qh = in[b].qh + 32 * h;
        for (int l = 0; l < 32; ++l) {
          const int low = t < 2 ? ql[l] & 0x0f : ql[l] >> 4;
          const int q = (low | (((qh[l] >> (2 * t)) & 3) << 4)) - 32;
          const int j = 8 * h + 2 * t + l / 16;  // sub-block of 16
          out[l] = d * static_cast<float>(in[b].scales[j]) * static_cast<float>(q);
        }
      }
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* in, int64_t nb, float* out) {
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int j = 0; j < 8; ++j, out += 32) {
      const int ls = ((in[b].scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) |
                     (((in[b].scales_h >> (2 * j)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = in[b].qs + 16 * j;
      for (int l = 0; l < 16; ++l) {
        out[l] = dl * kIq4Values[qs[l] & 0x0f];
        out[l + 16] = dl * kIq4Values[qs[l] >> 4];
      }
    }
  }
}

template <class Block>
const Block* blocks(const void* p) {
  return static_cast<const Block*>(p);
}

}  // namespace

bool dequantize_more_blocks(const void* in, int64_t n, DType t, float* out) {
  const int64_t nb = n / dtype_info(t).block_elems;
  switch (t) {
    case DType::Q4_1:
      return dequantize_q4_1(blocks<BlockQ4_1>(in), nb, out), true;
    case DType::Q5_0:
      return dequantize_q5_0(blocks<BlockQ5_0>(in), nb, out), true;
    case DType::Q5_1:
      return dequantize_q5_1(blocks<BlockQ5_1>(in), nb, out), true;
    case DType::IQ4_NL:
      return dequantize_iq4_nl(blocks<BlockIQ4_NL>(in), nb, out), true;
    case DType::Q2_K:
      return dequantize_q2_k(blocks<BlockQ2_K>(in), nb, out), true;
    case DType::Q3_K:
      return dequantize_q3_k(blocks<BlockQ3_K>(in), nb, out), true;
    case DType::Q5_K:
      return dequantize_q5_k(blocks<BlockQ5_K>(in), nb, out), true;
    case DType::Q6_K:
      return dequantize_q6_k(blocks<BlockQ6_K>(in), nb, out), true;
    case DType::IQ4_XS:
      return dequantize_iq4_xs(blocks<BlockIQ4_XS>(in), nb, out), true;
    default:
      return false;
  }
}

}  // namespace efim
