// BPE tokenizer, id-for-id identical to Hugging Face `tokenizers` and llama.cpp for the families
// efim serves. Two kinds of vocabulary:
//  - byte-level BPE (Llama-3 "llama-bpe", Qwen2, DeepSeek-Coder 1.x, StarCoder/StarCoder2,
//    GPT-2): pre-tokenizer regexes, merges over bytes;
//  - SentencePiece-style BPE (CodeLlama/Llama 2, Codestral, CodeGemma/Gemma): spaces become
//    "▁", an optional dummy prefix "▁", merges over UTF-8 characters with <0xXX> byte fallback;
//    by merge rank from tokenizer.json, by piece score from GGUF (llama.cpp's "spm").
//
// encode(text): (1) invalid UTF-8 is replaced by U+FFFD per maximal invalid subsequence (what
// HF sees when a JavaScript or Python caller decodes the bytes lossily); (2) added tokens are
// split out (leftmost-longest); special ones only when EncodeOptions::parse_special; (3) each
// remaining segment is normalized (NFC for Qwen2), pre-tokenized and BPE-encoded.
//
// Which added tokens are "special" (never parsed from user text by default): those marked
// special in tokenizer.json, control tokens (type 3) in GGUF, and -- as llama.cpp does -- the
// FIM sentinels even when a tokenizer.json marks them special=false (Qwen2.5-Coder, DeepSeek):
// only the infill layer may insert sentinels. Other non-special added tokens are always split
// out of the text, as Hugging Face does.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/spm.h"

namespace efim {

class GgufFile;
class GgufWriter;

// FIM sentinel ids; -1 when the vocabulary has none.
struct FimTokens {
  int32_t prefix = -1;     // <fim_prefix>, <|fim_prefix|>, <｜fim▁begin｜>, <PRE>
  int32_t suffix = -1;     // <fim_suffix>, <|fim_suffix|>, <｜fim▁hole｜>, <SUF>
  int32_t middle = -1;     // <fim_middle>, <|fim_middle|>, <｜fim▁end｜>, <MID>
  int32_t pad = -1;        // <fim_pad>, <|fim_pad|>
  int32_t eot = -1;        // end of the infilled text; falls back to eos
  int32_t repo_name = -1;  // <|repo_name|>, <repo_name>
  int32_t file_sep = -1;   // <|file_sep|>, <file_sep>
};

// Where a SentencePiece-style vocabulary puts its dummy prefix "▁" (a space before the text).
enum class SpacePrefix : uint8_t {
  kNone,             // Gemma: never
  kEverySegment,     // SentencePiece, llama.cpp, HF's Prepend normalizer: before the text and
                     // after each added token
  kMetaspaceAlways,  // HF Metaspace "always": the same, unless the segment starts with a space
  kMetaspaceFirst,   // HF Metaspace "first": only before the text, unless it starts with a space
};

struct EncodeOptions {
  bool parse_special = false;  // split special tokens (control, FIM) out of the text
  bool add_bos = false;        // prepend bos() when the tokenizer has one
  // SentencePiece-style vocabularies: add the dummy prefix where the vocabulary does. The infill
  // layer turns it off: its parts continue each other, and it places the spaces its format wants.
  bool space_prefix = true;
};

struct DecodeOptions {
  bool skip_special = false;  // drop special tokens instead of rendering their text
};

// One added token (tokenizer.json `added_tokens`, or a GGUF control/user-defined token).
struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;  // matched after normalization instead of on the raw text
};

struct TokenizerParts;  // what the loaders collect (tokenizer_internal.h)

