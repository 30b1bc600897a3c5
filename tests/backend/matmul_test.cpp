// Differential tests of the matmul kernel variants against matmul_reference (f64 over the
// dequantized weights), with per-dtype tolerances derived from the arithmetic. The AVX-512
// kernels run natively where the CPU has AVX-512, and everywhere as their emulated build (the
// same sources on SIMDe, see backend/cpu/avx512_emulation.h).
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "base/error.h"
#include "tensor/quant.h"
#include "matmul_test_util.h"

namespace efim::cpu {
namespace {

using namespace test;  // NOLINT: the shared helpers

void expect_close_to_reference(const Problem& p, const std::vector<float>& y,
                               const std::string& what) {
  std::vector<float> ref(y.size());
  matmul_reference(p.x.data(), p.s.m, p.w, ref.data());
  int bad = 0;
  for (int64_t i = 0; i < p.s.m; ++i) {
    for (int64_t r = 0; r < p.s.n; ++r) {
      const size_t at = static_cast<size_t>(i * p.s.n + r);
      const double tol = tolerance(p, i, r);
      if (!(std::fabs(y[at] - ref[at]) <= tol) && ++bad <= 5)
        ADD_FAILURE() << what << " y[" << i << "][" << r << "] = " << y[at] << ", reference "
                      << ref[at] << ", tolerance " << tol;
    }
  }
  EXPECT_EQ(bad, 0) << what;
  // The worst-case bound of the int8 paths is loose; typical errors must be far smaller:
  // activation rounding is ~uniform in +-d/2, about 0.5% of these dots (2% leaves room for the
  // smallest shapes).
  double err2 = 0, ref2 = 0;
  for (size_t at = 0; at < y.size(); ++at) {
    err2 += (y[at] - ref[at]) * static_cast<double>(y[at] - ref[at]);
    ref2 += ref[at] * static_cast<double>(ref[at]);
  }
  const double rel_rms = std::sqrt(err2 / std::max(ref2, 1e-30));
  EXPECT_LT(rel_rms, is_int8_path(p.dtype) ? 0.02 : 1e-5) << what;
}

const Shape kShapes[] = {
    {1, 64, 7},
    {1, 96, 21},
    {1, 768, 130},
    {2, 96, 13},
    {3, 128, 33},
    {4, 32, 16},
    {5, 256, 17},
    {6, 64, 16},
    {7, 384, 40},
    {13, 768, 50},
    {64, 256, 128},
    {37, 1024, 24},
    {1, 2048, 9},
    {100, 160, 3},
    {8, 128, 24},
    {11, 64, 40},
    {9, 96, 17},
    // Above kSerialMacs (128K multiply-adds), so that the threaded GEMV / GEMM paths run:
    {1, 1024, 640},
    {2, 512, 700},
    {5, 768, 200},
    {3, 512, 400},
    // AVX-512 edges: panels of 16 < n < 32 rows, k % 64 = 32, 7 quant blocks (a pair and a
    // single block after the steps of 4).
    {9, 96, 29},
    {1, 224, 40},
    {2, 224, 21},
    {12, 224, 45},
    // The K-quant panel GEMM (m >= kPanelMinRows): tiles of 8 x rows then 4 + 3 / 4 + 2, last
    // panels of 13 and 3 weight rows.
    {19, 512, 45},
    {30, 256, 19},
};

std::vector<CpuKernel> variants() {
  std::vector<CpuKernel> v{CpuKernel::Scalar};
  if (kernel_supported(CpuKernel::Avx2)) v.push_back(CpuKernel::Avx2);
  if (kernel_supported(CpuKernel::Avx512)) v.push_back(CpuKernel::Avx512);
  return v;
}

// k not a multiple of the SIMD width (8 or 16), or of the 4 registers of the decode loop (k % 64
// = 16 or 48), float dtypes only.
const Shape kOddKShapes[] = {{1, 37, 9},  {1, 45, 11}, {2, 13, 5},  {9, 37, 19},
                             {6, 7, 33},  {1, 79, 7},  {10, 53, 35}, {1, 80, 19},
                             {1, 112, 9}, {9, 112, 29}};

class MatmulDtype : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulDtype, EveryVariantMatchesReference) {
  const DType t = GetParam();
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    if (s.k % dtype_info(t).block_elems != 0) continue;  // super-blocks need k % 256 == 0
    const Problem p = make_problem(s, t, seed += 7);
    for (CpuKernel kernel : variants()) {
      for (int threads : {1, 2, 3}) {
        const std::string what = str(dtype_name(t), " ", kernel_name(kernel), " threads=", threads,
                                     " m=", s.m, " k=", s.k, " n=", s.n);
        expect_close_to_reference(p, run(p, kernel, threads), what);
      }
    }
  }
}

