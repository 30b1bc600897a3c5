// Unicode helpers for the tokenizer: lossy UTF-8 decoding, the character classes the
// pre-tokenizer regexes use (\p{L}, \p{N}, \p{P}, \s), NFC, and GPT-2's byte <-> char map.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace efim::unicode {

// Class bits of one code point. kSpace is the Unicode White_Space property, which is what
// Oniguruma's and Rust's `\s` mean (it includes U+000B, U+0085, U+00A0, U+2028, U+3000).
enum CharClass : uint8_t {
  kLetter = 1,   // \p{L}: Lu Ll Lt Lm Lo
  kNumber = 2,   // \p{N}: Nd Nl No (also Rust's char::is_numeric)
  kPunct = 4,    // \p{P}: Pc Pd Ps Pe Pi Pf Po
  kSpace = 8,    // \s
  kNewline = 16, // \r or \n
};

uint8_t char_class(char32_t cp);

// The code points of a UTF-8 string with their byte offsets; offsets.size() == cps.size() + 1.
struct CodePoints {
  std::vector<char32_t> cps;       // [n]
  std::vector<uint32_t> offsets;   // [n + 1] byte offset of each code point, then the length
  std::vector<uint8_t> classes;    // [n] char_class of each code point
};
// `text` must be valid UTF-8 (see to_valid_utf8).
void decode(std::string_view text, CodePoints& out);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool is_valid_utf8(std::string_view text);
// Replaces each maximal invalid subsequence by U+FFFD, as WHATWG's decoder, JavaScript's
// TextDecoder and Rust's String::from_utf8_lossy do. Valid input is returned unchanged.
std::string to_valid_utf8(std::string_view text);
// Number of trailing bytes of `bytes` (0..3) that form a proper prefix of a well-formed UTF-8
// sequence, i.e. that may still become a valid character when more bytes arrive. Lossy decoding
// is streaming: to_valid_utf8(a) + to_valid_utf8(b) == to_valid_utf8(a + b) whenever `a` ends
// with no such tail, which is what the incremental decoder relies on.
size_t incomplete_tail(std::string_view bytes);

// NFC normalization (ICU). Pure-ASCII input is returned without calling ICU.
std::string nfc(std::string_view text);

void append_utf8(std::string& out, char32_t cp);

// GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 + k. byte_char(b) is the code point of byte b; char_byte(cp) is -1 when cp is not one.
char32_t byte_char(uint8_t b);
int char_byte(char32_t cp);
// Byte-level form of raw bytes ("Ġhello" for " hello").
std::string bytes_to_byte_level(std::string_view bytes);
// Inverse; returns false when a character of `text` is not a byte-level character.
bool byte_level_to_bytes(std::string_view text, std::string& out);

}  // namespace efim::unicode
