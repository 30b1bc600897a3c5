// AdamW, the schedule, clipping, gradient accumulation and a short fine-tuning run.
#include "train/nn/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.h"
#include "train/nn/train_ops.h"
#include "train/nn/trainer.h"

namespace efim::train {
namespace {

// The vectorised exp of the softmaxes against std::exp: within 3 ulp-ish (4e-7 relative) over
// the range the softmaxes use (arguments <= 0 after max subtraction, and SiLU's -gate).
TEST(TrainOps, ExpMatchesStdExp) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  std::vector<float> y = x;
  ops::exp_inplace(y.data(), int64_t(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    ASSERT_NEAR(y[i], want, 4e-7 * want) << "exp(" << x[i] << ")";
  }
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  const LrSchedule s{1e-3, 10, 110, 0.1};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);                   // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 1e-4 + 0.9e-3 * 0.5, 1e-15);  // half way: the mean of peak and floor
  EXPECT_NEAR(s.at(35), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-15);
  EXPECT_NEAR(s.at(110), 1e-4, 1e-15);
  EXPECT_NEAR(s.at(500), 1e-4, 1e-15);  // stays at the floor past the end
  const LrSchedule flat{2e-3, 0, 1, 1.0};
  EXPECT_DOUBLE_EQ(flat.at(0), 2e-3);
  EXPECT_DOUBLE_EQ(flat.at(7), 2e-3);
}

TEST(Clip, ScalesToTheMaxNormAndReportsTheNorm) {
  ThreadPool pool(2);
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(clip_grad_norm(pool, g.data(), 2, 10.0), 5.0);  // below: unchanged
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_DOUBLE_EQ(clip_grad_norm(pool, g.data(), 2, 1.0), 5.0);
  EXPECT_NEAR(g[0], 0.6f, 1e-6f);
  EXPECT_NEAR(g[1], 0.8f, 1e-6f);
  std::vector<float> big(100000, 0.01f);  // norm 3.1623 over many threads' chunks
  EXPECT_NEAR(clip_grad_norm(pool, big.data(), 100000, 0.0), std::sqrt(10.0), 1e-5);
}

// Two AdamW steps against the formulas evaluated by hand in double, for a matrix element
// (decayed) and a norm weight (not decayed).
TEST(AdamWTest, TwoStepsMatchTheScalarUpdate) {
  const ParamLayout L = ParamLayout::build(test::tiny_config(true));
  const ParamTensor* mat = L.find("model.layers.1.mlp.up_proj.weight");
  const ParamTensor* vec = L.find("model.norm.weight");
  ASSERT_TRUE(mat && vec);
  AdamWOptions o;
  o.weight_decay = 0.1;
  AdamW adam(L, o);
  ThreadPool pool(2);
  std::vector<float> w(static_cast<size_t>(L.total), 0.5f), g(w.size(), 0.0f);
  const double lr[2] = {1e-2, 5e-3}, grad[2] = {0.3, -0.7};
  for (int s = 0; s < 2; ++s) {
    std::fill(g.begin(), g.end(), float(grad[s]));
    adam.step(pool, w.data(), g.data(), lr[s]);
  }
  auto expect = [&](bool decay) {
    double x = 0.5, m = 0, v = 0;
    for (int s = 0; s < 2; ++s) {
      const int t = s + 1;
      m = 0.9 * m + 0.1 * grad[s];
      v = 0.95 * v + 0.05 * grad[s] * grad[s];
      if (decay) x *= 1 - lr[s] * 0.1;
      const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.95, t));
      x -= lr[s] * mhat / (std::sqrt(vhat) + 1e-8);
    }
    return x;
  };
  EXPECT_NEAR(w[mat->offset + 5], expect(true), 1e-6);
  EXPECT_NEAR(w[vec->offset + 3], expect(false), 1e-6);
  EXPECT_GT(std::abs(expect(true) - expect(false)), 1e-5);  // decay makes a visible difference
  EXPECT_EQ(adam.steps_taken(), 2);
}

// Repeats one fixed batch.
class FixedSource : public BatchSource {
 public:
  explicit FixedSource(std::vector<TokenBatch> batches) : batches_(std::move(batches)) {}
  void next(TokenBatch& b) override { b = batches_[i_++ % batches_.size()]; }
  std::string describe() const override { return "fixed"; }

 private:
  std::vector<TokenBatch> batches_;
  size_t i_ = 0;
};

TokenBatch rows(const TokenBatch& b, int64_t r0, int64_t n) {
  TokenBatch out;
  out.resize(n, b.T);
  const auto s = b.inputs.begin() + r0 * b.T;
  std::copy(s, s + n * b.T, out.inputs.begin());
  std::copy(b.targets.begin() + r0 * b.T, b.targets.begin() + (r0 + n) * b.T, out.targets.begin());
  std::copy(b.loss_mask.begin() + r0 * b.T, b.loss_mask.begin() + (r0 + n) * b.T,
            out.loss_mask.begin());
  return out;
}

// One step over a batch of 2 rows = one step over 2 micro-batches of 1 row (row 1 has masked
// targets, so the halves hold different numbers of targets).
TEST(TrainerTest, AccumulationEqualsTheWholeBatch) {
  const ModelConfig c = test::tiny_config(true);
  const TokenBatch b = test::random_batch(2, 9, c.vocab, 21);
  TrainOptions o;
  o.clip = 0;
  ThreadPool pool(2);
  Params p1 = random_params(c, 5), p2 = p1;
  Trainer whole(p1, pool, o);
  FixedSource s1({b});
  const StepStats a = whole.step(s1);
  o.accum = 2;
  Trainer parts(p2, pool, o);
  FixedSource s2({rows(b, 0, 1), rows(b, 1, 1)});
  const StepStats z = parts.step(s2);
  EXPECT_EQ(a.targets, z.targets);
  EXPECT_NEAR(a.loss, z.loss, 1e-6 * a.loss);
  for (size_t i = 0; i < p1.w.size(); ++i)
    ASSERT_NEAR(whole.grads()[i], parts.grads()[i], 1e-6f + 1e-4f * std::abs(whole.grads()[i]));
  EXPECT_NEAR(a.grad_norm, z.grad_norm, 1e-5 * a.grad_norm);
}

// 20 steps on one repeated batch: the loss must fall well below its start.
TEST(TrainerTest, TwentyStepsReduceTheLossOnARepeatedBatch) {
  const ModelConfig c = test::tiny_config(true);
  Params p = random_params(c, 17);
  TrainOptions o;
  o.lr = LrSchedule{1e-2, 3, 20, 0.1};
  ThreadPool pool(2);
  Trainer tr(p, pool, o);
  FixedSource src({test::random_batch(2, 16, c.vocab, 23)});
  std::vector<double> loss;
  for (int s = 0; s < 20; ++s) {
    const StepStats st = tr.step(src);
    EXPECT_EQ(st.step, s);
    EXPECT_DOUBLE_EQ(st.lr, o.lr.at(s));
    loss.push_back(st.loss);
  }
  std::printf("loss: step 0 %.4f, step 10 %.4f, step 19 %.4f\n", loss[0], loss[10], loss[19]);
  EXPECT_LT(loss[10], loss[0]);
  EXPECT_LT(loss[19], 0.5 * loss[0]);
}

}  // namespace
}  // namespace efim::train
