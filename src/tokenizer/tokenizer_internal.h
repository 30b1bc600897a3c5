// What the tokenizer.json and GGUF loaders hand to Tokenizer::build (private to the module).
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace efim {

// How a SentencePiece-style vocabulary turns text into symbols.
struct SpmParts {
  bool enabled = false;
  SpacePrefix space_prefix = SpacePrefix::kNone;
  bool by_score = false;      // GGUF "llama": merge by token score (else by tokenizer.json rank)
  bool split_words = false;   // HF Metaspace split=true
  std::vector<float> scores;  // [vocab] when by_score
};

struct TokenizerParts {
  std::string label;                 // file name, for error messages
  std::vector<std::string> tokens;   // [vocab] spelling of each id
  std::vector<uint8_t> types;        // [vocab] 1 normal, 3 control, 4 user-defined
  std::vector<AddedToken> added;
  // Tokens BPE may produce (tokenizer.json model.vocab; GGUF normal tokens): spelling -> id.
  std::unordered_map<std::string, int32_t> bpe_vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  bool ignore_merges = false;
  std::vector<PreStep> steps;
  bool nfc = false;
  int32_t bos = -1, eos = -1, pad = -1;
  bool add_bos = false;
  FimTokens fim_keys;  // ids named by GGUF keys (-1 when absent)
  int32_t eot_key = -1;
  int32_t unk = -1;
  SpmParts spm;
};

// GGUF token types (llama.cpp's llama_token_type).
constexpr uint8_t kTokenNormal = 1;
constexpr uint8_t kTokenUnknown = 2;
constexpr uint8_t kTokenControl = 3;
constexpr uint8_t kTokenUserDefined = 4;
constexpr uint8_t kTokenUnused = 5;
constexpr uint8_t kTokenByte = 6;

// "<0x41>" -> 0x41; -1 when `text` is not a byte token's spelling.
int parse_byte_token(std::string_view text);

}  // namespace efim
