#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/error.h"

namespace efim::cpu {

namespace {
const uint8_t* row_ptr(const WeightMatrix& w, int64_t r) {
  return static_cast<const uint8_t*>(w.data) +
         static_cast<uint64_t>(r) * dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
}
}  // namespace

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  const uint8_t* p = row_ptr(w, r);
  switch (w.dtype) {
    case DType::F32:
      for (int64_t i = 0; i < w.cols; ++i) std::memcpy(&out[i], p + 4 * i, 4);
      return;
    case DType::F16:
    case DType::BF16:
      for (int64_t i = 0; i < w.cols; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = w.dtype == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = p + 34 * b;
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        float d = f16_to_f32(d16);
        for (int i = 0; i < 32; ++i) out[32 * b + i] = d * static_cast<int8_t>(blk[2 + i]);
      }
      return;
    case DType::Q4_0:
      for (int64_t b = 0; b < w.cols / 32; ++b) {
        const uint8_t* blk = p + 18 * b;
        uint16_t d16;
        std::memcpy(&d16, blk, 2);
        float d = f16_to_f32(d16);
        for (int i = 0; i < 16; ++i) {
          out[32 * b + i] = d * (static_cast<int>(blk[2 + i] & 0x0f) - 8);
          out[32 * b + 16 + i] = d * (static_cast<int>(blk[2 + i] >> 4) - 8);
        }
      }
      return;
    default:
      fail("dequantize_row: unsupported weight dtype ", dtype_name(w.dtype));
  }
}

void matmul_reference(const float* x, int64_t m, const WeightMatrix& w, float* y) {
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t n = 0; n < w.rows; ++n) {
    dequantize_row(w, n, row.data());
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * w.cols;
      double acc = 0;
      for (int64_t k = 0; k < w.cols; ++k) acc += static_cast<double>(xi[k]) * row[k];
      y[i * w.rows + n] = static_cast<float>(acc);
    }
  }
}

}  // namespace efim::cpu
