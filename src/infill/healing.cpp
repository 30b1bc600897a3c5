#include "infill/healing.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace efim {

HealBackoff heal_backoff(const VocabIndex& index, std::span<const int32_t> tokens, size_t from,
                         const HealBackoffOptions& opts) {
  const Tokenizer& tok = index.tokenizer();
  // The tail: last tokens back to `from`, a special token or max_tokens.
  size_t first = tokens.size();
  while (first > from && tokens.size() - first < opts.max_tokens) {
    const int32_t id = tokens[first - 1];
    if (id < 0 || id >= tok.vocab_size() || tok.is_special(id)) break;
    --first;
  }
  std::string tail;  // T
  for (size_t i = first; i < tokens.size(); ++i) tail += tok.token_bytes(tokens[i]);
  if (tail.empty() || index.max_token_bytes() < 2) return {};

  // S: the longest suffix of T that a token strictly extends.
  const size_t longest = std::min(tail.size(), index.max_token_bytes() - 1);
  size_t s_len = 0;
  for (size_t len = longest; len >= 1; --len) {
    if (index.strictly_extended(std::string_view(tail).substr(tail.size() - len))) {
      s_len = len;
      break;
    }
  }
  if (s_len == 0) return {};

  // The fewest last tokens that cover S.
  HealBackoff out;
  size_t covered = 0;
  for (size_t i = tokens.size(); covered < s_len; --i) {
    covered += tok.token_bytes(tokens[i - 1]).size();
    ++out.n_tokens;
  }
  out.bytes = tail.substr(tail.size() - covered);
  return out;
}

namespace {
constexpr std::array<std::string_view, 3> kModeNames = {"auto", "on", "off"};
}

std::string_view healing_mode_name(TokenHealingMode m) {
  return kModeNames.at(static_cast<size_t>(m));
}

TokenHealingMode parse_healing_mode(std::string_view name) {
  for (size_t i = 0; i < kModeNames.size(); ++i)
    if (kModeNames[i] == name) return static_cast<TokenHealingMode>(i);
  fail("unknown token healing mode \"", name, "\" (expected auto, on or off)");
}

bool heal_infill(const HealPolicy& p, std::optional<bool> requested) {
  if (requested) return *requested;
  if (p.mode == TokenHealingMode::automatic) return !p.fragment_trained;
  return p.mode == TokenHealingMode::on;
}

bool heal_plain(const HealPolicy& p, std::optional<bool> requested, std::string_view text) {
  if (requested) return *requested;
  if (p.mode == TokenHealingMode::automatic) return !p.fragment_trained && ends_inside_word(text);
  return p.mode == TokenHealingMode::on;
}

bool ends_inside_word(std::string_view text) {
  if (text.empty()) return false;
  const auto c = static_cast<unsigned char>(text.back());
  return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z');
}

}  // namespace efim
