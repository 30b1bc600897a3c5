#include "eval/harness.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.h"
#include "base/progress.h"
#include "eval/metrics.h"
#include "infill/stop.h"

namespace efim::eval {
namespace {

// FNV-1a: a seed per task id that does not depend on the order of tasks.
uint64_t hash_id(std::string_view s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string trimmed(const std::string& completion, const InfillJob& j) {
  RepeatRuleOptions ro;
  ro.cursor_at_line_start = cursor_at_line_start(j.prefix);
  return trim_suffix_repeat(completion, j.suffix, ro);
}

ItemResult base_item(const std::string& model, const char* kind, const std::string& subset,
                     const InfillJob& j, const InfillOutput& g, const char* variant) {
  ItemResult r;
  r.model = model;
  r.kind = kind;
  r.subset = subset;
  r.scheme = j.scheme.name();
  r.variant = variant;
  r.split = j.scheme.order == FimOrder::efim ? j.split : 0;
  r.n_healed = g.n_healed;
  r.n_prompt = g.n_prompt;
  r.n_generated = g.n_generated;
  r.finish = g.finish;
  return r;
}

}  // namespace

SpanSet make_span_jobs(const std::vector<SourceFile>& files, const EvalOptions& o) {
  SpanOptions so;
  so.seed = o.seed;
  SpanSet set;
  set.spans = sample_spans(files, o.n_spans, so);
  for (size_t i = 0; i < set.spans.size(); ++i) {
    const Span& s = set.spans[i];
    const std::string_view t = files[s.file].text;
    const std::string prefix(keep_tail(t.substr(0, s.begin), o.prefix_chars));
    const std::string suffix(keep_head(t.substr(s.end), o.suffix_chars));
    std::mt19937_64 rng(o.seed * 0x9E3779B97F4A7C15ull + i);
    const size_t split = efim_split(prefix, rng);
    for (const Scheme& scheme : o.schemes) {
      set.jobs.push_back({prefix, suffix, scheme, split, o.seed + i});
      set.refs.emplace_back(t.substr(s.begin, s.end - s.begin));
      set.ids.push_back(str(files[s.file].name, ":", s.begin, "-", s.end));
    }
  }
  return set;
}

std::vector<HumanEvalTask> select_tasks(std::vector<HumanEvalTask> tasks, size_t limit,
                                        uint64_t seed) {
  if (limit == 0 || limit >= tasks.size()) return tasks;
  std::mt19937_64 rng(seed);
  for (size_t i = tasks.size() - 1; i > 0; --i)  // Fisher-Yates with the portable draw
    std::swap(tasks[i], tasks[uniform_int(rng, 0, i)]);
  tasks.resize(limit);
  return tasks;
}

std::vector<InfillJob> make_humaneval_jobs(const std::vector<HumanEvalTask>& tasks,
                                           const EvalOptions& o) {
  std::vector<InfillJob> jobs;
  for (const auto& t : tasks) {
    std::mt19937_64 rng(hash_id(t.task_id, o.seed));
    const size_t split = efim_split(t.prompt, rng);
    for (const Scheme& scheme : o.schemes)
      jobs.push_back({t.prompt, t.suffix, scheme, split, hash_id(t.task_id, o.seed + 1)});
  }
  return jobs;
}

void score_spans(const SpanSet& set, const std::vector<InfillOutput>& gen,
                 const std::string& model, const EvalOptions&, std::vector<ItemResult>& out) {
  EFIM_CHECK(gen.size() == set.jobs.size(), "span results: ", gen.size(), " outputs for ",
             set.jobs.size(), " jobs");
  for (size_t i = 0; i < gen.size(); ++i) {
    const std::string texts[2] = {gen[i].text, trimmed(gen[i].text, set.jobs[i])};
    const char* variants[2] = {"raw", "trimmed"};
    for (int v = 0; v < 2; ++v) {
      ItemResult r = base_item(model, "span", "random-span", set.jobs[i], gen[i], variants[v]);
      r.id = set.ids[i];
      r.completion = texts[v];
      r.reference = set.refs[i];
      r.em = exact_match(r.completion, r.reference);
      r.es = edit_similarity(r.completion, r.reference);
      out.push_back(std::move(r));
    }
  }
}

void score_humaneval(const std::vector<HumanEvalTask>& tasks, const std::string& subset,
                     const std::vector<InfillJob>& jobs, const std::vector<InfillOutput>& gen,
                     const std::string& model, const EvalOptions& o,
                     std::vector<ItemResult>& out) {
  const size_t n_schemes = o.schemes.size();
  EFIM_CHECK(gen.size() == jobs.size() && jobs.size() == tasks.size() * n_schemes,
             "humaneval results: ", gen.size(), " outputs, ", jobs.size(), " jobs, ",
             tasks.size(), " tasks x ", n_schemes, " schemes");
  const size_t first = out.size();
  std::map<std::string, size_t> program_index;  // identical programs run once
  std::vector<std::string> programs;
  std::vector<size_t> item_program;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const HumanEvalTask& t = tasks[i / n_schemes];
    const std::string texts[2] = {gen[i].text, trimmed(gen[i].text, jobs[i])};
    const char* variants[2] = {"raw", "trimmed"};
    for (int v = 0; v < 2; ++v) {
      ItemResult r = base_item(model, "humaneval", subset, jobs[i], gen[i], variants[v]);
      r.id = t.task_id;
      r.completion = texts[v];
      r.reference = t.canonical_solution;
      std::string prog = humaneval_program(t, r.completion);
      auto [it, added] = program_index.emplace(prog, programs.size());
      if (added) programs.push_back(std::move(prog));
      item_program.push_back(it->second);
      out.push_back(std::move(r));
    }
  }
  std::vector<SandboxResult> results(programs.size());
  std::atomic<size_t> next{0};
  std::optional<ProgressBar> bar;
  if (!o.gen.progress_label.empty())
    bar.emplace(programs.size(), ProgressOptions{"exec " + subset, "prog"});
  std::mutex mu;
  std::exception_ptr error;
  auto worker = [&] {
    for (size_t k; (k = next++) < programs.size();) {
      try {
        results[k] = run_python(programs[k], o.sandbox);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!error) error = std::current_exception();
      }
      std::lock_guard lock(mu);
      if (bar) bar->add(1);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, o.threads); ++t) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  for (size_t i = 0; i < item_program.size(); ++i) {
    const SandboxResult& s = results[item_program[i]];
    out[first + i].passed = s.passed();
    out[first + i].status = to_string(s.status);
  }
}

