// f32 GEMM for training: C[m, n] (+)= op(A)[m, k] . op(B)[k, n], where op transposes or not.
//
// The three products a linear layer y = x W^T needs (x [tokens, in], W [out, in]):
//   forward   y  = x . W^T        (a = x,  b = W,  trans_b)
//   backward  dx = dy . W         (a = dy, b = W)
//   backward  dW += dy^T . x      (a = dy, b = x,  trans_a, accumulate)
// Every operand has a leading dimension (floats between rows as stored), so a head's slice of a
// fused q|k|v activation is an operand without a copy.
//
// Algorithm (both variants): blocks of op(A) (kMC x kKC) and op(B) (kKC x kNC) are packed into
// slivers of 6 rows and 16 columns, and a 6 x 16 micro-kernel accumulates outer products in
// registers; work items (an m block times an n block) are handed to the pool's threads.
#pragma once

#include <cstdint>

#include "backend/cpu/matmul.h"
#include "base/thread_pool.h"

namespace efim::cpu {

struct TrainGemm {
  int64_t m = 0, n = 0, k = 0;
  // op(A)(i, p) = trans_a ? a[p * lda + i] : a[i * lda + p]
  const float* a = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  // op(B)(p, j) = trans_b ? b[j * ldb + p] : b[p * ldb + j]
  const float* b = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  float* c = nullptr;  // [m, n], rows ldc floats apart
  int64_t ldc = 0;
  bool accumulate = false;  // C += product (else C = product)
};

// Checks shapes and strides (Error naming the field), then runs with the active kernel
// (cpu::active_kernel()) on all pool threads.
void train_gemm(ThreadPool& pool, const TrainGemm& g);
void train_gemm(ThreadPool& pool, const TrainGemm& g, CpuKernel kernel);
// The same on the calling thread only (for callers that already parallelise, e.g. attention
// over heads).
void train_gemm_serial(const TrainGemm& g);

// The definition: f64 accumulation, plain loops.
void train_gemm_reference(const TrainGemm& g);

}  // namespace efim::cpu
