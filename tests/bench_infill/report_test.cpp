// The Prometheus text reader, the SSE splitter, the statistics and the three report writers.
#include "bench/infill/report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace efim::bench {
namespace {

const char* kMetrics = R"(# HELP vllm:prefix_cache_queries_total Prefix cache queries (tokens).
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{model_name="efim-base-py"} 1200
vllm:prefix_cache_queries_total{model_name="other, \"quoted\" {x}"} 300 1700000000000
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="efim-base-py"} 900.5
  vllm:num_requests_running   3
up 1e0
)";

TEST(BenchMetrics, ParsesSamplesLabelsAndTimestamps) {
  auto m = parse_metrics(kMetrics);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].name, "vllm:prefix_cache_queries_total");
  EXPECT_EQ(m[0].labels.at("model_name"), "efim-base-py");
  EXPECT_EQ(m[1].labels.at("model_name"), "other, \"quoted\" {x}");
  EXPECT_DOUBLE_EQ(m[1].value, 300);
  EXPECT_DOUBLE_EQ(m[2].value, 900.5);
  EXPECT_EQ(m[3].name, "vllm:num_requests_running");
  EXPECT_TRUE(m[3].labels.empty());
  EXPECT_DOUBLE_EQ(m[4].value, 1);
  EXPECT_DOUBLE_EQ(*metric_sum(m, kQueriesMetric), 1500);
  EXPECT_FALSE(metric_sum(m, "missing"));
  auto c = prefix_cache_counters(kMetrics);
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->queries, 1500);
  EXPECT_DOUBLE_EQ(c->hits, 900.5);
  EXPECT_FALSE(prefix_cache_counters("# nothing\nup 1\n"));
  EXPECT_TRUE(std::isinf(parse_metrics("x +Inf\r\n")[0].value));
}

TEST(BenchMetrics, MalformedLinesNameTheLine) {
  for (const std::string bad :
       {"ok 1\nx{a=\"1\" 2\n", "ok 1\nx{a=1} 2\n", "ok 1\nx 1 2 3\n", "ok 1\nx abc\n",
        "ok 1\n{a=\"b\"} 1\n", "ok 1\nx\n", "ok 1\nx{a=\"\\q\"} 1\n", "ok 1\nx{a=\"b\n"}) {
    try {
      parse_metrics(bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("metrics line 2"), std::string::npos) << e.what();
    }
  }
}

TEST(BenchSse, SplitsEventsAcrossArbitraryChunks) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\nevent: x\ndata: {\"b\":\"\xC3\xA9\"}\r\n\r\ndata: [DONE]\n\n";
  const std::vector<std::string> want = {"{\"a\":1}", "{\"b\":\"\xC3\xA9\"}", "[DONE]"};
  for (size_t step = 1; step <= stream.size(); ++step) {
    SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += step)
      for (auto& e : p.push(std::string_view(stream).substr(i, step))) got.push_back(e);
    EXPECT_EQ(got, want) << "step " << step;
  }
}

