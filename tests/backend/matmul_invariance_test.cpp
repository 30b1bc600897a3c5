// Batch invariance of the matmul kernels: each row of x gets, bit for bit, what it gets alone
// (m = 1), so a speculative verify step (a token and its draft) and the users beside it in one
// step give every token what a one-token step gives it. The AVX-512 kernels run natively where
// the CPU has AVX-512, and everywhere as their emulated build.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "matmul_test_util.h"

namespace efim::cpu {
namespace {

using namespace test;  // NOLINT: the shared helpers

// Batch invariance of the file-layout Q8_0 / Q4_0 GEMV (speculative verify steps, up to 9 rows;
// weights mapped from the file): each row of x gets bit for bit what it gets alone (m = 1), at
// every m up to the GEMM threshold, for odd and even block counts and any thread count, on AVX2
// and AVX-512 (natively and on SIMDe).
TEST(MatmulInt8, GemvRowsEqualOneRowAloneBitForBit) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (int64_t k : {int64_t{384}, int64_t{416}, int64_t{448}})  // 12, 13 and 14 blocks
      for (int64_t m = 2; m <= 9; ++m) {
        const Problem p = make_problem(Shape{m, k, 38}, t, uint32_t(7 * m + k));
        for (const char* variant : {"avx2", "avx512", "avx512 (emulated)"}) {
          const std::string_view v = variant;
          if (v == "avx512" && !kernel_supported(CpuKernel::Avx512)) continue;
          for (int threads : {1, 2}) {
            auto run_v = [&](const Problem& q) {
              if (v == "avx512 (emulated)") return run_avx512_emulated(q, threads);
              return run(q, v == "avx2" ? CpuKernel::Avx2 : CpuKernel::Avx512, threads);
            };
            const std::vector<float> all = run_v(p);
            for (int64_t i = 0; i < m; ++i) {
              Problem one = p;
              one.s.m = 1;
              one.x.assign(p.x.begin() + i * k, p.x.begin() + (i + 1) * k);
              const std::vector<float> alone = run_v(one);
              EXPECT_EQ(std::memcmp(alone.data(), all.data() + i * p.s.n, alone.size() * 4), 0)
                  << dtype_name(t) << " " << v << " k=" << k << " m=" << m << " row " << i
                  << " threads " << threads;
            }
          }
        }
      }
}

// Every interleaved kernel gives each row of x exactly what it gives that row alone, for 2-15
// rows (a token and its draft, or several users' tokens, in one step) and for 16-20 (the panel
// GEMMs), tail rows after the groups included: the AVX-512 kernels emulated and natively where
// the VNNI kernels run, the AVX2 ones natively (matmul routes each). The K-quants' GEMV and
// panel GEMM add the same exact integer sums per super-block with the same f32 steps. An odd
// number of groups (40 and 24 rows: 5 and 3) leaves the 32-element types' GEMV a last group
// outside its pairs of groups.
TEST(MatmulInterleaved, RowsEqualOneRowAloneBitForBit) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  int mismatches = 0;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::IQ4_NL, DType::Q2_K, DType::Q3_K, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K, DType::IQ4_XS})
  for (Shape s : {Shape{15, 768, 48}, Shape{9, 1024, 64}, Shape{13, 256, 16}, Shape{20, 256, 32},
                  Shape{12, 512, 21}, Shape{11, 512, 40}, Shape{17, 256, 24}}) {
    const Problem p = make_problem(s, t, 5 + static_cast<uint32_t>(s.k));
    std::vector<uint8_t> bytes(p.wbuf.size());
    const WeightMatrix x8 = interleave_rows8(p.w, bytes.data());
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (const char* variant : {"avx512 (emulated)", "avx512", "avx2"}) {
        const std::string_view v = variant;
        if (v == "avx512" && !detail::vnni_kernels_run(CpuKernel::Avx512)) continue;
        if (v == "avx512 (emulated)" && s.n % 8 != 0) continue;  // groups only
        auto run_rows = [&](const float* x, int64_t m, float* y) {
          if (v == "avx512 (emulated)")
            emulated_x8(pool, x, m, x8, y, s.n);
          else
            matmul(pool, x, m, x8, y, v == "avx2" ? CpuKernel::Avx2 : CpuKernel::Avx512);
        };
        std::vector<float> alone(static_cast<size_t>(s.m * s.n));
        for (int64_t i = 0; i < s.m; ++i) run_rows(p.x.data() + i * s.k, 1, alone.data() + i * s.n);
        for (int64_t m = 2; m <= s.m; ++m) {
          std::vector<float> y(static_cast<size_t>(m * s.n), NAN);
          run_rows(p.x.data(), m, y.data());
          for (int64_t at = 0; at < m * s.n; ++at)
            if (std::memcmp(&y[static_cast<size_t>(at)], &alone[static_cast<size_t>(at)], sizeof(float)) != 0 &&
                ++mismatches <= 5)
              ADD_FAILURE() << dtype_name(t) << " " << v << " m=" << m << " k=" << s.k
                            << " y[" << at / s.n << "][" << at % s.n << "] " << y[static_cast<size_t>(at)]
                            << " alone " << alone[static_cast<size_t>(at)];
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// The file-layout row kernels of the block types (matmul_blocks_*.cpp) compute each row of x on
// its own, so a row gets the same bits at any m: on AVX2 at every m, on AVX-512 VNNI below
// kPanelMinRows rows of x (from there the panel GEMM of the super-block types sums in another
// order). This is what keeps speculative verify steps equal to one-token steps for the types
// without an interleaved layout.
TEST(MatmulDtype, FileLayoutRowsEqualOneRowAlone) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  int mismatches = 0, compared = 0;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                  DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL})
  for (Shape s : {Shape{20, 768, 24}, Shape{15, 512, 13}}) {
    const Problem p = make_problem(s, t, 21 + static_cast<uint32_t>(s.k));
    for (CpuKernel kernel : {CpuKernel::Avx2, CpuKernel::Avx512}) {
      if (!kernel_supported(kernel)) continue;
      const int64_t max_m =
          kernel == CpuKernel::Avx512 && detail::vnni_kernels_run(kernel) && detail::is_panel_type(t)
              ? std::min<int64_t>(s.m, detail::kPanelMinRows - 1)
              : s.m;
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> alone(static_cast<size_t>(max_m * s.n));
        for (int64_t i = 0; i < max_m; ++i)
          matmul(pool, p.x.data() + i * s.k, 1, p.w, alone.data() + i * s.n, kernel);
        for (int64_t m = 2; m <= max_m; ++m) {
          std::vector<float> y(static_cast<size_t>(m * s.n), NAN);
          matmul(pool, p.x.data(), m, p.w, y.data(), kernel);
          for (int64_t at = 0; at < m * s.n; ++at) {
            ++compared;
            if (std::memcmp(&y[static_cast<size_t>(at)], &alone[static_cast<size_t>(at)], sizeof(float)) != 0 &&
                ++mismatches <= 5)
              ADD_FAILURE() << dtype_name(t) << " " << kernel_name(kernel) << " m=" << m
                            << " y[" << at / s.n << "][" << at % s.n << "] " << y[static_cast<size_t>(at)]
                            << " alone " << alone[static_cast<size_t>(at)];
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_EQ(mismatches, 0);
}

// Float weights (F32, F16, BF16): below the GEMM threshold (10 rows of x: a token and a draft
// of up to 8) every GEMV sums a row of x in the one-row order, so each row gets the bits it gets
// alone: AVX2, AVX-512 natively and on SIMDe, and the scalar kernel; k with a 32/64-wide body,
// an 8/16-wide remainder and a scalar tail.
TEST(MatmulFloat, GemvRowsEqualOneRowAloneBitForBit) {
  int mismatches = 0, compared = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
  for (Shape s : {Shape{9, 768, 13}, Shape{9, 792, 8}, Shape{9, 100, 5}}) {
    const Problem p = make_problem(s, t, 31 + static_cast<uint32_t>(s.k));
    for (const char* variant : {"scalar", "avx2", "avx512", "avx512 (emulated)"}) {
      const std::string_view v = variant;
      const CpuKernel kernel = v == "scalar" ? CpuKernel::Scalar
                               : v == "avx2" ? CpuKernel::Avx2
                                             : CpuKernel::Avx512;
      if (!kernel_supported(kernel) && v != "avx512 (emulated)") continue;
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        auto run_rows = [&](const float* x, int64_t m, float* y) {
          if (v == "avx512 (emulated)")
            detail::matmul_float_avx512_emulated(pool, x, m, p.w, y);
          else
            matmul(pool, x, m, p.w, y, kernel);
        };
        std::vector<float> alone(static_cast<size_t>(s.m * s.n));
        for (int64_t i = 0; i < s.m; ++i) run_rows(p.x.data() + i * s.k, 1, alone.data() + i * s.n);
        for (int64_t m = 2; m <= s.m; ++m) {
          std::vector<float> y(static_cast<size_t>(m * s.n), NAN);
          run_rows(p.x.data(), m, y.data());
          for (int64_t at = 0; at < m * s.n; ++at) {
            ++compared;
            if (std::memcmp(&y[static_cast<size_t>(at)], &alone[static_cast<size_t>(at)], sizeof(float)) != 0 &&
                ++mismatches <= 5)
              ADD_FAILURE() << dtype_name(t) << " " << v << " k=" << s.k << " m=" << m
                            << " threads=" << threads << " y[" << at / s.n << "][" << at % s.n
                            << "] " << y[static_cast<size_t>(at)] << " alone "
                            << alone[static_cast<size_t>(at)];
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace efim::cpu
