// The paper's typing workload (EFIM, Euro-Par 2025, section 4 of docs/efim-method.md): each
// user is one source file, cut at its middle into a fixed suffix and a prefix that grows by
// one chunk per round, as if the user typed the file's first half.
//
// Per user, in Unicode characters (code points, as the authors' Python str indices):
//   H = n / 2, suffix = text[H:], chunk = H / (R + 2), prefix = text[:chunk],
//   round r in 0..R-1: typed = text[chunk : chunk * (r + 2)]
// so round r's full prefix is text[:chunk * (r + 2)] and the last round stops one chunk short
// of H. Cuts fall on code point boundaries, hence never inside a UTF-8 character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace efim::bench {

// Byte offsets of the code points of valid UTF-8 `text`: [n_chars + 1], the last one is
// text.size(). Throws Error (naming `label` and the byte offset) on invalid UTF-8.
std::vector<size_t> char_offsets(std::string_view text, std::string_view label = "text");
bool valid_utf8(std::string_view text);

struct UserDoc {
  std::string path;                // the source file
  int64_t n_tokens = 0;            // tokenized length of the whole file (no bos)
  std::string prefix;              // text[:chunk]
  std::string suffix;              // text[H:]
  std::vector<std::string> typed;  // [rounds] text[chunk : chunk * (r + 2)]
};

// Cuts one document into the user's texts. Throws Error when the text is invalid UTF-8 or too
// short to give every round a non-empty chunk (chunk must be >= 1 character).
UserDoc split_document(std::string path, std::string_view text, int rounds);

struct CorpusOptions {
  std::string dir = "/usr/lib/python3.11";       // searched recursively for *.py
  int64_t min_tokens = 1024, max_tokens = 1920;  // keep files with min <= tokens <= max
};

struct Corpus {
  std::vector<std::string> files;  // eligible, sorted by path
  std::vector<int64_t> tokens;     // [files] tokenized length
  size_t scanned = 0;              // *.py files looked at
  size_t skipped_invalid = 0;      // not valid UTF-8
};

// All *.py files under dir (not following directory links), sorted, whose tokenized length is
// in [min_tokens, max_tokens]. Throws Error when dir is missing or the range is empty/negative.
Corpus scan_corpus(const Tokenizer& tok, const CorpusOptions& opts);

// `n` distinct indices into [0, population), a deterministic function of (population, n, seed)
// on every platform (Fisher-Yates over a splitmix64 stream; no std:: distributions, whose
// algorithms differ between standard libraries). Throws Error when n > population.
std::vector<size_t> sample_indices(size_t population, size_t n, uint64_t seed);

struct WorkloadOptions {
  CorpusOptions corpus;
  int users = 8, rounds = 5;
  uint64_t seed = 0;
};

struct Workload {
  std::vector<UserDoc> users;
  size_t eligible_files = 0, scanned_files = 0;
};

// Scans the corpus, samples the users and splits their files.
Workload build_workload(const Tokenizer& tok, const WorkloadOptions& opts);

}  // namespace efim::bench