TEST(BenchStats, MatchNumpy) {
  // numpy.percentile(..., method="linear") and numpy.mean.
  std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(mean_of(v), 2.5);
  EXPECT_DOUBLE_EQ(percentile_of(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile_of(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile_of({5}, 90), 5);
  EXPECT_DOUBLE_EQ(percentile_of({}, 50), 0);
  EXPECT_THROW(percentile_of(v, 101), Error);
}

RequestRecord rec(int user, int round, double ttft, double lat, int64_t prompt, int64_t out,
                  int64_t cached) {
  RequestRecord r;
  r.user = user;
  r.round = round;
  r.timing.ttft_s = ttft;
  r.timing.latency_s = lat;
  r.timing.prompt_tokens = prompt;
  r.timing.completion_tokens = out;
  r.timing.cached_tokens = cached;
  r.timing.chunk_s = {ttft, ttft + 0.01, ttft + 0.03};
  return r;
}

SchemeResult result(Scheme s, double scale, double hits) {
  SchemeResult r;
  r.scheme = s;
  r.wall_s = 2.0 * scale;
  r.requests = {rec(0, 0, 0.1 * scale, 1.0 * scale, 100, 11, 0),
                rec(0, 1, 0.3 * scale, 2.0 * scale, 120, 11, 60)};
  r.metrics_before = PrefixCacheCounters{1000, 10};
  r.metrics_after = PrefixCacheCounters{1220, 10 + hits};
  return r;
}

TEST(BenchReport, SummaryAndRatios) {
  std::vector<SchemeResult> res = {result(Scheme::cache_psm, 1.0, 22),
                                   result(Scheme::cache_efim, 0.5, 165)};
  std::vector<SchemeSummary> rows = {summarize(res[0]), summarize(res[1])};
  add_ratios(rows);
  const SchemeSummary& a = rows[0];
  EXPECT_EQ(a.requests, 2u);
  EXPECT_NEAR(a.ttft_mean_ms, 200, 1e-9);
  EXPECT_NEAR(a.ttft_median_ms, 200, 1e-9);
  EXPECT_NEAR(a.ttft_p90_ms, 280, 1e-9);
  // TPOT = (latency - ttft) / (11 - 1): 90 ms and 170 ms.
  EXPECT_NEAR(a.tpot_mean_ms, 130, 1e-9);
  EXPECT_NEAR(a.itl_mean_ms, 15, 1e-9);
  EXPECT_NEAR(a.latency_mean_s, 1.5, 1e-12);
  EXPECT_NEAR(a.request_throughput, 1.0, 1e-12);
  EXPECT_NEAR(a.output_token_throughput, 11.0, 1e-12);
  EXPECT_EQ(a.prompt_tokens, 220);
  ASSERT_TRUE(a.reuse_rate);
  EXPECT_NEAR(*a.reuse_rate, 0.1, 1e-12);  // 22 hits of 220 queried
  EXPECT_NEAR(a.usage_cached_rate, 60.0 / 220, 1e-12);
  EXPECT_NEAR(a.followup_cached_rate, 60.0 / 120, 1e-12);  // round 1 only
  EXPECT_NEAR(*rows[1].reuse_rate, 0.75, 1e-12);
  EXPECT_NEAR(*a.latency_ratio, 1.0, 1e-12);
  EXPECT_NEAR(*rows[1].latency_ratio, 0.5, 1e-12);
  EXPECT_NEAR(*rows[1].throughput_ratio, 2.0, 1e-12);

  SchemeResult no_metrics = result(Scheme::cache_auto, 1, 0);
  no_metrics.metrics_after.reset();
  EXPECT_FALSE(summarize(no_metrics).reuse_rate);
  std::vector<SchemeSummary> alone = {summarize(res[1])};
  add_ratios(alone);  // no cache-psm row: no ratios
  EXPECT_FALSE(alone[0].latency_ratio);
}

std::vector<SchemeSummary> five_rows(std::vector<SchemeResult>& res) {
  double scale = 1;
  for (Scheme s : all_schemes()) res.push_back(result(s, scale *= 0.8, 50));
  std::vector<SchemeSummary> rows;
  for (const auto& r : res) rows.push_back(summarize(r));
  add_ratios(rows);
  return rows;
}

TEST(BenchReport, MarkdownHasEveryScheme) {
  std::vector<SchemeResult> res;
  auto rows = five_rows(res);
  const std::string md = markdown_table(rows);
  std::vector<std::string> lines;
  for (size_t b = 0, e; (e = md.find('\n', b)) != std::string::npos; b = e + 1)
    lines.push_back(md.substr(b, e - b));
  ASSERT_EQ(lines.size(), 7u);  // header, rule, five schemes
  const auto bars = std::count(lines[0].begin(), lines[0].end(), '|');
  for (const auto& l : lines) EXPECT_EQ(std::count(l.begin(), l.end(), '|'), bars) << l;
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(lines[2 + i].rfind("| " + std::string(scheme_name(all_schemes()[i])) + " |", 0), 0u)
        << lines[2 + i];
  EXPECT_NE(lines[3].find("| 1.00x, 1.00x |"), std::string::npos) << lines[3];  // cache-psm
  EXPECT_NE(lines[2].find("| 22.7% | 50.0% |"), std::string::npos) << lines[2];  // 50/220, 60/120
}

// A "+spec" row: acceptance and tokens per step from the /metrics deltas, and how many texts
// equal those of the same scheme without speculation.
TEST(BenchReport, SpeculativeRowsHaveAcceptanceTokensPerStepAndSameText) {
  SchemeResult plain = result(Scheme::cache_efim, 1, 50);
  plain.speculative = "off";
  SchemeResult spec = plain;
  spec.speculative = "ngram";
  spec.metrics_before->generated = 1000;
  spec.metrics_before->draft_tokens = 500;
  spec.metrics_before->accepted = 100;
  spec.metrics_after->generated = 1100;   // 100 tokens generated
  spec.metrics_after->draft_tokens = 580;  // 80 drafted
  spec.metrics_after->accepted = 160;      // 60 accepted: 40 steps
  plain.requests[0].timing.text = "a";
  spec.requests[0].timing.text = "b";
  std::vector<SchemeResult> res = {plain, spec};
  std::vector<SchemeSummary> rows = {summarize(plain), summarize(spec)};
  add_same_text(res, rows);
  EXPECT_TRUE(rows[1].speculative);
  EXPECT_FALSE(rows[0].speculative);
  EXPECT_FALSE(rows[0].acceptance_rate);
  EXPECT_FALSE(rows[0].same_text);
  EXPECT_NEAR(*rows[1].acceptance_rate, 0.75, 1e-12);
  EXPECT_NEAR(*rows[1].tokens_per_step, 2.5, 1e-12);
  EXPECT_EQ(*rows[1].same_text, plain.requests.size() - 1);
  const std::string md = markdown_table(rows);
  EXPECT_NE(md.find("| 75.0%, 2.50 | " + std::to_string(plain.requests.size() - 1) + " / " +
                    std::to_string(plain.requests.size()) + " |"),
            std::string::npos)
      << md;
  EXPECT_EQ(summary_json(rows[1])["tokens_per_step"], 2.5);
}

// Requests the server ended before max_tokens (despite ignore_eos) are counted and flagged.
TEST(BenchReport, ShortRequestsAreFlagged) {
  SchemeResult r = result(Scheme::cache_auto, 1, 0);
  r.max_tokens = 11;
  EXPECT_EQ(summarize(r).short_requests, 0u);
  EXPECT_EQ(markdown_table({summarize(r)}).find("Note:"), std::string::npos);
  r.requests[1].timing.completion_tokens = 0;
  SchemeSummary s = summarize(r);
  EXPECT_EQ(s.short_requests, 1u);
  EXPECT_EQ(s.output_tokens, 11);
  EXPECT_NE(markdown_table({s}).find("Note: cache-auto: 1 of 2 requests ended before 11 tokens"),
            std::string::npos)
      << markdown_table({s});
  EXPECT_EQ(summary_json(s)["short_requests"], 1);
}

TEST(BenchReport, JsonCarriesEveryScheme) {
  std::vector<SchemeResult> res;
  auto rows = five_rows(res);
  auto j = report_json({{"users", 1}}, res, rows);
  ASSERT_EQ(j["schemes"].size(), 5u);
  EXPECT_EQ(j["config"]["users"], 1);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(j["schemes"][i]["scheme"], std::string(scheme_name(all_schemes()[i])));
    EXPECT_EQ(j["schemes"][i]["per_request"].size(), 2u);
    EXPECT_GT(j["schemes"][i]["latency_s"]["mean"].get<double>(), 0);
  }
  EXPECT_THROW(report_json({}, res, {}), Error);
}

// Well-formedness is checked by Python's XML parser (an independent reader).
TEST(BenchReport, SvgIsWellFormedAndLabelsEveryScheme) {
  std::vector<SchemeResult> res;
  auto rows = five_rows(res);
  const std::string svg = svg_chart(rows, "title with <angle> & \"quotes\"");
  for (const auto& r : rows) EXPECT_NE(svg.find(">" + r.name + "</text>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;angle&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  const auto path = std::filesystem::temp_directory_path() /
                    ("efim_bench_chart_" + std::to_string(::getpid()) + ".svg");
  std::ofstream(path) << svg;
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
      "r = E.parse(sys.argv[1]).getroot(); "
      "assert r.tag == '{http://www.w3.org/2000/svg}svg', r.tag; "
      "n = len(r.findall('{http://www.w3.org/2000/svg}rect')); assert n == 11, n\" " +
      path.string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << svg;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace efim::bench
