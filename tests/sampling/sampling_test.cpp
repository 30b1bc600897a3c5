#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "base/error.h"
#include "sampling/sampler.h"

using namespace efim;

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler s({});
  std::vector<float> logits = {0.5f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(logits), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  SamplingParams p{.temperature = 1.0f, .seed = 42};
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits), b.sample(logits));
}

TEST(Sampler, TopKRestrictsSupport) {
  std::vector<float> logits = {3.0f, 2.9f, 2.8f, 2.7f, 2.6f};
  Sampler s({.temperature = 5.0f, .top_k = 2, .seed = 1});
  for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(logits), 2);
}

TEST(Sampler, TopPKeepsSmallestMassReachingP) {
  // softmax(log p) = p: probabilities 0.5, 0.3, 0.15, 0.05. top_p 0.75 keeps {0, 1}.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  Sampler s({.temperature = 1.0f, .top_p = 0.75f, .seed = 7});
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) counts[s.sample(logits)]++;
  EXPECT_EQ(counts.count(2) + counts.count(3), 0u);
  // Renormalised: 0.5/0.8 = 0.625 for token 0.
  EXPECT_NEAR(counts[0] / 4000.0, 0.625, 0.03);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .min_p = 0.2f, .seed = 3});  // floor = 0.12
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.sample(logits), 2);
}

TEST(Sampler, MatchesDistributionAtTemperatureOne) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s({.temperature = 1.0f, .seed = 11});
  int ones = 0;
  for (int i = 0; i < 20000; ++i) ones += s.sample(logits);
  EXPECT_NEAR(ones / 20000.0, 0.75, 0.015);
}

TEST(Sampler, RejectsBadParams) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_k = -2}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 1.5f}), Error);
  EXPECT_THROW(Sampler({.min_p = 2.0f}), Error);
  EXPECT_THROW(Sampler({.temperature = NAN}), Error);
}
