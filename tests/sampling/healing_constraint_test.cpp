// VocabIndex and HealConstraint against brute-force scans of real vocabularies (llama.cpp's
// GGUF vocab files): the allowed set of every query equals a scan over all ids, on thousands
// of random byte strings (random bytes, cuts of real token bytes, multi-byte characters).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../infill/infill_test_util.h"
#include "sampling/covering.h"
#include "sampling/sampler.h"
#include "sampling/token_healing.h"
#include "sampling/vocab_index.h"

namespace efim {
namespace {

bool indexed(const Tokenizer& t, int32_t id) {
  return !t.is_special(id) && !t.token_bytes(id).empty();
}

// The allowed set of `rest` and whether some token strictly extends it, in one scan.
struct Brute {
  std::vector<int32_t> allowed;
  bool extended = false;
};
Brute brute(const Tokenizer& t, std::string_view rest) {
  Brute out;
  for (int32_t id = 0; id < t.vocab_size(); ++id) {
    if (!indexed(t, id)) continue;
    const std::string_view b = t.token_bytes(id);
    if (b.starts_with(rest)) {
      out.extended = out.extended || b.size() > rest.size();
      if (!rest.empty()) out.allowed.push_back(id);
    } else if (b.size() < rest.size() && rest.starts_with(b)) {
      out.allowed.push_back(id);
    }
  }
  return out;
}
std::vector<int32_t> brute_allowed(const Tokenizer& t, std::string_view rest) {
  return brute(t, rest).allowed;
}

// Query strings: random bytes, prefixes / cuts of real tokens (so that long ranges and exact
// hits occur), and those with random bytes appended; lengths 1..12.
std::vector<std::string> queries(const Tokenizer& t, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> out;
  while (out.size() < n) {
    const int kind = int(rng() % 4);
    std::string s;
    if (kind == 0) {
      const size_t len = 1 + rng() % 4;
      for (size_t i = 0; i < len; ++i) s += char(rng() % 256);
    } else {
      const auto id = int32_t(rng() % uint64_t(t.vocab_size()));
      const std::string_view b = t.token_bytes(id);
      if (b.empty()) continue;
      const size_t from = kind == 3 ? rng() % b.size() : 0;  // may start inside a character
      s = std::string(b.substr(from, 1 + rng() % (b.size() - from)));
      if (kind == 2) s += char(rng() % 256);
    }
    out.push_back(s.substr(0, 12));
  }
  return out;
}

class VocabIndexBrute : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabIndexBrute, AllowedSetEqualsScanOfTheVocabulary) {
  const Tokenizer tok = test::gguf_tokenizer(GetParam());
  const VocabIndex index(tok);
  size_t n_indexed = 0, max_bytes = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!indexed(tok, id)) continue;
    ++n_indexed;
    max_bytes = std::max(max_bytes, tok.token_bytes(id).size());
  }
  EXPECT_EQ(index.size(), n_indexed);
  EXPECT_EQ(index.max_token_bytes(), max_bytes);
  std::vector<int32_t> got;
  size_t nonempty = 0;
  for (const std::string& q : queries(tok, 2500, 17)) {
    index.allowed(q, got);
    const Brute want = brute(tok, q);
    ASSERT_EQ(got, want.allowed) << "query of " << q.size() << " bytes";
    ASSERT_EQ(index.strictly_extended(q), want.extended);
    nonempty += !got.empty();
  }
  EXPECT_GT(nonempty, 1500u);  // the queries exercise real ranges, not only empty sets
  index.allowed("", got);
  EXPECT_TRUE(got.empty());
}

