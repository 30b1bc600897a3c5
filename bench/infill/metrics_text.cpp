#include "bench/infill/metrics_text.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "base/error.h"

namespace efim::bench {
namespace {

bool name_char(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Cursor over one line; errors name the line.
struct LineReader {
  std::string_view s;
  size_t pos = 0;
  size_t line_no = 0;

  [[noreturn]] void error(std::string_view what) const {
    fail("metrics line ", line_no, ": ", what, " at column ", pos + 1, ": '", s, "'");
  }
  bool at_end() const { return pos >= s.size(); }
  char peek() const { return at_end() ? '\0' : s[pos]; }
  void skip_blanks() {
    while (!at_end() && (s[pos] == ' ' || s[pos] == '\t')) ++pos;
  }
  void expect(char c) {
    if (peek() != c) error(str("expected '", c, "'"));
    ++pos;
  }
  std::string name() {
    size_t start = pos;
    while (!at_end() && name_char(s[pos], pos == start)) ++pos;
    if (pos == start) error("expected a name");
    return std::string(s.substr(start, pos - start));
  }
  std::string quoted() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) error("unterminated label value");
      char c = s[pos++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) error("unterminated escape");
      char e = s[pos++];
      if (e == 'n')
        out += '\n';
      else if (e == '\\' || e == '"')
        out += e;
      else
        error(str("unknown escape '\\", e, "'"));
    }
  }
  std::map<std::string, std::string> labels() {
    std::map<std::string, std::string> out;
    expect('{');
    skip_blanks();
    while (peek() != '}') {
      std::string key = name();
      skip_blanks();
      expect('=');
      skip_blanks();
      out[key] = quoted();
      skip_blanks();
      if (peek() == ',') {
        ++pos;
        skip_blanks();
      } else if (peek() != '}') {
        error("expected ',' or '}'");
      }
    }
    ++pos;
    return out;
  }
  double number() {
    size_t start = pos;
    while (!at_end() && s[pos] != ' ' && s[pos] != '\t') ++pos;
    std::string tok(s.substr(start, pos - start));
    if (tok.empty()) error("expected a value");
    if (tok == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (tok == "+Inf" || tok == "Inf") return std::numeric_limits<double>::infinity();
    if (tok == "-Inf") return -std::numeric_limits<double>::infinity();
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(tok.c_str(), &end);
    if (end != tok.c_str() + tok.size() || errno == ERANGE || std::isnan(v) || std::isinf(v)) {
      pos = start;
      error(str("bad number '", tok, "'"));
    }
    return v;
  }
};

}  // namespace

std::vector<MetricSample> parse_metrics(std::string_view text) {
  std::vector<MetricSample> out;
  size_t line_no = 0, start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    start = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineReader r{line, 0, line_no};
    r.skip_blanks();
    if (r.at_end() || r.peek() == '#') continue;
    MetricSample m;
    m.name = r.name();
    r.skip_blanks();
    if (r.peek() == '{') m.labels = r.labels();
    r.skip_blanks();
    m.value = r.number();
    r.skip_blanks();
    if (!r.at_end()) r.number();  // optional timestamp (ms), ignored
    r.skip_blanks();
    if (!r.at_end()) r.error("unexpected text after the value");
    out.push_back(std::move(m));
  }
  return out;
}

std::optional<double> metric_sum(const std::vector<MetricSample>& samples, std::string_view name) {
  std::optional<double> sum;
  for (const auto& m : samples)
    if (m.name == name) sum = sum.value_or(0) + m.value;
  return sum;
}

std::optional<PrefixCacheCounters> prefix_cache_counters(std::string_view metrics_text) {
  auto samples = parse_metrics(metrics_text);
  auto q = metric_sum(samples, kQueriesMetric), h = metric_sum(samples, kHitsMetric);
  if (!q && !h) return std::nullopt;
  return PrefixCacheCounters{q.value_or(0), h.value_or(0),
                             metric_sum(samples, kGeneratedMetric).value_or(0),
                             metric_sum(samples, kDraftTokensMetric).value_or(0),
                             metric_sum(samples, kAcceptedMetric).value_or(0)};
}

}  // namespace efim::bench