// Float weights with k not a multiple of the SIMD width (tails of the k loops).
TEST_P(MatmulDtype, OddK) {
  const DType t = GetParam();
  if (dtype_info(t).block_elems != 1) return;  // block formats cannot have odd k
  for (Shape s : kOddKShapes) {
    const Problem p = make_problem(s, t, 99);
    for (CpuKernel kernel : variants())
      expect_close_to_reference(
          p, run(p, kernel, 2),
          str(dtype_name(t), " ", kernel_name(kernel), " m=", s.m, " k=", s.k));
  }
}

// The AVX-512 sources on SIMDe: every shape above, both entry paths (GEMV and GEMM), 1-3
// threads. They quantize activations with the AVX2 quantizer, hence the AVX2 requirement.
TEST_P(MatmulDtype, Avx512EmulatedMatchesReference) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  const DType t = GetParam();
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    if (s.k % dtype_info(t).block_elems != 0) continue;
    const Problem p = make_problem(s, t, seed += 7);  // EveryVariantMatchesReference's problems
    for (int threads : {1, 3})
      expect_close_to_reference(p, run_avx512_emulated(p, threads),
                                str(dtype_name(t), " avx512 (emulated) threads=", threads,
                                    " m=", s.m, " k=", s.k, " n=", s.n));
  }
  if (dtype_info(t).block_elems != 1) return;
  for (Shape s : kOddKShapes) {
    const Problem p = make_problem(s, t, 99);
    expect_close_to_reference(
        p, run_avx512_emulated(p, 2),
        str(dtype_name(t), " avx512 (emulated) m=", s.m, " k=", s.k, " n=", s.n));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulDtype,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                           DType::Q4_0, DType::Q4_K, DType::Q4_1, DType::Q5_0,
                                           DType::Q5_1, DType::IQ4_NL, DType::Q2_K, DType::Q3_K,
                                           DType::Q5_K, DType::Q6_K, DType::IQ4_XS),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The int8 kernels do exactly the scalar kernel's integer arithmetic: only the order of the
// f32 accumulation of per-block partial results differs.
TEST(MatmulInt8, SimdVariantsMatchScalarArithmetic) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL,
                 DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    for (Shape s : {Shape{1, 768, 64}, Shape{2, 384, 20}, Shape{3, 256, 8}, Shape{17, 1024, 72},
                    Shape{64, 2048, 32}, Shape{1, 1024, 600}, Shape{2, 1024, 300},
                    Shape{1, 224, 40}, Shape{5, 224, 18}, Shape{19, 512, 45}}) {
      if (s.k % dtype_info(t).block_elems != 0) continue;
      const Problem p = make_problem(s, t, 5);
      const auto b = run(p, CpuKernel::Scalar, 1);
      std::vector<std::pair<std::string, std::vector<float>>> simd;
      simd.emplace_back("avx2", run(p, CpuKernel::Avx2, 2));
      simd.emplace_back("avx512 (emulated)", run_avx512_emulated(p, 2));
      if (kernel_supported(CpuKernel::Avx512)) simd.emplace_back("avx512", run(p, CpuKernel::Avx512, 2));
      for (const auto& [name, a] : simd) {
        int bad = 0;
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t r = 0; r < s.n; ++r) {
            const size_t at = static_cast<size_t>(i * s.n + r);
            const double tol = 2e-6 * abs_dot(p, i, r) + 1e-7;
            if (!(std::fabs(a[at] - b[at]) <= tol) && ++bad <= 5)
              ADD_FAILURE() << dtype_name(t) << " m=" << s.m << " y[" << i << "][" << r << "]: "
                            << name << " " << a[at] << " scalar " << b[at] << " tol " << tol;
          }
        }
        EXPECT_EQ(bad, 0) << name;
      }
    }
  }
}

