// The typing workload: chunk arithmetic, cuts at character boundaries, deterministic user
// sampling, and the corpus length filter.
#include "bench/infill/workload.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/error.h"

namespace efim::bench {
namespace {

std::string join(const std::vector<std::string>& chars, size_t b, size_t e) {
  std::string out;
  for (size_t i = b; i < e; ++i) out += chars[i];
  return out;
}

TEST(BenchWorkload, ChunkArithmeticOnAscii) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += char('a' + i % 26);
  UserDoc u = split_document("t.py", text, 5);
  // H = 50, chunk = 50 / 7 = 7.
  EXPECT_EQ(u.prefix, text.substr(0, 7));
  EXPECT_EQ(u.suffix, text.substr(50));
  ASSERT_EQ(u.typed.size(), 5u);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(u.typed[size_t(r)], text.substr(7, 7 * size_t(r + 1)));
  // The last round's prefix ends one chunk (plus the rounding rest) before the suffix.
  EXPECT_EQ(u.prefix.size() + u.typed.back().size(), 42u);
}

TEST(BenchWorkload, OddLengthAndRounds) {
  std::string text(101, 'x');  // H = 50, rounds 3: chunk = 10
  UserDoc u = split_document("t.py", text, 3);
  EXPECT_EQ(u.prefix.size(), 10u);
  EXPECT_EQ(u.suffix.size(), 51u);
  EXPECT_EQ(u.typed[0].size(), 10u);
  EXPECT_EQ(u.typed[2].size(), 30u);
}

// Cuts count code points, never bytes: with multi-byte characters every piece is the same
// as cutting a list of characters, and each piece is valid UTF-8.
TEST(BenchWorkload, CutsAtCharacterBoundaries) {
  const std::vector<std::string> alphabet = {"a",  "\xC3\xA9", "\xE6\xBC\xA2", "\xF0\x9F\x98\x80",
                                             "\n", " "};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<std::string> chars(30 + rng() % 200);
    for (auto& c : chars) c = alphabet[rng() % alphabet.size()];
    const std::string text = join(chars, 0, chars.size());
    const int rounds = 1 + int(rng() % 6);
    const size_t n = chars.size(), h = n / 2, chunk = h / size_t(rounds + 2);
    UserDoc u = split_document("t.py", text, rounds);
    EXPECT_EQ(u.prefix, join(chars, 0, chunk));
    EXPECT_EQ(u.suffix, join(chars, h, n));
    for (int r = 0; r < rounds; ++r) {
      EXPECT_EQ(u.typed[size_t(r)], join(chars, chunk, chunk * size_t(r + 2)));
      EXPECT_TRUE(valid_utf8(u.typed[size_t(r)]));
    }
  }
}

TEST(BenchWorkload, CharOffsets) {
  const std::string text = "a\xC3\xA9\xF0\x9F\x98\x80z";
  EXPECT_EQ(char_offsets(text), (std::vector<size_t>{0, 1, 3, 7, 8}));
  EXPECT_EQ(char_offsets(""), (std::vector<size_t>{0}));
}

