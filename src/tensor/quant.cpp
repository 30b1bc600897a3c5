#include "tensor/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "tensor/quant_internal.h"

namespace efim {

namespace {

int64_t blocks_of(int64_t n, int block, const char* what) {
  EFIM_CHECK(n >= 0 && n % block == 0, what, ": element count ", n,
             " is not a non-negative multiple of the block size ", block);
  return n / block;
}

}  // namespace

void quantize_row_q8_0(const float* x, int64_t n, BlockQ8_0* out) {
  const int64_t nb = blocks_of(n, kQBlock, "quantize_row_q8_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;  // multiply by the reciprocal, as ggml does
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQBlock; ++j) out[b].qs[j] = static_cast<int8_t>(std::round(xb[j] * id));
  }
}

void quantize_row_q4_0(const float* x, int64_t n, BlockQ4_0* out) {
  const int64_t nb = blocks_of(n, kQBlock, "quantize_row_q4_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float* xb = x + b * kQBlock;
    // The signed value of largest magnitude (the first one on ties) maps to quant 0 (= -8 * d),
    // which uses the asymmetric range [-8, 7] fully on that side.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQBlock; ++j) {
      if (amax < std::fabs(xb[j])) {
        amax = std::fabs(xb[j]);
        max = xb[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQBlock / 2; ++j) {
      // x*id lies in [-8, 8], so x*id + 8.5 >= 0.5 and truncation is floor (round half up).
      auto q = [&](float v) {
        return static_cast<uint8_t>(std::min(15, static_cast<int>(v * id + 8.5f)));
      };
      out[b].qs[j] = static_cast<uint8_t>(q(xb[j]) | (q(xb[j + kQBlock / 2]) << 4));
    }
  }
}

void dequantize_row_q8_0(const BlockQ8_0* in, int64_t n, float* out) {
  const int64_t nb = blocks_of(n, kQBlock, "dequantize_row_q8_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    for (int j = 0; j < kQBlock; ++j) out[b * kQBlock + j] = d * in[b].qs[j];
  }
}

void dequantize_row_q4_0(const BlockQ4_0* in, int64_t n, float* out) {
  const int64_t nb = blocks_of(n, kQBlock, "dequantize_row_q4_0");
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    float* o = out + b * kQBlock;
    for (int j = 0; j < kQBlock / 2; ++j) {
      o[j] = d * (static_cast<int>(in[b].qs[j] & 0x0f) - 8);
      o[j + kQBlock / 2] = d * (static_cast<int>(in[b].qs[j] >> 4) - 8);
    }
  }
}

// Scales and mins 0..3 sit in the low 6 bits of bytes 0..3 and 4..7; those of sub-blocks 4..7
// put their low 4 bits in bytes 8..11 (scale low nibble, min high nibble) and their top 2 bits
// in the spare top bits of bytes 0..3 (scales) and 4..7 (mins).
void q4k_scale_min(const uint8_t scales[12], int s, uint8_t* scale, uint8_t* min) {
  if (s < 4) {
    *scale = scales[s] & 63;
    *min = scales[s + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((scales[s + 4] & 0x0f) | ((scales[s - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((scales[s + 4] >> 4) | ((scales[s] >> 6) << 4));
  }
}

void dequantize_row_q4_k(const BlockQ4_K* in, int64_t n, float* out) {
  const int64_t nb = blocks_of(n, kQKBlock, "dequantize_row_q4_k");
  for (int64_t b = 0; b < nb; ++b) {
    const float d = f16_to_f32(in[b].d);
    const float dmin = f16_to_f32(in[b].dmin);
    for (int c = 0; c < 4; ++c) {  // 4 chunks of 32 bytes = 64 elements = 2 sub-blocks
      const uint8_t* q = in[b].qs + 32 * c;
      uint8_t sc_lo, m_lo, sc_hi, m_hi;
      q4k_scale_min(in[b].scales, 2 * c, &sc_lo, &m_lo);
      q4k_scale_min(in[b].scales, 2 * c + 1, &sc_hi, &m_hi);
      const float d_lo = d * sc_lo, min_lo = dmin * m_lo;
      const float d_hi = d * sc_hi, min_hi = dmin * m_hi;
      float* o = out + b * kQKBlock + 64 * c;
      for (int j = 0; j < 32; ++j) {
        o[j] = d_lo * (q[j] & 0x0f) - min_lo;
        o[j + 32] = d_hi * (q[j] >> 4) - min_hi;
      }
    }
  }
}

std::vector<uint8_t> quantize(const float* x, int64_t n, DType t,
                              std::span<const float> importance) {
  EFIM_CHECK(n >= 0, "quantize: negative element count ", n);
  std::vector<uint8_t> out(dtype_row_bytes(t, static_cast<uint64_t>(n)));
  if (!importance.empty() && is_quantized(t) && t != DType::Q8_0) {
    const auto cols = static_cast<int64_t>(importance.size());
    EFIM_CHECK(n % cols == 0 && cols % dtype_info(t).block_elems == 0, "quantize: importance of ",
               cols, " columns for ", n, " elements of ", dtype_name(t),
               " (rows must be whole, and whole blocks of ", dtype_info(t).block_elems, ")");
    for (float v : importance)
      EFIM_CHECK(std::isfinite(v) && v >= 0, "quantize: importance ", v, " is not finite and >= 0");
    if (quantize_more_blocks(x, n, t, out.data(), importance)) return out;
  }
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(out.data(), x, out.size());
      break;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h = t == DType::F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case DType::Q8_0:  // importance changes nothing (nor does it in llama.cpp)
      quantize_row_q8_0(x, n, reinterpret_cast<BlockQ8_0*>(out.data()));
      break;
    case DType::Q4_0:
      quantize_row_q4_0(x, n, reinterpret_cast<BlockQ4_0*>(out.data()));
      break;
    default:
      if (quantize_more_blocks(x, n, t, out.data())) break;
      fail("quantize: cannot produce dtype ", dtype_name(t),
           " (supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, iq4_xs)");
  }
  return out;
}

void dequantize(const void* data, int64_t n, DType t, float* out) {
  EFIM_CHECK(n >= 0, "dequantize: negative element count ", n);
  const auto* p = static_cast<const uint8_t*>(data);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(out, p, static_cast<size_t>(n) * 4);
      return;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case DType::Q8_0:
      return dequantize_row_q8_0(reinterpret_cast<const BlockQ8_0*>(p), n, out);
    case DType::Q4_0:
      return dequantize_row_q4_0(reinterpret_cast<const BlockQ4_0*>(p), n, out);
    case DType::Q4_K:
      return dequantize_row_q4_k(reinterpret_cast<const BlockQ4_K*>(p), n, out);
    default:
      blocks_of(n, dtype_info(t).block_elems, "dequantize");
      if (dequantize_more_blocks(p, n, t, out)) return;
      fail("dequantize: unsupported dtype ", dtype_name(t));
  }
}

}  // namespace efim
