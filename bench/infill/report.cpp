#include "bench/infill/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/error.h"

namespace efim::bench {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

nlohmann::json opt_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

double percentile_of(std::vector<double> v, double q) {
  EFIM_CHECK(q >= 0 && q <= 100, "percentile ", q, " outside [0, 100]");
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q / 100 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

namespace {

// A server --speculative mode that drafts ("" is the server's default: off).
bool is_speculative(const std::string& mode) { return !mode.empty() && mode != "off"; }

}  // namespace

void add_same_text(const std::vector<SchemeResult>& results, std::vector<SchemeSummary>& rows) {
  for (size_t i = 0; i < results.size(); ++i) {
    if (!is_speculative(results[i].speculative) || !results[i].peer.empty()) continue;
    for (const SchemeResult& plain : results) {
      if (plain.scheme != results[i].scheme || plain.speculative != "off" || !plain.peer.empty() ||
          plain.requests.size() != results[i].requests.size())
        continue;
      size_t same = 0;
      for (size_t k = 0; k < plain.requests.size(); ++k)
        same += plain.requests[k].timing.text == results[i].requests[k].timing.text;
      rows[i].same_text = same;
    }
  }
}

SchemeSummary summarize(const SchemeResult& r) {
  SchemeSummary s;
  s.name = std::string(scheme_name(r.scheme));
  if (!r.peer.empty()) s.name += " (" + r.peer + ")";
  s.speculative = is_speculative(r.speculative);
  s.requests = r.requests.size();
  s.wall_s = r.wall_s;
  std::vector<double> ttft, tpot, itl, lat;
  int64_t followup_prompt = 0, followup_cached = 0;
  for (const auto& rec : r.requests) {
    const RequestTiming& t = rec.timing;
    ttft.push_back(t.ttft_s * 1e3);
    lat.push_back(t.latency_s);
    if (auto p = t.tpot_s()) tpot.push_back(*p * 1e3);
    for (size_t i = 1; i < t.chunk_s.size(); ++i)
      itl.push_back((t.chunk_s[i] - t.chunk_s[i - 1]) * 1e3);
    s.prompt_tokens += t.prompt_tokens;
    s.output_tokens += t.completion_tokens;
    s.cached_tokens += t.cached_tokens;
    if (t.completion_tokens < r.max_tokens) ++s.short_requests;
    if (rec.round > 0) {
      followup_prompt += t.prompt_tokens;
      followup_cached += t.cached_tokens;
    }
  }
  s.max_tokens = r.max_tokens;
  s.ttft_mean_ms = mean_of(ttft);
  s.ttft_median_ms = percentile_of(ttft, 50);
  s.ttft_p90_ms = percentile_of(ttft, 90);
  s.tpot_mean_ms = mean_of(tpot);
  s.tpot_median_ms = percentile_of(tpot, 50);
  s.itl_mean_ms = mean_of(itl);
  s.latency_mean_s = mean_of(lat);
  s.latency_median_s = percentile_of(lat, 50);
  if (r.wall_s > 0) {
    s.request_throughput = double(s.requests) / r.wall_s;
    s.output_token_throughput = double(s.output_tokens) / r.wall_s;
  }
  if (r.metrics_before && r.metrics_after) {
    const double q = r.metrics_after->queries - r.metrics_before->queries;
    const double h = r.metrics_after->hits - r.metrics_before->hits;
    s.reuse_rate = q > 0 ? h / q : 0.0;
    const double g = r.metrics_after->generated - r.metrics_before->generated;
    const double d = r.metrics_after->draft_tokens - r.metrics_before->draft_tokens;
    const double a = r.metrics_after->accepted - r.metrics_before->accepted;
    if (s.speculative && d > 0) s.acceptance_rate = a / d;
    if (s.speculative && g > a) s.tokens_per_step = g / (g - a);
  }
  if (s.prompt_tokens > 0) s.usage_cached_rate = double(s.cached_tokens) / double(s.prompt_tokens);
  if (followup_prompt > 0)
    s.followup_cached_rate = double(followup_cached) / double(followup_prompt);
  return s;
}

void add_ratios(std::vector<SchemeSummary>& rows) {
  auto base = std::find_if(rows.begin(), rows.end(),
                           [](const SchemeSummary& s) { return s.name == "cache-psm"; });
  if (base == rows.end()) return;
  const double lat = base->latency_mean_s, thr = base->request_throughput;
  for (auto& s : rows) {
    if (lat > 0) s.latency_ratio = s.latency_mean_s / lat;
    if (thr > 0) s.throughput_ratio = s.request_throughput / thr;
  }
}

nlohmann::json summary_json(const SchemeSummary& s) {
  return {
      {"scheme", s.name},
      {"requests", s.requests},
      {"wall_s", s.wall_s},
      {"ttft_ms", {{"mean", s.ttft_mean_ms}, {"median", s.ttft_median_ms}, {"p90", s.ttft_p90_ms}}},
      {"tpot_ms", {{"mean", s.tpot_mean_ms}, {"median", s.tpot_median_ms}}},
      {"itl_mean_ms", s.itl_mean_ms},
      {"latency_s", {{"mean", s.latency_mean_s}, {"median", s.latency_median_s}}},
      {"request_throughput", s.request_throughput},
      {"output_token_throughput", s.output_token_throughput},
      {"prompt_tokens", s.prompt_tokens},
      {"output_tokens", s.output_tokens},
      {"max_tokens_per_request", s.max_tokens},
      {"short_requests", s.short_requests},
      {"cached_tokens", s.cached_tokens},
      {"reuse_rate", opt_json(s.reuse_rate)},
      {"usage_cached_rate", s.usage_cached_rate},
      {"followup_cached_rate", s.followup_cached_rate},
      {"latency_ratio_vs_cache_psm", opt_json(s.latency_ratio)},
      {"throughput_ratio_vs_cache_psm", opt_json(s.throughput_ratio)},
      {"speculative", s.speculative},
      {"acceptance_rate", opt_json(s.acceptance_rate)},
      {"tokens_per_step", opt_json(s.tokens_per_step)},
      {"same_text_as_plain", s.same_text ? nlohmann::json(*s.same_text) : nlohmann::json()}};
}

nlohmann::json report_json(const nlohmann::json& config, const std::vector<SchemeResult>& results,
                           const std::vector<SchemeSummary>& rows) {
  EFIM_CHECK(results.size() == rows.size(), "report: ", results.size(), " results but ",
             rows.size(), " summaries");
  nlohmann::json schemes = nlohmann::json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    nlohmann::json j = summary_json(rows[i]);
    j["layout"] = std::string(scheme_layout(results[i].scheme));
    j["server"] = results[i].server;
    j["serve_command"] = results[i].serve_command;
    nlohmann::json reqs = nlohmann::json::array();
    for (const auto& rec : results[i].requests) {
      const RequestTiming& t = rec.timing;
      reqs.push_back({{"user", rec.user},
                      {"round", rec.round},
                      {"start_s", t.start_s},
                      {"ttft_s", t.ttft_s},
                      {"latency_s", t.latency_s},
                      {"prompt_tokens", t.prompt_tokens},
                      {"cached_tokens", t.cached_tokens},
                      {"completion_tokens", t.completion_tokens}});
    }
    j["per_request"] = std::move(reqs);
    schemes.push_back(std::move(j));
  }
  return {{"benchmark", "efim bench infill"}, {"config", config}, {"schemes", schemes}};
}

std::string markdown_table(const std::vector<SchemeSummary>& rows) {
  std::string md =
      "| scheme | requests | TTFT mean / median / p90 (ms) | TPOT mean / median (ms) | "
      "latency mean / median (s) | req/s | output tok/s | reuse rate | reuse, rounds 1+ | "
      "prompt tokens | output tokens | vs cache-psm: latency, throughput | "
      "draft acceptance, tokens per step | same text as without |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& s : rows) {
    std::string reuse = s.reuse_rate ? fmt("%.1f%%", *s.reuse_rate * 100) : "n/a";
    std::string vs = s.latency_ratio && s.throughput_ratio
                         ? fmt("%.2fx", *s.latency_ratio) + ", " + fmt("%.2fx", *s.throughput_ratio)
                         : "n/a";
    md += "| " + s.name + " | " + std::to_string(s.requests) + " | " + fmt("%.1f", s.ttft_mean_ms) +
          " / " + fmt("%.1f", s.ttft_median_ms) + " / " + fmt("%.1f", s.ttft_p90_ms) + " | " +
          fmt("%.2f", s.tpot_mean_ms) + " / " + fmt("%.2f", s.tpot_median_ms) + " | " +
          fmt("%.3f", s.latency_mean_s) + " / " + fmt("%.3f", s.latency_median_s) + " | " +
          fmt("%.2f", s.request_throughput) + " | " + fmt("%.1f", s.output_token_throughput) +
          " | " + reuse + " | " + fmt("%.1f%%", s.followup_cached_rate * 100) + " | " +
          std::to_string(s.prompt_tokens) + " | " +
          std::to_string(s.output_tokens) + " | " + vs + " | " +
          (s.acceptance_rate && s.tokens_per_step
               ? fmt("%.1f%%", *s.acceptance_rate * 100) + ", " + fmt("%.2f", *s.tokens_per_step)
               : std::string("n/a")) +
          " | " + (s.same_text ? str(*s.same_text, " / ", s.requests) : std::string("n/a")) +
          " |\n";
  }
  for (const auto& s : rows)
    if (s.short_requests > 0)
      md += str("\nNote: ", s.name, ": ", s.short_requests, " of ", s.requests,
                " requests ended before ", s.max_tokens,
                " tokens although ignore_eos was set "
                "(the server stopped them); its latency and throughput are not comparable.\n");
  return md;
}

