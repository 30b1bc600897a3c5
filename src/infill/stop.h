// When an infill stops, and how a completion that runs into the suffix is cut.
//
// Stop tokens: eos, the FIM end-of-text token (fim().eot), <fim_pad>, <|repo_name|>,
// <|file_sep|>, and the layout's own prefix/suffix/middle sentinels (a generated sentinel means
// the model started a new FIM document; it can never be part of the middle). Models trained
// with another end token (the EFIM authors' fragment-trained DeepSeek stops on 32027) pass it
// as an extra id.
//
// Suffix-repeat rule (a model that does not stop in time tends to write the suffix again):
//   needle: the suffix's first full lines, starting at its first non-blank full line (a "full
//           line" starts after the suffix's first '\n', or at the suffix's start when the
//           cursor is at a line start), taken one by one (blank lines included) until they hold
//           min_chars (6) non-blank bytes, at most max_lines (3). If they never do, the
//           rule is off: short lines such as "}" or "else:" are too often written on purpose.
//   gap:    the suffix text before the needle (the rest of the cursor line and blank lines).
//   match:  a line start L of the completion (position 0 counts only when the cursor is at a
//           line start) from which the completion's lines equal the needle lines, compared
//           with trailing whitespace (and \r) ignored. Every needle line must be complete
//           (ended by '\n'), except that at the end of generation the last one may be
//           unterminated.
//   cut:    the completion is cut at L, then loses its longest tail that is also a tail of the
//           gap (that text is supplied by the suffix itself), e.g. completion "foo(a)\n    return
//           x\n" with suffix ")\n    return x\n" becomes "foo(a".
// SuffixRepeatGuard applies the same rule while streaming: it holds back text from the
// earliest line start that could still turn into a match (minus the gap tail it would lose),
// and emits the rest at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infill/layout.h"
#include "tokenizer/tokenizer.h"

namespace efim {

// The tokens that end an infill: eos, the FIM eot / pad / repo-name / file-separator tokens and
// sentinels, every end-of-generation token of the vocabulary (Tokenizer::end_of_generation:
// Qwen2.5-Coder's <|im_end|> beside <|endoftext|>), and extra_ids. Sorted, unique, without -1.
std::vector<int32_t> infill_stop_tokens(const Tokenizer& tok, const FimFormat& fmt,
                                        std::span<const int32_t> extra_ids = {});

struct RepeatRuleOptions {
  bool cursor_at_line_start = false;  // the prefix is empty or ends with '\n'
  size_t min_chars = 6;               // non-blank bytes the needle must hold
  size_t max_lines = 3;               // lines the needle may take to reach min_chars
};

// True when the prefix text puts the cursor at the start of a line.
bool cursor_at_line_start(std::string_view prefix);

// The completion, cut where it starts repeating the suffix (unchanged when it does not).
std::string trim_suffix_repeat(std::string_view completion, std::string_view suffix,
                               const RepeatRuleOptions& opts = {});

class SuffixRepeatGuard {
 public:
  explicit SuffixRepeatGuard(std::string_view suffix, RepeatRuleOptions opts = {});

  struct Step {
    std::string text;   // safe to send now
    bool stop = false;  // the completion repeats the suffix: stop generating (text is cut)
  };
  // Appends generated text (whole UTF-8 characters, e.g. from IncrementalDecoder).
  Step push(std::string_view piece);
  // At the end of generation: the held-back text, trimmed by the rule.
  std::string finish();

  const std::string& completion() const { return text_; }  // everything pushed
  bool active() const { return !needle_.empty(); }         // the rule has a needle

 private:
  struct Scan {
    size_t cut = std::string::npos;  // where the completion is cut when it matched
    size_t hold = 0;                 // text before this is safe to emit
  };
  Scan scan(bool final) const;
  // Characters of text_[..line_start] that the cut at line_start would also drop.
  size_t gap_overlap(size_t line_start) const;

  RepeatRuleOptions opts_;
  std::vector<std::string> needle_;  // lines, trailing whitespace removed
  std::string gap_;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

// llama.cpp's /infill `n_indent`: once the completion has a newline, every later line that has
// text must start with at least n_indent spaces or tabs; the first one that does not ends
// generation, cut right before its first non-blank character (its indentation is kept). The
// first line continues the cursor line and is never checked. Unlike llama.cpp, a blank line
// does not stop: it does not leave the block.
class IndentLimit {
 public:
  explicit IndentLimit(int64_t n_indent) : n_indent_(n_indent) {}
  struct Step {
    std::string text;   // safe to send now
    bool stop = false;  // a line was indented less than n_indent: text is cut before it
  };
  Step push(std::string_view piece);

 private:
  int64_t n_indent_;
  bool at_line_start_ = false;  // after a '\n', still inside the line's indentation
  int64_t indent_ = 0;          // spaces and tabs read so far on this line
  bool stopped_ = false;
};

}  // namespace efim
