// Turning logits into the next token: greedy, or temperature / top-k / top-p / min-p sampling
// with a per-request seeded generator; or, when a request names its samplers (llama.cpp's
// `samplers`), those stages in that order, including llama.cpp's `infill` stage.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace efim {

// Stages of an explicit chain (llama.cpp's sampler names). Each narrows the candidate set
// (or, temperature, rescales the logits); the token is then drawn from what is left with
// p_i = softmax(logit_i) -- llama.cpp's final `dist` sampler.
//   top_k        keep the k largest logits (k <= 0: all)
//   top_p        keep the smallest most-likely set whose softmax mass reaches top_p
//   min_p        keep p_i >= min_p * p_max
//   temperature  logits /= T; T <= 0 keeps only the largest logit (greedy)
//   infill       llama.cpp's FIM stage (p over the candidates; EOG = end-of-infill tokens):
//                (1) if 3 * p_EOG * n > p_text (n candidates), keep only the EOG tokens;
//                (2) else merge each pair where one token's bytes are a prefix of the other's
//                    into the more likely one (p adds up, the other leaves);
//                (3) drop text tokens with p < 0.2, renormalise, drop text tokens with
//                    p < 1 / (n_text + 1); EOG tokens always stay;
//                (4) no text token left: the end-of-infill token alone.
//                Step (2) is quadratic in n: above kInfillMaxCandidates candidates (no top_k
//                before it) only the most likely kInfillMaxCandidates take part.
enum class SamplerStage : uint8_t { top_k, top_p, min_p, temperature, infill };
inline constexpr size_t kInfillMaxCandidates = 512;
// llama.cpp's spellings ("top_k", "top-k", "topk", "nucleus", "temp", ...), case-insensitive;
// false for names it does not know.
bool parse_sampler_stage(std::string_view name, SamplerStage& out);
std::string_view stage_name(SamplerStage s);

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id wins ties)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off; keep the smallest set with probability mass >= top_p
  float min_p = 0.0f;        // 0 = off; drop tokens with p < min_p * p_max
  uint64_t seed = 0;
  // Non-empty: these stages in this order instead of the fixed order below; `temperature`
  // applies only where it is listed (as in llama.cpp, a chain without it draws at T = 1).
  std::vector<SamplerStage> chain = {};
};

// What the infill stage knows of the vocabulary: each token's text and the end-of-infill set.
struct InfillVocab {
  virtual ~InfillVocab() = default;
  virtual std::string_view piece(int32_t id) const = 0;  // empty for control tokens
  virtual bool is_eog(int32_t id) const = 0;
  virtual int32_t eot() const = 0;  // chosen when no text token is left; -1: none
};

// Throws Error naming the field when a value is out of range (negative temperature, top_p
// outside (0, 1], min_p outside [0, 1], negative top_k).
void validate(const SamplingParams& p);

class Sampler {
 public:
  // `vocab` (borrowed) is needed when the chain has an infill stage.
  explicit Sampler(const SamplingParams& params, const InfillVocab* vocab = nullptr);
  // logits: [vocab]. Returns the chosen token id. Filters apply in the order top-k, then
  // temperature softmax, then top-p, then min-p (llama.cpp's default order). Logits of -inf
  // (masked by a constraint) are never chosen while any finite one is left.
  int32_t sample(std::span<const float> logits);

 private:
  int32_t sample_chain(std::span<const float> logits);
  void stage_infill();
  SamplingParams p_;
  const InfillVocab* vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch: (logit or prob, id)
  struct Candidate {
    float logit;
    float p;  // set by the stages that need probabilities
    int32_t id;
  };
  std::vector<Candidate> chain_cand_;  // scratch of the explicit chain
};

// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace efim
