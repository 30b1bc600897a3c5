#include "sampling/sampler.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

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

bool parse_sampler_stage(std::string_view name, SamplerStage& out) {
  std::string n(name);
  for (char& c : n) c = char(std::tolower(uint8_t(c)));
  static constexpr std::array<std::pair<std::string_view, SamplerStage>, 12> kNames = {{
      {"top_k", SamplerStage::top_k},
      {"top-k", SamplerStage::top_k},
      {"topk", SamplerStage::top_k},
      {"top_p", SamplerStage::top_p},
      {"top-p", SamplerStage::top_p},
      {"topp", SamplerStage::top_p},
      {"nucleus", SamplerStage::top_p},
      {"min_p", SamplerStage::min_p},
      {"min-p", SamplerStage::min_p},
      {"minp", SamplerStage::min_p},
      {"temperature", SamplerStage::temperature},
      {"temp", SamplerStage::temperature},
  }};
  for (const auto& [spelling, stage] : kNames)
    if (n == spelling) return out = stage, true;
  if (n == "infill") return out = SamplerStage::infill, true;
  return false;
}

std::string_view stage_name(SamplerStage s) {
  switch (s) {
    case SamplerStage::top_k: return "top_k";
    case SamplerStage::top_p: return "top_p";
    case SamplerStage::min_p: return "min_p";
    case SamplerStage::temperature: return "temperature";
    case SamplerStage::infill: return "infill";
  }
  return "?";
}

Sampler::Sampler(const SamplingParams& params, const InfillVocab* vocab)
    : p_(params), vocab_(vocab), rng_(params.seed) {
  validate(p_);
  for (SamplerStage s : p_.chain)
    EFIM_CHECK(s != SamplerStage::infill || vocab_,
               "the infill sampler needs the vocabulary (Sampler without InfillVocab)");
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// p_i = softmax(logit_i) over the candidates (masked ones get 0).
template <class C>
void softmax(std::vector<C>& c) {
  float max_l = kNegInf;
  for (const auto& x : c) max_l = std::max(max_l, x.logit);
  double sum = 0;
  for (auto& x : c) {
    x.p = x.logit == kNegInf ? 0.0f : std::exp(x.logit - max_l);
    sum += x.p;
  }
  for (auto& x : c) x.p = float(x.p / sum);
}

template <class C>
bool by_logit(const C& a, const C& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

template <class C>
void sort_by_logit(std::vector<C>& c) {
  std::sort(c.begin(), c.end(), by_logit<C>);
}

}  // namespace

// llama.cpp's llama_sampler_infill (see the header), on candidates sorted by logit.
void Sampler::stage_infill() {
  auto& c = chain_cand_;
  sort_by_logit(c);
  if (c.size() > kInfillMaxCandidates) c.resize(kInfillMaxCandidates);
  softmax(c);
  double p_txt = 0, p_eog = 0;
  for (const auto& x : c) (vocab_->is_eog(x.id) ? p_eog : p_txt) += x.p;
  if (3 * p_eog * double(c.size()) > p_txt) {
    std::erase_if(c, [&](const Candidate& x) { return !vocab_->is_eog(x.id); });
    return;
  }
  for (size_t i0 = 0; i0 < c.size(); ++i0) {
    for (size_t i1 = 0; i1 < c.size(); ++i1) {
      if (c[i0].logit == kNegInf) break;
      if (i0 == i1 || c[i1].logit == kNegInf) continue;
      const std::string_view a = vocab_->piece(c[i0].id), b = vocab_->piece(c[i1].id);
      if (a.empty() || a.size() > b.size() || std::memcmp(a.data(), b.data(), a.size()) != 0)
        continue;
      size_t dst = i0, src = i1;  // token i0 is a prefix of token i1: merge into the likelier
      if (c[i1].p > c[i0].p) std::swap(dst, src);
      c[dst].p += c[src].p;
      c[src].logit = kNegInf;
      c[src].p = 0;
    }
  }
  auto threshold = [&](float floor) {
    size_t n_text = 0;
    double sum = 0;
    std::erase_if(c, [&](const Candidate& x) {
      const bool eog = vocab_->is_eog(x.id);
      if (!eog && (x.p < floor || x.logit == kNegInf)) return true;
      n_text += eog ? 0 : 1;
      sum += x.p;
      return false;
    });
    for (auto& x : c) x.p = float(x.p / sum);
    return n_text;
  };
  const Candidate best = c[0];  // sorted: the likeliest before the merge
  const size_t n_text = threshold(0.2f);
  if (n_text == 0) {
    // llama.cpp's end-of-text token; a vocabulary without one keeps the likeliest token.
    const int32_t eot = vocab_->eot();
    c.assign(1, eot >= 0 ? Candidate{1.0f, 1.0f, eot} : best);
    return;
  }
  threshold(1.0f / float(n_text + 1));
}

// The explicit chain: the stages in order, then a draw with p = softmax(logits) (llama.cpp's
// dist sampler recomputes p from the logits, so stages that set p only choose who stays).
int32_t Sampler::sample_chain(std::span<const float> logits) {
  auto& c = chain_cand_;
  c.clear();
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] != kNegInf) c.push_back({logits[i], 0.0f, int32_t(i)});
  if (c.empty()) return argmax(logits);  // everything masked: nothing better to offer
  for (SamplerStage s : p_.chain) {
    switch (s) {
      case SamplerStage::top_k:
        if (p_.top_k > 0 && size_t(p_.top_k) < c.size()) {
          // Only the k kept need ordering: no full sort of the vocabulary per token.
          std::partial_sort(c.begin(), c.begin() + p_.top_k, c.end(), by_logit<Candidate>);
          c.resize(size_t(p_.top_k));
        }
        break;
      case SamplerStage::top_p:
        if (p_.top_p < 1.0f) {
          sort_by_logit(c);
          softmax(c);
          double mass = 0;
          size_t keep = 0;
          while (keep < c.size()) {
            mass += c[keep++].p;
            if (mass >= p_.top_p) break;
          }
          c.resize(keep);
        }
        break;
      case SamplerStage::min_p:
        if (p_.min_p > 0.0f) {
          softmax(c);
          float p_max = 0;
          for (const auto& x : c) p_max = std::max(p_max, x.p);
          std::erase_if(c, [&](const Candidate& x) { return x.p < p_.min_p * p_max; });
        }
        break;
      case SamplerStage::temperature:
        if (p_.temperature <= 0.0f) {
          sort_by_logit(c);
          c.resize(1);
        } else {
          for (auto& x : c) x.logit /= p_.temperature;
        }
        break;
      case SamplerStage::infill:
        stage_infill();
        break;
    }
  }
  if (c.size() == 1) return c[0].id;
  sort_by_logit(c);
  softmax(c);
  double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  for (const auto& x : c) {
    r -= x.p;
    if (r < 0) return x.id;
  }
  return c.back().id;
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (!p_.chain.empty()) return sample_chain(logits);
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
