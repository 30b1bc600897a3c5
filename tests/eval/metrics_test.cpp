// EM and ES against values computed by hand (and rapidfuzz's documented example).
#include <gtest/gtest.h>

#include "eval/metrics.h"

namespace efim::eval {
namespace {

TEST(Metrics, ExactMatchComparesRawStrings) {
  EXPECT_TRUE(exact_match("x = 1\n", "x = 1\n"));
  EXPECT_FALSE(exact_match("x = 1", "x = 1\n"));  // no stripping for EM
  EXPECT_FALSE(exact_match(" x", "x"));
  EXPECT_TRUE(exact_match("", ""));
}

TEST(Metrics, IndelDistance) {
  // kitten / sitting: LCS "ittn" (4), so 6 + 7 - 2*4 = 5.
  EXPECT_EQ(indel_distance("kitten", "sitting"), 5u);
  EXPECT_EQ(indel_distance("abc", "abc"), 0u);
  EXPECT_EQ(indel_distance("abc", ""), 3u);
  EXPECT_EQ(indel_distance("ab", "ba"), 2u);      // a substitution-free path: delete + insert
  EXPECT_EQ(indel_distance("é", "e"), 2u);        // code points, not bytes (é is 2 bytes)
  EXPECT_EQ(indel_distance("a€b", "ab"), 1u);
}

TEST(Metrics, EditSimilarityIsCcevalFuzzRatio) {
  // rapidfuzz documentation: fuzz.ratio("this is a test", "this is a test!") = 96.55...
  EXPECT_NEAR(edit_similarity("this is a test", "this is a test!"), 100.0 * 28 / 29, 1e-9);
  EXPECT_NEAR(edit_similarity("kitten", "sitting"), 100.0 * (1 - 5.0 / 13), 1e-9);
  EXPECT_DOUBLE_EQ(edit_similarity("  return x\n", "return x"), 100.0);  // stripped
  EXPECT_DOUBLE_EQ(edit_similarity("", ""), 100.0);
  EXPECT_DOUBLE_EQ(edit_similarity("\n\t ", "  "), 100.0);  // both strip to empty
  EXPECT_DOUBLE_EQ(edit_similarity("abc", ""), 0.0);
  EXPECT_DOUBLE_EQ(edit_similarity("aé", "ae"), 50.0);  // 2 + 2 code points, LCS 1
  EXPECT_DOUBLE_EQ(edit_similarity("ab", "ba"), 50.0);
}

TEST(Metrics, StripAscii) {
  EXPECT_EQ(strip_ascii(" \t a b \r\n"), "a b");
  EXPECT_EQ(strip_ascii("   "), "");
  EXPECT_EQ(strip_ascii("x"), "x");
}

}  // namespace
}  // namespace efim::eval
