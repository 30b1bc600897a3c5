// Matrix products against weight matrices stored in any weight dtype.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace efim::cpu {

// A weight matrix W[rows, cols] in row-major order; each row holds `cols` elements of `dtype`
// (rows are dtype_row_bytes(dtype, cols) bytes apart). For a linear layer rows = out features.
struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// y[m, n] = sum_k x[m, k] * W[n, k]
// x: [m, W.cols] f32 row-major, y: [m, W.rows] f32 row-major. Uses the fastest kernel for the
// CPU (chosen once at run time) and all threads of the pool.
void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y);

// Scalar reference of matmul: the definition every optimised kernel is tested against.
void matmul_reference(const float* x, int64_t m, const WeightMatrix& w, float* y);

// out[cols] = row r of W in f32.
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace efim::cpu