// The integer forms the kernels compute with describe the same numbers as the dequantizers
// (checked bit for bit against ggml in quant_test): d sc q - dmin mn, or d (q - o) + m.
TEST(QuantInt, IntegerFormsReproduceDequantize) {
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS,
                  DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q8_0}) {
    const int64_t n = 1024;
    const auto bytes = t == DType::Q8_0 || t == DType::Q4_0
                           ? quantize(random_vec(n, 3).data(), n, t)
                           : random_blocks(t, n, 11);
    std::vector<float> ref(n);
    dequantize(bytes.data(), n, t, ref.data());
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v;
      if (is_superblock_type(t)) {
        IntSuperBlock b;
        decode_superblock(t, bytes.data(), i / 256, b);
        const int j = static_cast<int>(i % 256) / 16;
        v = static_cast<double>(b.d) * b.sc[j] * b.q[i % 256] - static_cast<double>(b.dmin) * b.mn[j];
      } else {
        IntBlock32 b;
        decode_block32(t, bytes.data(), i / 32, b);
        v = static_cast<double>(b.d) * (b.q[i % 32] - b.o) + b.m;
      }
      if (!(std::fabs(v - ref[i]) <= 1e-6 * (std::fabs(ref[i]) + 1e-3)) && ++bad <= 3)
        ADD_FAILURE() << dtype_name(t) << " element " << i << ": integer form " << v
                      << ", dequantize " << ref[i];
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

// Q6_K stores q in 0..63 for the level q - 32; the kernels fold the 32 into a min term. Weights
// near level 0 (q ~ 32) against large activations make the two integer sums large and nearly
// equal: they must be subtracted as integers, not as floats (a regression: 0.05 logit error on
// a model whose ffn_down had such rows).
TEST(MatmulInt8, Q6KFoldedOffsetIsExactOnCancellingSums) {
  const int64_t k = 1024, n = 16;
  std::mt19937 rng(7);
  std::vector<uint8_t> w(n * dtype_row_bytes(DType::Q6_K, k));
  auto* blocks = reinterpret_cast<BlockQ6_K*>(w.data());
  for (int64_t b = 0; b < n * k / 256; ++b) {
    BlockQ6_K& blk = blocks[b];
    std::memset(blk.ql, 0, sizeof blk.ql);
    std::memset(blk.qh, 0xaa, sizeof blk.qh);  // high bits 2 in every pair: q = 32 (level 0)
    if (b % (k / 256) == 0) blk.ql[rng() % 128] = 0x01;  // one level +1 per row
    for (auto& sc : blk.scales) sc = static_cast<int8_t>(101 + 2 * (rng() % 13));  // odd, large
    blk.d = f32_to_f16(0.01f);
  }
  // Activations with a large common offset (as after a gated activation): every int8 quant is
  // near 127, so each sub-block's sum of q * qa is ~32 * 16 * 120, times sc ~120, times 16.
  std::vector<float> x(k), ref(n), y(n), wrow(k);
  for (auto& v : x) v = 40.0f + static_cast<float>(rng() % 1000) / 200.0f;
  const WeightMatrix wm{DType::Q6_K, n, k, w.data()};
  // Reference on the activations as the kernels quantize them (Q8_K), in double: what remains
  // is only the kernels' own arithmetic.
  QuantizedRowsK a;
  a.resize(1, k);
  quantize_row_k_scalar(x.data(), 0, a);
  for (int64_t r = 0; r < n; ++r) {
    dequantize_row(wm, r, wrow.data());
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(wrow[j]) * a.d[j / 256] * a.q[j];
    ref[r] = static_cast<float>(dot);
  }
  for (CpuKernel kernel : variants()) {
    ThreadPool pool(1);
    matmul(pool, x.data(), 1, wm, y.data(), kernel);
    for (int64_t r = 0; r < n; ++r)
      EXPECT_NEAR(y[r], ref[r], 1e-5 * std::fabs(ref[r]) + 1e-3) << kernel_name(kernel) << " row " << r;
  }
}

// The two ggml-exact Q8_0 / Q8_1 activation quantizers write identical bytes.
TEST(QuantInt, GgmlBlockActivationQuantizersAgree) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  auto x = random_vec(3 * 256, 9, 2.0f);
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
  detail::QuantizedRows a, b;
  a.resize(3, 256);
  b.resize(3, 256);
  for (int64_t i = 0; i < 3; ++i) {
    detail::quantize_row_q8_ggml_scalar(x.data(), i, a);
    detail::quantize_row_q8_ggml_avx2(x.data(), i, b);
  }
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.d, b.d);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.s, b.s);
  EXPECT_EQ(a.d[1], 0.0f);
  for (size_t blk = 0; blk < a.d.size(); ++blk)  // d and s are f16 values
    EXPECT_EQ(f16_to_f32(f32_to_f16(a.d[blk])), a.d[blk]);
  EXPECT_NEAR(a.s[0], a.d[0] * static_cast<float>(a.sum[0]), 1e-3 * std::fabs(a.s[0]) + 1e-6);
}

