// FIM samples and fragment tokenization with the real efim-base-py tokenizer.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "data_test_util.h"
#include "train/data/fim_sample.h"

namespace efim::train {
namespace {

using test::efim_tokenizer;
using test::random_documents;

struct Parts {
  std::vector<int32_t> prefix, suffix, middle;  // plain: the text in middle
};

// Splits a sample at its sentinels, checking the PSM frame and the final <eos>.
Parts split_sample(const Sample& s, const Tokenizer& tok) {
  const auto& t = s.tokens;
  EXPECT_FALSE(t.empty());
  EXPECT_EQ(t.back(), tok.eos());
  auto range = [&](size_t a, size_t b) { return std::vector<int32_t>(t.begin() + a, t.begin() + b); };
  Parts p;
  if (s.kind == SampleKind::plain) {
    EXPECT_NE(t.front(), tok.fim().prefix);
    p.middle = range(0, t.size() - 1);
    return p;
  }
  EXPECT_EQ(t.front(), tok.fim().prefix);
  size_t si = std::find(t.begin(), t.end(), tok.fim().suffix) - t.begin();
  size_t mi = std::find(t.begin(), t.end(), tok.fim().middle) - t.begin();
  EXPECT_LT(si, mi);
  EXPECT_LT(mi, t.size());
  if (!(si < mi && mi < t.size())) return p;
  p.prefix = range(1, si);
  p.suffix = range(si + 1, mi);
  p.middle = range(mi + 1, t.size() - 1);
  return p;
}

std::vector<std::vector<Sample>> build_all(const std::vector<std::string>& docs, FimOptions o) {
  SampleBuilder b(efim_tokenizer(), o);
  std::vector<std::vector<Sample>> out;
  for (size_t i = 0; i < docs.size(); ++i) out.push_back(b.document(docs[i], "doc" + std::to_string(i)));
  return out;
}

FimOptions small_chunks(double rate, uint64_t seed = 7) {
  FimOptions o;
  o.seed = seed;
  o.chunk_chars = 300;  // many samples from short documents
  o.fragment_rate = rate;
  return o;
}

// Chunks reassemble the document; each sample's parts reassemble its chunk.
void expect_texts_cover(const std::string& doc, const std::vector<Sample>& samples) {
  std::string joined;
  for (const Sample& s : samples) {
    joined += std::string(s.prefix) + std::string(s.middle) + std::string(s.suffix);
  }
  EXPECT_EQ(joined, doc);
}

TEST(FimSample, RateZeroIsCanonicalTokenizationOfEachPart) {
  const Tokenizer& tok = efim_tokenizer();
  auto docs = random_documents(1, 40, 3000);
  auto all = build_all(docs, small_chunks(0.0));
  size_t n = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    expect_texts_cover(docs[d], all[d]);
    for (const Sample& s : all[d]) {
      Parts p = split_sample(s, tok);
      EXPECT_EQ(p.prefix, tok.encode(s.prefix));
      EXPECT_EQ(p.suffix, tok.encode(s.suffix));
      EXPECT_EQ(p.middle, tok.encode(s.middle));
      EXPECT_EQ(s.fragments,
                static_cast<uint32_t>(!s.prefix.empty() + !s.suffix.empty() + !s.middle.empty()));
      ++n;
    }
  }
  EXPECT_GT(n, 150u);
}

TEST(FimSample, FragmentsDecodeExactlyAndDifferFromCanonical) {
  const Tokenizer& tok = efim_tokenizer();
  auto docs = random_documents(2, 60, 4000);
  auto canon = build_all(docs, small_chunks(0.0));
  auto frag = build_all(docs, small_chunks(0.05));
  size_t samples = 0, differ = 0, fragments = 0, chars = 0, parts = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    ASSERT_EQ(frag[d].size(), canon[d].size());
    expect_texts_cover(docs[d], frag[d]);
    for (size_t k = 0; k < frag[d].size(); ++k) {
      const Sample& s = frag[d][k];
      // Same seed: the same layout at every fragment rate.
      EXPECT_EQ(s.kind, canon[d][k].kind);
      EXPECT_EQ(s.prefix, canon[d][k].prefix);
      EXPECT_EQ(s.middle, canon[d][k].middle);
      Parts p = split_sample(s, tok);
      EXPECT_EQ(tok.decode(p.prefix), s.prefix);
      EXPECT_EQ(tok.decode(p.suffix), s.suffix);
      EXPECT_EQ(tok.decode(p.middle), s.middle);
      differ += s.tokens != canon[d][k].tokens;
      ++samples;
      fragments += s.fragments;
      for (std::string_view part : {s.prefix, s.suffix, s.middle}) {
        if (part.empty()) continue;
        ++parts;
        chars += char_starts(part).size() - 2;  // boundaries inside the part
      }
    }
  }
  EXPECT_GT(samples, 300u);
  EXPECT_GT(differ, samples / 2) << "fragment tokens should differ from canonical often";
  // Each interior boundary is cut with probability 0.05: fragments = parts + Binomial(chars, p).
  const double expected = static_cast<double>(parts) + 0.05 * static_cast<double>(chars);
  const double sd = std::sqrt(0.05 * 0.95 * static_cast<double>(chars));
  EXPECT_NEAR(static_cast<double>(fragments), expected, 5 * sd);
}

