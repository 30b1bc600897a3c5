// SentencePiece-style BPE on a tiny vocabulary with exact ids: merging by rank (tokenizer.json)
// and by score (GGUF), the dummy prefix per segment and per Metaspace scheme, byte fallback and
// the unknown token, the infill layer's space_prefix = false, GGUF round trips and loader errors.
// Parity with Hugging Face and llama.cpp on real vocabularies is in oracle_test.cpp.
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tokenizer_test_util.h"

namespace efim::test {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

constexpr int32_t kByte0 = 3;  // <0x00> .. <0xFF> are ids 3 .. 258
constexpr int32_t kSp = 259, kA = 260, kB = 261, kC = 262, kAb = 263, kSpA = 264, kSpAb = 265,
                  kBc = 266, kAbc = 267;

// <unk> <s> </s>, the 256 byte tokens, then ▁ a b c ab ▁a ▁ab bc abc.
json tiny_json(const json& normalizer, const json& pre_tokenizer, bool all_bytes = true) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[all_bytes || b != 0xC3 ? std::string(name) : "unused"] = kByte0 + b;
  }
  const char* rest[] = {"\u2581", "a", "b", "c", "ab", "\u2581a", "\u2581ab", "bc", "abc"};
  for (int i = 0; i < 9; ++i) vocab[rest[i]] = kSp + i;
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i}, {"content", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>"},
                     {"special", true}, {"normalized", false}});
  }
  return {{"model",
           {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", "<unk>"},
            {"vocab", vocab},
            {"merges", {"a b", "\u2581 a", "\u2581a b", "b c", "ab c"}}}},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", json::parse(R"({"type": "Sequence", "decoders": [
              {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
              {"type": "ByteFallback"}, {"type": "Fuse"}]})")}};
}

const json kReplace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
const json kPrepend = {{"type", "Prepend"}, {"prepend", "\u2581"}};

Tokenizer llama_style() {  // Llama 2 / Mistral: Prepend + Replace
  return Tokenizer::from_json(
      tiny_json({{"type", "Sequence"}, {"normalizers", {kPrepend, kReplace}}}, nullptr).dump(), "tiny");
}

Tokenizer from_bytes(const std::string& bytes) {
  return Tokenizer::from_gguf(
      GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem"));
}

TEST(SpmRank, OnlyListedMergesApplyInRankOrder) {
  const Tokenizer t = llama_style();
  EXPECT_TRUE(t.sentencepiece());
  EXPECT_FALSE(t.merges_by_score());
  EXPECT_EQ(t.space_prefix(), SpacePrefix::kEverySegment);
  // "▁ab": a+b (rank 0) before ▁+a (rank 1); no merge "▁ ab" is listed, so ▁ stays alone.
  EXPECT_EQ(t.encode("ab"), (Ids{kSp, kAb}));
  EXPECT_EQ(t.encode("abc"), (Ids{kSp, kAbc}));
  EXPECT_EQ(t.encode("a"), (Ids{kSpA}));
  EXPECT_EQ(t.encode("a b"), (Ids{kSpA, kSp, kB}));
  EXPECT_EQ(t.decode(t.encode("a b")), " a b");
}

TEST(SpmRank, DummyPrefixAfterEveryAddedTokenAndSwitchable) {
  const Tokenizer t = llama_style();
  EXPECT_EQ(t.encode("a</s>a", {.parse_special = true}), (Ids{kSpA, 2, kSpA}));
  EXPECT_EQ(t.encode("a", {.space_prefix = false}), (Ids{kA}));
  EXPECT_EQ(t.encode(" a", {.space_prefix = false}), (Ids{kSpA}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(SpmRank, ByteFallbackAndFusedUnknown) {
  const Tokenizer t = llama_style();
  // "é" = C3 A9 has no token: its bytes' tokens.
  EXPECT_EQ(t.encode("\xC3\xA9", {.space_prefix = false}), (Ids{kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(t.decode(t.encode("a\xC3\xA9")), " a\xC3\xA9");
  EXPECT_EQ(t.token_bytes(kByte0 + 0x41), "A");
  EXPECT_EQ(t.token_bytes(kSpAb), " ab");
  // Without <0xC3>, "é" is unknown; a run of unknown characters is one <unk>.
  const Tokenizer u = Tokenizer::from_json(tiny_json(kReplace, nullptr, false).dump(), "tiny");
  EXPECT_EQ(u.encode("\xC3\xA9\xC3\xA9" "a\xC3\xA9"), (Ids{0, kA, 0}));
  EXPECT_TRUE(u.is_special(0));
  EXPECT_EQ(u.space_prefix(), SpacePrefix::kNone);  // Gemma: Replace without Prepend
}

TEST(SpmRank, MetaspaceSchemes) {
  auto meta = [](const char* scheme, bool split) {
    return Tokenizer::from_json(
        tiny_json(nullptr, {{"type", "Metaspace"}, {"replacement", "\u2581"},
                            {"prepend_scheme", scheme}, {"split", split}})
            .dump(),
        "tiny");
  };
  const Tokenizer first = meta("first", false), always = meta("always", false);
  EXPECT_EQ(first.space_prefix(), SpacePrefix::kMetaspaceFirst);
  // "first": only the segment at the start of the text; never before a leading space.
  EXPECT_EQ(first.encode("a</s>a", {.parse_special = true}), (Ids{kSpA, 2, kA}));
  EXPECT_EQ(first.encode(" a"), (Ids{kSpA}));
  EXPECT_EQ(always.encode("a</s>a", {.parse_special = true}), (Ids{kSpA, 2, kSpA}));
  // split: each "▁"-led word merges alone ("ab" then "▁ab" -> [ab] [▁ab] is never tried as one).
  const Tokenizer split = meta("never", true);
  EXPECT_EQ(split.encode("ab ab"), (Ids{kAb, kSp, kAb}));
}

TEST(SpmScore, AnyPairFormingATokenMergesByScore) {
  // The same vocabulary through GGUF: scores derived from the ranks (ab 0, ▁a -1, ▁ab -2, ...).
  GgufWriter w;
  llama_style().write_gguf_metadata(w);
  const Tokenizer t = from_bytes(w.serialize());
  EXPECT_TRUE(t.merges_by_score());
  EXPECT_EQ(t.space_prefix(), SpacePrefix::kEverySegment);
  // a+b first (score 0), then ▁+ab forms the token ▁ab although no merge lists it.
  EXPECT_EQ(t.encode("ab"), (Ids{kSpAb}));
  EXPECT_EQ(t.encode("a b"), (Ids{kSpA, kSp, kB}));
  EXPECT_EQ(t.encode("\xC3\xA9", {.space_prefix = false}), (Ids{kByte0 + 0xC3, kByte0 + 0xA9}));
  EXPECT_EQ(t.encode("a</s>a", {.parse_special = true}), (Ids{kSpA, 2, kSpA}));
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.unk(), 0);
  EXPECT_TRUE(t.is_special(0));
}

TEST(SpmScore, HighestScoreFirstThenLeftmost) {
  // a=3 b=4 ab=5 (score -2) bc=6 (score -1) c=7 abc=8: "abc": bc (-1) beats ab (-2), then
  // a+bc forms abc. Equal scores: leftmost.
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "a", "b", "ab", "bc", "c", "abc"};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  scores[5] = -2, scores[6] = -1, scores[8] = -3;
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_bool("tokenizer.ggml.add_space_prefix", false);
  const Tokenizer t = from_bytes(w.serialize());
  EXPECT_EQ(t.encode("abc"), (Ids{8}));
  EXPECT_EQ(t.encode("abab"), (Ids{5, 5}));
  EXPECT_EQ(t.encode("bcab"), (Ids{6, 5}));
  EXPECT_EQ(t.encode("x"), (Ids{9 + 'x'}));  // byte fallback
  EXPECT_EQ(t.encode("</s>"), (Ids{9 + '<', 9 + '/', 9 + 's', 9 + '>'}));  // text, not eos
  // ab and bc tie on "abc": the leftmost pair (ab) merges. abc marked unused: SentencePiece
  // never produces unused pieces, so only normal tokens are merge targets.
  scores[5] = -1;
  types[8] = 5;
  w.set_f32s("tokenizer.ggml.scores", scores);
  w.set_i32s("tokenizer.ggml.token_type", types);
  EXPECT_EQ(from_bytes(w.serialize()).encode("abc"), (Ids{5, 7}));
}

TEST(SpmGguf, RoundTripOfRealVocabulariesMatchesTheirJson) {
  for (const std::string name : {"llama2", "gemma"}) {
    require_file(lenml_json(name));
    const Tokenizer j = Tokenizer::from_json_file(lenml_json(name));
    GgufWriter w;
    j.write_gguf_metadata(w);
    const Tokenizer g = from_bytes(w.serialize());
    EXPECT_TRUE(g.merges_by_score());
    EXPECT_EQ(g.space_prefix(), j.space_prefix()) << name;
    EXPECT_EQ(g.bos(), j.bos()) << name;
    EXPECT_EQ(g.eos(), j.eos()) << name;
    EXPECT_EQ(g.add_bos_default(), j.add_bos_default()) << name;
    for (const char* f : {"/usr/lib/python3.11/textwrap.py", "/usr/lib/python3.11/os.py"}) {
      const std::string text = read_file(f);
      EXPECT_EQ(first_mismatch(g, f, text, j.encode(text), g.encode(text)), "") << name;
    }
    for (int32_t id = 0; id < j.vocab_size(); id += 97) {
      ASSERT_EQ(g.token_bytes(id), j.token_bytes(id)) << name << " id " << id;
      ASSERT_EQ(g.is_special(id), j.is_special(id)) << name << " id " << id;
    }
  }
}

TEST(SpmErrors, UnsupportedSpellingsAreNamed) {
  auto error_of = [](const json& j) -> std::string {
    try {
      Tokenizer::from_json(j.dump(), "tiny");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // No space handling at all.
  EXPECT_NE(error_of(tiny_json(nullptr, nullptr)).find("Replace"), std::string::npos);
  // A normalizer step we do not implement.
  EXPECT_NE(error_of(tiny_json({{"type", "Lowercase"}}, nullptr)).find("Lowercase"),
            std::string::npos);
  // A normalized added token.
  json j = tiny_json(kReplace, nullptr);
  j["added_tokens"].push_back({{"id", kAbc}, {"content", "abc"}, {"special", false}, {"normalized", true}});
  EXPECT_NE(error_of(j).find("normalized=true"), std::string::npos);
  // A pre-tokenizer that would split.
  EXPECT_NE(error_of(tiny_json(kReplace, {{"type", "Digits"}, {"individual_digits", true}}))
                .find("pre_tokenizer"),
            std::string::npos);
  // GGUF without byte tokens: llama.cpp's byte fallback needs them.
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xC3\xA9"});
  EXPECT_THROW(from_bytes(w.serialize()), Error);
}

}  // namespace
}  // namespace efim::test
