// Turning logits into the next token: greedy, or temperature / top-k / top-p / min-p sampling
// with a per-request seeded generator.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace efim {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id wins ties)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off; keep the smallest set with probability mass >= top_p
  float min_p = 0.0f;        // 0 = off; drop tokens with p < min_p * p_max
  uint64_t seed = 0;
};

// Throws Error naming the field when a value is out of range (negative temperature, top_p
// outside (0, 1], min_p outside [0, 1], negative top_k).
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: [vocab]. Returns the chosen token id. Filters apply in the order top-k, then
  // temperature softmax, then top-p, then min-p (llama.cpp's default order). Logits of -inf
  // (masked by a constraint) are never chosen while any finite one is left.
  int32_t sample(std::span<const float> logits);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit or prob, id)
};

// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace efim