TEST(BenchWorkload, InvalidUtf8IsAnError) {
  for (const std::string& bad :
       {std::string("ab\xFFz"), std::string("ab\xC3"), std::string("\xED\xA0\x80"),
        std::string("\xC0\xAF"), std::string("\xF4\x90\x80\x80")}) {
    EXPECT_FALSE(valid_utf8(bad));
    try {
      split_document("bad.py", bad + std::string(100, 'x'), 2);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("bad.py: invalid UTF-8 at byte offset"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(BenchWorkload, TooShortForTheRounds) {
  try {
    split_document("s.py", "abcdefghij", 5);  // H = 5, chunk = 5 / 7 = 0
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too few for 5 rounds"), std::string::npos) << e.what();
  }
  EXPECT_THROW(split_document("s.py", std::string(100, 'x'), 0), Error);
}

// Golden values from an independent Python implementation of the same splitmix64 +
// Fisher-Yates procedure (so the sampling is the same on every platform).
TEST(BenchWorkload, SamplingIsDeterministic) {
  EXPECT_EQ(sample_indices(100, 8, 0), (std::vector<size_t>{35, 55, 39, 38, 95, 1, 21, 72}));
  EXPECT_EQ(sample_indices(100, 8, 1), (std::vector<size_t>{65, 53, 66, 56, 61, 18, 43, 40}));
  EXPECT_EQ(sample_indices(10, 10, 42), (std::vector<size_t>{3, 2, 4, 5, 8, 7, 0, 9, 6, 1}));
  EXPECT_EQ(sample_indices(100, 8, 5), sample_indices(100, 8, 5));
  auto all = sample_indices(50, 50, 3);
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(all[i], i);  // a permutation: distinct, in range
  EXPECT_TRUE(sample_indices(5, 0, 1).empty());
  EXPECT_THROW(sample_indices(3, 4, 0), Error);
}

class BenchCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("efim_bench_corpus_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    std::filesystem::create_directories(dir_ / "sub");
    tok_ = std::make_unique<Tokenizer>(Tokenizer::from_json_file(
        std::string(EFIM_SOURCE_DIR) + "/tests/tokenizer/data/efim-base-py/tokenizer.json"));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  int64_t write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_ / rel, std::ios::binary) << text;
    return int64_t(tok_->encode(text).size());
  }
  static std::string lines(int n) {
    std::string s;
    for (int i = 0; i < n; ++i)
      s += "value_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
    return s;
  }
  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(BenchCorpus, FiltersByTokenLengthInclusive) {
  const int64_t short_n = write("short.py", lines(2));
  const int64_t lo = write("b.py", lines(20));
  const int64_t hi = write("sub/d.py", lines(40));
  const int64_t long_n = write("long.py", lines(80));
  write("c.txt", lines(30));                                   // not *.py
  write("bad.py", lines(30) + std::string("\xFF\xFE") + "x");  // invalid UTF-8
  ASSERT_LT(short_n, lo);
  ASSERT_LT(hi, long_n);
  Corpus c = scan_corpus(*tok_, {dir_.string(), lo, hi});
  ASSERT_EQ(c.files.size(), 2u);
  EXPECT_EQ(c.files[0], (dir_ / "b.py").string());  // sorted by path
  EXPECT_EQ(c.files[1], (dir_ / "sub/d.py").string());
  EXPECT_EQ(c.tokens, (std::vector<int64_t>{lo, hi}));
  EXPECT_EQ(c.scanned, 5u);
  EXPECT_EQ(c.skipped_invalid, 1u);
  // One token narrower on either side drops that file.
  EXPECT_EQ(scan_corpus(*tok_, {dir_.string(), lo + 1, hi}).files,
            (std::vector<std::string>{(dir_ / "sub/d.py").string()}));
  EXPECT_EQ(scan_corpus(*tok_, {dir_.string(), lo, hi - 1}).files,
            (std::vector<std::string>{(dir_ / "b.py").string()}));
  EXPECT_THROW(scan_corpus(*tok_, {dir_.string(), 10, 5}), Error);
  EXPECT_THROW(scan_corpus(*tok_, {(dir_ / "missing").string(), 0, 5}), Error);
}

TEST_F(BenchCorpus, WorkloadSamplesUsersAndSplits) {
  for (int i = 0; i < 6; ++i) write("f" + std::to_string(i) + ".py", lines(20 + i));
  WorkloadOptions o;
  o.corpus = {dir_.string(), 0, 100000};
  o.users = 3;
  o.rounds = 2;
  o.seed = 0;
  Workload a = build_workload(*tok_, o), b = build_workload(*tok_, o);
  ASSERT_EQ(a.users.size(), 3u);
  EXPECT_EQ(a.eligible_files, 6u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a.users[i].path, b.users[i].path);
    EXPECT_EQ(a.users[i].typed.size(), 2u);
    EXPECT_GT(a.users[i].n_tokens, 0);
  }
  // Which files: sample_indices(6, 3, 0) over the sorted list f0..f5.
  auto idx = sample_indices(6, 3, 0);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(a.users[i].path, (dir_ / ("f" + std::to_string(idx[i]) + ".py")).string());
  o.users = 7;
  try {
    build_workload(*tok_, o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only 6 of 6"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace efim::bench
