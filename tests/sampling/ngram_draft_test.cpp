// NgramIndex, DraftLength and DraftMemory (sampling/ngram_draft.h): exact proposals on small
// documents, a brute-force reference on random ones, document boundaries, the draft-length
// policy, and the bounded memory of previous completions.
#include "sampling/ngram_draft.h"

#include <gtest/gtest.h>

#include <random>

#include "base/error.h"

namespace efim {
namespace {

using Toks = std::vector<int32_t>;

TEST(NgramIndex, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  NgramIndex idx({.min_n = 2, .max_n = 3});
  const int32_t doc = idx.add_document(Toks{1, 2, 3, 4, 5, 1, 2, 3, 9, 8, 1, 2, 3});
  // "1 2 3" ends the document; its latest earlier occurrence is followed by 9 8 1 2 3.
  EXPECT_EQ(idx.propose(doc, 3), (Toks{9, 8, 1}));
  EXPECT_EQ(idx.propose(doc, 10), (Toks{9, 8, 1, 2, 3}));  // stops at the document's end
  EXPECT_EQ(idx.propose(doc, 0), Toks{});
  idx.append(doc, Toks{9});  // "2 3 9" -> 8 1 2 3 9 (its only earlier occurrence)
  EXPECT_EQ(idx.propose(doc, 2), (Toks{8, 1}));
  idx.append(doc, Toks{7});  // "9 7", "3 9 7": never seen before
  EXPECT_EQ(idx.propose(doc, 4), Toks{});
  EXPECT_EQ(idx.n_tokens(), 15);
}

TEST(NgramIndex, LongerMatchesWinAndOneTokenSuffixesDoNotCount) {
  NgramIndex idx({.min_n = 2, .max_n = 4});
  // "5 6 7 8" once early (followed by 40), "7 8" again later (followed by 50).
  const int32_t doc = idx.add_document(Toks{5, 6, 7, 8, 40, 1, 7, 8, 50, 2, 5, 6, 7, 8});
  EXPECT_EQ(idx.propose(doc, 1), Toks{40});  // the 4-gram, though "7 8" is more recent
  NgramIndex two({.min_n = 2, .max_n = 2});
  const int32_t d2 = two.add_document(Toks{5, 6, 7, 8, 40, 1, 7, 8, 50, 2, 5, 6, 7, 8});
  EXPECT_EQ(two.propose(d2, 1), Toks{50});  // only 2-grams: the latest "7 8"
  const int32_t d3 = two.add_document(Toks{3, 40});  // "40" was seen, but only as 1 token
  EXPECT_EQ(two.propose(d3, 2), Toks{});
}

TEST(NgramIndex, OtherDocumentsAreReadButNeverSpanned) {
  NgramIndex idx({.min_n = 2, .max_n = 3});
  const int32_t prompt = idx.add_document(Toks{10, 11, 12, 13, 14});
  const int32_t previous = idx.add_document(Toks{20, 21, 22});
  const int32_t seq = idx.add_document(Toks{99, 11, 12});
  EXPECT_EQ(idx.propose(seq, 5), (Toks{13, 14}));  // from the prompt, up to its end
  idx.append(seq, Toks{20, 21});
  EXPECT_EQ(idx.propose(seq, 5), Toks{22});  // from the previous completion
  // "14 20" would span the prompt and the next document: it is no n-gram.
  const int32_t probe = idx.add_document(Toks{14, 20});
  EXPECT_EQ(idx.propose(probe, 3), Toks{});
  EXPECT_NE(prompt, previous);
}

// The brute-force reference: for n from max_n down to min_n, the latest start s < len - n
// whose n tokens equal the last n; the tokens from s + n on.
Toks brute(const Toks& d, int32_t min_n, int32_t max_n, int32_t k) {
  const auto len = static_cast<int32_t>(d.size());
  for (int32_t n = std::min(max_n, len); n >= min_n; --n)
    for (int32_t s = len - n - 1; s >= 0; --s)
      if (std::equal(d.begin() + s, d.begin() + s + n, d.end() - n))
        return Toks(d.begin() + s + n, d.begin() + std::min(len, s + n + k));
  return {};
}

TEST(NgramIndex, RandomDocumentsMatchBruteForce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t alphabet = 2 + trial % 6, min_n = 1 + trial % 2, max_n = min_n + trial % 4;
    NgramIndex idx({.min_n = min_n, .max_n = max_n});
    Toks d = {int32_t(rng() % alphabet)};
    const int32_t doc = idx.add_document(d);
    for (int step = 0; step < 60; ++step) {
      const int32_t k = 1 + step % 7;
      ASSERT_EQ(idx.propose(doc, k), brute(d, min_n, max_n, k))
          << "trial " << trial << " step " << step;
      const int32_t t = int32_t(rng() % alphabet);
      d.push_back(t);
      idx.append(doc, Toks{t});
    }
  }
}

TEST(NgramIndex, BadArgumentsAreErrors) {
  EXPECT_THROW(NgramIndex({.min_n = 0, .max_n = 2}), Error);
  EXPECT_THROW(NgramIndex({.min_n = 3, .max_n = 2}), Error);
  NgramIndex idx;
  EXPECT_THROW(idx.propose(0, 1), Error);
  EXPECT_THROW(idx.append(3, Toks{1}), Error);
}

TEST(DraftLength, DoublesOnFullAcceptanceAndFallsAfterAMiss) {
  DraftLength k(1, 8, 2);
  EXPECT_EQ(k.next(), 2);
  k.update(2, 2);
  EXPECT_EQ(k.next(), 4);
  k.update(4, 4);
  EXPECT_EQ(k.next(), 8);
  k.update(8, 8);
  EXPECT_EQ(k.next(), 8);  // capped
  k.update(8, 3);
  EXPECT_EQ(k.next(), 4);  // one more than accepted
  k.update(4, 0);
  EXPECT_EQ(k.next(), 1);
  k.update(0, 0);  // nothing drafted: unchanged
  EXPECT_EQ(k.next(), 1);
  EXPECT_THROW(k.update(2, 3), Error);
  EXPECT_THROW(DraftLength(0, 4, 2), Error);
  EXPECT_EQ(DraftLength(2, 6, 10).next(), 6);
}

TEST(DraftMemory, KeepsTheTypedTailAndTheCompletionPerPlace) {
  DraftMemory m({.max_places = 8, .docs_per_place = 2, .keep_typed = 3, .max_doc_tokens = 6});
  EXPECT_TRUE(m.recall(7).empty());
  m.remember(7, Toks{1, 2, 3, 4, 5}, Toks{10, 11});  // the typed tail's last 3 tokens
  EXPECT_EQ(m.recall(7), (std::vector<Toks>{{3, 4, 5, 10, 11}}));
  m.remember(7, Toks{1}, Toks{20, 21, 22, 23, 24, 25, 26});  // 7 generated > 6: the first 6
  m.remember(7, Toks{8, 9}, Toks{30, 31, 32, 33, 34});        // typed gets what is left (1)
  // Two documents per place, oldest first: the first one is gone.
  EXPECT_EQ(m.recall(7), (std::vector<Toks>{{20, 21, 22, 23, 24, 25}, {9, 30, 31, 32, 33, 34}}));
  m.remember(7, Toks{1, 2}, Toks{});  // nothing generated: nothing kept
  m.remember(0, Toks{1, 2}, Toks{3});  // place 0: none
  EXPECT_EQ(m.recall(7).size(), 2u);
  EXPECT_TRUE(m.recall(0).empty());
  EXPECT_TRUE(m.recall(8).empty());  // another place has its own
}

TEST(DraftMemory, EvictsTheLeastRecentlyUsedPlace) {
  DraftMemory m({.max_places = 3, .docs_per_place = 1, .keep_typed = 0, .max_doc_tokens = 4});
  for (uint64_t p = 1; p <= 3; ++p) m.remember(p, Toks{}, Toks{int32_t(p)});
  EXPECT_EQ(m.recall(1), (std::vector<Toks>{{1}}));  // 1 is now the most recent
  m.remember(4, Toks{}, Toks{4});                     // evicts 2, the least recently used
  EXPECT_EQ(m.n_places(), 3u);
  EXPECT_TRUE(m.recall(2).empty());
  EXPECT_EQ(m.recall(1), (std::vector<Toks>{{1}}));
  EXPECT_EQ(m.recall(3), (std::vector<Toks>{{3}}));
  EXPECT_EQ(m.recall(4), (std::vector<Toks>{{4}}));
  EXPECT_THROW(DraftMemory({.max_places = 0}), Error);
  DraftMemory off({.docs_per_place = 0});  // efim serve --draft-memory 0
  off.remember(1, Toks{1}, Toks{2});
  EXPECT_TRUE(off.recall(1).empty());
}

}  // namespace
}  // namespace efim