INSTANTIATE_TEST_SUITE_P(Gguf, VocabIndexBrute,
                         ::testing::Values("llama-bpe", "qwen2", "deepseek-coder", "starcoder"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

TEST(VocabIndex, SpecialTokensAreNeverIndexed) {
  const Tokenizer tok = test::gguf_tokenizer("starcoder");
  const VocabIndex index(tok);
  // <fim_prefix> (1) spelled out as bytes: only plain-text tokens may produce those bytes.
  for (int32_t id : index.starting_with("<fim_")) EXPECT_FALSE(tok.is_special(id)) << id;
  for (int32_t id : index.equal_to("<fim_prefix>")) EXPECT_NE(id, 1);
  EXPECT_TRUE(index.equal_to("<fim_prefix>").empty());
}

TEST(HealConstraint, WalksTheRequiredBytesAndMasksEverythingElse) {
  const Tokenizer tok = test::gguf_tokenizer("llama-bpe");
  const VocabIndex index(tok);
  HealConstraint c(index, " comp");
  ASSERT_TRUE(c.active());
  std::vector<float> logits(size_t(tok.vocab_size()), 1.0f);
  c.mask(logits);
  const std::vector<int32_t> want = brute_allowed(tok, " comp");
  size_t finite = 0;
  for (size_t id = 0; id < logits.size(); ++id) {
    const bool allowed = std::binary_search(want.begin(), want.end(), int32_t(id));
    EXPECT_EQ(std::isfinite(logits[id]), allowed) << id;
    finite += std::isfinite(logits[id]);
  }
  EXPECT_EQ(finite, want.size());
  // " co" (1080) is a proper prefix: "mp" remains; a token starting with "mp" covers it.
  c.accept(1080);
  EXPECT_EQ(c.rest(), "mp");
  std::vector<float> rest_logits(size_t(tok.vocab_size()), 1.0f);
  c.mask(rest_logits);
  int32_t longer = -1;  // a token that runs past the cursor
  for (int32_t id : index.starting_with("mp"))
    if (index.bytes(id).size() > 2) longer = id;
  ASSERT_GE(longer, 0);
  EXPECT_TRUE(std::isfinite(rest_logits[size_t(longer)]));
  EXPECT_FALSE(std::isfinite(rest_logits[1080]));  // " co" no longer fits
  c.accept(longer);
  EXPECT_FALSE(c.active());
  std::vector<float> free(8, 0.5f);
  c.mask(free);  // inactive: untouched
  EXPECT_EQ(free, std::vector<float>(8, 0.5f));
  HealConstraint d(index, " comp");
  EXPECT_THROW(d.accept(index.equal_to(" x").front()), Error);  // does not continue " comp"
}

TEST(HealConstraint, ModelWithFewerLogitsThanTheVocabulary) {
  const Tokenizer tok = test::gguf_tokenizer("llama-bpe");
  const VocabIndex index(tok);
  HealConstraint c(index, " comp");
  std::vector<float> logits(300, 0.0f);  // ids >= 300 do not exist for this model
  c.mask(logits);
  size_t finite = 0;
  for (float l : logits) finite += std::isfinite(l);
  // " " (220) and " c" (272) are the only allowed ids below 300.
  EXPECT_EQ(finite, 2u);
  EXPECT_TRUE(std::isfinite(logits[220]) && std::isfinite(logits[272]));
  HealConstraint none(index, "\xe4\xb8\xad");  // no token below 100 starts or covers this
  std::vector<float> few(100, 0.0f);
  EXPECT_THROW(none.mask(few), Error);
}

TEST(Sampler, MaskedLogitsAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {-inf, 0.1f, -inf, -inf, 0.2f, -inf};
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Sampler s({.temperature = 1.5f, .top_k = 5, .top_p = 0.99f, .min_p = 0.0f, .seed = seed});
    const int32_t t = s.sample(logits);
    EXPECT_TRUE(t == 1 || t == 4) << t;
  }
  Sampler g({});
  EXPECT_EQ(g.sample(logits), 4);
  std::vector<float> one = {-inf, -inf, 3.0f};
  Sampler s({.temperature = 1.0f, .top_p = 0.5f, .seed = 3});
  EXPECT_EQ(s.sample(one), 2);
}


// The covering search with uniform logits over the first n ids: fully expanded, its leaves are
// exactly the coverings of R among those ids (a brute-force enumeration), each with log
// probability -k log n for a path of k tokens; greedy picks the shortest (a one-token covering).
TEST(CoveringSearch, LeavesAreAllCoveringsWithTheirProbabilities) {
  const Tokenizer tok = test::gguf_tokenizer("llama-bpe");
  const VocabIndex index(tok);
  const std::string r = " comp";
  const size_t n = 2000;  // ids below 2000: " ", " c", " co", " com", " comp", ...
  std::vector<std::vector<int32_t>> want;
  std::function<void(std::vector<int32_t>, std::string_view)> enumerate =
      [&](std::vector<int32_t> path, std::string_view rest) {
        for (int32_t id = 0; id < int32_t(n); ++id) {
          if (!indexed(tok, id)) continue;
          const std::string_view b = tok.token_bytes(id);
          std::vector<int32_t> next = path;
          next.push_back(id);
          if (b.starts_with(rest)) want.push_back(next);
          else if (b.size() < rest.size() && rest.starts_with(b)) enumerate(next, rest.substr(b.size()));
        }
      };
  enumerate({}, r);
  ASSERT_GT(want.size(), 5u);
  CoveringSearch s(index, r, {.max_expansions = 1000, .parallel = 2});
  const std::vector<float> uniform(n, 0.0f);
  s.start(uniform);
  while (!s.done()) {
    const auto next = s.next();
    ASSERT_FALSE(next.empty());
    for (const auto& e : next) s.feed(e.node, uniform);
  }
  std::vector<std::vector<int32_t>> got;
  for (size_t i = 0; i < s.n_leaves(); ++i) {
    got.push_back(s.leaf_path(i));
    EXPECT_NEAR(s.leaf_logp(i), -double(got.back().size()) * std::log(double(n)), 1e-9);
  }
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  Sampler greedy({});
  EXPECT_EQ(s.choose(greedy).size(), 1u);
  // A budget of 0 expansions keeps only the one-token coverings.
  CoveringSearch none(index, r, {.max_expansions = 0});
  none.start(uniform);
  EXPECT_TRUE(none.done());
  for (size_t i = 0; i < none.n_leaves(); ++i) EXPECT_EQ(none.leaf_path(i).size(), 1u);
}

}  // namespace
}  // namespace efim
