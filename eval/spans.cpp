#include "eval/spans.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::eval {
namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if (!is_continuation(static_cast<unsigned char>(s[i + k]))) return false;
    i += n;
  }
  return true;
}

}  // namespace

uint64_t uniform_int(std::mt19937_64& rng, uint64_t lo, uint64_t hi) {
  EFIM_CHECK(lo <= hi, "uniform_int: empty range [", lo, ", ", hi, "]");
  const uint64_t range = hi - lo;
  if (range == UINT64_MAX) return rng();
  // Rejection sampling: draws below `limit` map uniformly onto [0, range].
  const uint64_t n = range + 1;
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
  uint64_t x;
  do x = rng();
  while (x > limit);
  return lo + x % n;
}

size_t char_floor(std::string_view text, size_t pos) {
  pos = std::min(pos, text.size());
  while (pos > 0 && pos < text.size() && is_continuation(static_cast<unsigned char>(text[pos])))
    --pos;
  return pos;
}

std::vector<Span> sample_spans(const std::vector<SourceFile>& files, size_t n,
                               const SpanOptions& o) {
  EFIM_CHECK(o.min_len >= 1 && o.min_len <= o.max_len, "span lengths must satisfy 1 <= min (",
             o.min_len, ") <= max (", o.max_len, ")");
  EFIM_CHECK(o.end_margin >= o.max_len, "end_margin (", o.end_margin, ") must be >= max_len (",
             o.max_len, ") so a hole never runs past the file");
  std::vector<size_t> eligible;
  for (size_t i = 0; i < files.size(); ++i)
    if (files[i].text.size() >= o.min_start + o.end_margin) eligible.push_back(i);
  EFIM_CHECK(!eligible.empty() || n == 0, "no file has the ", o.min_start + o.end_margin,
             " characters a span needs (", files.size(), " files)");
  std::mt19937_64 rng(o.seed);
  std::vector<Span> spans;
  spans.reserve(n);
  while (spans.size() < n) {
    const size_t f = eligible[uniform_int(rng, 0, eligible.size() - 1)];
    const std::string& t = files[f].text;
    const size_t start = uniform_int(rng, o.min_start, t.size() - o.end_margin);
    const size_t len = uniform_int(rng, o.min_len, o.max_len);
    Span s{f, char_floor(t, start), char_floor(t, start + len)};
    if (s.end <= s.begin) continue;  // a hole inside one long character: draw again
    spans.push_back(s);
  }
  return spans;
}

size_t efim_split(std::string_view prefix, std::mt19937_64& rng) {
  if (prefix.size() < 2) return prefix.size();
  size_t idx = char_floor(prefix, uniform_int(rng, 1, prefix.size() - 1));
  if (idx == 0) idx = char_floor(prefix, prefix.size() - 1);  // first character is multi-byte
  return idx == 0 ? prefix.size() : idx;
}

std::string_view keep_tail(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  size_t from = text.size() - max_chars;
  while (from < text.size() && is_continuation(static_cast<unsigned char>(text[from]))) ++from;
  return text.substr(from);
}

std::string_view keep_head(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, char_floor(text, max_chars));
}

std::vector<SourceFile> load_python_files(const std::string& root) {
  namespace fs = std::filesystem;
  EFIM_CHECK(fs::is_directory(root), "source root is not a directory: ", root);
  static const char* const kSkip[] = {"test", "tests", "idlelib", "site-packages",
                                      "dist-packages", "__pycache__"};
  std::vector<std::string> paths;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (std::find(std::begin(kSkip), std::end(kSkip), name) != std::end(kSkip))
        it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".py")
      paths.push_back(fs::relative(it->path(), root).string());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<SourceFile> files;
  for (auto& p : paths) {
    std::string text = read_file((fs::path(root) / p).string());
    if (valid_utf8(text)) files.push_back({p, std::move(text)});
  }
  return files;
}

}  // namespace efim::eval
