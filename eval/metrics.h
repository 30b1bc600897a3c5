// Text metrics of the random-span evaluation.
//
// Exact match (EM): the completion equals the hidden span byte for byte (raw strings, as the
// method doc says; no stripping).
//
// Edit similarity (ES), 0-100: CCEval's `cal_edit_sim` (Ding et al. 2023, CrossCodeEval,
// scripts/eval_metric.py): both strings are stripped of leading and trailing whitespace, then
// scored with `fuzz.ratio`. We use the rapidfuzz definition of fuzz.ratio (the same number as
// python-Levenshtein's `ratio`, which fuzzywuzzy calls, before fuzzywuzzy rounds it to an int):
//     ES(a, b) = 100 * (1 - indel(a, b) / (|a| + |b|)),   ES("", "") = 100,
// where indel is the edit distance with insertions and deletions only (a substitution costs
// 2), i.e. |a| + |b| - 2 * LCS(a, b), and lengths count Unicode code points (Python str).
// Stripping removes ASCII whitespace (space, \t, \n, \r, \f, \v).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace efim::eval {

bool exact_match(std::string_view completion, std::string_view reference);

// Code points of UTF-8 text (invalid bytes count as one code point each).
std::vector<char32_t> code_points(std::string_view text);

// |a| + |b| - 2 LCS(a, b) over code points.
size_t indel_distance(std::string_view a, std::string_view b);

std::string_view strip_ascii(std::string_view s);

// CCEval edit similarity, 0-100 (formula above).
double edit_similarity(std::string_view completion, std::string_view reference);

}  // namespace efim::eval
