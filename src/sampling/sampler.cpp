#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace efim {

void validate(const SamplingParams& p) {
  EFIM_CHECK(std::isfinite(p.temperature) && p.temperature >= 0,
             "temperature must be >= 0, got ", p.temperature);
  EFIM_CHECK(p.top_k >= 0, "top_k must be >= 0, got ", p.top_k);
  EFIM_CHECK(p.top_p > 0 && p.top_p <= 1, "top_p must be in (0, 1], got ", p.top_p);
  EFIM_CHECK(p.min_p >= 0 && p.min_p <= 1, "min_p must be in [0, 1], got ", p.min_p);
}

int32_t argmax(std::span<const float> logits) {
  EFIM_CHECK(!logits.empty(), "argmax of empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed) { validate(p_); }

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.temperature == 0.0f) return argmax(logits);
  const size_t vocab = logits.size();
  EFIM_CHECK(vocab > 0, "sampling from empty logits");

  // Candidates sorted by logit, descending (ties: lower id first), cut to top-k.
  cand_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
  size_t k = p_.top_k > 0 ? std::min<size_t>(static_cast<size_t>(p_.top_k), vocab) : vocab;
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(cand_.begin(), cand_.begin() + static_cast<ptrdiff_t>(k), cand_.end(),
                    by_logit);
  cand_.resize(k);
  // Masked tokens (-inf, e.g. token healing) have probability 0: never candidates.
  while (cand_.size() > 1 && cand_.back().first == -std::numeric_limits<float>::infinity())
    cand_.pop_back();

  // p_i = softmax(logit_i / T) over the kept candidates.
  const float max_logit = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp((c.first - max_logit) / p_.temperature);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);

  // top-p: smallest prefix whose mass reaches top_p (always at least one token).
  if (p_.top_p < 1.0f) {
    double mass = 0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      mass += cand_[keep++].first;
      if (mass >= p_.top_p) break;
    }
    cand_.resize(keep);
  }
  // min-p: relative to the most likely token.
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < cand_.size() && cand_[keep].first >= floor) ++keep;
    cand_.resize(keep);
  }

  double total = 0;
  for (const auto& c : cand_) total += c.first;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : cand_) {
    r -= c.first;
    if (r < 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace efim
