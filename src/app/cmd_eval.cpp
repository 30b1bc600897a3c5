// `efim eval`: quality of infilling on efim's own engine. Random spans in held-out Python files
// (exact match, edit similarity) and HumanEval-infilling pass@1 (executed in a sandbox), under
// PSM and EFIM prompts, raw and trimmed. Writes OUT/eval.json (every item) and OUT/eval.md.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/mmap_file.h"
#include "eval/harness.h"

namespace efim::app {
namespace {

struct EvalArgs {
  std::vector<std::string> models;
  std::string suite = "all", data, sources = "/usr/lib/python3.11", out = "eval-out";
  std::string schemes = "psm,efim", subsets = "single,multi,random";
  bool greedy = false, progress = false;
  int threads = 2;
  double timeout_s = 5.0;
  std::string kv_type = "f16";
  eval::EvalOptions opt;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void configure(EvalArgs& a) {
  EFIM_CHECK(!a.models.empty(), "give at least one --model");
  EFIM_CHECK(a.suite == "random-span" || a.suite == "humaneval" || a.suite == "all",
             "--suite must be random-span, humaneval or all, got '", a.suite, "'");
  EFIM_CHECK(a.threads >= 1, "--threads must be >= 1, got ", a.threads);
  a.opt.random_span = a.suite != "humaneval";
  a.opt.humaneval = a.suite != "random-span";
  a.opt.schemes.clear();
  for (const auto& s : split_list(a.schemes)) {
    a.opt.schemes.push_back(eval::parse_scheme(s));
  }
  EFIM_CHECK(!a.opt.schemes.empty(), "--schemes is empty");
  a.opt.subsets = split_list(a.subsets);
  for (const auto& s : a.opt.subsets)
    EFIM_CHECK(s == "single" || s == "multi" || s == "random",
               "--subsets takes single, multi, random; got '", s, "'");
  if (a.opt.humaneval) EFIM_CHECK(!a.data.empty(), "--suite ", a.suite, " needs --data DIR");
  if (a.greedy) a.opt.gen.sampling = SamplingParams{};
  validate(a.opt.gen.sampling);
  a.opt.gen.kv_type = parse_kv_type(a.kv_type);
  a.opt.threads = a.threads;
  a.opt.sandbox.timeout_s = a.timeout_s;
  if (a.progress) a.opt.gen.progress_label = "eval";
}

nlohmann::json config_json(const EvalArgs& a, bool net_isolated) {
  const auto& s = a.opt.gen.sampling;
  return {{"models", a.models},
          {"suite", a.suite},
          {"schemes", a.schemes},
          {"subsets", a.opt.humaneval ? a.subsets : ""},
          {"data", a.data},
          {"sources", a.opt.random_span ? a.sources : ""},
          {"n_spans", a.opt.random_span ? a.opt.n_spans : 0},
          {"seed", a.opt.seed},
          {"limit", a.opt.limit},
          {"sampling", {{"temperature", s.temperature}, {"top_p", s.top_p}, {"top_k", s.top_k}}},
          {"max_new_tokens", a.opt.gen.max_new_tokens},
          {"context_tokens", a.opt.gen.context_tokens},
          {"kv_type", a.kv_type},
          {"prefix_chars", a.opt.prefix_chars},
          {"suffix_chars", a.opt.suffix_chars},
          {"sandbox", {{"timeout_s", a.opt.sandbox.timeout_s},
                       {"memory_bytes", a.opt.sandbox.memory_bytes},
                       {"file_bytes", a.opt.sandbox.file_bytes},
                       {"max_procs", a.opt.sandbox.max_procs},
                       // null when no program ran (random-span only)
                       {"network_isolated", a.opt.humaneval ? nlohmann::json(net_isolated)
                                                            : nlohmann::json()}}}};
}

void run_eval(EvalArgs& a) {
  configure(a);
  const auto t0 = std::chrono::steady_clock::now();
  bool net_isolated = false;
  if (a.opt.humaneval) {  // probe once: is the network namespace available here?
    net_isolated = eval::run_python("pass\n", a.opt.sandbox).network_isolated;
    if (!net_isolated)
      std::fprintf(stderr, "efim eval: warning: no network namespace for the sandbox; "
                           "generated code runs with network access\n");
  }
  std::vector<eval::SourceFile> sources;
  if (a.opt.random_span) sources = eval::load_python_files(a.sources);
  std::vector<eval::ItemResult> items;
  for (const auto& path : a.models) {
    LoadedModel m = load_model(path, a.threads);
    const std::string name = std::filesystem::path(path).filename().string();
    eval::evaluate_model(*m.model, m.tokenizer, name, sources, a.data, a.opt, items);
  }
  const auto rows = eval::summarize(items);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json cfg = config_json(a, net_isolated);
  cfg["wall_s"] = wall;
  std::filesystem::create_directories(a.out);
  write_file(a.out + "/eval.json", eval::to_json(items, rows, cfg).dump(1) + "\n");
  const std::string md = eval::to_markdown(rows, "efim eval") +
                         str("\nWall time: ", static_cast<int64_t>(wall), " s; seed ", a.opt.seed,
                             "; sampling T=", a.opt.gen.sampling.temperature, "\n");
  write_file(a.out + "/eval.md", md);
  std::fputs(md.c_str(), stdout);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  a->opt.gen.sampling.temperature = 0.2f;  // the method doc's sampling
  a->opt.gen.sampling.top_p = 0.95f;
  a->opt.gen.sampling.top_k = 20;
  auto* cmd = app.add_subcommand("eval", "Infilling quality: random spans and HumanEval-infilling");
  cmd->add_option("--model", a->models, "HF folder or .gguf (repeatable)")->required();
  cmd->add_option("--suite", a->suite, "random-span, humaneval or all")->capture_default_str();
  cmd->add_option("--data", a->data, "Folder with the HumanEval-infilling .jsonl(.gz) files");
  cmd->add_option("--sources", a->sources, "Held-out Python files for random spans")
      ->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "K/V cache element type: f16 (as efim serve), q8_0 or f32")
      ->capture_default_str();
  cmd->add_option("--n-spans", a->opt.n_spans, "Random spans")->capture_default_str();
  cmd->add_option("--schemes", a->schemes,
                  "Comma-separated: psm, efim, psm-heal, efim-heal, psm-heal-exact, "
                  "efim-heal-exact (token healing of the text after the middle sentinel, "
                  "constrained or exact)")
      ->capture_default_str();
  cmd->add_option("--subsets", a->subsets, "HumanEval subsets: single,multi,random")
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Output folder (eval.json, eval.md)")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Model threads and sandbox processes")
      ->capture_default_str();
  cmd->add_option("--seed", a->opt.seed, "Seed of spans, splits, task choice, sampling")
      ->capture_default_str();
  cmd->add_option("--limit", a->opt.limit, "HumanEval tasks per subset (0 = all)")
      ->capture_default_str();
  cmd->add_flag("--greedy", a->greedy, "Greedy decoding instead of T=0.2/top-p 0.95/top-k 20");
  cmd->add_option("--temp", a->opt.gen.sampling.temperature, "Temperature")->capture_default_str();
  cmd->add_option("--top-p", a->opt.gen.sampling.top_p, "Top-p")->capture_default_str();
  cmd->add_option("--top-k", a->opt.gen.sampling.top_k, "Top-k")->capture_default_str();
  cmd->add_option("--max-new-tokens", a->opt.gen.max_new_tokens, "Tokens per completion")
      ->capture_default_str();
  cmd->add_option("--context-tokens", a->opt.gen.context_tokens,
                  "Prompt + new tokens at most (0 = model context)")->capture_default_str();
  cmd->add_option("--prefix-chars", a->opt.prefix_chars, "Random spans: prefix chars kept")
      ->capture_default_str();
  cmd->add_option("--suffix-chars", a->opt.suffix_chars, "Random spans: suffix chars kept")
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout_s, "Sandbox wall-clock limit per program (s)")
      ->capture_default_str();
  cmd->add_flag("--progress", a->progress, "Progress bars (when stderr is a terminal)");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace efim::app
