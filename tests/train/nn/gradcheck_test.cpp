// Gradient check of every parameter tensor: the trainer's hand-written backward pass (f32)
// against central finite differences of an independent double-precision forward (ref_model.h).
//
// Bounds (f32 backward vs a double oracle whose differences have error ~h^2 = 1e-10): per tensor,
//   ||g - g_ref||_2 <= 2e-5 ||g_ref||_2   and   max_i |g_i - g_ref_i| <= 2e-5 max_i |g_ref_i|
// (measured: about 1e-6 for both).
// f32 rounding of sums over ~100 terms gives ~1e-6 relative; a wrong term in a derivative gives
// O(1) relative errors, so the bounds separate the two by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "nn_test_util.h"
#include "ref_model.h"
#include "train/nn/network.h"

namespace efim::train {
namespace {

struct TensorError {
  double rel_l2, rel_max, ref_norm;
};

// Central differences of the reference mean loss for every element of tensor t.
std::vector<double> numeric_grad(test::RefModel& ref, const ParamTensor& t, const TokenBatch& b) {
  std::vector<double> out(static_cast<size_t>(t.numel));
  std::vector<double>& w = ref.weights();
  const double h = 1e-5;
  for (int64_t i = 0; i < t.numel; ++i) {
    double& wi = w[static_cast<size_t>(t.offset + i)];
    const double w0 = wi;
    wi = w0 + h;
    const double lp = ref.loss(b);
    wi = w0 - h;
    const double lm = ref.loss(b);
    wi = w0;
    out[i] = (lp - lm) / (2 * h);
  }
  return out;
}

TensorError compare(const float* g, const std::vector<double>& ref) {
  double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(g[i]) - ref[i];
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
    max_diff = std::max(max_diff, std::abs(d));
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return {std::sqrt(diff2 / ref2), max_diff / max_ref, std::sqrt(ref2)};
}

void check_all_gradients(bool tied, const NetworkOptions& opts, int threads) {
  const ModelConfig c = test::tiny_config(tied);
  Params p = random_params(c, tied ? 7 : 8);
  const TokenBatch b = test::random_batch(2, 7, c.vocab, 11);
  ThreadPool pool(threads);
  Network net(p.layout, pool, opts);
  std::vector<float> g(static_cast<size_t>(p.layout.total), 0.0f);
  const LossSum loss = net.forward_backward(p.w.data(), b, g.data(), 1.0f / float(b.n_targets()));

  test::RefModel ref(p.layout, std::vector<double>(p.w.begin(), p.w.end()));
  const double ref_loss = ref.loss(b);
  EXPECT_EQ(loss.count, b.n_targets());
  EXPECT_NEAR(loss.mean(), ref_loss, 2e-6 * ref_loss);
  double worst_l2 = 0, worst_max = 0;
  for (const ParamTensor& t : p.layout.tensors) {
    const std::vector<double> num = numeric_grad(ref, t, b);
    const TensorError e = compare(g.data() + t.offset, num);
    worst_l2 = std::max(worst_l2, e.rel_l2);
    worst_max = std::max(worst_max, e.rel_max);
    EXPECT_GT(e.ref_norm, 1e-6) << t.name << ": the check needs a non-zero gradient";
    EXPECT_LT(e.rel_l2, 2e-5) << t.name << " (norm " << e.ref_norm << ")";
    EXPECT_LT(e.rel_max, 2e-5) << t.name << " (norm " << e.ref_norm << ")";
  }
  std::printf("%zu tensors: worst relative L2 error %.2e, worst relative max error %.2e\n",
              p.layout.tensors.size(), worst_l2, worst_max);
}

TEST(GradCheck, EveryTensorTiedEmbeddings) {
  check_all_gradients(true, {}, 2);
}

TEST(GradCheck, EveryTensorUntiedHead) {
  check_all_gradients(false, {}, 1);
}

// Small head chunks and attention row blocks: several blocks per row, with remainders.
TEST(GradCheck, EveryTensorSmallBlocks) {
  NetworkOptions o;
  o.head_rows = 5;
  o.attention_row_block = 3;
  check_all_gradients(true, o, 2);
}

// Gradients accumulate: two calls with scale 1/2 equal one call with scale 1.
TEST(GradCheck, GradientsAccumulateAcrossCalls) {
  const ModelConfig c = test::tiny_config(true);
  Params p = random_params(c, 3);
  const TokenBatch b = test::random_batch(2, 5, c.vocab, 4);
  ThreadPool pool(2);
  Network net(p.layout, pool);
  std::vector<float> once(static_cast<size_t>(p.layout.total), 0.0f), twice = once;
  net.forward_backward(p.w.data(), b, once.data(), 1.0f);
  net.forward_backward(p.w.data(), b, twice.data(), 0.5f);
  net.forward_backward(p.w.data(), b, twice.data(), 0.5f);
  for (size_t i = 0; i < once.size(); ++i)
    ASSERT_NEAR(once[i], twice[i], 1e-5f * (1.0f + std::abs(once[i]))) << "element " << i;
}

}  // namespace
}  // namespace efim::train
