#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "base/error.h"
#include "tensor/quant.h"

namespace efim::cpu {

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  EFIM_CHECK(r >= 0 && r < w.rows, "dequantize_row: row ", r, " outside [0, ", w.rows, ")");
  if (w.interleave != 1) {  // the row in the file's layout first
    static thread_local std::vector<uint8_t> row;
    row.resize(dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols)));
    deinterleave_row(w, r, row.data());
    dequantize(row.data(), w.cols, w.dtype, out);
    return;
  }
  dequantize(detail::weight_row(w, r), w.cols, w.dtype, out);
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
