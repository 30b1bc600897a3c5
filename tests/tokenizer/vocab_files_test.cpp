// llama.cpp's vocabulary test files: GGUF vocabularies with inputs and the ids Hugging Face
// produced for them (tests/test-tokenizer-0 format). Tokenized with parse_special=false as
// llama.cpp's test does.
#include "format/gguf.h"
#include "tokenizer_test_util.h"

namespace efim::test {
namespace {

class VocabFile : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabFile, ExpectedIds) {
  const std::string path = vocab_gguf(GetParam());
  require_file(path);
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
  const auto cases = read_vocab_cases(path);
  ASSERT_GE(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tok.encode(cases[i].text);
    EXPECT_EQ(first_mismatch(tok, "case " + std::to_string(i), cases[i].text, cases[i].ids, ids), "");
    // Decoding gives the text back (all inputs are valid UTF-8).
    EXPECT_EQ(tok.decode(ids), cases[i].text) << "case " << i;
  }
  EXPECT_EQ(tok.pre_name(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Gguf, VocabFile,
                         ::testing::Values("llama-bpe", "qwen2", "deepseek-coder", "starcoder"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// SentencePiece by piece score: llama.cpp's GGUF of Llama 2's vocabulary (CodeLlama's, less its
// four FIM tokens). The expected ids carry the dummy prefix ("▁" before the text).
TEST(SpmVocabFile, LlamaSpmExpectedIds) {
  const std::string path = vocab_gguf("llama-spm");
  require_file(path);
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile::open(path));
  EXPECT_TRUE(tok.sentencepiece());
  EXPECT_TRUE(tok.merges_by_score());
  EXPECT_EQ(tok.space_prefix(), SpacePrefix::kEverySegment);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.unk(), 0);
  EXPECT_TRUE(tok.add_bos_default());
  const auto cases = read_vocab_cases(path);
  ASSERT_GE(cases.size(), 40u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = tok.encode(cases[i].text);
    EXPECT_EQ(first_mismatch(tok, "case " + std::to_string(i), cases[i].text, cases[i].ids, ids), "");
    // Decoding gives the text back behind the dummy prefix's space.
    if (!cases[i].text.empty()) {
      EXPECT_EQ(tok.decode(ids), " " + cases[i].text) << "case " << i;
    }
  }
}

Tokenizer open_gguf(const std::string& name) {
  require_file(vocab_gguf(name));
  return Tokenizer::from_gguf(GgufFile::open(vocab_gguf(name)));
}

TEST(GgufVocab, FimAndControlTokens) {
  {
    const Tokenizer t = open_gguf("deepseek-coder");
    EXPECT_EQ(t.fim().prefix, 32016);  // <｜fim▁begin｜>
    EXPECT_EQ(t.fim().suffix, 32015);  // <｜fim▁hole｜>
    EXPECT_EQ(t.fim().middle, 32017);  // <｜fim▁end｜>
    EXPECT_EQ(t.fim().pad, -1);
    EXPECT_EQ(t.fim().eot, 32014);     // <｜end▁of▁sentence｜>
    EXPECT_EQ(t.bos(), 32013);
    EXPECT_EQ(t.eos(), 32014);
    EXPECT_TRUE(t.add_bos_default());
    // User-defined in the GGUF, but sentinels are never parsed from user text by default.
    EXPECT_TRUE(t.is_special(32016));
    EXPECT_NE(t.encode("<｜fim▁begin｜>"), std::vector<int32_t>{32016});
    EXPECT_EQ(t.encode("<｜fim▁begin｜>", {.parse_special = true}), std::vector<int32_t>{32016});
    // Other user-defined tokens are split out of the text as Hugging Face does.
    EXPECT_EQ(t.encode("<|EOT|>"), std::vector<int32_t>{32021});
    EXPECT_FALSE(t.is_special(32021));
  }
  {
    const Tokenizer t = open_gguf("starcoder");
    EXPECT_EQ(t.fim().prefix, 1);
    EXPECT_EQ(t.fim().middle, 2);
    EXPECT_EQ(t.fim().suffix, 3);
    EXPECT_EQ(t.fim().pad, 4);
    EXPECT_EQ(t.fim().repo_name, 5);
    EXPECT_EQ(t.fim().file_sep, 6);
    EXPECT_EQ(t.fim().eot, 0);
    EXPECT_EQ(t.encode("<fim_prefix>", {.parse_special = true}), std::vector<int32_t>{1});
    EXPECT_GT(t.encode("<fim_prefix>").size(), 1u);
  }
  {
    const Tokenizer t = open_gguf("llama-bpe");
    EXPECT_EQ(t.fim().prefix, -1);
    EXPECT_EQ(t.bos(), 128000);
    EXPECT_TRUE(t.add_bos_default());
    EXPECT_TRUE(t.ignore_merges());
    EXPECT_EQ(t.encode("hi", {.add_bos = true}).front(), 128000);
  }
  {
    const Tokenizer t = open_gguf("qwen2");
    EXPECT_EQ(t.fim().prefix, -1);  // this Qwen2 vocabulary predates the FIM tokens
    EXPECT_EQ(t.fim().eot, 151643);
    EXPECT_TRUE(t.nfc());
  }
}

TEST(GgufVocab, UnknownPreTokenizerIsAClearError) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "mystery-pre");
  w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.set_strings("tokenizer.ggml.merges", {"a b"});
  const std::string bytes = w.serialize();
  const GgufFile g = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
  try {
    Tokenizer::from_gguf(g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mystery-pre"), std::string::npos) << e.what();
  }
}

TEST(GgufVocab, BadMergeAndIdsAreClearErrors) {
  auto load = [](std::vector<std::string> merges, uint32_t bos) {
    GgufWriter w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "llama-bpe");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
    w.set_strings("tokenizer.ggml.merges", merges);
    w.set_u32("tokenizer.ggml.bos_token_id", bos);
    const std::string bytes = w.serialize();
    return Tokenizer::from_gguf(
        GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem"));
  };
  EXPECT_NO_THROW(load({"a b"}, 0));
  EXPECT_THROW(load({"a c"}, 0), Error);
  EXPECT_THROW(load({"ab"}, 0), Error);
  EXPECT_THROW(load({"a b"}, 7), Error);
}

}  // namespace
}  // namespace efim::test