void evaluate_model(Model& model, const Tokenizer& tok, const std::string& name,
                    const std::vector<SourceFile>& sources, const std::string& data_dir,
                    const EvalOptions& o, std::vector<ItemResult>& out) {
  if (o.random_span) {
    SpanSet set = make_span_jobs(sources, o);
    GenerateOptions g = o.gen;
    if (!g.progress_label.empty()) g.progress_label = "random-span";
    // Spans keep their own context caps; the model's context bounds the prompt as well.
    score_spans(set, generate_infills(model, tok, set.jobs, g), name, o, out);
  }
  if (o.humaneval) {
    for (const auto& sub : humaneval_subsets()) {
      if (std::find(o.subsets.begin(), o.subsets.end(), sub.name) == o.subsets.end()) continue;
      EFIM_CHECK(!data_dir.empty(), "the humaneval suite needs --data DIR");
      std::string path = data_dir + "/" + sub.file;  // or the uncompressed .jsonl beside it
      if (!std::filesystem::exists(path) && std::filesystem::exists(path.substr(0, path.size() - 3)))
        path.resize(path.size() - 3);
      auto tasks = select_tasks(load_humaneval(path), o.limit, o.seed);
      auto jobs = make_humaneval_jobs(tasks, o);
      GenerateOptions g = o.gen;
      if (!g.progress_label.empty()) g.progress_label = std::string("humaneval ") + sub.name;
      score_humaneval(tasks, sub.name, jobs, generate_infills(model, tok, jobs, g), name, o,
                      out);
    }
  }
}

}  // namespace efim::eval
