// Exact token layouts per family and order, extra context, ranges and budget trimming.
// Expected sequences are written out from the vocabulary's sentinel ids (literal numbers,
// checked against the vocabulary files) and separately encoded parts.
#include "infill/layout.h"

#include <algorithm>
#include <functional>

#include "infill_test_util.h"

namespace efim::test {
namespace {

struct FamilyCase {
  std::string label;
  std::function<const Tokenizer&()> load;
  FormatOptions opts;
  FimFamily family;
  int32_t bos, pre, suf, mid;  // as placed
  bool space;                  // codellama: prefix tokenized with a leading space
  SpmStyle spm;
};

std::vector<FamilyCase> family_cases() {
  return {
      {"efim_base_py", efim_tok, {}, FimFamily::starcoder, -1, 1, 3, 2, false, SpmStyle::joint},
      {"starcoder_gguf",
       starcoder_tok,
       {},
       FimFamily::starcoder,
       -1,
       1,
       3,
       2,
       false,
       SpmStyle::joint},
      {"llama3_fim",
       llama3_fim_tok,
       {},
       FimFamily::starcoder,
       128000,
       128002,
       128004,
       128003,
       false,
       SpmStyle::joint},
      {"qwen3", qwen3_tok, {}, FimFamily::qwen, -1, 151659, 151661, 151660, false, SpmStyle::plain},
      {"deepseek_gguf",
       deepseek_tok,
       {},
       FimFamily::deepseek,
       32013,
       32016,
       32015,
       32017,
       false,
       SpmStyle::plain},
      {"deepseek_swapped",
       deepseek_tok,
       {.family = FimFamily::deepseek_swapped},
       FimFamily::deepseek_swapped,
       32013,
       32016,
       32017,
       32015,
       false,
       SpmStyle::plain},
      {"codellama_like",
       codellama_like_tok,
       {},
       FimFamily::codellama,
       -1,
       1,
       3,
       2,
       true,
       SpmStyle::joint},
      // SentencePiece: the prefix gets its " " as "▁" (CodeLlama's "<PRE> {pre}"), the suffix
      // and the typed text no dummy prefix (CodeLlama's encode_infilling).
      {"codellama_spm",
       codellama_spm_tok,
       {},
       FimFamily::codellama,
       1,
       32000,
       32001,
       32002,
       true,
       SpmStyle::joint},
  };
}

// What the layout does with a part: no SentencePiece dummy prefix.
std::vector<int32_t> part_ids(const Tokenizer& tok, const std::string& s) {
  return tok.encode(s, {.space_prefix = false});
}

void PrintTo(const FamilyCase& c, std::ostream* os) {
  *os << c.label;
}

class Family : public ::testing::TestWithParam<FamilyCase> {};

// Text with every family's sentinel spellings in it: they must stay plain text.
const std::string kPrefix =
    "def add(a, b):\n    \"\"\"<fim_prefix><|fim_prefix|><｜fim▁begin｜><PRE> <fim_middle>\"\"\"\n "
    "   ret";
const std::string kSuffix =
    "\n\nprint(add(1, 2))  # <fim_suffix><|fim_suffix|><｜fim▁hole｜><SUF>\n";
const std::string kInc = "urn a";
const std::string kPrompt = " + b";

TEST_P(Family, DetectionAndFormat) {
  const FamilyCase& c = GetParam();
  const Tokenizer& tok = c.load();
  if (!c.opts.family) {
    EXPECT_EQ(detect_family(tok), c.family);
  }
  const FimFormat f = make_format(tok, c.opts);
  EXPECT_EQ(f.family, c.family);
  EXPECT_EQ(f.bos, c.bos);
  EXPECT_EQ(f.pre, c.pre);
  EXPECT_EQ(f.suf, c.suf);
  EXPECT_EQ(f.mid, c.mid);
  EXPECT_EQ(f.prefix_space, c.space);
  EXPECT_EQ(f.spm, c.spm);
}

TEST_P(Family, ExactTokensInEveryOrder) {
  const FamilyCase& c = GetParam();
  const Tokenizer& tok = c.load();
  const FimLayout layout(tok, make_format(tok, c.opts));
  auto enc = [&](const std::string& s) { return part_ids(tok, s); };
  const std::vector<int32_t> B = c.bos >= 0 ? std::vector<int32_t>{c.bos} : std::vector<int32_t>{};
  const std::vector<int32_t> P{c.pre}, S{c.suf}, M{c.mid};
  const std::vector<int32_t> p = enc(c.space ? " " + kPrefix : kPrefix), s = enc(kSuffix),
                             inc = enc(kInc), q = enc(kPrompt);

  const FimPrompt psm =
      layout.build({.prefix = kPrefix, .suffix = kSuffix, .prompt = kPrompt}, FimOrder::psm);
  EXPECT_EQ(psm.tokens, cat({B, P, p, S, s, M, q}));
  EXPECT_EQ(psm.middle_end, B.size() + 3 + p.size() + s.size());

  const FimPrompt efim = layout.build(
      {.prefix = kPrefix, .suffix = kSuffix, .inc = kInc, .prompt = kPrompt}, FimOrder::efim);
  EXPECT_EQ(efim.tokens, cat({B, P, p, S, s, M, inc, q}));

  const FimPrompt spm =
      layout.build({.prefix = kPrefix, .suffix = kSuffix, .prompt = kPrompt}, FimOrder::spm);
  if (c.spm == SpmStyle::joint) {
    EXPECT_EQ(spm.tokens, cat({B, P, S, s, M, p, q}));
  } else {
    EXPECT_EQ(spm.tokens, cat({B, S, s, P, p, M, q}));
  }
  EXPECT_FALSE(psm.truncated || efim.truncated || spm.truncated);

  // The user text tokenizes to plain text: exactly the three inserted sentinels appear.
  for (const FimPrompt* fp : {&psm, &efim, &spm}) {
    for (int32_t id : {c.pre, c.suf, c.mid}) {
      EXPECT_EQ(std::count(fp->tokens.begin(), fp->tokens.end(), id), 1)
          << c.label << " " << order_name(fp->order) << " sentinel " << id;
    }
  }
  EXPECT_GT(enc("<fim_prefix>").size(), 1u);
}

TEST_P(Family, RangesDescribeTheParts) {
  const FamilyCase& c = GetParam();
  const Tokenizer& tok = c.load();
  const FimLayout layout(tok, make_format(tok, c.opts));
  const FimPrompt efim = layout.build(
      {.prefix = kPrefix, .suffix = kSuffix, .inc = kInc, .prompt = kPrompt}, FimOrder::efim);
  uint32_t at = 0;
  for (const PartRange& r : efim.ranges) {
    EXPECT_EQ(r.begin, at);
    EXPECT_LT(r.begin, r.end);
    at = r.end;
  }
  EXPECT_EQ(at, efim.tokens.size());
  auto as_vec = [](std::span<const int32_t> s) { return std::vector<int32_t>(s.begin(), s.end()); };
  EXPECT_EQ(as_vec(efim.first(PromptPart::prefix)), part_ids(tok, c.space ? " " + kPrefix : kPrefix));
  EXPECT_EQ(as_vec(efim.first(PromptPart::suffix)), part_ids(tok, kSuffix));
  EXPECT_EQ(as_vec(efim.first(PromptPart::inc)), part_ids(tok, kInc));
  EXPECT_EQ(as_vec(efim.first(PromptPart::prompt)), part_ids(tok, kPrompt));
  if (tok.sentencepiece()) {
    // One "▁" for the format's space, none added by the tokenizer: "▁def" starts the prefix,
    // and the typed "urn a" continues a word ("urn", not "▁urn").
    EXPECT_EQ(tok.token_text(efim.first(PromptPart::prefix)[0]), "\u2581def");
    EXPECT_EQ(tok.token_bytes(efim.first(PromptPart::inc)[0]).substr(0, 1), "u");
    EXPECT_EQ(tok.end_of_generation(), (std::vector<int32_t>{2, 32003}));
  }
  EXPECT_EQ(efim.count(PromptPart::sentinel), 3u);
  EXPECT_EQ(efim.count(PromptPart::bos), c.bos >= 0 ? 1u : 0u);
  EXPECT_EQ(efim.count(PromptPart::extra), 0u);
}

INSTANTIATE_TEST_SUITE_P(Vocab, Family, ::testing::ValuesIn(family_cases()),
                         [](const auto& info) { return info.param.label; });

TEST(Layout, FamilyOverridesAndErrors) {
  const Tokenizer& tok = deepseek_tok();
  EXPECT_EQ(parse_family("deepseek_swapped"), FimFamily::deepseek_swapped);
  EXPECT_THROW(parse_family("starcoder2"), Error);
  EXPECT_EQ(make_format(tok, {.add_bos = false}).bos, -1);
  EXPECT_EQ(make_format(tok, {.spm = SpmStyle::joint}).spm, SpmStyle::joint);
  EXPECT_NE(make_format(tok).id(), make_format(tok, {.family = FimFamily::deepseek_swapped}).id());
  // Llama-3.1 and this Qwen2 vocabulary have no FIM sentinels.
  try {
    detect_family(gguf_tokenizer("llama-bpe"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no FIM sentinels"), std::string::npos) << e.what();
  }
  const FimLayout layout(tok, make_format(tok));
  EXPECT_THROW(layout.build({.prefix = "a", .suffix = "b", .inc = "c"}, FimOrder::psm), Error);
}

// Qwen2.5-Coder's repo-level format with <|repo_name|> 151663 and <|file_sep|> 151664.
TEST(Layout, QwenRepoLevelExtraContext) {
  const Tokenizer& tok = qwen3_tok();
  const FimLayout layout(tok, make_format(tok), {.repo_name = "demo"});
  const std::vector<ExtraChunk> extra = {{"util.py", "def helper():\n    return 1\n"},
                                         {"<|file_sep|>.py", "X = 2"}};
  const FimPrompt fp = layout.build(
      {.prefix = "import util\n", .suffix = "\n", .filename = "main.py", .extra = extra},
      FimOrder::psm);
  auto enc = [&](const std::string& s) { return tok.encode(s); };
  const std::vector<int32_t> expected = cat({{151663},
                                             enc("demo\n"),
                                             {151664},
                                             enc("util.py\n"),
                                             enc("def helper():\n    return 1\n"),
                                             {151664},
                                             enc("<|file_sep|>.py\n"),
                                             enc("X = 2\n"),
                                             {151664},
                                             enc("main.py\n"),
                                             {151659},
                                             enc("import util\n"),
                                             {151661},
                                             enc("\n"),
                                             {151660}});
  EXPECT_EQ(fp.tokens, expected);
  EXPECT_EQ(fp.extra_chunks, 2u);
  EXPECT_EQ(std::count(fp.tokens.begin(), fp.tokens.end(), 151664), 3);
  EXPECT_EQ(fp.ranges.front().part, PromptPart::extra);

  // The extra part does not depend on prefix or suffix: it stays a cached prefix.
  const FimPrompt other = layout.build(
      {.prefix = "import os\n", .suffix = "pass\n", .filename = "main.py", .extra = extra},
      FimOrder::psm);
  const size_t n_extra = fp.count(PromptPart::extra);
  ASSERT_GE(other.tokens.size(), n_extra);
  EXPECT_TRUE(std::equal(fp.tokens.begin(), fp.tokens.begin() + n_extra, other.tokens.begin()));
  // No chunks: nothing before the prefix sentinel.
  EXPECT_EQ(layout.build({.prefix = "a", .suffix = "b", .filename = "main.py"}, FimOrder::psm)
                .tokens.front(),
            151659);
}

// Without repo sentinels (DeepSeek): plain-text file headers after bos.
TEST(Layout, PlainTextExtraContext) {
  const Tokenizer& tok = deepseek_tok();
  const FimLayout layout(tok, make_format(tok));
  const std::vector<ExtraChunk> extra = {{"a.py", "A = 1\n"}, {"b.py", "B = 2"}};
  const FimPrompt fp = layout.build({.prefix = "x", .suffix = "y", .extra = extra}, FimOrder::efim);
  auto enc = [&](const std::string& s) { return tok.encode(s); };
  EXPECT_EQ(fp.tokens, cat({{32013},
                            enc("--- a.py ---\n"),
                            enc("A = 1\n"),
                            enc("--- b.py ---\n"),
                            enc("B = 2\n"),
                            {32016},
                            enc("x"),
                            {32015},
                            enc("y"),
                            {32017}}));
}

std::string numbered_lines(const std::string& tag, int n) {
  std::string s;
  for (int i = 0; i < n; ++i)
    s += "    " + tag + "_" + std::to_string(i) + " = compute(" + std::to_string(i) + ")\n";
  return s;
}

TEST(Layout, BudgetCapsExtraThenCutsFarEnds) {
  const Tokenizer& tok = efim_tok();
  const FimLayout layout(tok, make_format(tok));
  const std::string prefix = "def f():\n" + numbered_lines("before", 60) + "    x = ";
  const std::string suffix = "\n" + numbered_lines("after", 60) + "    return x\n";
  const std::vector<ExtraChunk> extra = {{"a.py", numbered_lines("a", 10)},
                                         {"b.py", numbered_lines("b", 10)}};
  const FimParts parts{.prefix = prefix, .suffix = suffix, .prompt = "1", .extra = extra};
  const FimPrompt full = layout.build(parts, FimOrder::psm);
  ASSERT_FALSE(full.truncated);
  ASSERT_EQ(full.extra_chunks, 2u);
  const size_t n_a = layout.encode("--- a.py ---\n").size() + layout.encode(extra[0].text).size();

  const size_t n_b = layout.encode("--- b.py ---\n").size() + layout.encode(extra[1].text).size();
  const auto extra_of = [](const FimPrompt& p) {
    std::vector<int32_t> x;
    for (const PartRange& r : p.ranges)
      if (r.part == PromptPart::extra) x.insert(x.end(), p.tokens.begin() + r.begin, p.tokens.begin() + r.end);
    return x;
  };
  // X may take half the budget whatever p and s need: at 2 (n_a + n_b) both chunks stay and
  // p and s are cut to what is left.
  const FimPrompt both = layout.build(parts, FimOrder::psm, 2 * (n_a + n_b));
  EXPECT_TRUE(both.truncated);
  EXPECT_EQ(both.extra_chunks, 2u);
  EXPECT_EQ(both.count(PromptPart::extra), n_a + n_b);
  EXPECT_LT(both.count(PromptPart::prefix), full.count(PromptPart::prefix));
  // One token less and the first chunk goes; the last one (nearest the prefix) stays.
  const FimPrompt minus_a = layout.build(parts, FimOrder::psm, 2 * (n_a + n_b) - 1);
  EXPECT_EQ(minus_a.extra_chunks, 1u);
  EXPECT_EQ(minus_a.count(PromptPart::extra), n_b);
  // X depends on the budget and the chunks only: a request with no prefix or suffix (llama.vim's
  // warm-up) lays out the same X as the long one, so the long one finds it cached.
  const FimParts warmup{.extra = extra};
  for (size_t budget : {2 * (n_a + n_b), 2 * (n_a + n_b) - 1, full.tokens.size()})
    EXPECT_EQ(extra_of(layout.build(warmup, FimOrder::psm, budget)),
              extra_of(layout.build(parts, FimOrder::psm, budget)))
        << budget;

  // A tight budget: p keeps its tail, s its head, cut at line boundaries, near 3:1.
  const size_t budget = 200;
  FimParts local = parts;
  local.extra = {};
  const FimPrompt cut = layout.build(local, FimOrder::psm, budget);
  EXPECT_TRUE(cut.truncated);
  EXPECT_LE(cut.tokens.size(), budget);
  EXPECT_EQ(cut.extra_chunks, 0u);
  const std::string kept_p = tok.decode(cut.first(PromptPart::prefix));
  const std::string kept_s = tok.decode(cut.first(PromptPart::suffix));
  ASSERT_FALSE(kept_p.empty());
  ASSERT_FALSE(kept_s.empty());
  EXPECT_TRUE(prefix.ends_with(kept_p)) << kept_p;
  EXPECT_TRUE(suffix.starts_with(kept_s)) << kept_s;
  EXPECT_EQ(prefix[prefix.size() - kept_p.size() - 1], '\n') << "prefix cut not at a line start";
  EXPECT_EQ(kept_s.back(), '\n') << "suffix cut not at a line end";
  EXPECT_TRUE(kept_p.ends_with("    x = "));
  EXPECT_TRUE(kept_s.starts_with("\n    after_0 = compute(0)\n"));
  const double share =
      static_cast<double>(cut.count(PromptPart::prefix)) /
      static_cast<double>(cut.count(PromptPart::prefix) + cut.count(PromptPart::suffix));
  EXPECT_GT(share, 0.65);
  EXPECT_LT(share, 0.85);
  // The prompt part is never cut.
  EXPECT_EQ(tok.decode(cut.first(PromptPart::prompt)), "1");
}

TEST(Layout, BudgetGivesUnusedShareToTheOtherPart) {
  const Tokenizer& tok = efim_tok();
  const FimLayout layout(tok, make_format(tok));
  const std::string prefix = numbered_lines("p", 80);
  const FimPrompt fp = layout.build({.prefix = prefix, .suffix = "\n"}, FimOrder::psm, 300);
  EXPECT_TRUE(fp.truncated);
  EXPECT_EQ(fp.count(PromptPart::suffix), 1u);
  EXPECT_LE(fp.tokens.size(), 300u);
  EXPECT_GT(fp.tokens.size(), 300u * 9 / 10);  // the prefix used the suffix's share
}

TEST(Layout, BudgetNeverSplitsAUtf8Character) {
  const Tokenizer& tok = efim_tok();
  const FimLayout layout(tok, make_format(tok));
  std::string prefix, suffix;  // no newlines: the cut cannot snap to a line
  for (int i = 0; i < 200; ++i) prefix += "ж€😀";
  for (int i = 0; i < 200; ++i) suffix += "😀€ж";
  for (size_t budget : {20u, 33u, 57u, 101u}) {
    const FimPrompt fp = layout.build({.prefix = prefix, .suffix = suffix}, FimOrder::psm, budget);
    EXPECT_LE(fp.tokens.size(), budget);
    const std::string kp = tok.decode(fp.first(PromptPart::prefix));
    const std::string ks = tok.decode(fp.first(PromptPart::suffix));
    EXPECT_TRUE(prefix.ends_with(kp));
    EXPECT_TRUE(suffix.starts_with(ks));
    EXPECT_TRUE(kp.empty() || (static_cast<uint8_t>(kp[0]) & 0xC0) != 0x80) << budget;
    EXPECT_EQ(tok.decode(tok.encode(ks)), ks);
    // A suffix that ends inside a character would not survive a round trip through validation.
    const size_t n = ks.size();
    EXPECT_TRUE(n == 0 || suffix.substr(0, n + 0) == ks);
    EXPECT_TRUE(n == suffix.size() || (static_cast<uint8_t>(suffix[n]) & 0xC0) != 0x80) << budget;
  }
}

TEST(Layout, BudgetTooSmallForTheFixedPartsIsAClearError) {
  const Tokenizer& tok = efim_tok();
  const FimLayout layout(tok, make_format(tok));
  try {
    layout.build({.prefix = "a", .suffix = "b", .prompt = "hello world, this is long"},
                 FimOrder::psm, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("the prompt budget is 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("prompt"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace efim::test
