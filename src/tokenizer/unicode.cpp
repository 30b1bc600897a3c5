#include "tokenizer/unicode.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>

#include "base/error.h"

namespace efim::unicode {
namespace {

uint8_t classify_icu(char32_t cp) {
  uint8_t c = 0;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      c |= kLetter;
      break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      c |= kNumber;
      break;
    case U_CONNECTOR_PUNCTUATION:
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
      c |= kPunct;
      break;
    default:
      break;
  }
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) c |= kSpace;
  if (cp == '\r' || cp == '\n') c |= kNewline;
  return c;
}

// Classes of the first 64K code points, computed once (the BMP covers nearly all text).
const std::array<uint8_t, 0x10000>& bmp_classes() {
  static const auto table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (uint32_t cp = 0; cp < 0x10000; ++cp) t[cp] = classify_icu(cp);
    return t;
  }();
  return table;
}

struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // byte-level chars are all < U+0144
};

const ByteMap& byte_map() {
  static const ByteMap m = [] {
    ByteMap bm;
    bm.to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(0x100 + extra++);
      bm.to_char[b] = c;
      bm.to_byte[c] = static_cast<int16_t>(b);
    }
    return bm;
  }();
  return m;
}

// Decodes one well-formed sequence at s[i]; returns its length, 0 when s[i..] starts with an
// invalid sequence. `cp` receives the code point.
size_t decode_one(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  return len;
}

// Length of the maximal prefix of an invalid sequence at s[i] that is itself a valid prefix of
// some well-formed sequence (at least 1): the unit replaced by one U+FFFD.
size_t invalid_subpart(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t k = 1;
  for (; k < len && i + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
  }
  return k;
}

}  // namespace

uint8_t char_class(char32_t cp) {
  if (cp < 0x10000) return bmp_classes()[cp];
  return classify_icu(cp);
}

void decode(std::string_view text, CodePoints& out) {
  const auto& table = bmp_classes();
  out.cps.clear();
  out.offsets.clear();
  out.classes.clear();
  out.cps.reserve(text.size());
  out.offsets.reserve(text.size() + 1);
  out.classes.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    size_t n = decode_one(text, i, cp);
    EFIM_CHECK(n > 0, "tokenizer: invalid UTF-8 at byte ", i, " (callers must sanitize)");
    out.cps.push_back(cp);
    out.offsets.push_back(static_cast<uint32_t>(i));
    out.classes.push_back(cp < 0x10000 ? table[cp] : classify_icu(cp));
    i += n;
  }
  out.offsets.push_back(static_cast<uint32_t>(text.size()));
}

bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    size_t n = decode_one(text, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 16);
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    size_t n = decode_one(text, i, cp);
    if (n > 0) {
      out.append(text.substr(i, n));
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += invalid_subpart(text, i);
    }
  }
  return out;
}

size_t incomplete_tail(std::string_view bytes) {
  // A proper prefix of a valid sequence is at most 3 bytes; look for its lead byte.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation byte: keep looking for the lead
    if (b < 0xC2 || b > 0xF4) return 0;    // ASCII or a byte that never leads
    return invalid_subpart(bytes, i) == back && back < (b >= 0xF0 ? 4u : b >= 0xE0 ? 3u : 2u)
               ? back
               : 0;
  }
  return 0;
}

std::string nfc(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(text);
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* norm = icu::Normalizer2::getNFCInstance(err);
  EFIM_CHECK(U_SUCCESS(err), "tokenizer: ICU NFC unavailable: ", u_errorName(err));
  icu::UnicodeString src = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  if (norm->isNormalized(src, err) && U_SUCCESS(err)) return std::string(text);
  err = U_ZERO_ERROR;
  icu::UnicodeString dst = norm->normalize(src, err);
  EFIM_CHECK(U_SUCCESS(err), "tokenizer: NFC failed: ", u_errorName(err));
  std::string out;
  dst.toUTF8String(out);
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t byte_char(uint8_t b) { return byte_map().to_char[b]; }

int char_byte(char32_t cp) {
  const auto& m = byte_map();
  return cp < m.to_byte.size() ? m.to_byte[cp] : -1;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_char(static_cast<uint8_t>(c)));
  return out;
}

bool byte_level_to_bytes(std::string_view text, std::string& out) {
  out.clear();
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    size_t n = decode_one(text, i, cp);
    if (n == 0) return false;
    int b = char_byte(cp);
    if (b < 0) return false;
    out.push_back(static_cast<char>(b));
    i += n;
  }
  return true;
}

}  // namespace efim::unicode
