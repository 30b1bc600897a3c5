// Fill-in-the-middle prompt layouts: which sentinel goes where for each model family, in PSM,
// SPM and EFIM order, with repo-level extra context and trimming to a token budget.
//
// Sentinels are always inserted as ids taken from the vocabulary. Every piece of user text
// (prefix, suffix, typed text, the /infill `prompt`, extra files) is tokenized on its own with
// parse_special=false, so sentinel spellings inside user text stay plain text, and the token
// ids of each piece are the same in every request that carries the same text (what the prefix
// cache needs).
//
// Layouts (P, S, M = the family's prefix / suffix / middle sentinel; [B] = bos when the
// tokenizer adds one; X = extra context; p = prefix, s = suffix, p0 = the EFIM anchor's prefix,
// inc = text typed since p0, q = the /infill `prompt` field):
//   PSM    [B] X P p S s M q
//   EFIM   [B] X P p0 S s M inc q
//   SPM    joint: [B] X P S s M p q     (bigcode Megatron "SPM variant 2", StarCoder training;
//                                         CodeLlama's suffix_first; prefix runs into the middle)
//          plain: [B] X S s P p M q     (llama.cpp --spm-infill; the EFIM paper's SPM)
// Families (sentinels P / S / M):
//   starcoder        <fim_prefix> <fim_suffix> <fim_middle>  (also efim-base-py, FIM-trained
//                    Llama-3 with these tokens added)        SPM joint
//   qwen             <|fim_prefix|> <|fim_suffix|> <|fim_middle|>  (Qwen2.5-Coder)   SPM plain
//   deepseek         <｜fim▁begin｜> <｜fim▁hole｜> <｜fim▁end｜>   (DeepSeek-Coder)  SPM plain
//   deepseek_swapped <｜fim▁begin｜> <｜fim▁end｜> <｜fim▁hole｜>   (the EFIM authors'
//                    fragment-trained DeepSeek: hole and end swapped)              SPM plain
//   codellama        <PRE> <SUF> <MID>; p (and p0) tokenized as " " + p, the dummy-prefix space
//                    SentencePiece adds in Meta's `encode(pre)`; s, inc, q without it (Meta's
//                    `encode_infilling`). Text form: "<PRE> {p} <SUF>{s} <MID>".   SPM joint
// Qwen2.5-Coder and DeepSeek-Coder document no SPM training format; they get `plain`.
//
// Extra context X (repo-level, llama.cpp's `input_extra`): nothing when there are no chunks.
// With <|repo_name|>/<|file_sep|> in the vocabulary (Qwen2.5-Coder's documented repo format;
// StarCoder2's <repo_name>/<file_sep> are used the same way):
//   <|repo_name|>{repo}\n (<|file_sep|>{filename}\n{text, ending with \n})* <|file_sep|>{current}\n
// Without them (DeepSeek, CodeLlama, efim-base-py): ("--- {filename} ---\n" {text, ending \n})*
// X depends only on the chunks, the current filename and the options, never on p or s, so it
// stays a cached prefix across requests.
//
// Budget (max_tokens > 0): bos, sentinels, inc and q are never cut (inc and q sit at the cursor;
// an EFIM prompt that does not fit is the planner's cue to fall back to PSM). Then, in order:
// (1) extra chunks are dropped whole from the front (the last chunk, nearest the prefix, goes
// last; the repo/current-file headers go with the last chunk) until X fits extra_share (1/2)
// of max_tokens (and what the fixed parts leave), whatever p and s need, as llama.cpp splits
// its context: X's cap depends on max_tokens and the chunks only, so a request that only sends the chunks (llama.vim's cache warm-up)
// lays out the same X as the requests that follow with a long p and s; (2) p loses its head
// and s its tail: p may take up to prefix_share (3/4) of what is left, s the rest, and a part
// that needs less gives its share to the other. Cuts snap to a line boundary when one is within a quarter
// of the kept length, and never split a UTF-8 character.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace efim {

enum class FimFamily : uint8_t { starcoder, qwen, deepseek, deepseek_swapped, codellama };
enum class FimOrder : uint8_t { psm, spm, efim };
enum class SpmStyle : uint8_t { joint, plain };  // see the table above

std::string_view family_name(FimFamily f);
std::string_view order_name(FimOrder o);
// Throws Error listing the valid names.
FimFamily parse_family(std::string_view name);

