// Summaries, JSON and Markdown of evaluation results.
#include <cstdio>
#include <map>
#include <tuple>

#include "base/error.h"
#include "eval/harness.h"

namespace efim::eval {
namespace {

struct Acc {
  size_t n = 0;
  double sum = 0;
  void add(double v) { ++n, sum += v; }
  SummaryCell cell(double scale) const { return {n, n ? scale * sum / n : 0.0}; }
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string cell_text(const SummaryCell& c) {
  return c.n ? fmt(c.value) + " (" + std::to_string(c.n) + ")" : "-";
}

nlohmann::json cell_json(const SummaryCell& c) { return {{"n", c.n}, {"value", c.value}}; }

}  // namespace

std::vector<SummaryRow> summarize(const std::vector<ItemResult>& items) {
  using Key = std::tuple<std::string, std::string, std::string>;  // model, scheme, variant
  struct Accs {
    Acc single, multi, random, em, es;
  };
  std::map<Key, Accs> acc;
  std::vector<Key> order;  // first appearance
  for (const auto& it : items) {
    Key k{it.model, it.scheme, it.variant};
    if (!acc.count(k)) order.push_back(k);
    Accs& a = acc[k];
    if (it.kind == "span") {
      a.em.add(it.em), a.es.add(it.es);
    } else if (it.subset == "single") {
      a.single.add(it.passed);
    } else if (it.subset == "multi") {
      a.multi.add(it.passed);
    } else if (it.subset == "random") {
      a.random.add(it.passed);
    }
  }
  std::vector<SummaryRow> rows;
  for (const auto& k : order) {
    const Accs& a = acc[k];
    rows.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), a.single.cell(100),
                    a.multi.cell(100), a.random.cell(100), a.em.cell(100), a.es.cell(1)});
  }
  return rows;
}

nlohmann::json to_json(const std::vector<ItemResult>& items, const std::vector<SummaryRow>& rows,
                       const nlohmann::json& config) {
  nlohmann::json j;
  j["config"] = config;
  j["summary"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["summary"].push_back({{"model", r.model}, {"scheme", r.scheme}, {"variant", r.variant},
                            {"humaneval_single_pass1", cell_json(r.single)},
                            {"humaneval_multi_pass1", cell_json(r.multi)},
                            {"humaneval_random_pass1", cell_json(r.random)},
                            {"span_em", cell_json(r.em)}, {"span_es", cell_json(r.es)}});
  j["items"] = nlohmann::json::array();
  for (const auto& it : items) {
    nlohmann::json e = {{"model", it.model},       {"kind", it.kind},
                        {"subset", it.subset},     {"id", it.id},
                        {"scheme", it.scheme},     {"variant", it.variant},
                        {"completion", it.completion}, {"reference", it.reference},
                        {"split", it.split},       {"n_prompt", it.n_prompt},
                        {"n_generated", it.n_generated}, {"n_healed", it.n_healed},
                        {"finish", it.finish}};
    if (it.kind == "span") {
      e["em"] = it.em;
      e["es"] = it.es;
    } else {
      e["passed"] = it.passed;
      e["status"] = it.status;
    }
    j["items"].push_back(std::move(e));
  }
  return j;
}

std::string to_markdown(const std::vector<SummaryRow>& rows, const std::string& title) {
  std::string md = "# " + title + "\n\n";
  md += "Each cell: value (number of items behind it). pass@1 in %, one sample per task; "
        "EM in %; ES = CCEval edit similarity 0-100.\n";
  for (const char* variant : {"raw", "trimmed"}) {
    md += std::string("\n## ") + variant +
          (std::string(variant) == "raw" ? " completions\n\n"
                                         : " completions (suffix-repeat trim of the infill "
                                           "layer)\n\n");
    md += "| model | scheme | single pass@1 | multi pass@1 | random pass@1 | span EM | span ES |\n";
    md += "|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows) {
      if (r.variant != variant) continue;
      md += "| " + r.model + " | " + r.scheme + " | " + cell_text(r.single) + " | " +
            cell_text(r.multi) + " | " + cell_text(r.random) + " | " + cell_text(r.em) + " | " +
            cell_text(r.es) + " |\n";
    }
  }
  return md;
}

}  // namespace efim::eval