class Tokenizer {
 public:
  // Reads a Hugging Face tokenizer.json; bos/eos/pad come from the sibling
  // tokenizer_config.json and config.json when present, else from the post-processor template.
  static Tokenizer from_json_file(const std::string& path);
  static Tokenizer from_json(std::string_view json_text, const std::string& label);
  // Reads GGUF `tokenizer.ggml.*` metadata (model "gpt2").
  static Tokenizer from_gguf(const GgufFile& gguf);
  // Writes the metadata from_gguf reads (and llama.cpp loads). Throws when the pre-tokenizer
  // has no GGUF name.
  void write_gguf_metadata(GgufWriter& writer) const;

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  // Bytes of the ids concatenated (may end inside a UTF-8 character; see IncrementalDecoder).
  std::string decode(std::span<const int32_t> ids, const DecodeOptions& opts = {}) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  std::string_view token_text(int32_t id) const;   // spelling in the vocabulary ("Ġhello")
  std::string_view token_bytes(int32_t id) const;  // what decode() emits (" hello")
  bool is_special(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view text) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t pad() const { return pad_; }
  bool add_bos_default() const { return add_bos_; }
  const FimTokens& fim() const { return fim_; }
  // Every token that ends a generation, as llama.cpp's end-of-generation set: eos, the FIM eot,
  // and the families' end spellings present in the vocabulary (<|endoftext|>, <|im_end|>,
  // <|eot_id|>, <|end_of_text|>, <end_of_turn>, <EOT>, ▁<EOT>, <|file_separator|>, ...).
  // Sorted, unique.
  const std::vector<int32_t>& end_of_generation() const { return eog_; }
  // GGUF `tokenizer.ggml.pre` name of the pre-tokenizer ("" when it has none).
  std::string_view pre_name() const { return pre_name_; }
  bool nfc() const { return nfc_; }
  bool ignore_merges() const { return bpe_.ignore_merges(); }
  // SentencePiece-style vocabulary ("▁" spaces, byte fallback); by_score: GGUF piece scores.
  bool sentencepiece() const { return sentencepiece_; }
  bool merges_by_score() const { return by_score_; }
  SpacePrefix space_prefix() const { return space_prefix_; }
  int32_t unk() const { return unk_; }

 private:
  // Added tokens by first byte, longest first: leftmost-longest matching.
  struct Matcher {
    std::vector<std::vector<int32_t>> by_first;  // [256] indices into added_
    bool empty = true;
  };
  struct Segment {
    uint32_t begin, end;  // bytes of text; id < 0
    int32_t id;           // an added token, or -1 for text
  };

  static Tokenizer build(struct TokenizerParts parts);
  void init_vocab(TokenizerParts& p);
  void init_bpe(TokenizerParts& p);
  void init_spm(TokenizerParts& p);
  std::array<int32_t, 256> spm_byte_tokens(const std::string& label, bool all) const;

  void detect_fim();
  Matcher make_matcher(bool normalized, bool with_special) const;
  void split_added(std::string_view text, const Matcher& m, std::vector<Segment>& out) const;
  void encode_text(std::string_view text, const EncodeOptions& opts,
                   std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, bool prefix, std::vector<int32_t>& out) const;
  void write_gguf_spm(GgufWriter& writer) const;
  std::vector<float> spm_scores() const;  // [vocab]
  void write_gguf_byte_level(GgufWriter& writer) const;

  std::vector<std::string> tokens_;  // [vocab] vocabulary spelling
  std::vector<std::string> pieces_;  // [vocab] decoded bytes
  std::vector<uint8_t> types_;       // [vocab] GGUF token type: 1 normal, 2 unknown,
                                     // 3 control, 4 user-defined, 5 unused, 6 byte
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<AddedToken> added_;
  std::vector<BpeMerge> merges_;
  Matcher raw_[2], normalized_[2];  // [parse_special]
  BpeModel bpe_;
  SpmScoreModel spm_;       // SentencePiece by score (GGUF "llama")
  bool sentencepiece_ = false, by_score_ = false;
  bool split_words_ = false;  // HF Metaspace split=true: each "▁"-led word is merged alone
  SpacePrefix space_prefix_ = SpacePrefix::kNone;
  PreTokenizer pre_;
  std::string pre_name_;
  bool nfc_ = false;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  bool add_bos_ = false;
  FimTokens fim_;
  std::vector<int32_t> eog_;
};

// Turns ids into text as they are generated, emitting only whole UTF-8 characters: bytes of an
// incomplete character wait for the next id; bytes that can never form a character become
// U+FFFD. push()s followed by flush() give exactly the lossy UTF-8 decoding of decode(ids).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, DecodeOptions opts = {})
      : tok_(&tokenizer), opts_(opts) {}
  std::string push(int32_t id);
  // The same for raw bytes (part of a token: token healing leaves out bytes the prompt had).
  std::string push_bytes(std::string_view bytes);
  // Emits what is held back (an incomplete character becomes U+FFFD) and resets.
  std::string flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  DecodeOptions opts_;
  std::string pending_;
};

}  // namespace efim