// The two Q8_K activation quantizers write identical bytes.
TEST(QuantInt, SuperBlockActivationQuantizersAgree) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  auto x = random_vec(3 * 512, 5, 3.0f);
  for (int j = 256; j < 512; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero super-block
  QuantizedRowsK a, b;
  a.resize(3, 512);
  b.resize(3, 512);
  for (int64_t i = 0; i < 3; ++i) {
    quantize_row_k_scalar(x.data(), i, a);
    quantize_row_k_avx2(x.data(), i, b);
  }
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.d, b.d);
  EXPECT_EQ(a.bsum, b.bsum);
  EXPECT_EQ(a.d[1], 0.0f);
  for (int64_t i = 0; i < 3 * 512; ++i) {
    const float d = a.d[static_cast<size_t>(i / 256)];
    EXPECT_LE(std::fabs(d * a.q[static_cast<size_t>(i)] - x[static_cast<size_t>(i)]), 0.5f * std::fabs(d) + 1e-6f);
  }
  int sum = 0;
  for (int j = 0; j < 16; ++j) sum += a.q[static_cast<size_t>(j)];
  EXPECT_EQ(a.bsum[0], sum);
}

// Where the CPU has AVX-512 the native kernels run in every test above through variants(); this
// test only makes their absence visible (skipped) instead of silent.
TEST(MatmulAvx512, NativeKernelsRanWhereSupported) {
  if (!kernel_supported(CpuKernel::Avx512))
    GTEST_SKIP() << "this CPU has no AVX-512F + AVX-512BW: the native AVX-512 kernels were not "
                    "run (their emulated build was)";
  EXPECT_EQ(best_supported_kernel(), CpuKernel::Avx512);
}

// The Q8_0 / Q4_0 activations (ggml's quantize_row_q8_0): scalar and AVX2 agree byte for byte
// on ties and all-zero blocks, and the dequantized values stay within half a step of x plus
// the f16 rounding of the scale (127 |f16(d) - d| <= 127 * 2^-11 d).
TEST(MatmulInt8, ActivationQuantizersAgreeBytewise) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  auto x = random_vec(5 * 256, 3, 4.0f);
  x[10] = 0.5f * 127.0f / 4.0f;  // a few exact ties in some blocks
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
  detail::QuantizedRows a, b;
  a.resize(5, 256);
  b.resize(5, 256);
  for (int64_t i = 0; i < 5; ++i) {
    detail::quantize_row_q8_ggml_scalar(x.data(), i, a);
    detail::quantize_row_q8_ggml_avx2(x.data(), i, b);
  }
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.d, b.d);
  EXPECT_EQ(a.sum, b.sum);
  EXPECT_EQ(a.d[1], 0.0f);
  for (int64_t i = 0; i < 5 * 256; ++i) {
    const float d = a.d[static_cast<size_t>(i / kQBlock)];
    EXPECT_EQ(d, f16_to_f32(f32_to_f16(d)));  // the scale is an f16 value
    EXPECT_LE(std::fabs(d * a.q[static_cast<size_t>(i)] - x[static_cast<size_t>(i)]),
              0.57f * d + 1e-6f);
  }
}