// Everything that decides the token layout of a prompt for one model.
struct FimFormat {
  FimFamily family = FimFamily::starcoder;
  int32_t bos = -1;                       // prepended when >= 0
  int32_t pre = -1, suf = -1, mid = -1;   // as placed: before p, before s, before the middle
  int32_t repo_name = -1, file_sep = -1;  // repo-level sentinels; -1 when absent
  bool prefix_space = false;              // codellama: p tokenized as " " + p
  SpmStyle spm = SpmStyle::joint;
  // A string that differs whenever the layout differs (part of anchor keys).
  std::string id() const;
};

struct FormatOptions {
  std::optional<FimFamily> family = {};  // default: detect_family()
  std::optional<bool> add_bos = {};      // default: tokenizer.add_bos_default()
  std::optional<SpmStyle> spm = {};      // default: the family's (table above)
};

// The family whose sentinel spellings the vocabulary has (by the spelling of fim().prefix);
// a vocabulary with P/S/M sentinels of another spelling gets `starcoder` (the generic layout).
// Throws Error when the vocabulary lacks a prefix, suffix or middle sentinel.
FimFamily detect_family(const Tokenizer& tok);
FimFormat make_format(const Tokenizer& tok, const FormatOptions& opts = {});

// One file of repo-level context (llama.cpp's input_extra item).
struct ExtraChunk {
  std::string filename;
  std::string text;
};

// The texts of one prompt. All views must outlive the build() call only.
struct FimParts {
  std::string_view prefix = {};  // PSM/SPM: the whole prefix; EFIM: the anchor's p0
  std::string_view suffix = {};
  std::string_view inc = {};       // EFIM only: typed since p0; must be empty for PSM/SPM
  std::string_view prompt = {};    // /infill `prompt`: after the middle sentinel (and after inc)
  std::string_view filename = {};  // current file for the repo header; "" = LayoutOptions default
  std::span<const ExtraChunk> extra = {};
};

enum class PromptPart : uint8_t { bos, extra, sentinel, prefix, suffix, inc, prompt };
std::string_view part_name(PromptPart p);

struct PartRange {
  PromptPart part;
  uint32_t begin, end;  // token indices [begin, end)
};

struct FimPrompt {
  std::vector<int32_t> tokens;
  std::vector<PartRange> ranges;  // in order, contiguous, covering tokens; no empty ranges
  FimOrder order = FimOrder::psm;
  bool truncated = false;   // extra chunks dropped or p / s cut to fit the budget
  size_t extra_chunks = 0;  // extra chunks kept (from the end of the list)
  size_t middle_end = 0;    // index just past the middle sentinel
  // Total tokens of all ranges of a part.
  size_t count(PromptPart p) const;
  // Tokens of the first range of a part (empty when absent).
  std::span<const int32_t> first(PromptPart p) const;
};

struct LayoutOptions {
  std::string repo_name = "project";      // after <|repo_name|>
  std::string default_filename = "file";  // current file when FimParts::filename is empty
  double prefix_share = 0.75;             // of the budget left for p and s, in (0, 1]
  double extra_share = 0.5;               // of max_tokens that extra context may take, [0, 1]
};

class FimLayout {
 public:
  FimLayout(const Tokenizer& tok, FimFormat format, LayoutOptions opts = {});

  // Tokens of the prompt in `order`, trimmed to max_tokens (0 = no limit). Throws Error when
  // even the parts that are never cut (bos, sentinels, inc, prompt) exceed max_tokens.
  FimPrompt build(const FimParts& parts, FimOrder order, size_t max_tokens = 0) const;

  // How build() tokenizes a piece of user text (parse_special=false, no bos).
  std::vector<int32_t> encode(std::string_view text) const;
  // Tokens of the prefix text as placed by this family (codellama adds the leading space).
  std::vector<int32_t> encode_prefix(std::string_view text) const;

  const FimFormat& format() const { return fmt_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const LayoutOptions& options() const { return opts_; }

 private:
  struct Pieces;  // tokenized parts (layout.cpp)
  std::vector<std::vector<int32_t>> encode_extra(const FimParts& parts) const;
  void fit(Pieces& pc, size_t max_tokens, FimOrder order) const;
  FimPrompt assemble(const Pieces& pc, FimOrder order) const;

  const Tokenizer* tok_;
  FimFormat fmt_;
  LayoutOptions opts_;
};

}  // namespace efim
