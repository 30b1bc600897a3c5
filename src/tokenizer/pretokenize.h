// Pre-tokenizers: split text into the pieces that BPE encodes independently.
//
// Each family is a sequence of Hugging Face `Split(pattern, behavior="Isolated")` steps (matches
// and the gaps between them both become pieces; every later step refines each piece on its
// own, so lookaheads and `$` see the end of the piece). The patterns are implemented by
// hand-written matchers over code points (see pretokenize.cpp for why and for measurements).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/unicode.h"

namespace efim {

enum class PreStep : uint8_t {
  kLlama3,        // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,         // the same with \p{N} instead of \p{N}{1,3}
  kGpt2,          // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (ByteLevel use_regex)
  kNewline,       // [\r\n]
  kSpaceLetters,  // \s?\p{L}+
  kSpacePunct,    // \s?\p{P}+
  kCjk,           // [一-龥ࠀ-一가-퟿]+
  kDigits,        // Digits(individual_digits=true), equivalently Split(\p{N})
};

// The Split regex a step implements, exactly as tokenizer.json spells it ("" for kDigits and
// kGpt2, which are not Split steps).
std::string_view pre_step_pattern(PreStep step);
// The step whose Split pattern is `pattern`; throws Error naming the pattern when unknown.
PreStep pre_step_from_pattern(std::string_view pattern);

// A named family: the GGUF `tokenizer.ggml.pre` value and what it means.
struct PreFamily {
  std::string_view name;
  std::vector<PreStep> steps;
  bool nfc = false;            // NFC normalizer before splitting (Qwen2)
  bool ignore_merges = false;  // what llama.cpp assumes for the family
};
const std::vector<PreFamily>& pre_families();
const PreFamily* find_pre_family(std::string_view name);
const PreFamily* find_pre_family(const std::vector<PreStep>& steps, bool nfc);

// Byte range [begin, end) of one piece in the text that was split.
using Piece = std::pair<uint32_t, uint32_t>;

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreStep> steps) : steps_(std::move(steps)) {}
  const std::vector<PreStep>& steps() const { return steps_; }

  // Appends the pieces of `text` (valid UTF-8) to `out`, in order, covering all of it.
  void split(std::string_view text, std::vector<Piece>& out) const;

 private:
  std::vector<PreStep> steps_;
};

}  // namespace efim
