// Differential tests of the training GEMM (train_gemm.h): every kernel variant, every
// transposition, block-edge shapes and padded strides against the f64 reference.
#include "backend/cpu/train_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"

namespace efim::cpu {
namespace {

struct Case {
  int64_t m, n, k;
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// Runs one product with `run` and checks it element by element against the reference: f32
// accumulation of k terms errs by at most ~k * 2^-24 * sum |a b| (bound used: 1e-5 * that sum,
// k <= 600), and the padding columns of C stay untouched.
template <typename Run>
void check(const Case& cs, bool ta, bool tb, bool acc, uint32_t seed, Run run) {
  const int64_t pad = 3;
  const int64_t lda = (ta ? cs.m : cs.k) + pad, ldb = (tb ? cs.k : cs.n) + pad, ldc = cs.n + pad;
  const std::vector<float> a = random_vec(size_t((ta ? cs.k : cs.m) * lda), seed);
  const std::vector<float> b = random_vec(size_t((tb ? cs.n : cs.k) * ldb), seed + 1);
  const std::vector<float> c0 = random_vec(size_t(cs.m * ldc), seed + 2);
  std::vector<float> c = c0, ref = c0;
  TrainGemm g{cs.m, cs.n, cs.k, a.data(), lda, ta, b.data(), ldb, tb, c.data(), ldc, acc};
  run(g);
  g.c = ref.data();
  train_gemm_reference(g);
  for (int64_t i = 0; i < cs.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      if (j >= cs.n) {
        ASSERT_EQ(c[at], c0[at]) << "padding overwritten at " << i << ", " << j;
        continue;
      }
      double mag = acc ? std::abs(c0[at]) : 0.0;
      for (int64_t p = 0; p < cs.k; ++p)
        mag += std::abs(double(ta ? a[p * lda + i] : a[i * lda + p]) *
                        (tb ? b[j * ldb + p] : b[p * ldb + j]));
      ASSERT_NEAR(c[at], ref[at], 1e-5 * mag + 1e-30)
          << "m " << cs.m << " n " << cs.n << " k " << cs.k << " ta " << ta << " tb " << tb
          << " acc " << acc << " at " << i << ", " << j;
    }
}

// Shapes around the block sizes (mc 96, nc 256, kc 256), micro-tile edges (6 x 16) and the
// work split (items of 48+ rows / 64+ columns, near-equal, up to 384 x 256).
const Case kCases[] = {{1, 1, 1},      {7, 17, 5},    {6, 16, 8},     {97, 259, 300},
                       {200, 40, 520}, {13, 300, 64}, {192, 33, 257}, {384, 384, 24},
                       {1000, 130, 9}, {50, 700, 17}};

class TrainGemmTest : public ::testing::TestWithParam<CpuKernel> {};

TEST_P(TrainGemmTest, MatchesReferenceForEveryTransposition) {
  if (!kernel_supported(GetParam())) GTEST_FAIL() << "this CPU lacks the kernel under test";
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const Case& cs : kCases)
    for (int mode = 0; mode < 8; ++mode) {
      const bool ta = mode & 1, tb = mode & 2, acc = mode & 4;
      check(cs, ta, tb, acc, seed += 3,
            [&](const TrainGemm& g) { train_gemm(pool, g, GetParam()); });
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, TrainGemmTest,
                         ::testing::Values(CpuKernel::Scalar, CpuKernel::Avx2),
                         [](const auto& info) { return std::string(kernel_name(info.param)); });

TEST(TrainGemm, SerialMatchesReference) {
  uint32_t seed = 100;
  for (const Case& cs : kCases)
    for (int mode = 0; mode < 8; ++mode)
      check(cs, mode & 1, mode & 2, mode & 4, seed += 3,
            [](const TrainGemm& g) { train_gemm_serial(g); });
}

// Each element of C is summed by one thread in a fixed order: the result is bitwise the same
// for any thread count (training runs are reproducible and resumable bit for bit).
TEST(TrainGemm, ThreadCountDoesNotChangeBits) {
  ThreadPool one(1), two(2), three(3);
  const std::vector<float> a = random_vec(1000 * 300, 1), b = random_vec(300 * 384, 2);
  std::vector<float> c1(1000 * 384), c2(1000 * 384), c3(1000 * 384);
  TrainGemm g{1000, 384, 300, a.data(), 300, false, b.data(), 300, true, c1.data(), 384, false};
  train_gemm(one, g);
  g.c = c2.data();
  train_gemm(two, g);
  g.c = c3.data();
  train_gemm(three, g);
  EXPECT_TRUE(c1 == c2 && c1 == c3);
  g.c = c2.data();
  train_gemm_serial(g);
  EXPECT_TRUE(c1 == c2);
}

TEST(TrainGemm, EmptyKZeroesOrKeepsC) {
  ThreadPool pool(1);
  std::vector<float> c = {1, 2, 3, 4};
  train_gemm(pool, TrainGemm{2, 2, 0, nullptr, 0, false, nullptr, 0, false, c.data(), 2, true});
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 4}));
  train_gemm(pool, TrainGemm{2, 2, 0, nullptr, 0, false, nullptr, 0, false, c.data(), 2, false});
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0, 0}));
}

TEST(TrainGemm, BadStridesAreErrors) {
  ThreadPool pool(1);
  std::vector<float> a(64), b(64), c(64);
  // B is k x n = 4 x 8 (not transposed) but ldb 4 < n.
  EXPECT_THROW(train_gemm(pool, TrainGemm{2, 8, 4, a.data(), 4, false, b.data(), 4, false, c.data(),
                                          8, false}),
               Error);
  EXPECT_THROW(train_gemm(pool, TrainGemm{2, 8, 4, a.data(), 4, false, b.data(), 8, false, c.data(),
                                          7, false}),
               Error);
  EXPECT_THROW(train_gemm(pool, TrainGemm{-1, 8, 4, a.data(), 4, false, b.data(), 8, false,
                                          c.data(), 8, false}),
               Error);
}

}  // namespace
}  // namespace efim::cpu
