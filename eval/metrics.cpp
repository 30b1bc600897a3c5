#include "eval/metrics.h"

#include <algorithm>

namespace efim::eval {

bool exact_match(std::string_view completion, std::string_view reference) {
  return completion == reference;
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    bool ok = i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (!ok || n == 1) {
      out.push_back(c < 0x80 ? c : 0xDC00 + c);  // an invalid byte stands for itself
      ++i;
      continue;
    }
    char32_t cp = c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

size_t indel_distance(std::string_view as, std::string_view bs) {
  const std::vector<char32_t> a = code_points(as), b = code_points(bs);
  // LCS by dynamic programming over one row: row[j] = LCS(a[0..i), b[0..j)).
  std::vector<size_t> row(b.size() + 1, 0);
  for (size_t i = 0; i < a.size(); ++i) {
    size_t diag = 0;  // row[j - 1] of the previous i
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = a[i] == b[j - 1] ? diag + 1 : std::max(row[j], row[j - 1]);
      diag = up;
    }
  }
  return a.size() + b.size() - 2 * row[b.size()];
}

std::string_view strip_ascii(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

double edit_similarity(std::string_view completion, std::string_view reference) {
  const std::string_view a = strip_ascii(completion), b = strip_ascii(reference);
  const size_t lensum = code_points(a).size() + code_points(b).size();
  if (lensum == 0) return 100.0;
  return 100.0 * (1.0 - static_cast<double>(indel_distance(a, b)) / static_cast<double>(lensum));
}

}  // namespace efim::eval
