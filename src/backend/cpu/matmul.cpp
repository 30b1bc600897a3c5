#include "backend/cpu/matmul.h"

#include <vector>

namespace efim::cpu {

// Placeholder dispatch: rows of W split across threads, scalar inner loop. The SIMD kernels
// replace this body; matmul_reference stays the definition.
void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  pool.parallel_for(w.rows, 16, [&](int, int64_t n0, int64_t n1) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t n = n0; n < n1; ++n) {
      dequantize_row(w, n, row.data());
      for (int64_t i = 0; i < m; ++i) {
        const float* xi = x + i * w.cols;
        float acc = 0;
        for (int64_t k = 0; k < w.cols; ++k) acc += xi[k] * row[k];
        y[i * w.rows + n] = acc;
      }
    }
  });
}

}  // namespace efim::cpu
