#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <string>
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

// --- llama.cpp's explicit sampler chains (`samplers`), with its infill stage ---

namespace {

// A constructed vocabulary for the infill stage: each id's text, and which ids end an infill.
struct TestVocab final : InfillVocab {
  std::vector<std::string> pieces;
  std::vector<int32_t> eog;
  std::string_view piece(int32_t id) const override { return pieces.at(size_t(id)); }
  bool is_eog(int32_t id) const override {
    return std::find(eog.begin(), eog.end(), id) != eog.end();
  }
  int32_t eot() const override { return eog.empty() ? -1 : eog.front(); }
};

std::vector<float> log_probs(const std::vector<float>& p) {
  std::vector<float> l;
  for (float x : p) l.push_back(std::log(x));
  return l;
}

std::map<int, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int, int> h;
  for (int i = 0; i < n; ++i) h[s.sample(logits)]++;
  return h;
}

}  // namespace

TEST(SamplerChain, ParsesLlamaCppNames) {
  SamplerStage s{};
  for (const char* n : {"top_k", "TOP-K", "topk"}) {
    ASSERT_TRUE(parse_sampler_stage(n, s)) << n;
    EXPECT_EQ(s, SamplerStage::top_k) << n;
  }
  ASSERT_TRUE(parse_sampler_stage("nucleus", s));
  EXPECT_EQ(s, SamplerStage::top_p);
  ASSERT_TRUE(parse_sampler_stage("temp", s));
  EXPECT_EQ(s, SamplerStage::temperature);
  ASSERT_TRUE(parse_sampler_stage("infill", s));
  EXPECT_EQ(s, SamplerStage::infill);
  EXPECT_FALSE(parse_sampler_stage("mirostat", s));
}

TEST(SamplerChain, WithoutTemperatureDrawsAtTemperatureOne) {
  // llama.cpp: a chain that does not list `temperature` ignores it and draws from the
  // softmax of the logits (its final dist sampler), even with temperature 0.
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s({.temperature = 0.0f, .seed = 5, .chain = {SamplerStage::top_k}});
  auto h = histogram(s, logits, 20000);
  EXPECT_NEAR(h[1] / 20000.0, 0.75, 0.015);
  // Listed with T = 0 it is greedy.
  Sampler g({.temperature = 0.0f, .chain = {SamplerStage::top_k, SamplerStage::temperature}});
  EXPECT_EQ(histogram(g, logits, 100)[1], 100);
}

TEST(SamplerChain, StagesRunInTheGivenOrder) {
  // p = 0.4 0.3 0.2 0.1. top_p 0.6 then top_k 1 keeps {0}; top_k 3 then top_p 0.95 keeps
  // {0, 1, 2} (renormalised over the 3: 0.44 0.33 0.22, mass 0.95 needs all three).
  std::vector<float> logits = log_probs({0.4f, 0.3f, 0.2f, 0.1f});
  Sampler a({.top_k = 1, .top_p = 0.6f, .chain = {SamplerStage::top_p, SamplerStage::top_k}});
  EXPECT_EQ(histogram(a, logits, 200)[0], 200);
  Sampler b({.top_k = 3, .top_p = 0.95f, .seed = 2,
             .chain = {SamplerStage::top_k, SamplerStage::top_p}});
  auto h = histogram(b, logits, 6000);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_NEAR(h[2] / 6000.0, 0.2 / 0.9, 0.03);
}

TEST(SamplerChain, InfillMergesPrefixTokensAndDropsWeakOnes) {
  // x is the argmax (0.19), but "comp" (0.18) is a prefix of "compute" (0.17): merged, comp
  // holds 0.35 and compute leaves. Then text tokens under 0.2 go (x, a, b, c); EOG stays.
  TestVocab v;
  v.pieces = {"x", "comp", "compute", "a", "b", "c", ""};
  v.eog = {6};
  std::vector<float> logits = log_probs({0.19f, 0.18f, 0.17f, 0.15f, 0.15f, 0.159f, 0.001f});
  SamplingParams greedy_after{.chain = {SamplerStage::infill, SamplerStage::temperature}};
  Sampler s(greedy_after, &v);
  EXPECT_EQ(s.sample(logits), 1) << "comp, not the plain argmax x";
  Sampler plain({.chain = {SamplerStage::temperature}});
  EXPECT_EQ(plain.sample(logits), 0);
  // At T = 1 the draw is over what stayed, weighed by the original logits (llama.cpp's dist
  // recomputes p from the logits): comp 0.18 : EOG 0.001.
  Sampler t1({.seed = 9, .chain = {SamplerStage::infill}}, &v);
  auto h = histogram(t1, logits, 5000);
  EXPECT_EQ(h[1] + h[6], 5000);
  EXPECT_LT(h[6], 100);
}

TEST(SamplerChain, InfillPrefersEndOfInfillWhenItsMassIsHigh) {
  // 3 * p_eog * n > p_text: 3 * 0.11 * 3 = 0.99 > 0.89, so only EOG tokens stay.
  TestVocab v;
  v.pieces = {"x", "y", ""};
  v.eog = {2};
  std::vector<float> logits = log_probs({0.49f, 0.40f, 0.11f});
  Sampler s({.seed = 1, .chain = {SamplerStage::infill}}, &v);
  EXPECT_EQ(histogram(s, logits, 300)[2], 300);
  // With top_k 2 first the EOG token is gone and text is drawn.
  Sampler k({.top_k = 2, .seed = 1, .chain = {SamplerStage::top_k, SamplerStage::infill}}, &v);
  EXPECT_EQ(histogram(k, logits, 300)[2], 0);
}

TEST(SamplerChain, InfillWithNoStrongTextTokenEndsTheInfill) {
  // Five unrelated text tokens at 0.2 - e each fall under the 0.2 threshold: llama.cpp then
  // answers the end-of-text token alone, even though its own p is tiny.
  TestVocab v;
  v.pieces = {"a", "b", "c", "d", "e", ""};
  v.eog = {5};
  std::vector<float> logits = log_probs({0.1999f, 0.1999f, 0.1999f, 0.1999f, 0.1999f, 0.0005f});
  Sampler s({.chain = {SamplerStage::infill, SamplerStage::temperature}}, &v);
  EXPECT_EQ(s.sample(logits), 5);
  // Without an end-of-text token the likeliest token stays.
  TestVocab none;
  none.pieces = v.pieces;
  Sampler n({.chain = {SamplerStage::infill, SamplerStage::temperature}}, &none);
  EXPECT_EQ(n.sample(logits), 0);
}

TEST(SamplerChain, InfillNeedsTheVocabulary) {
  EXPECT_THROW(Sampler({.chain = {SamplerStage::infill}}), Error);
}
