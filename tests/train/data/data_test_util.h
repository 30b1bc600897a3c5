// Shared helpers of the training-data tests: the real efim-base-py tokenizer, random documents
// mixing Python source with non-ASCII text, and temporary folders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "tokenizer/tokenizer.h"
#include "train/data/rng.h"

namespace efim::test {

namespace fs = std::filesystem;

inline std::string src_path(const std::string& rel) {
  return std::string(EFIM_SOURCE_DIR) + "/" + rel;
}

// Loaded once: the model's own tokenizer (sentinels 1/2/3, eos 0).
inline const Tokenizer& efim_tokenizer() {
  static const Tokenizer tok =
      Tokenizer::from_json_file(src_path("tests/tokenizer/data/efim-base-py/tokenizer.json"));
  return tok;
}

// A fresh empty folder under the system temp dir, removed by the destructor.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("efim_data_test_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

// Random documents: pieces of real Python source (this repository's scripts) interleaved with
// words and characters of several scripts (2-, 3- and 4-byte UTF-8, combining marks, CRLF,
// tabs, runs of spaces), so that cut points land inside multi-byte characters' neighbourhoods.
inline std::vector<std::string> random_documents(uint64_t seed, size_t count, size_t max_bytes) {
  static const std::string code = read_file(src_path("scripts/build_corpus.py")) +
                                  read_file(src_path("scripts/make_tiny_model.py"));
  static const std::vector<std::string> pieces = {
      "héllo wörld", " naïve café", "日本語のテキスト", " Привет, мир", "😀🎉", " αβγ = δ",
      "e\u0301", "\r\n", "\t\t", "    ", "  x  ", "\"\"\"docstring ü\"\"\"\n", "ﬁ ligature",
      " 0x1F600", "#", "<fim_prefix>", "<|endoftext|>", "\u00a0", "한국어", " مرحبا", "\n\n\n"};
  train::Rng rng(seed);
  std::vector<std::string> docs;
  for (size_t d = 0; d < count; ++d) {
    std::string doc;
    const size_t target = 1 + rng.uniform(max_bytes);
    while (doc.size() < target) {
      if (rng.bernoulli(0.5)) {
        // A slice of the code, widened to whole characters at both ends.
        auto continuation = [&](size_t i) { return (static_cast<uint8_t>(code[i]) & 0xC0) == 0x80; };
        size_t a = rng.uniform(code.size() - 200), e = a + 1 + rng.uniform(200);
        while (a > 0 && continuation(a)) --a;
        while (e < code.size() && continuation(e)) ++e;
        doc += code.substr(a, e - a);
      } else {
        doc += pieces[rng.uniform(pieces.size())];
      }
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace efim::test
