// Random-span infilling items from held-out source files (the EFIM paper's CCEval-style
// protocol, docs/efim-method.md section 5): a hole of uniform length in [16, 128] characters
// starting at a uniform position in [32, len - 160], and the EFIM split of a prefix at a
// uniform character in [1, len - 1]. Everything is a pure function of the inputs and a seed.
//
// "Characters" are bytes of UTF-8 text; every drawn position is moved back to the start of the
// character it falls in, so no part ever begins or ends inside a multi-byte character.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace efim::eval {

struct SourceFile {
  std::string name;  // shown in results (path relative to the corpus root)
  std::string text;  // valid UTF-8
};

struct SpanOptions {
  size_t min_len = 16, max_len = 128;  // hole length, characters (bytes), inclusive
  size_t min_start = 32;               // first possible hole start
  size_t end_margin = 160;             // last possible start is len - end_margin
  uint64_t seed = 1;
};

struct Span {
  size_t file = 0;          // index into the files
  size_t begin = 0, end = 0;  // hole [begin, end) in bytes, on character boundaries
};

// Files too short for the protocol (len < min_start + end_margin) are never drawn. n spans:
// file i uniform among the eligible ones, then start and length as above. Throws Error when no
// file is long enough.
std::vector<Span> sample_spans(const std::vector<SourceFile>& files, size_t n,
                               const SpanOptions& opts);

// The largest character boundary <= pos in text (pos clamped to text.size()).
size_t char_floor(std::string_view text, size_t pos);

// EFIM split index of a prefix: uniform in [1, len - 1], moved to a character boundary (>= 1
// whenever possible). Prefixes of fewer than 2 characters return their length (no split).
size_t efim_split(std::string_view prefix, std::mt19937_64& rng);

// At most max_chars of text nearest a hole: the tail of a prefix / the head of a suffix, cut on
// a character boundary.
std::string_view keep_tail(std::string_view text, size_t max_chars);
std::string_view keep_head(std::string_view text, size_t max_chars);

// Uniform integer in [lo, hi] from a 64-bit generator, identical on every platform (the
// standard distributions are not specified bit for bit).
uint64_t uniform_int(std::mt19937_64& rng, uint64_t lo, uint64_t hi);

// Python files under root (sorted by path, recursively), skipping directories named `test`,
// `tests`, `idlelib`, `site-packages`, `dist-packages` and `__pycache__`, and files that are
// not valid UTF-8.
std::vector<SourceFile> load_python_files(const std::string& root);

}  // namespace efim::eval
