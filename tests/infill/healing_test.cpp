// Token healing's back-off (infill/healing.h) with exact ids on llama.cpp's GGUF vocabularies
// (llama-bpe, qwen2, deepseek-coder, starcoder) and the healing policy.
#include "infill/healing.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "infill/layout.h"
#include "sampling/token_healing.h"
#include "infill_test_util.h"

namespace efim {
namespace {

struct Vocab {
  Tokenizer tok;
  VocabIndex index;
  explicit Vocab(const std::string& name) : tok(test::gguf_tokenizer(name)), index(tok) {}
  Vocab(const Vocab&) = delete;
  HealBackoff backoff(std::span<const int32_t> ids, size_t from = 0) const {
    return heal_backoff(index, ids, from);
  }
  bool allows(std::string_view rest, int32_t id) const {
    std::vector<int32_t> a;
    index.allowed(rest, a);
    return std::binary_search(a.begin(), a.end(), id);
  }
  int32_t id(std::string_view bytes) const {
    const auto r = index.equal_to(bytes);
    EXPECT_EQ(r.size(), 1u) << "bytes of " << bytes.size();
    return r.empty() ? -1 : r.front();
  }
};

const Vocab& vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Vocab>> cache;
  auto& v = cache[name];
  if (!v) v = std::make_unique<Vocab>(name);
  return *v;
}

using Ids = std::vector<int32_t>;

struct Case {
  const char* vocab;
  Ids ids;             // the canonical tokens of the text (checked)
  size_t n_tokens;     // removed
  std::string bytes;   // R
};

void check(const Case& c, const std::string& text) {
  const Vocab& v = vocab(c.vocab);
  ASSERT_EQ(v.tok.encode(text), c.ids) << c.vocab;
  const HealBackoff h = v.backoff(c.ids);
  EXPECT_EQ(h.n_tokens, c.n_tokens) << c.vocab;
  EXPECT_EQ(h.bytes, c.bytes) << c.vocab;
  // R is the bytes of the removed tokens, and the removed tokens are allowed first steps.
  if (!h.empty()) {
    EXPECT_EQ(v.tok.decode(std::span(c.ids).last(h.n_tokens)), h.bytes);
    EXPECT_TRUE(v.allows(h.bytes, c.ids[c.ids.size() - h.n_tokens])) << c.vocab;
  }
}

// "comp" backs off one token; a "completion" token is then an allowed first step.
TEST(HealBackoff, PartialWordBacksOffToOneLongerToken) {
  const std::string text = "    result = comp";
  struct Want {
    Case c;
    int32_t completion;  // " completion"
  };
  const Want wants[] = {
      {{"llama-bpe", {262, 1121, 284, 1391}, 1, " comp"}, 9954},
      {{"qwen2", {262, 1102, 284, 1367}, 1, " comp"}, 9755},
      {{"deepseek-coder", {315, 1228, 405, 588}, 1, " comp"}, 16081},
      {{"starcoder", {283, 1074, 299, 940}, 1, " comp"}, 13362},
  };
  for (const Want& w : wants) {
    check(w.c, text);
    const Vocab& v = vocab(w.c.vocab);
    EXPECT_EQ(v.id(" completion"), w.completion) << w.c.vocab;
    EXPECT_TRUE(v.allows(" comp", w.completion)) << w.c.vocab;
    EXPECT_FALSE(v.allows(" comp", v.id(" result"))) << w.c.vocab;
  }
}

TEST(HealBackoff, IndentationTails) {
  // After "():\n" + 4 spaces: a longer whitespace token exists ("\n" + 5 spaces, or 5 spaces).
  for (const Case& c : {Case{"llama-bpe", {755, 282, 4019, 257}, 2, "():\n    "},
                        Case{"qwen2", {750, 282, 3932, 257}, 2, "():\n    "},
                        Case{"deepseek-coder", {1551, 267, 10942, 185, 251}, 1, "    "},
                        Case{"starcoder", {610, 315, 2284, 294}, 1, "\n    "}}) {
    check(c, "def f():\n    ");
  }
  for (const Case& c : {Case{"llama-bpe", {87, 284, 220, 16, 198, 197}, 2, "\n\t"},
                        Case{"qwen2", {87, 284, 220, 16, 198, 197}, 2, "\n\t"},
                        Case{"deepseek-coder", {87, 1412, 16, 185, 184}, 1, "\t"},
                        Case{"starcoder", {125, 299, 244, 54, 376}, 1, "\n\t"}}) {
    check(c, "x = 1\n\t");
  }
  // Tabs: "\n\t" may become "\n\t\t" (llama-bpe 18108 is "\n\t\n"; starcoder 374 "\n\t\t").
  EXPECT_TRUE(vocab("starcoder").allows("\n\t", 374));
  EXPECT_TRUE(vocab("llama-bpe").allows("\n\t", 18108));
}

// A character split over tokens: R starts inside it (its last continuation byte).
TEST(HealBackoff, RStartsInsideAMultiByteCharacter) {
  check({"llama-bpe", {87, 284, 330, 9468, 99, 247}, 1, "\x99"}, "x = \"\xf0\x9f\xa6\x99");
  check({"starcoder", {125, 299, 332, 3822, 137, 271}, 1, "\x99"}, "x = \"\xf0\x9f\xa6\x99");
  check({"qwen2", {87, 284, 330, 124026, 246}, 1, "\x98"}, "x = \"\xf0\x9d\x94\x98");
  check({"deepseek-coder", {87, 405, 440, 10047, 223, 218}, 1, "\x89"}, "x = \"\xf0\x9f\x8e\x89");
}

// A token-id prompt may end inside a character ("x = caf" + the lead byte of "é", 0xC3): R
// ends inside it, and the constrained steps may complete the character or the word.
TEST(HealBackoff, REndsInsideAMultiByteCharacter) {
  struct Want {
    Case c;
    int32_t first;        // an allowed first step
    std::string rest;     // what remains after it
    int32_t completes;    // an allowed step that covers the rest
  };
  const Want wants[] = {
      // " café" (53050 / 51950) is one token: the whole word is one allowed step.
      {{"llama-bpe", {87, 284, 30203, 127}, 2, " caf\xc3"}, 53050, "", -1},
      {{"qwen2", {87, 284, 29103, 127}, 2, " caf\xc3"}, 51950, "", -1},
      // 125 is the byte 0xC3 and 584 "é".
      {{"deepseek-coder", {87, 405, 26632, 125}, 1, "\xc3"}, 584, "", -1},
      // "af" (1566) first, then 0xC3 remains and "é" (1329) covers it.
      {{"starcoder", {125, 299, 300, 1566, 163}, 2, "af\xc3"}, 1566, "\xc3", 1329},
  };
  for (const Want& w : wants) {
    const Vocab& v = vocab(w.c.vocab);
    Ids ids = v.tok.encode("x = caf");
    ids.push_back(v.id("\xc3"));
    ASSERT_EQ(ids, w.c.ids) << w.c.vocab;
    const HealBackoff h = v.backoff(ids);
    EXPECT_EQ(h.n_tokens, w.c.n_tokens) << w.c.vocab;
    EXPECT_EQ(h.bytes, w.c.bytes) << w.c.vocab;
    EXPECT_TRUE(v.allows(h.bytes, w.first)) << w.c.vocab;
    HealConstraint c(v.index, h.bytes);
    c.accept(w.first);
    EXPECT_EQ(c.rest(), w.rest) << w.c.vocab;
    if (w.completes >= 0) {
      EXPECT_TRUE(v.allows(w.rest, w.completes)) << w.c.vocab;
      c.accept(w.completes);
      EXPECT_FALSE(c.active());
    }
  }
}

// No token extends any suffix of the tail: nothing is backed off. Qwen2, DeepSeek and
// StarCoder split numbers into single digits, and a digit is no token's start but its own.
TEST(HealBackoff, CompleteTokenWithoutExtensionIsLeftAlone) {
  check({"qwen2", {87, 284, 220, 16, 15}, 0, ""}, "x = 10");
  check({"deepseek-coder", {87, 1412, 16, 15}, 0, ""}, "x = 10");
  check({"starcoder", {125, 299, 244, 54, 53}, 0, ""}, "x = 10");
  // llama-bpe extends every printable token; a control character is one no token extends.
  const Vocab& l = vocab("llama-bpe");
  const Ids ids = l.tok.encode("sep = \x01");
  EXPECT_EQ(ids.back(), 189);
  EXPECT_TRUE(l.backoff(ids).empty());
}

TEST(HealBackoff, NeverCrossesSpecialTokensOrFrom) {
  const Vocab& v = vocab("starcoder");  // <fim_prefix> 1, <fim_middle> 2, <fim_suffix> 3
  const Ids comp = v.tok.encode(" comp");
  ASSERT_EQ(comp, Ids{940});
  // <fim_middle> " comp": only the typed token goes.
  EXPECT_EQ(v.backoff(Ids{1, 3, 2, 940}).n_tokens, 1u);
  // Nothing after the sentinel: nothing to heal, the sentinel stays.
  EXPECT_TRUE(v.backoff(Ids{1, 3, 2}).empty());
  // "():\n    " in llama-bpe wants two tokens; with the sentinel right before the last one only
  // one token is in reach, whose own suffixes still extend ("    " -> 5 spaces).
  const Vocab& l = vocab("llama-bpe");
  EXPECT_EQ(l.backoff(Ids{755, 282, 4019, 257}).n_tokens, 2u);
  const int32_t bos = l.tok.bos();
  ASSERT_TRUE(l.tok.is_special(bos));
  const HealBackoff h = l.backoff(Ids{bos, 257});
  EXPECT_EQ(h.n_tokens, 1u);
  EXPECT_EQ(h.bytes, "    ");
  // `from` bounds the tail the same way.
  EXPECT_EQ(l.backoff(Ids{755, 282, 4019, 257}, 3).n_tokens, 1u);
  EXPECT_TRUE(l.backoff(Ids{755, 282, 4019, 257}, 4).empty());
  // At most 4 tokens: six one-space tokens; 4 of them are in reach and 5 spaces extend 4.
  const int32_t sp = l.id(" ");
  const HealBackoff six = l.backoff(Ids(6, sp));
  EXPECT_EQ(six.n_tokens, 4u);
  EXPECT_EQ(six.bytes, "    ");
}

// The back-off of an EFIM prompt only ever removes text after the middle sentinel.
TEST(HealBackoff, EfimPromptLosesOnlyTypedTokens) {
  const Vocab& v = vocab("starcoder");
  FimLayout layout(v.tok, make_format(v.tok));
  const FimPrompt p = layout.build(
      {.prefix = "def area(r):\n    return 3.14 * r", .suffix = "\n", .inc = "\n\ndef circumf"},
      FimOrder::efim);
  const HealBackoff h = heal_backoff(v.index, p.tokens, p.middle_end);
  ASSERT_FALSE(h.empty());
  EXPECT_LE(h.n_tokens, p.tokens.size() - p.middle_end);
  EXPECT_TRUE(std::string("\n\ndef circumf").ends_with(h.bytes));
  // PSM: nothing follows <fim_middle>.
  const FimPrompt psm = layout.build({.prefix = "x = comp", .suffix = "\n"}, FimOrder::psm);
  EXPECT_TRUE(heal_backoff(v.index, psm.tokens, psm.middle_end).empty());
}

TEST(HealPolicy, ModesAndRequestField) {
  const HealPolicy autom{};
  const HealPolicy frag{TokenHealingMode::automatic, true};
  const HealPolicy on{TokenHealingMode::on, true};
  const HealPolicy off{TokenHealingMode::off, false};
  EXPECT_TRUE(heal_infill(autom, std::nullopt));
  EXPECT_FALSE(heal_infill(frag, std::nullopt));  // fragment-trained: EFIM needs no healing
  EXPECT_TRUE(heal_infill(frag, true));           // unless the request asks for it
  EXPECT_TRUE(heal_infill(on, std::nullopt));
  EXPECT_FALSE(heal_infill(off, std::nullopt));
  EXPECT_FALSE(heal_infill(autom, false));
  EXPECT_TRUE(heal_plain(autom, std::nullopt, "x = comp"));
  EXPECT_FALSE(heal_plain(autom, std::nullopt, "x = f("));   // not inside a word
  EXPECT_FALSE(heal_plain(frag, std::nullopt, "x = comp"));
  EXPECT_TRUE(heal_plain(on, std::nullopt, "x = f("));
  EXPECT_FALSE(heal_plain(autom, false, "x = comp"));
  EXPECT_TRUE(ends_inside_word("caf\xc3\xa9"));
  EXPECT_TRUE(ends_inside_word("x_1"));
  EXPECT_FALSE(ends_inside_word("f()"));
  EXPECT_FALSE(ends_inside_word(""));
  EXPECT_EQ(parse_healing_mode("auto"), TokenHealingMode::automatic);
  EXPECT_EQ(healing_mode_name(TokenHealingMode::off), "off");
  EXPECT_THROW(parse_healing_mode("sometimes"), Error);
}

}  // namespace
}  // namespace efim
