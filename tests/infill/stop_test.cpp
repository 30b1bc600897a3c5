// Infill stop tokens and the suffix-repeat rule, one-shot and streaming.
#include "infill/stop.h"

#include <random>

#include "infill_test_util.h"

namespace efim::test {
namespace {

TEST(StopTokens, PerVocabulary) {
  const Tokenizer& sc = starcoder_tok();
  // <|endoftext|> 0, <fim_prefix> 1, <fim_middle> 2, <fim_suffix> 3, <fim_pad> 4,
  // <repo_name> 5, <file_sep> 6.
  EXPECT_EQ(infill_stop_tokens(sc, make_format(sc)), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  const Tokenizer& ds = deepseek_tok();
  // eos 32014, hole 32015, begin 32016, end 32017; the fragment-trained model's 32027.
  const std::vector<int32_t> extra = {32027};
  EXPECT_EQ(infill_stop_tokens(ds, make_format(ds, {.family = FimFamily::deepseek_swapped}), extra),
            (std::vector<int32_t>{32014, 32015, 32016, 32017, 32027}));
  const Tokenizer& qw = qwen3_tok();
  // <|endoftext|> 151643, fim prefix/middle/suffix/pad 151659-151662, repo 151663, file 151664.
  const auto q = infill_stop_tokens(qw, make_format(qw));
  for (int32_t id : {151643, 151659, 151660, 151661, 151662, 151663, 151664}) {
    EXPECT_NE(std::find(q.begin(), q.end(), id), q.end()) << id;
  }
}

struct RepeatCase {
  std::string label, completion, suffix;
  bool line_start;
  std::string expected;
};

std::vector<RepeatCase> repeat_cases() {
  return {
      {"runs_into_next_line", "x * 2\n    return result\n    # more", "\n    return result\n",
       false, "x * 2"},
      {"rest_of_line_in_gap", "foo(a)\n    return x\n", ")\n    return x\n", false, "foo(a"},
      {"gap_partly_written", "foo(a\n    return x\n", ")\n    return x\n", false, "foo(a"},
      {"no_repeat", "x * 2\n    y = x\n", "\n    return result\n", false, "x * 2\n    y = x\n"},
      {"short_line_is_not_a_needle", "a;\n}\n", "\n}\n", false, "a;\n}\n"},
      {"short_lines_combine", "  return 0;\n}\n\nint main() {\n  foo();", "\n}\n\nint main() {\n",
       false, "  return 0;"},
      {"cursor_at_line_start", "    y = 1\n    return y\n", "    return y\n", true, "    y = 1\n"},
      {"repeat_from_the_start", "    return y\n", "    return y\n", true, ""},
      {"mid_line_start_is_not_a_line_start", "    return y\n", "\n    return y\n", false,
       "    return y\n"},
      {"trailing_space_and_crlf", "x\r\n    return result  \r\n", "\r\n    return result\r\n",
       false, "x"},
      {"unterminated_at_the_end", "x\n    return result", "\n    return result\n", false, "x"},
      {"partial_line_at_the_end_stays", "x\n    return res", "\n    return result\n", false,
       "x\n    return res"},
      {"longer_line_is_not_a_repeat", "x\n    return result + 1\n", "\n    return result\n", false,
       "x\n    return result + 1\n"},
      {"blank_lines_before_needle", "x\n\n\ndef g():\n", "\n\n\ndef g():\n    pass\n", false, "x"},
      {"suffix_without_full_line", "abc\ndef", "tail", false, "abc\ndef"},
      {"empty_completion", "", "\n    return result\n", false, ""},
      {"utf8", "é = 1\n    retour = «été»\n", "\n    retour = «été»\n", false, "é = 1"},
  };
}

class Repeat : public ::testing::TestWithParam<RepeatCase> {};

void PrintTo(const RepeatCase& c, std::ostream* os) {
  *os << c.label;
}

TEST_P(Repeat, OneShot) {
  const RepeatCase& c = GetParam();
  EXPECT_EQ(trim_suffix_repeat(c.completion, c.suffix, {.cursor_at_line_start = c.line_start}),
            c.expected);
}

// Streaming in pieces of every split gives the one-shot result, never emits text it later
// cuts, and reports stop as soon as the repeat is complete.
TEST_P(Repeat, StreamingMatchesOneShot) {
  const RepeatCase& c = GetParam();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    SuffixRepeatGuard guard(c.suffix, {.cursor_at_line_start = c.line_start});
    std::string out;
    bool stopped = false;
    for (size_t at = 0; at < c.completion.size() && !stopped;) {
      size_t n = trial == 0 ? 1 : 1 + rng() % 6;
      // Whole UTF-8 characters only, as IncrementalDecoder delivers them.
      while (at + n < c.completion.size() &&
             (static_cast<uint8_t>(c.completion[at + n]) & 0xC0) == 0x80)
        ++n;
      const auto step = guard.push(std::string_view(c.completion).substr(at, n));
      out += step.text;
      EXPECT_TRUE(c.expected.starts_with(out)) << "trial " << trial << " emitted \"" << out << "\"";
      stopped = step.stop;
      at += n;
    }
    if (!stopped) out += guard.finish();
    EXPECT_EQ(out, c.expected) << "trial " << trial;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Repeat, ::testing::ValuesIn(repeat_cases()),
                         [](const auto& info) { return info.param.label; });

TEST(RepeatGuard, StopsAsSoonAsTheRepeatIsComplete) {
  SuffixRepeatGuard guard("\n    return result\n    print(result)\n");
  ASSERT_TRUE(guard.active());
  EXPECT_EQ(guard.push("x = 1").text, "x = 1");  // nothing held: no line start, no gap overlap
  auto s = guard.push("\n    return res");
  EXPECT_FALSE(s.stop);
  EXPECT_EQ(s.text, "");  // "\n" might be the gap, "    return res" the needle
  s = guard.push("ult\n");
  EXPECT_TRUE(s.stop);
  EXPECT_EQ(s.text, "");
  EXPECT_TRUE(guard.push("more").stop);
  EXPECT_EQ(guard.finish(), "");
  EXPECT_EQ(guard.completion(), "x = 1\n    return result\n");  // nothing after the stop
}

TEST(RepeatGuard, ReleasesHeldTextWhenTheLineDiverges) {
  SuffixRepeatGuard guard("\n    return result\n");
  EXPECT_EQ(guard.push("a\n    ret").text, "a");
  const auto s = guard.push("ry()\n");
  EXPECT_FALSE(s.stop);
  EXPECT_EQ(s.text, "\n    retry()");  // the final "\n" may still be the gap
  EXPECT_EQ(guard.finish(), "\n");
}

TEST(RepeatGuard, InactiveWithoutANeedle) {
  SuffixRepeatGuard guard("\n}\n");
  EXPECT_FALSE(guard.active());
  EXPECT_EQ(guard.push("}\n").text, "}\n");
  EXPECT_EQ(cursor_at_line_start(""), true);
  EXPECT_EQ(cursor_at_line_start("a\n"), true);
  EXPECT_EQ(cursor_at_line_start("a"), false);
}

}  // namespace
}  // namespace efim::test

namespace efim::test {

// /infill n_indent (llama.cpp semantics): the first line is free; a later line with text and
// less indentation stops generation right before its first non-blank character.
TEST(IndentLimit, CutsTheFirstLessIndentedLine) {
  IndentLimit lim(4);
  EXPECT_EQ(lim.push("x = 1\n    y = 2\n").text, "x = 1\n    y = 2\n");
  IndentLimit::Step s = lim.push("\n  z = 3\n");  // a blank line passes; "  z" is too shallow
  EXPECT_TRUE(s.stop);
  EXPECT_EQ(s.text, "\n  ");
  EXPECT_EQ(lim.push("more").text, "");  // nothing after the stop
}

TEST(IndentLimit, FirstLineAndTabsAndPiecewiseInput) {
  IndentLimit lim(2);
  // The first line is never checked, even unindented; a tab counts as one.
  for (const char* piece : {"ret", "urn a\n", "\t", "\tb\n", " ", "c"}) {
    IndentLimit::Step s = lim.push(piece);
    if (std::string_view(piece) == "c") {
      EXPECT_TRUE(s.stop);
      EXPECT_EQ(s.text, "");
    } else {
      EXPECT_FALSE(s.stop) << piece;
      EXPECT_EQ(s.text, piece);
    }
  }
  IndentLimit off(0);
  EXPECT_FALSE(off.push("a\nb\nc").stop);
}

}  // namespace efim::test