namespace {

// One bar panel at (x0, y0), w x h; values drawn above the bars, scheme names under them.
std::string svg_panel(const std::vector<SchemeSummary>& rows, double (*value)(const SchemeSummary&),
                      const std::string& title, const char* value_fmt, double x0, double y0,
                      double w, double h) {
  static const char* colors[] = {"#9e9e9e", "#5b8def", "#8e6fd8", "#e8793a", "#2fa36b"};
  double top = 0;
  for (const auto& r : rows) top = std::max(top, value(r));
  if (top <= 0) top = 1;
  const double plot_h = h - 90, base_y = y0 + 30 + plot_h;  // 30 px title, 60 px names
  const double slot = w / double(std::max<size_t>(rows.size(), 1)), bar_w = slot * 0.6;
  std::string s = str("<text x=\"", x0 + w / 2, "\" y=\"", y0 + 16,
                      "\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">",
                      xml_escape(title), "</text>\n");
  s += str("<line x1=\"", x0, "\" y1=\"", base_y, "\" x2=\"", x0 + w, "\" y2=\"", base_y,
           "\" stroke=\"#333\"/>\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const double v = value(rows[i]), bh = plot_h * 0.9 * v / top;
    const double x = x0 + slot * double(i) + (slot - bar_w) / 2, cx = x + bar_w / 2;
    s += str("<rect x=\"", x, "\" y=\"", base_y - bh, "\" width=\"", bar_w, "\" height=\"", bh,
             "\" fill=\"", colors[i % 5], "\"/>\n");
    s += str("<text x=\"", cx, "\" y=\"", base_y - bh - 5,
             "\" text-anchor=\"middle\" "
             "font-size=\"12\">",
             fmt(value_fmt, v), "</text>\n");
    s += str("<text x=\"", cx, "\" y=\"", base_y + 16,
             "\" text-anchor=\"end\" font-size=\"12\" "
             "transform=\"rotate(-30 ",
             cx, " ", base_y + 16, ")\">", xml_escape(rows[i].name), "</text>\n");
  }
  return s;
}

}  // namespace

std::string svg_chart(const std::vector<SchemeSummary>& rows, const std::string& title) {
  const double panel_w = 400, panel_h = 340, gap = 60, margin = 60;  // labels lean left
  const double width = margin * 2 + panel_w * 2 + gap, height = panel_h + 50;
  std::string s =
      str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n",
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", width, "\" height=\"", height,
          "\" viewBox=\"0 0 ", width, " ", height, "\" font-family=\"sans-serif\">\n",
          "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n", "<text x=\"", width / 2,
          "\" y=\"24\" text-anchor=\"middle\" "
          "font-size=\"16\">",
          xml_escape(title), "</text>\n");
  s += svg_panel(
      rows, [](const SchemeSummary& r) { return r.latency_mean_s; },
      "mean latency (s), lower is better", "%.3f", margin, 40, panel_w, panel_h);
  s += svg_panel(
      rows, [](const SchemeSummary& r) { return r.request_throughput; },
      "request throughput (req/s), higher is better", "%.2f", margin + panel_w + gap, 40, panel_w,
      panel_h);
  s += "</svg>\n";
  return s;
}

}  // namespace efim::bench
