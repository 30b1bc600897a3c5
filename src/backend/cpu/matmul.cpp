// Kernel selection and argument checks; the arithmetic lives in matmul_*.cpp.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "base/error.h"

namespace efim::cpu {

std::string_view kernel_name(CpuKernel k) {
  switch (k) {
    case CpuKernel::Scalar:
      return "scalar";
    case CpuKernel::Avx2:
      return "avx2";
    case CpuKernel::Avx512:
      return "avx512";
  }
  return "unknown";
}

bool kernel_supported(CpuKernel k) {
  switch (k) {
    case CpuKernel::Scalar:
      return true;
    case CpuKernel::Avx2:
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case CpuKernel::Avx512:
      // libgcc sets its AVX-512 feature bits only when the OS has enabled the opmask and zmm
      // register state (XCR0), so this also says the OS supports it.
      return kernel_supported(CpuKernel::Avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw");
  }
  return false;
}

namespace detail {
bool avx512_vnni_supported() {  // asked on every block matmul: CPUID once
  static const bool supported = [] {
    __builtin_cpu_init();
    return kernel_supported(CpuKernel::Avx512) && __builtin_cpu_supports("avx512vnni");
  }();
  return supported;
}
}  // namespace detail

CpuKernel best_supported_kernel() {
  if (kernel_supported(CpuKernel::Avx512)) return CpuKernel::Avx512;
  return kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2 : CpuKernel::Scalar;
}

namespace {

CpuKernel choose_kernel() {
  if (const char* env = std::getenv("EFIM_KERNEL"); env != nullptr && *env != '\0') {
    std::string_view want(env);
    for (CpuKernel k : {CpuKernel::Scalar, CpuKernel::Avx2, CpuKernel::Avx512}) {
      if (kernel_name(k) != want) continue;
      EFIM_CHECK(kernel_supported(k), "EFIM_KERNEL=", want, " but this CPU lacks the ",
                 "instructions it needs (avx2: AVX2, FMA and F16C; avx512: those and ",
                 "AVX-512F and AVX-512BW)");
      return k;
    }
    fail("EFIM_KERNEL='", want, "' is not a kernel variant (expected scalar, avx2 or avx512)");
  }
  return best_supported_kernel();
}

void check_args(const float* x, int64_t m, const WeightMatrix& w, const float* y) {
  EFIM_CHECK(m >= 0 && w.rows >= 0 && w.cols >= 0, "matmul: negative shape: m=", m,
             " W.rows=", w.rows, " W.cols=", w.cols);
  // Throws for column counts that are not whole blocks of the dtype.
  dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  if (m == 0 || w.rows == 0) return;
  EFIM_CHECK(y != nullptr, "matmul: null output for m=", m, " n=", w.rows);
  if (w.cols == 0) return;
  EFIM_CHECK(x != nullptr && w.data != nullptr,
             "matmul: null input (x=", static_cast<const void*>(x), ", W=", w.data, ")");
  EFIM_CHECK(w.dtype == DType::F32 || w.dtype == DType::F16 || w.dtype == DType::BF16 ||
                 is_quantized(w.dtype),
             "matmul: unsupported weight dtype ", dtype_name(w.dtype));
}

// Interleaved Q2_K..Q6_K / Q8_0 / Q4_0 / IQ4_NL / IQ4_XS (interleave.h): natively by the
// AVX-512 VNNI kernels or the AVX2 ones, the tail rows by the file-layout
// kernels one row of x at a time, as in decode (at most 7 weight rows: no thread hand-off),
// so a row's tail does not depend on m either; the other variants (tests) on a copy in the
// file's layout.
void matmul_interleaved(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                        float* y, CpuKernel kernel) {
  EFIM_CHECK(has_interleaved_layout(w.dtype) && w.interleave == kInterleaveRows &&
                 w.rows >= kInterleaveRows,
             "matmul: interleave ", int{w.interleave}, " is defined for Q2_K..Q6_K, Q8_0, ",
             "Q4_0, IQ4_NL and IQ4_XS matrices of at least ", kInterleaveRows, " rows, not ",
             dtype_name(w.dtype), " [", w.rows, ", ", w.cols, "]");
  const size_t row_bytes = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const bool vnni = detail::vnni_kernels_run(kernel);
  if (computes_interleaved(w.dtype, kernel)) {
    const int64_t whole = w.rows / kInterleaveRows * kInterleaveRows, tail = w.rows - whole;
    WeightMatrix groups = w;
    groups.rows = whole;
    if (vnni && is_block32_x8(w.dtype))
      detail::matmul_b32x8_avx512(pool, x, m, groups, y, w.rows);
    else if (vnni)
      detail::matmul_panel_avx512(pool, x, m, groups, y, w.rows);
    else
      detail::matmul_interleaved_avx2(pool, x, m, groups, y, w.rows);
    if (tail == 0) return;
    // The tail rows (file layout, after the groups): y[i][whole..rows).
    const WeightMatrix rest{w.dtype, tail, w.cols, static_cast<const uint8_t*>(w.data) + whole * row_bytes};
    for (int64_t i = 0; i < m; ++i)
      matmul(pool, x + i * w.cols, 1, rest, y + i * w.rows + whole, kernel);
    return;
  }
  static thread_local std::vector<uint8_t> rows;  // [rows][row_bytes]
  rows.resize(static_cast<size_t>(w.rows) * row_bytes);
  for (int64_t r = 0; r < w.rows; ++r) deinterleave_row(w, r, rows.data() + r * row_bytes);
  WeightMatrix plain = w;
  plain.data = rows.data();
  plain.interleave = 1;
  matmul(pool, x, m, plain, y, kernel);
}

}  // namespace

CpuKernel active_kernel() {
  static const CpuKernel kernel = choose_kernel();
  return kernel;
}

void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y,
            CpuKernel kernel) {
  check_args(x, m, w, y);
  EFIM_CHECK(kernel_supported(kernel), "matmul: kernel variant ", kernel_name(kernel),
             " is not supported by this CPU");
  if (m == 0 || w.rows == 0) return;
  if (w.cols == 0) {  // empty sums
    std::memset(y, 0, static_cast<size_t>(m * w.rows) * sizeof(float));
    return;
  }
  if (w.interleave != 1) return matmul_interleaved(pool, x, m, w, y, kernel);
  const bool int8 = w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0;
  if (kernel != CpuKernel::Scalar && detail::is_block_kernel_type(w.dtype)) {
    if (detail::vnni_kernels_run(kernel)) return detail::matmul_blocks_avx512(pool, x, m, w, y);
    return detail::matmul_blocks_avx2(pool, x, m, w, y);
  }
  switch (kernel) {
    case CpuKernel::Scalar:
      return detail::matmul_scalar(pool, x, m, w, y);
    case CpuKernel::Avx2:
      return int8 ? detail::matmul_quant_avx2(pool, x, m, w, y)
                  : detail::matmul_float_avx2(pool, x, m, w, y);
    case CpuKernel::Avx512:
      return int8 ? detail::matmul_quant_avx512(pool, x, m, w, y)
                  : detail::matmul_float_avx512(pool, x, m, w, y);
  }
}

void matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  matmul(pool, x, m, w, y, active_kernel());
}

void matmul_jobs(ThreadPool& pool, std::span<const MatmulJob> jobs, CpuKernel kernel) {
  EFIM_CHECK(kernel_supported(kernel), "matmul_jobs: kernel variant ", kernel_name(kernel),
             " is not supported by this CPU");
  for (const MatmulJob& j : jobs) check_args(j.x, j.m, j.w, j.y);  // nothing throws below
  pool.parallel_for(static_cast<int64_t>(jobs.size()), 1, [&](int, int64_t j0, int64_t j1) {
    static thread_local ThreadPool serial(1);  // runs inline on this thread
    for (int64_t j = j0; j < j1; ++j) {
      const MatmulJob& job = jobs[static_cast<size_t>(j)];
      matmul(serial, job.x, job.m, job.w, job.y, kernel);
    }
  });
}

void matmul_jobs(ThreadPool& pool, std::span<const MatmulJob> jobs) {
  matmul_jobs(pool, jobs, active_kernel());
}

}  // namespace efim::cpu