TEST(Matmul, ZeroSizesAndBadArguments) {
  ThreadPool pool(2);
  std::vector<float> x(64, 1.0f), y(4, 7.0f);
  std::vector<float> wdata(64, 1.0f);
  WeightMatrix w{DType::F32, 2, 32, wdata.data()};
  matmul(pool, x.data(), 0, w, y.data());  // m = 0: nothing written
  EXPECT_EQ(y[0], 7.0f);
  WeightMatrix empty{DType::F32, 2, 0, nullptr};
  matmul(pool, x.data(), 2, empty, y.data());  // k = 0: empty sums
  EXPECT_EQ(y[3], 0.0f);
  WeightMatrix i8{DType::I8, 2, 32, wdata.data()};
  EXPECT_THROW(matmul(pool, x.data(), 1, i8, y.data()), Error);
  WeightMatrix q8_bad{DType::Q8_0, 2, 48, wdata.data()};  // 48 is not whole blocks
  EXPECT_THROW(matmul(pool, x.data(), 1, q8_bad, y.data()), Error);
  WeightMatrix null_data{DType::F32, 2, 32, nullptr};
  EXPECT_THROW(matmul(pool, x.data(), 1, null_data, y.data()), Error);
}

// matmul_jobs: every job's output equals its own matmul call bit for bit (any kernel, any
// dtype, one row of x or several), and a bad job is reported before any job runs.
TEST(Matmul, JobsEqualSeparateCallsBitForBit) {
  std::vector<Problem> problems;
  uint32_t seed = 40;
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::BF16, DType::Q5_0, DType::F32})
    for (Shape s : {Shape{1, 512, 300}, Shape{1, 256, 40}, Shape{19, 512, 45}})
      problems.push_back(make_problem(s, t, seed += 3));
  for (CpuKernel kernel : variants()) {
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> ys;
      std::vector<MatmulJob> jobs;
      for (const Problem& p : problems) {
        ys.emplace_back(static_cast<size_t>(p.s.m * p.s.n), NAN);
        jobs.push_back({p.x.data(), p.s.m, p.w, ys.back().data()});
      }
      matmul_jobs(pool, jobs, kernel);
      for (size_t j = 0; j < problems.size(); ++j) {
        const std::vector<float> want = run(problems[j], kernel, threads);
        EXPECT_EQ(std::memcmp(want.data(), ys[j].data(), want.size() * sizeof(float)), 0)
            << kernel_name(kernel) << " threads=" << threads << " job " << j << " "
            << dtype_name(problems[j].dtype) << " m=" << problems[j].s.m;
      }
    }
  }
  ThreadPool pool(2);
  std::vector<float> y(600, 7.0f);
  const Problem& good = problems.front();
  WeightMatrix q8_bad{DType::Q8_0, 2, 48, good.wbuf.data()};  // 48 is not whole blocks
  std::vector<MatmulJob> jobs{{good.x.data(), 1, good.w, y.data()}, {good.x.data(), 1, q8_bad, y.data()}};
  EXPECT_THROW(matmul_jobs(pool, jobs), Error);
  EXPECT_EQ(y[0], 7.0f);  // the good job did not run either
}


