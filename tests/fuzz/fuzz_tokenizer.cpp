// libFuzzer target for the tokenizer. The first input byte picks the mode:
//   even: the rest is a tokenizer.json; loading must succeed or throw efim::Error.
//   odd:  the rest is user text for efim-base-py's byte-level tokenizer (byte % 4 == 1) or for
//         llama.cpp's SentencePiece vocabulary llama-spm, merged by score (byte % 4 == 3);
//         encoding must not crash, ids must be in the vocabulary, and decoding must give back
//         the text (after invalid UTF-8 is replaced by U+FFFD, which encode() does first; behind
//         the dummy prefix's space for SentencePiece), with or without special parsing.
#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

const efim::Tokenizer& base_tokenizer() {
  static const efim::Tokenizer tok = efim::Tokenizer::from_json_file(
      std::string(EFIM_SOURCE_DIR) + "/tests/tokenizer/data/efim-base-py/tokenizer.json");
  return tok;
}

const efim::Tokenizer& spm_tokenizer() {
  static const efim::Tokenizer tok = efim::Tokenizer::from_gguf(efim::GgufFile::open(
      std::string(EFIM_SOURCE_DIR) + "/.deps/llama.cpp/models/ggml-vocab-llama-spm.gguf"));
  return tok;
}

// Lossy UTF-8 decoding in the simplest possible form: a valid sequence is kept, any other byte
// becomes U+FFFD. (Maximal-subpart grouping can differ, so this is only used on valid text.)
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    try {
      auto tok = efim::Tokenizer::from_json(rest, "fuzz");
      (void)tok.encode("def f(x):\n    return x  # ok");
    } catch (const efim::Error&) {
    }
    return 0;
  }
  const bool spm = (data[0] & 3) == 3;
  const efim::Tokenizer& tok = spm ? spm_tokenizer() : base_tokenizer();
  for (bool special : {false, true}) {
    efim::EncodeOptions opts;
    opts.parse_special = special;
    auto ids = tok.encode(rest, opts);
    for (int32_t id : ids)
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    // Special parsing may split the text, and each piece gets its own dummy prefix; a literal
    // "▁" in the text decodes as a space (SentencePiece's escape is not reversible).
    if (spm && (special || rest.find("\xE2\x96\x81") != std::string_view::npos)) continue;
    const std::string expected = spm && !rest.empty() ? " " + std::string(rest) : std::string(rest);
    if (valid_utf8(rest) && tok.decode(ids) != expected) __builtin_trap();
  }
  return 0;
}
