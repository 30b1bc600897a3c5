// Token healing of the text after the middle sentinel: where to back off.
//
// Under EFIM the typed text (inc, and /infill's `prompt`) follows <MID> and usually ends inside
// a word. Its last tokens are the canonical tokenization of a partial word ("comp"), a split a
// model trained on canonically tokenized text has hardly seen before a continuation ("letion").
// Token healing removes those tokens from the prompt and makes generation start by reproducing
// their bytes R with tokens of the model's choice ("completion"); sampling/token_healing.h is
// the constraint, this file the back-off:
//
//   tail: the last tokens of tokens[from, n), at most max_tokens (4) of them, none special
//         (a special token or sentinel ends the tail); T = their bytes.
//   S:    the longest suffix of T, at most max_token_bytes - 1 bytes, that some vocabulary
//         token strictly extends (starts with S and is longer).
//   cut:  the fewest last tokens whose bytes cover S; R = their bytes (R ends with S, and
//         starts at a token boundary). No S: nothing is removed.
//
// Everything is bytes: S and R may start inside a UTF-8 character (a character split over two
// tokens), and T may end inside one (a token-id prompt).
//
// Where healing applies (TokenHealingMode, the server's --token-healing and the request's
// `token_healing` field):
//   infill plans   the text after <MID> (EFIM's inc and the /infill prompt); `auto` heals it
//                  unless the model declares fragment-tokenized training (efim train writes
//                  efim.fragment_tokenization), since such a model continues partial words.
//   plain prompts  the end of the prompt (after bos); `auto` heals it when the prompt text ends
//                  inside a word (its last character is a letter, digit or '_'), and not for a
//                  fragment-trained model.
//   on / off       always (where a back-off is found) / never; a request's `token_healing`
//                  true or false overrides the server's mode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sampling/vocab_index.h"

namespace efim {

struct HealBackoffOptions {
  size_t max_tokens = 4;  // tokens that may be removed at most
};

struct HealBackoff {
  size_t n_tokens = 0;  // removed from the end of the prompt
  std::string bytes;    // R: the removed tokens' bytes, which generation must reproduce first
  bool empty() const { return n_tokens == 0; }
};

// The back-off of tokens[from, n) (tokens before `from` are never removed).
HealBackoff heal_backoff(const VocabIndex& index, std::span<const int32_t> tokens, size_t from,
                         const HealBackoffOptions& opts = {});

enum class TokenHealingMode : uint8_t { automatic, on, off };
std::string_view healing_mode_name(TokenHealingMode m);        // "auto", "on", "off"
TokenHealingMode parse_healing_mode(std::string_view name);   // throws Error naming the choices

struct HealPolicy {
  TokenHealingMode mode = TokenHealingMode::automatic;
  bool fragment_trained = false;  // the model declares fragment-tokenized training
  // The exact variant (sampling/covering.h) instead of masking: +0.49 edit similarity on
  // efim-base-py's spans, but 13-19% more mean latency in efim bench infill; off by default.
  bool exact = false;
};

// Whether to heal an infill plan's text after <MID> / a plain completion prompt.
// `requested`: the request's own token_healing field, when it has one.
bool heal_infill(const HealPolicy& p, std::optional<bool> requested);
bool heal_plain(const HealPolicy& p, std::optional<bool> requested, std::string_view prompt_text);

// True when the text's last character is a letter, digit or '_' (ASCII, or any non-ASCII
// character: identifiers in most languages allow them).
bool ends_inside_word(std::string_view text);

}  // namespace efim
