// The session-free EFIM decision: the paper's typing workload, suffix changes, extra context,
// the `prompt` field, cache-aware anchor choice, re-anchoring, budgets and the LRU index.
#include "infill/planner.h"

#include <algorithm>
#include <map>
#include <random>

#include "infill_test_util.h"

namespace efim::test {
namespace {

// A small document for the EFIM paper's section 4 workload (ASCII, so character = byte).
const std::string kDoc = R"PY(import json
import os
from dataclasses import dataclass, field


@dataclass
class Record:
    name: str
    size: int = 0
    tags: list = field(default_factory=list)

    def describe(self):
        return f"{self.name} ({self.size} bytes, {len(self.tags)} tags)"


def load_records(path):
    """Reads one JSON record per line and skips blank lines."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            data = json.loads(line)
            records.append(Record(data["name"], data.get("size", 0), data.get("tags", [])))
    return records


def total_size(records):
    return sum(r.size for r in records)


def largest(records, n=3):
    return sorted(records, key=lambda r: r.size, reverse=True)[:n]


def group_by_tag(records):
    groups = {}
    for r in records:
        for t in r.tags:
            groups.setdefault(t, []).append(r)
    return groups


def main():
    path = os.environ.get("RECORDS", "records.jsonl")
    records = load_records(path)
    print("total:", total_size(records))
    for r in largest(records):
        print(r.describe())
    for tag, rs in sorted(group_by_tag(records).items()):
        print(tag, len(rs))


if __name__ == "__main__":
    main()
)PY";

constexpr int kRounds = 5;

// Per the paper: H = len/2, suffix = text[H:], chunk = H/(R+2), prefix = text[:chunk], and in
// round r the typed text is text[chunk : chunk*(r+2)].
struct Workload {
  std::string suffix, prefix0;
  std::vector<std::string> prefixes;  // [round] prefix0 + typed
  size_t chunk = 0;
};
Workload paper_workload(const std::string& text) {
  Workload w;
  const size_t h = text.size() / 2;
  w.suffix = text.substr(h);
  w.chunk = h / (kRounds + 2);
  w.prefix0 = text.substr(0, w.chunk);
  for (int r = 0; r < kRounds; ++r) w.prefixes.push_back(text.substr(0, w.chunk * (r + 2)));
  return w;
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t k = 0;
  while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
  return k;
}

bool starts_with(const std::vector<int32_t>& seq, const std::vector<int32_t>& head) {
  return seq.size() >= head.size() && std::equal(head.begin(), head.end(), seq.begin());
}

class Planner : public ::testing::Test {
 protected:
  const Tokenizer& tok = efim_tok();
  FimLayout layout{tok, make_format(tok)};
  std::vector<int32_t> enc(std::string_view s) const { return tok.encode(s); }
};

TEST_F(Planner, PaperTypingWorkloadEfimExtendsTheSequence) {
  const Workload w = paper_workload(kDoc);
  for (InfillMode mode : {InfillMode::efim, InfillMode::automatic}) {
    SCOPED_TRACE(std::string(mode_name(mode)));
    InfillPlanner planner(layout);
    // The user opens the file with the cursor after prefix0: a miss, PSM, new anchor.
    const InfillPlan open = planner.plan({.prefix = w.prefix0, .suffix = w.suffix, .mode = mode});
    EXPECT_EQ(open.reason, InfillReason::miss);
    EXPECT_EQ(open.prompt.order, FimOrder::psm);
    EXPECT_TRUE(open.new_anchor);
    const std::vector<int32_t> psm0 = cat({{1}, enc(w.prefix0), {3}, enc(w.suffix), {2}});
    ASSERT_EQ(open.prompt.tokens, psm0);

    std::vector<int32_t> previous = psm0, expected = psm0;
    for (int r = 0; r < kRounds; ++r) {
      const InfillPlan plan =
          planner.plan({.prefix = w.prefixes[r], .suffix = w.suffix, .mode = mode});
      EXPECT_EQ(plan.reason, InfillReason::hit) << "round " << r;
      EXPECT_EQ(plan.prompt.order, FimOrder::efim);
      EXPECT_FALSE(plan.new_anchor);
      EXPECT_EQ(plan.anchor_tokens, previous.size()) << "round " << r;
      // Token-identical prefix: round r starts with round r-1's whole sequence.
      EXPECT_TRUE(starts_with(plan.prompt.tokens, previous)) << "round " << r;
      // Exactly: the anchor, then each round's newly typed text tokenized on its own.
      const size_t from = r == 0 ? w.chunk : w.chunk * (r + 1);
      expected = cat({expected, enc(kDoc.substr(from, w.chunk))});
      EXPECT_EQ(plan.prompt.tokens, expected) << "round " << r;
      EXPECT_EQ(tok.decode(plan.prompt.first(PromptPart::inc)), w.prefixes[r].substr(w.chunk));
      previous = plan.prompt.tokens;
    }
  }
}

TEST_F(Planner, PaperTypingWorkloadPsmReusesOnlyThePrefix) {
  const Workload w = paper_workload(kDoc);
  InfillPlanner planner(layout);
  size_t reused_psm = 0, total = 0;
  std::vector<int32_t> previous =
      planner.plan({.prefix = w.prefix0, .suffix = w.suffix, .mode = InfillMode::psm})
          .prompt.tokens;
  std::string previous_prefix = w.prefix0;
  for (int r = 0; r < kRounds; ++r) {
    const InfillPlan plan =
        planner.plan({.prefix = w.prefixes[r], .suffix = w.suffix, .mode = InfillMode::psm});
    EXPECT_EQ(plan.reason, InfillReason::forced);
    EXPECT_EQ(plan.prompt.tokens, cat({{1}, enc(w.prefixes[r]), {3}, enc(w.suffix), {2}}));
    const size_t lcp = common_prefix(plan.prompt.tokens, previous);
    // Reuse stops inside <fim_prefix> + the previous prefix: the suffix is recomputed.
    EXPECT_LE(lcp, 1 + enc(previous_prefix).size()) << "round " << r;
    EXPECT_GE(lcp, enc(previous_prefix).size() / 2) << "round " << r;
    reused_psm += lcp;
    total += plan.prompt.tokens.size();
    previous = plan.prompt.tokens;
    previous_prefix = w.prefixes[r];
  }
  EXPECT_EQ(planner.anchors().size(), 0u);  // psm mode neither reads nor writes anchors

  // The same rounds in auto mode reuse far more.
  InfillPlanner efim_planner(layout);
  previous = efim_planner.plan({.prefix = w.prefix0, .suffix = w.suffix}).prompt.tokens;
  size_t reused_efim = 0, total_efim = 0;
  for (int r = 0; r < kRounds; ++r) {
    const InfillPlan plan = efim_planner.plan({.prefix = w.prefixes[r], .suffix = w.suffix});
    reused_efim += common_prefix(plan.prompt.tokens, previous);
    total_efim += plan.prompt.tokens.size();
    previous = plan.prompt.tokens;
  }
  const double rate_psm = static_cast<double>(reused_psm) / static_cast<double>(total);
  const double rate_efim = static_cast<double>(reused_efim) / static_cast<double>(total_efim);
  EXPECT_GT(rate_efim, 0.85) << "psm " << rate_psm;
  EXPECT_LT(rate_psm, 0.6);
}

TEST_F(Planner, SuffixChangeFallsBackToPsmWithANewAnchor) {
  InfillPlanner planner(layout);
  const std::string p = "def f(x):\n    y = ", s1 = "\n    return y\n", s2 = "\n    return y + 1\n";
  ASSERT_EQ(planner.plan({.prefix = p, .suffix = s1}).reason, InfillReason::miss);
  EXPECT_EQ(planner.plan({.prefix = p + "x", .suffix = s1}).reason, InfillReason::hit);
  // The user edits after the cursor: a miss, PSM, anchored on the new suffix.
  const InfillPlan changed = planner.plan({.prefix = p + "x", .suffix = s2});
  EXPECT_EQ(changed.reason, InfillReason::miss);
  EXPECT_EQ(changed.prompt.order, FimOrder::psm);
  EXPECT_TRUE(changed.new_anchor);
  EXPECT_EQ(changed.prompt.tokens, cat({{1}, enc(p + "x"), {3}, enc(s2), {2}}));
  const InfillPlan next = planner.plan({.prefix = p + "x * 2", .suffix = s2});
  EXPECT_EQ(next.reason, InfillReason::hit);
  EXPECT_EQ(next.prompt.tokens, cat({changed.prompt.tokens, enc(" * 2")}));
  // The old suffix's anchors still serve a user who goes back.
  EXPECT_EQ(planner.plan({.prefix = p + "x + 1", .suffix = s1}).reason, InfillReason::hit);
  // A prefix edited before the anchor's end (not an extension): a miss.
  EXPECT_EQ(planner.plan({.prefix = "def g(x):\n    y = ", .suffix = s1}).reason,
            InfillReason::miss);
}

TEST_F(Planner, ExtraContextAndFilenameAreTheAnchorsContext) {
  InfillPlanner planner(layout);
  const std::vector<ExtraChunk> a = {{"a.py", "A = 1\n"}}, b = {{"a.py", "A = 2\n"}};
  ASSERT_EQ(planner.plan({.prefix = "x = ", .suffix = "\n", .extra = a}).reason,
            InfillReason::miss);
  const InfillPlan hit = planner.plan({.prefix = "x = A", .suffix = "\n", .extra = a});
  EXPECT_EQ(hit.reason, InfillReason::hit);
  EXPECT_EQ(hit.prompt.tokens, cat({enc("--- a.py ---\n"),
                                    enc("A = 1\n"),
                                    {1},
                                    enc("x = "),
                                    {3},
                                    enc("\n"),
                                    {2},
                                    enc("A")}));
  EXPECT_EQ(hit.prompt.extra_chunks, 1u);
  EXPECT_EQ(planner.plan({.prefix = "x = A", .suffix = "\n", .extra = b}).reason,
            InfillReason::miss);
  EXPECT_EQ(
      planner.plan({.prefix = "x = A", .suffix = "\n", .filename = "other.py", .extra = a}).reason,
      InfillReason::miss);
}

// The place (the engine's draft memory key): the same while the user types at one place (a
// growing prefix and prompt, PSM or EFIM, any mode), another for another suffix, extra context
// or file.
TEST_F(Planner, PlaceIsTheContextAndSuffixInEveryMode) {
  const std::vector<ExtraChunk> a = {{"a.py", "A = 1\n"}};
  for (InfillMode mode : {InfillMode::automatic, InfillMode::efim, InfillMode::psm,
                          InfillMode::spm}) {
    InfillPlanner planner(layout);
    const InfillPlan first = planner.plan({.prefix = "x = ", .suffix = "\n", .extra = a,
                                           .mode = mode});
    const InfillPlan typed = planner.plan({.prefix = "x = A", .suffix = "\n", .prompt = " +",
                                           .extra = a, .mode = mode});
    EXPECT_NE(first.place, 0u);
    EXPECT_EQ(typed.place, first.place) << mode_name(mode);
    EXPECT_NE(planner.plan({.prefix = "x = A", .suffix = "\n\n", .extra = a, .mode = mode}).place,
              first.place);
    EXPECT_NE(planner.plan({.prefix = "x = A", .suffix = "\n", .mode = mode}).place, first.place);
    EXPECT_NE(planner.plan({.prefix = "x = A", .suffix = "\n", .filename = "b.py", .extra = a,
                            .mode = mode}).place,
              first.place);
  }
}

TEST_F(Planner, PromptFieldGoesAfterTheMiddleAndIsNotAnchored) {
  InfillPlanner planner(layout);
  const std::string p = "def f(x):\n", s = "\n    return y\n";
  const InfillPlan first = planner.plan({.prefix = p, .suffix = s, .prompt = "    y ="});
  EXPECT_EQ(first.prompt.tokens, cat({{1}, enc(p), {3}, enc(s), {2}, enc("    y =")}));
  EXPECT_EQ(first.prompt.count(PromptPart::prompt), enc("    y =").size());
  // The client keeps the current line in `prompt`: the whole layout is the anchor.
  const InfillPlan second = planner.plan({.prefix = p, .suffix = s, .prompt = "    y = x"});
  EXPECT_EQ(second.reason, InfillReason::hit);
  EXPECT_EQ(second.prompt.tokens, cat({{1}, enc(p), {3}, enc(s), {2}, enc("    y = x")}));
  // A finished line moves into the prefix: inc, then the new prompt.
  const InfillPlan third =
      planner.plan({.prefix = p + "    y = x\n", .suffix = s, .prompt = "    z"});
  EXPECT_EQ(third.reason, InfillReason::hit);
  EXPECT_EQ(third.prompt.tokens,
            cat({{1}, enc(p), {3}, enc(s), {2}, enc("    y = x\n"), enc("    z")}));
  const InfillPlan fourth = planner.plan({.prefix = p + "    y = x\n    z = 1\n", .suffix = s});
  EXPECT_EQ(fourth.prompt.tokens,
            cat({{1}, enc(p), {3}, enc(s), {2}, enc("    y = x\n"), enc("    z = 1\n")}));
}

TEST_F(Planner, PrefersCachedAnchors) {
  InfillPlanner planner(layout);
  const std::string s = "\n    return y\n";
  const InfillPlan root_a = planner.plan({.prefix = "y = ", .suffix = s});
  const InfillPlan ext_a = planner.plan({.prefix = "y = 1 +", .suffix = s});
  ASSERT_EQ(ext_a.reason, InfillReason::hit);
  // The extension (longer) is evicted from the KV cache; the root is still there.
  auto cached = [&](std::span<const int32_t> ids) -> size_t {
    const std::vector<int32_t> v(ids.begin(), ids.end());
    return v == root_a.prompt.tokens ? v.size() : 0;
  };
  const InfillPlan plan = planner.plan({.prefix = "y = 1 + 2", .suffix = s, .cached = probe_each(cached)});
  EXPECT_EQ(plan.reason, InfillReason::hit);
  EXPECT_EQ(plan.anchor_tokens, root_a.prompt.tokens.size());
  EXPECT_EQ(plan.cached_tokens, root_a.prompt.tokens.size());
  EXPECT_EQ(plan.prompt.tokens, cat({root_a.prompt.tokens, enc("1 + 2")}));
  // Without the callback the longest anchor wins: here the one the last request recorded.
  const InfillPlan longest = planner.plan({.prefix = "y = 1 + 2 + 3", .suffix = s});
  EXPECT_EQ(longest.anchor_tokens, plan.prompt.tokens.size());
  EXPECT_GT(plan.prompt.tokens.size(), ext_a.prompt.tokens.size());
}

TEST_F(Planner, AutoReanchorsWhenNothingIsCachedEfimDoesNot) {
  InfillPlanner planner(layout);
  const std::string s = "\n    return y\n";
  planner.plan({.prefix = "y = ", .suffix = s});
  auto nothing = [](std::span<const int32_t>) -> size_t { return 0; };
  const InfillPlan efim =
      planner.plan({.prefix = "y = 1", .suffix = s, .mode = InfillMode::efim, .cached = probe_each(nothing)});
  EXPECT_EQ(efim.reason, InfillReason::hit);
  const InfillPlan aut = planner.plan({.prefix = "y = 1 + 2", .suffix = s, .cached = probe_each(nothing)});
  EXPECT_EQ(aut.reason, InfillReason::not_cached);
  EXPECT_EQ(aut.prompt.order, FimOrder::psm);
  EXPECT_TRUE(aut.new_anchor);
  EXPECT_EQ(aut.prompt.tokens, cat({{1}, enc("y = 1 + 2"), {3}, enc(s), {2}}));
  // A cache that keeps whole blocks only: part of the suffix is cached, EFIM still pays.
  const size_t suffix_at = 1 + enc("y = 1 + 2").size();
  ASSERT_EQ(aut.prompt.tokens[suffix_at], 3);
  auto blocks = [&](std::span<const int32_t> ids) -> size_t {
    return std::min(ids.size(), suffix_at + 1);
  };
  EXPECT_EQ(planner.plan({.prefix = "y = 1 + 2 + 3", .suffix = s, .cached = probe_each(blocks)}).reason,
            InfillReason::hit);
  auto up_to_suffix = [&](std::span<const int32_t> ids) -> size_t {
    return std::min(ids.size(), suffix_at);
  };
  EXPECT_EQ(
      planner.plan({.prefix = "y = 1 + 2 + 3 + 4", .suffix = s, .cached = probe_each(up_to_suffix)}).reason,
      InfillReason::not_cached);
}

TEST_F(Planner, AutoReanchorsWhenIncGrowsPastTheLimit) {
  InfillPlanner planner(layout, {.reanchor_inc_tokens = 8});
  InfillPlanner efim_planner(layout, {.reanchor_inc_tokens = 8});
  const std::string s = "\n    return total\n";
  std::string p = "def f(xs):\n    total = 0\n";
  planner.plan({.prefix = p, .suffix = s});
  efim_planner.plan({.prefix = p, .suffix = s, .mode = InfillMode::efim});
  std::vector<InfillReason> reasons, efim_reasons;
  for (const char* line :
       {"    for x in xs:\n", "        total += x\n", "    total *= 2\n", "    total -= 1\n"}) {
    p += line;
    reasons.push_back(planner.plan({.prefix = p, .suffix = s}).reason);
    efim_reasons.push_back(
        efim_planner.plan({.prefix = p, .suffix = s, .mode = InfillMode::efim}).reason);
  }
  for (InfillReason r : efim_reasons) EXPECT_EQ(r, InfillReason::hit);
  EXPECT_EQ(reasons[0], InfillReason::hit);
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), InfillReason::inc_limit), reasons.end());
  // After re-anchoring, the next request extends the new root.
  p += "    return\n";
  const InfillPlan after = planner.plan({.prefix = p, .suffix = s});
  EXPECT_EQ(after.reason, InfillReason::hit);
  EXPECT_EQ(after.prompt.tokens.back(), enc("    return\n").back());
}

TEST_F(Planner, OverBudgetFallsBackToTrimmedPsm) {
  InfillPlanner planner(layout);
  const Workload w = paper_workload(kDoc);
  const InfillPlan open = planner.plan({.prefix = w.prefix0, .suffix = w.suffix});
  const size_t budget = open.prompt.tokens.size() + 10;
  const InfillPlan plan =
      planner.plan({.prefix = w.prefixes[4], .suffix = w.suffix, .max_prompt_tokens = budget});
  EXPECT_EQ(plan.reason, InfillReason::over_budget);
  EXPECT_EQ(plan.prompt.order, FimOrder::psm);
  EXPECT_TRUE(plan.prompt.truncated);
  EXPECT_LE(plan.prompt.tokens.size(), budget);
  EXPECT_TRUE(plan.new_anchor);
  // The trimmed root serves the next round: the prefix text matches, the tokens are the root's.
  const InfillPlan next = planner.plan(
      {.prefix = w.prefixes[4] + "x", .suffix = w.suffix, .max_prompt_tokens = budget});
  EXPECT_EQ(next.reason, InfillReason::hit);
  EXPECT_TRUE(next.prompt.truncated);
  EXPECT_TRUE(starts_with(next.prompt.tokens, plan.prompt.tokens));
}

TEST_F(Planner, SpmModeAndModeNames) {
  InfillPlanner planner(layout);
  const InfillPlan spm =
      planner.plan({.prefix = "a = ", .suffix = "\nb = 2\n", .mode = InfillMode::spm});
  EXPECT_EQ(spm.reason, InfillReason::forced);
  EXPECT_EQ(spm.prompt.tokens, cat({{1, 3}, enc("\nb = 2\n"), {2}, enc("a = ")}));  // StarCoder SPM
  EXPECT_EQ(planner.anchors().size(), 0u);
  EXPECT_EQ(parse_mode("auto"), InfillMode::automatic);
  EXPECT_EQ(mode_name(InfillMode::automatic), "auto");
  EXPECT_THROW(parse_mode("fim"), Error);
}

TEST_F(Planner, WithoutExtensionsIncIsTokenizedWhole) {
  InfillPlanner planner(layout, {.extend_anchors = false});
  const std::string s = "\n";
  const InfillPlan root = planner.plan({.prefix = "x = ", .suffix = s});
  planner.plan({.prefix = "x = comp", .suffix = s});
  const InfillPlan plan = planner.plan({.prefix = "x = completion", .suffix = s});
  EXPECT_EQ(plan.anchor_tokens, root.prompt.tokens.size());
  EXPECT_EQ(plan.prompt.tokens, cat({root.prompt.tokens, enc("completion")}));
  EXPECT_EQ(planner.anchors().size(), 1u);
}

TEST_F(Planner, NeverSplitsAUtf8CharacterBetweenAnchorAndInc) {
  InfillPlanner planner(layout);
  ASSERT_EQ(planner.plan({.prefix = "x = \xC3", .suffix = "\n"}).reason, InfillReason::miss);
  // "\xC3" + "\xA9" is one character: the anchor ending in its first byte must not be used.
  EXPECT_EQ(planner.plan({.prefix = "x = \xC3\xA9", .suffix = "\n"}).reason, InfillReason::miss);
  EXPECT_EQ(planner.plan({.prefix = "x = \xC3\xA9!", .suffix = "\n"}).reason, InfillReason::hit);
}

// A random editing session: whatever the decision, the prompt's parts decode to the request's
// texts, sentinels sit in PSM/EFIM order, and a hit extends an anchor it reports.
TEST_F(Planner, RandomSessionKeepsThePartsExact) {
  std::mt19937 rng(11);
  const std::vector<std::string> snippets = {
      "x",       " = ", "foo(",  ")",        "\n    ",
      "return ", "42",  "\"s\"", "# note\n", "for i in range(3):\n"};
  for (InfillMode mode : {InfillMode::automatic, InfillMode::efim}) {
    InfillPlanner planner(layout, {.reanchor_inc_tokens = 40, .index = {.max_anchors = 16}});
    const size_t cut = kDoc.size() / 3;
    std::string prefix = kDoc.substr(0, cut), suffix = kDoc.substr(cut);
    std::map<InfillReason, int> seen;
    for (int step = 0; step < 300; ++step) {
      const unsigned op = rng() % 20;
      if (op < 14) {
        prefix += snippets[rng() % snippets.size()];
      } else if (op < 16 && !prefix.empty()) {
        prefix.resize(prefix.size() - std::min<size_t>(prefix.size(), 1 + rng() % 4));
      } else if (op == 16 && suffix.size() > 1) {
        suffix.erase(0, 1 + rng() % std::min<size_t>(3, suffix.size() - 1));
      } else if (op == 17) {  // the cursor moves
        const std::string all = prefix + suffix;
        const size_t at = rng() % (all.size() + 1);
        prefix = all.substr(0, at);
        suffix = all.substr(at);
      }
      const InfillPlan plan = planner.plan({.prefix = prefix, .suffix = suffix, .mode = mode});
      ++seen[plan.reason];
      const FimPrompt& fp = plan.prompt;
      ASSERT_EQ(tok.decode(fp.first(PromptPart::prefix)) + tok.decode(fp.first(PromptPart::inc)),
                prefix)
          << "step " << step;
      ASSERT_EQ(tok.decode(fp.first(PromptPart::suffix)), suffix) << "step " << step;
      std::vector<int32_t> sentinels;
      for (const PartRange& r : fp.ranges) {
        if (r.part == PromptPart::sentinel) sentinels.push_back(fp.tokens[r.begin]);
      }
      ASSERT_EQ(sentinels, (std::vector<int32_t>{1, 3, 2})) << "step " << step;
      ASSERT_EQ(fp.tokens[fp.middle_end - 1], 2);
      if (plan.reason == InfillReason::hit) {
        ASSERT_GT(plan.anchor_tokens, 0u);
        ASSERT_EQ(fp.order, FimOrder::efim);
      } else {
        ASSERT_EQ(fp.order, FimOrder::psm);
        ASSERT_EQ(fp.tokens, cat({{1}, enc(prefix), {3}, enc(suffix), {2}}));
      }
    }
    EXPECT_GT(seen[InfillReason::hit], 150) << mode_name(mode);
    EXPECT_GT(seen[InfillReason::miss], 10) << mode_name(mode);
    if (mode == InfillMode::automatic) {
      EXPECT_GT(seen[InfillReason::inc_limit], 0);
    } else {
      EXPECT_EQ(seen[InfillReason::inc_limit], 0);
    }
    EXPECT_LE(planner.anchors().size(), 16u);
  }
}

TEST(AnchorIndexTest, LruEvictionAndBounds) {
  const Tokenizer& tok = efim_tok();
  const FimLayout layout(tok, make_format(tok));
  AnchorIndex index({.max_anchors = 2, .max_tokens = 1000});
  auto root = [&](const std::string& p) {
    return index.insert_root("k", "s", p,
                             layout.build({.prefix = p, .suffix = "s"}, FimOrder::psm));
  };
  const Anchor* a = root("a");
  ASSERT_NE(a, nullptr);
  root("b");
  index.touch(*a);  // b is now the least recently used
  root("c");
  EXPECT_EQ(index.size(), 2u);
  EXPECT_EQ(index.matches("k", "s", "a!").size(), 1u);
  EXPECT_EQ(index.matches("k", "s", "b!").size(), 0u);
  EXPECT_EQ(index.matches("k", "s", "c!").size(), 1u);
  EXPECT_EQ(index.matches("k", "t", "c!").size(), 0u);
  EXPECT_EQ(index.matches("j", "s", "c!").size(), 0u);
  // An anchor larger than max_tokens is not recorded; the token bound evicts.
  std::string big;
  for (int i = 0; i < 1000; ++i) big += " " + std::to_string(i * 7919);
  EXPECT_EQ(root(big), nullptr);
  AnchorIndex small({.max_anchors = 10, .max_tokens = 12});
  const FimPrompt fp = layout.build({.prefix = "abc def", .suffix = "s"}, FimOrder::psm);
  ASSERT_LE(fp.middle_end, 12u);
  small.insert_root("k", "s", "abc def", fp);
  small.insert_root("k", "s", "abc def!", fp);
  EXPECT_LE(small.total_tokens(), 12u);
  EXPECT_EQ(small.size(), 12u / fp.middle_end);
  // Context keys are length-prefixed: different chunk splits never collide.
  const FimFormat f = make_format(tok);
  const std::vector<ExtraChunk> x = {{"ab", "c"}}, y = {{"a", "bc"}};
  EXPECT_NE(AnchorIndex::context_key(f, "", x), AnchorIndex::context_key(f, "", y));
}

}  // namespace
}  // namespace efim::test
