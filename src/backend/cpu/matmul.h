// Matrix products against weight matrices stored in any weight dtype.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

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
  // 1: rows one after another, as in the file. 8: Q4_K rows interleaved 8 at a time
  // (interleave.h), written by interleave_rows8 where can_interleave holds.
  int8_t interleave = 1;
};

// y[m, n] = sum_k x[m, k] * W[n, k]
// x: [m, W.cols] f32 row-major, y: [m, W.rows] f32 row-major. Uses the fastest kernel for the
// CPU (chosen once at run time) and all threads of the pool.
// Q8_0 / Q4_0 weights: x is quantized to Q8_0 blocks as ggml does (f16 scale, int8 quants,
// rounding to nearest even) once per call and the products are integer dot products per
// 32-block, as in llama.cpp; the relative error this adds is about 2^-8 of sum_k |x_k w_k|.
void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y);

// One product of a batch for matmul_jobs: y = x . W^T as matmul computes it.
struct MatmulJob {
  const float* x = nullptr;
  int64_t m = 0;
  WeightMatrix w;
  float* y = nullptr;
};

// Independent products in one parallel loop: each job runs whole on one thread, jobs are
// handed out dynamically. Every output element is computed by one thread either way, so the
// results equal matmul's on each job bit for bit. For many small products (a mixture-of-experts
// decode step: 16 expert matrices of under 1 MB), where a parallel loop per product costs more
// in hand-offs and stragglers than it gains. Every job is checked before any runs.
void matmul_jobs(ThreadPool& pool, std::span<const MatmulJob> jobs);

// Scalar reference of matmul: the definition every optimised kernel is tested against
// (f64 accumulation of x times the dequantized weights, no activation quantization).
void matmul_reference(const float* x, int64_t m, const WeightMatrix& w, float* y);

// out[cols] = row r of W in f32.
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

// ---- kernel variants (chosen at run time by CPU features) ----
// Avx512 has its own matmul kernels (AVX-512F + AVX-512BW); every other op with a SIMD version
// (norms, RoPE, attention, training GEMM) runs its AVX2 code under it.
enum class CpuKernel : uint8_t { Scalar, Avx2, Avx512 };

std::string_view kernel_name(CpuKernel k);
// Whether this CPU (and OS: the AVX-512 register state must be enabled) can run the variant.
// Avx2 needs AVX2 + FMA + F16C; Avx512 needs those and AVX-512F + AVX-512BW.
bool kernel_supported(CpuKernel k);
// Whether code written for AVX2 may run under variant k (Avx512 includes AVX2).
constexpr bool has_avx2(CpuKernel k) {
  return k == CpuKernel::Avx2 || k == CpuKernel::Avx512;
}
// The fastest variant this CPU supports: Avx512, else Avx2, else Scalar.
CpuKernel best_supported_kernel();
// The variant matmul uses: EFIM_KERNEL=scalar|avx2|avx512 if set (Error if unknown or
// unsupported), else the best one the CPU supports. Decided once per process.
CpuKernel active_kernel();

// matmul with an explicit variant (tests and benchmarks); Error if the CPU lacks it.
void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y,
            CpuKernel kernel);
// matmul_jobs with an explicit variant.
void matmul_jobs(ThreadPool& pool, std::span<const MatmulJob> jobs, CpuKernel kernel);

}  // namespace efim::cpu