TEST(FimSample, DeterministicForSeedAndDifferentAcrossSeeds) {
  auto docs = random_documents(3, 20, 3000);
  auto a = build_all(docs, small_chunks(0.02, 11));
  auto b = build_all(docs, small_chunks(0.02, 11));
  auto c = build_all(docs, small_chunks(0.02, 12));
  size_t same_ab = 0, same_ac = 0, total = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    ASSERT_EQ(a[d].size(), c[d].size());
    for (size_t k = 0; k < a[d].size(); ++k) {
      same_ab += a[d][k].tokens == b[d][k].tokens;
      same_ac += a[d][k].tokens == c[d][k].tokens;
      ++total;
    }
  }
  EXPECT_EQ(same_ab, total);
  EXPECT_LT(same_ac, total / 4);
}

TEST(FimSample, LayoutStatisticsMatchTheOptions) {
  FimOptions o;  // defaults: fim 0.85, short share 0.5, hole 1 + floor(Exp(40))
  Rng rng(99);
  const size_t n = 1000000, draws = 40000;  // long chunks: the length cap never binds
  size_t fim = 0, shorts = 0;
  double hole_sum = 0, span_sum = 0;
  for (size_t i = 0; i < draws; ++i) {
    FimLayout l = draw_layout(n, o, rng);
    ASSERT_LE(l.hole_begin, l.hole_end);
    ASSERT_LE(l.hole_end, n);
    if (l.kind == SampleKind::plain) continue;
    ++fim;
    if (l.kind == SampleKind::fim_short) {
      ++shorts;
      ASSERT_GE(l.hole_end - l.hole_begin, 1u);
      hole_sum += static_cast<double>(l.hole_end - l.hole_begin);
    } else {
      span_sum += static_cast<double>(l.hole_end - l.hole_begin);
    }
  }
  EXPECT_NEAR(static_cast<double>(fim) / draws, 0.85, 0.01);
  EXPECT_NEAR(static_cast<double>(shorts) / static_cast<double>(fim), 0.5, 0.015);
  // E[1 + floor(X)], X ~ Exp(mean 40): 1 + 1 / (e^(1/40) - 1) = 40.50; sd of the mean ~0.28.
  EXPECT_NEAR(hole_sum / static_cast<double>(shorts), 1 + 1 / std::expm1(1.0 / 40), 1.2);
  // |U1 - U2| for two uniform points on [0, n] has mean n / 3.
  EXPECT_NEAR(span_sum / static_cast<double>(fim - shorts) / n, 1.0 / 3, 0.01);
}

TEST(FimSample, ShortChunkHolesStayInside) {
  FimOptions o;
  o.fim_rate = 1;
  o.short_hole_share = 1;
  Rng rng(5);
  for (size_t n : {1u, 2u, 3u, 10u}) {
    for (int i = 0; i < 500; ++i) {
      FimLayout l = draw_layout(n, o, rng);
      ASSERT_LE(l.hole_end, n);
      ASSERT_GE(l.hole_end - l.hole_begin, 1u);
    }
  }
}

TEST(FimSample, ChunksAreWholeCharacters) {
  std::string text = "aé日😀b";  // 1 + 2 + 3 + 4 + 1 bytes
  auto chunks = chunk_text(text, 2);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], "aé");
  EXPECT_EQ(chunks[1], "日😀");
  EXPECT_EQ(chunks[2], "b");
  EXPECT_EQ(char_starts(text), (std::vector<size_t>{0, 1, 3, 6, 10, 11}));
}

TEST(FimSample, RngUniformIsInRangeAndBalanced) {
  Rng rng(123);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) counts[rng.uniform(7)] += 1;
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    double u = rng.uniform01();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  Rng a(42), b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
}

TEST(FimSample, BadInputGivesErrors) {
  const Tokenizer& tok = efim_tokenizer();
  SampleBuilder b(tok, FimOptions{});
  EXPECT_THROW(b.document(std::string("ok \xff\xfe bad"), "bad.py"), Error);
  try {
    b.document(std::string("x\xc3"), "trunc.py");
    ADD_FAILURE() << "no error for a truncated character";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trunc.py"), std::string::npos) << e.what();
  }
  FimOptions o;
  o.fragment_rate = 1.5;
  EXPECT_THROW(SampleBuilder(tok, o), Error);
  o = FimOptions{};
  o.chunk_chars = 0;
  EXPECT_THROW(SampleBuilder(tok, o), Error);
  EXPECT_TRUE(b.document("", "empty.py").empty());
}

}  // namespace
}  // namespace efim::train