// Q2_K..Q6_K, Q8_0, Q4_0, IQ4_NL and IQ4_XS rows interleaved 8 at a time (interleave.h): the
// layout round-trips, and every kernel computes it with the scalar kernel's integer arithmetic
// on the file layout: natively (the AVX2 GEMV/GEMM at every m; the AVX-512 VNNI GEMV below 16
// rows of x, the panel GEMMs above, also on SIMDe), and through the copy the other variants
// make.
TEST(MatmulInterleaved, RowsOf8MatchTheFileLayout) {
  if (!kernel_supported(CpuKernel::Avx2)) GTEST_FAIL() << "this test needs an AVX2 CPU";
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0,
                  DType::Q4_0, DType::IQ4_NL, DType::IQ4_XS})
  for (Shape s : {Shape{1, 512, 64}, Shape{2, 256, 8}, Shape{3, 768, 40}, Shape{7, 256, 200},
                  Shape{16, 512, 24}, Shape{19, 256, 72}, Shape{1, 1024, 1000},
                  // tails of 5, 3 and 7 rows after the groups (GEMV and GEMM)
                  Shape{1, 256, 13}, Shape{4, 512, 35}, Shape{17, 256, 47},
                  // several L2-sized chunks of groups (AVX2) with 4 + 1 rows of x
                  Shape{5, 2048, 512}}) {
    const Problem p = make_problem(s, t, 11 + static_cast<uint32_t>(s.n));
    std::vector<uint8_t> bytes(p.wbuf.size());
    const WeightMatrix x8 = interleave_rows8(p.w, bytes.data());
    ASSERT_EQ(x8.interleave, 8);
    {  // in place, groups in parallel: the same bytes
      std::vector<uint8_t> same = p.wbuf;
      WeightMatrix w = p.w;
      w.data = same.data();
      ThreadPool pool(3);
      EXPECT_EQ(interleave_rows8(w, same.data(), &pool).data, same.data());
      EXPECT_EQ(same, bytes) << dtype_name(t) << " n=" << s.n;
    }
    const size_t row_bytes = dtype_row_bytes(t, static_cast<uint64_t>(s.k));
    std::vector<uint8_t> row(row_bytes);
    for (int64_t r = 0; r < s.n; ++r) {
      deinterleave_row(x8, r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), p.wbuf.data() + r * row_bytes, row_bytes), 0)
          << dtype_name(t) << " row " << r;
    }
    std::vector<float> want_row(static_cast<size_t>(s.k)), got_row(static_cast<size_t>(s.k));
    dequantize_row(p.w, s.n - 1, want_row.data());
    dequantize_row(x8, s.n - 1, got_row.data());
    EXPECT_EQ(want_row, got_row);

    const std::vector<float> base = run(p, CpuKernel::Scalar, 1);
    auto check = [&](const std::vector<float>& a, const std::string& name) {
      int bad = 0;
      for (int64_t i = 0; i < s.m; ++i)
        for (int64_t r = 0; r < s.n; ++r) {
          const size_t at = static_cast<size_t>(i * s.n + r);
          const double tol = 2e-6 * abs_dot(p, i, r) + 1e-7;
          if (!(std::fabs(a[at] - base[at]) <= tol) && ++bad <= 5)
            ADD_FAILURE() << dtype_name(t) << " " << name << " m=" << s.m << " n=" << s.n << " y[" << i << "][" << r
                          << "] " << a[at] << " scalar " << base[at];
        }
      EXPECT_EQ(bad, 0) << name;
    };
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> y(static_cast<size_t>(s.m * s.n), NAN);
      {
        WeightMatrix groups = x8;  // the emulated kernel takes whole groups; the tail as matmul does
        groups.rows = s.n / 8 * 8;
        emulated_x8(pool, p.x.data(), s.m, groups, y.data(), s.n);
        const std::vector<float> tail_ref = run(p, CpuKernel::Avx2, 1);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t r = groups.rows; r < s.n; ++r) y[i * s.n + r] = tail_ref[i * s.n + r];
        check(y, "avx512 (emulated) threads=" + std::to_string(threads));
      }
      for (CpuKernel kernel : variants()) {
        std::fill(y.begin(), y.end(), NAN);
        matmul(pool, p.x.data(), s.m, x8, y.data(), kernel);
        check(y, std::string(kernel_name(kernel)) + " threads=" + std::to_string(threads));
      }
    }
  }
  ThreadPool pool(1);
  const Problem p = make_problem(Shape{1, 256, 16}, DType::Q4_K, 3);
  WeightMatrix odd = p.w;
  odd.rows = 7;  // not one group of 8
  odd.interleave = 8;
  std::vector<float> y(16);
  EXPECT_THROW(matmul(pool, p.x.data(), 1, odd, y.data()), Error);
  std::vector<uint8_t> bytes(p.wbuf.size());
  EXPECT_THROW(interleave_rows8(odd, bytes.data()), Error);
}




TEST(Matmul, ActiveKernelIsTheBestSupported) {
  // Without EFIM_KERNEL the dispatcher uses the widest variant the CPU has; with it, the
  // variant named there.
  const char* env = std::getenv("EFIM_KERNEL");
  if (env != nullptr && *env != '\0') {
    EXPECT_EQ(kernel_name(active_kernel()), std::string(env));
  } else {
    EXPECT_EQ(active_kernel(), best_supported_kernel());
    EXPECT_EQ(active_kernel(), kernel_supported(CpuKernel::Avx512) ? CpuKernel::Avx512
                               : kernel_supported(CpuKernel::Avx2) ? CpuKernel::Avx2
                                                                   : CpuKernel::Scalar);
  }
}

}  // namespace
}  // namespace efim::cpu
