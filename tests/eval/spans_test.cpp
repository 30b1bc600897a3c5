// Span sampler: bounds of the protocol, determinism, UTF-8 boundaries; the EFIM split.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"
#include "eval/spans.h"

namespace efim::eval {
namespace {

bool on_boundary(const std::string& t, size_t pos) {
  return pos == t.size() || (static_cast<unsigned char>(t[pos]) & 0xC0) != 0x80;
}

std::vector<SourceFile> corpus() {
  std::vector<SourceFile> f;
  f.push_back({"short.py", std::string(150, 'x')});  // < 32 + 160: never drawn
  std::string ascii;
  for (int i = 0; i < 40; ++i) ascii += "def f" + std::to_string(i) + "(x):\n    return x\n";
  f.push_back({"ascii.py", ascii});
  std::string utf;
  for (int i = 0; i < 200; ++i) utf += "s = 'é€😀'  # ü\n";  // 2-, 3- and 4-byte characters
  f.push_back({"utf8.py", utf});
  return f;
}

TEST(Spans, BoundsOfTheProtocol) {
  auto files = corpus();
  SpanOptions o;
  o.seed = 7;
  auto spans = sample_spans(files, 2000, o);
  ASSERT_EQ(spans.size(), 2000u);
  std::set<size_t> lens, used;
  for (const auto& s : spans) {
    const std::string& t = files[s.file].text;
    ASSERT_NE(s.file, 0u) << "a file shorter than 192 characters was drawn";
    used.insert(s.file);
    // The drawn start is in [32, len-160]; snapping moves it back by < 4 bytes.
    EXPECT_GE(s.begin + 3, 32u);
    EXPECT_LE(s.begin, t.size() - 160);
    EXPECT_LT(s.begin, s.end);
    EXPECT_LE(s.end - s.begin, 128u + 3);
    EXPECT_LE(s.end, t.size());
    if (s.file == 1) {  // ASCII: exact protocol bounds
      EXPECT_GE(s.begin, 32u);
      EXPECT_GE(s.end - s.begin, 16u);
      EXPECT_LE(s.end - s.begin, 128u);
      lens.insert(s.end - s.begin);
    }
    EXPECT_TRUE(on_boundary(t, s.begin)) << s.begin;
    EXPECT_TRUE(on_boundary(t, s.end)) << s.end;
  }
  EXPECT_EQ(used.size(), 2u);
  EXPECT_TRUE(lens.count(16) && lens.count(128)) << "both ends of the length range occur";
}

TEST(Spans, DeterministicForASeed) {
  auto files = corpus();
  SpanOptions o;
  o.seed = 3;
  auto a = sample_spans(files, 50, o), b = sample_spans(files, 50, o);
  o.seed = 4;
  auto c = sample_spans(files, 50, o);
  auto same = [](const std::vector<Span>& x, const std::vector<Span>& y) {
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].file != y[i].file || x[i].begin != y[i].begin || x[i].end != y[i].end)
        return false;
    return true;
  };
  EXPECT_TRUE(same(a, b));
  EXPECT_FALSE(same(a, c));
  // The portable draw: fixed values for a fixed seed, on every platform.
  std::mt19937_64 rng(42);
  const uint64_t first = uniform_int(rng, 0, 9);
  std::mt19937_64 rng2(42);
  EXPECT_EQ(first, rng2() % 10);  // no rejection happens for a range of 10 here
}

TEST(Spans, NoFileLongEnoughIsAnError) {
  std::vector<SourceFile> f = {{"a.py", std::string(191, 'x')}};
  EXPECT_THROW(sample_spans(f, 1, {}), Error);
  f[0].text.push_back('x');  // 192 = 32 + 160: exactly one start
  auto s = sample_spans(f, 10, {});
  for (auto& sp : s) EXPECT_EQ(sp.begin, 32u);
}

TEST(Spans, EfimSplitIsInsideThePrefixOnACharacter) {
  std::mt19937_64 rng(1);
  const std::string p = "x = '€'\ny = 'é'\n";
  std::set<size_t> seen;
  for (int i = 0; i < 2000; ++i) {
    size_t k = efim_split(p, rng);
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, p.size() - 1);
    ASSERT_TRUE(on_boundary(p, k));
    seen.insert(k);
  }
  EXPECT_TRUE(seen.count(1) && seen.count(p.size() - 1));
  EXPECT_EQ(efim_split("", rng), 0u);
  EXPECT_EQ(efim_split("a", rng), 1u);
  EXPECT_EQ(efim_split("€", rng), 3u);  // one character: no split inside it
  EXPECT_EQ(efim_split("€a", rng), 3u);
}

TEST(Spans, KeepNearestTheHoleOnCharacters) {
  EXPECT_EQ(keep_tail("abcdef", 3), "def");
  EXPECT_EQ(keep_head("abcdef", 3), "abc");
  EXPECT_EQ(keep_tail("a€b", 3), "b");    // would start inside '€'
  EXPECT_EQ(keep_head("a€b", 3), "a");    // would end inside '€'
  EXPECT_EQ(keep_tail("ab", 10), "ab");
  EXPECT_EQ(char_floor("a€b", 2), 1u);
  EXPECT_EQ(char_floor("a€b", 4), 4u);
}

TEST(Spans, LoadsPythonFilesSortedSkippingTests) {
  auto dir = std::filesystem::temp_directory_path() / ("efim-spans-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "pkg" / "test");
  std::filesystem::create_directories(dir / "pkg" / "__pycache__");
  auto put = [&](const std::filesystem::path& p, const std::string& s) {
    std::ofstream(dir / p, std::ios::binary) << s;
  };
  put("b.py", "b = 1\n");
  put("a.py", "a = 1\n");
  put("pkg/c.py", "c = 1\n");
  put("pkg/test/t.py", "t = 1\n");
  put("pkg/__pycache__/x.py", "x\n");
  put("bad.py", std::string("s = '\xff'\n"));
  put("notes.txt", "n\n");
  auto files = load_python_files(dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].name, "a.py");
  EXPECT_EQ(files[1].name, "b.py");
  EXPECT_EQ(files[2].name, "pkg/c.py");
  EXPECT_EQ(files[2].text, "c = 1\n");
}

}  // namespace
}  // namespace efim::eval
