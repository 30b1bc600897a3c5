// `efim bench infill MODEL`: the EFIM paper's serving experiment (docs/efim-method.md section 4)
// against efim's own server: users typing into Python standard-library files, five prompt
// schemes, each against a fresh `efim serve` child. Prints a Markdown table; --out writes
// bench_infill.{json,md,svg}.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/commands.h"
#include "app/loaded.h"
#include "base/error.h"
#include "base/mmap_file.h"
#include "bench/infill/report.h"
#include "bench/infill/runner.h"
#include "format/gguf.h"
#include "model/config.h"

namespace efim::app {
namespace {

using namespace efim::bench;

struct BenchInfillArgs {
  std::string model;
  std::string schemes = "all";
  std::string server_url, api_key, out_dir;
  WorkloadOptions workload;
  SamplingSpec sampling;
  int threads = 0, kv_cache_mb = 512, max_requests = 0;
  // off, ngram, draft, ngram+draft, a comma list of them (each scheme once per mode), or both
  // (off,ngram)
  std::string speculative = "off";
  std::string draft_model;  // --draft-model of the servers whose mode drafts with a model
  std::string peer_llama_server;   // llama-server binary: each token-prompt scheme again with it
  bool no_progress = false;
};

// The model's context length, from the GGUF metadata or the folder's config.json.
int64_t model_context(const std::string& path) {
  if (is_gguf_path(path)) return config_from_gguf(GgufFile::open(path)).max_position;
  const auto cfg = std::filesystem::path(path) / "config.json";
  EFIM_CHECK(std::filesystem::is_regular_file(cfg), "no config.json in '", path, "'");
  return config_from_hf_file(cfg.string()).max_position;
}

// Every request must fit the model: the longest client-built prompt plus the output tokens.
void check_context(const FimLayout& layout, const Workload& w, const BenchInfillArgs& a,
                   int64_t n_ctx) {
  const int64_t longest = int64_t(max_prompt_tokens(layout, w.users));
  const int64_t need = longest + a.sampling.output_tokens;
  EFIM_CHECK(need <= n_ctx, "the model's context is ", n_ctx, " tokens but this workload needs ",
             need, " (longest prompt ", longest, " + ", a.sampling.output_tokens,
             " output tokens): lower --max-doc-tokens (now ", a.workload.corpus.max_tokens,
             ") or --output-tokens, or use a model with a longer context");
}

nlohmann::json config_json(const BenchInfillArgs& a, const Workload& w, const FimLayout& layout,
                           int64_t n_ctx) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& u : w.users)
    files.push_back({{"path", u.path},
                     {"tokens", u.n_tokens},
                     {"prefix_bytes", u.prefix.size()},
                     {"suffix_bytes", u.suffix.size()},
                     {"typed_bytes_last_round", u.typed.back().size()}});
  char when[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"model", a.model},
          {"model_context", n_ctx},
          {"fim_family", std::string(family_name(layout.format().family))},
          {"users", a.workload.users},
          {"rounds", a.workload.rounds},
          {"output_tokens", a.sampling.output_tokens},
          {"temperature", a.sampling.temperature},
          {"top_p", a.sampling.top_p},
          {"top_k", a.sampling.top_k},
          {"ignore_eos", true},
          {"stream", true},
          {"seed", a.workload.seed},
          {"sampling_seed", a.sampling.seed},
          {"docs", a.workload.corpus.dir},
          {"doc_tokens", {a.workload.corpus.min_tokens, a.workload.corpus.max_tokens}},
          {"scanned_files", w.scanned_files},
          {"eligible_files", w.eligible_files},
          {"server_threads", a.threads},
          {"kv_cache_mb", a.kv_cache_mb},
          {"max_requests", a.max_requests},
          {"speculative", a.speculative},
          {"server_url", a.server_url},
          {"peer_llama_server", a.peer_llama_server},
          {"client_cores", std::thread::hardware_concurrency()},
          {"date", when},
          {"user_files", files}};
}

void write_outputs(const BenchInfillArgs& a, const nlohmann::json& report, const std::string& md,
                   const std::string& svg) {
  std::filesystem::create_directories(a.out_dir);
  const std::string base = a.out_dir + "/bench_infill";
  write_file(base + ".json", report.dump(2) + "\n");
  write_file(base + ".md", md);
  write_file(base + ".svg", svg);
  std::fprintf(stderr, "efim: wrote %s.json, .md and .svg\n", base.c_str());
}

void run_bench_infill(BenchInfillArgs& a) {
  const std::vector<Scheme> schemes = parse_schemes(a.schemes);
  EFIM_CHECK(a.server_url.empty() || schemes.size() == 1,
             "--server benchmarks one running server: give exactly one --schemes name");
  std::vector<std::string> modes;
  for (size_t at = 0; at <= a.speculative.size();) {
    const size_t comma = std::min(a.speculative.find(',', at), a.speculative.size());
    const std::string m = a.speculative.substr(at, comma - at);
    if (m == "both") {
      modes.insert(modes.end(), {"off", "ngram"});
    } else {
      EFIM_CHECK(m == "off" || m == "ngram" || m == "draft" || m == "ngram+draft",
                 "--speculative takes off, ngram, draft, ngram+draft, both or a comma list of "
                 "them, got '", m, "'");
      EFIM_CHECK(!a.draft_model.empty() || (m != "draft" && m != "ngram+draft"),
                 "--speculative ", m, " needs --draft-model");
      modes.push_back(m);
    }
    at = comma + 1;
  }
  EFIM_CHECK(a.server_url.empty() || modes.size() == 1,
             "--speculative ", a.speculative, " starts a server per mode; with --server give one");
  EFIM_CHECK(a.peer_llama_server.empty() || a.server_url.empty(),
             "--peer-llama-server starts its own servers: not with --server");
  EFIM_CHECK(a.peer_llama_server.empty() || is_gguf_path(a.model),
             "--peer-llama-server serves the same file: give a .gguf model, not '", a.model, "'");
  EFIM_CHECK(a.workload.rounds >= 1 && a.sampling.output_tokens >= 1,
             "--rounds and --output-tokens must be >= 1");
  const Tokenizer tok = load_tokenizer(a.model);
  const FimLayout layout(tok, make_format(tok));
  const int64_t n_ctx = model_context(a.model);
  std::fprintf(stderr, "efim: scanning %s for *.py files of %lld-%lld tokens\n",
               a.workload.corpus.dir.c_str(), (long long)a.workload.corpus.min_tokens,
               (long long)a.workload.corpus.max_tokens);
  const Workload w = build_workload(tok, a.workload);
  check_context(layout, w, a, n_ctx);
  std::fprintf(stderr, "efim: %d users (of %zu eligible files) x %d rounds, %d output tokens\n",
               a.workload.users, w.eligible_files, a.workload.rounds, a.sampling.output_tokens);

  RunOptions ro;
  ro.model = a.model;
  ro.server_url = a.server_url;
  ro.api_key = a.api_key;
  ro.sampling = a.sampling;
  ro.threads = a.threads;
  ro.kv_cache_mb = a.kv_cache_mb;
  ro.max_requests = a.max_requests;
  ro.draft_model = a.draft_model;
  ro.progress = !a.no_progress;
  if (!a.out_dir.empty()) {
    std::filesystem::create_directories(a.out_dir);
    ro.log_dir = a.out_dir;
  }
  std::vector<SchemeResult> results;
  std::vector<SchemeSummary> rows;
  // The peer's slots each hold a user's longest prompt and the output, in 256-token steps.
  const int64_t peer_slot_ctx =
      (int64_t(max_prompt_tokens(layout, w.users)) + a.sampling.output_tokens + 255) / 256 * 256;
  for (Scheme s : schemes) {
    for (const std::string& mode : modes) {
      ro.speculative = mode;  // passed to the servers it starts; labels the row either way
      results.push_back(run_scheme(layout, w, s, ro));
      rows.push_back(summarize(results.back()));
      if (modes.size() > 1 && mode == "ngram") rows.back().name += "+spec";
      if (modes.size() > 1 && mode != "ngram" && mode != "off") rows.back().name += "+" + mode;
    }
    // The peer on the same token prompts (it always caches: no row for nocache-psm).
    if (!a.peer_llama_server.empty() && !is_auto(s) && scheme_server(s).prefix_cache) {
      RunOptions peer = ro;
      peer.speculative = "off";
      peer.peer_llama_server = a.peer_llama_server;
      peer.peer_slot_ctx = peer_slot_ctx;
      results.push_back(run_scheme(layout, w, s, peer));
      rows.push_back(summarize(results.back()));
    }
  }
  add_ratios(rows);
  add_same_text(results, rows);
  const std::string md = markdown_table(rows);
  std::printf("%s", md.c_str());
  std::fflush(stdout);
  if (a.out_dir.empty()) return;
  const std::string title =
      str("efim bench infill: ", std::filesystem::path(a.model).filename().string(), ", ",
          a.workload.users, " users x ", a.workload.rounds, " rounds, ", a.sampling.output_tokens,
          " output tokens");
  write_outputs(a, report_json(config_json(a, w, layout, n_ctx), results, rows), md,
                svg_chart(rows, title));
}

}  // namespace

void register_bench_infill(CLI::App& bench) {
  auto a = std::make_shared<BenchInfillArgs>();
  auto* cmd = bench.add_subcommand(
      "infill",
      "The EFIM paper's typing workload against efim serve: TTFT, TPOT, latency, "
      "throughput and prefix-cache reuse per prompt scheme");
  cmd->add_option("model", a->model,
                  "HF folder or .gguf file (served, and its tokenizer "
                  "builds the prompts)")
      ->required();
  cmd->add_option("--schemes", a->schemes,
                  "Comma list of nocache-psm, cache-psm, cache-spm, "
                  "cache-efim, cache-auto, cache-auto-noheal and cache-auto-exact (not in all), or all")
      ->capture_default_str();
  cmd->add_option("--users", a->workload.users, "Concurrent users (one file each)")
      ->capture_default_str();
  cmd->add_option("--rounds", a->workload.rounds, "Typing rounds per user (sequential)")
      ->capture_default_str();
  cmd->add_option("--output-tokens", a->sampling.output_tokens,
                  "Tokens generated per request "
                  "(ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--seed", a->workload.seed, "Seed of the user sampling")->capture_default_str();
  cmd->add_option("--sampling-seed", a->sampling.seed, "Request i samples with seed + i")
      ->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature)->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p)->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k)->capture_default_str();
  cmd->add_option("--docs", a->workload.corpus.dir, "Folder searched recursively for *.py")
      ->capture_default_str();
  cmd->add_option("--min-doc-tokens", a->workload.corpus.min_tokens,
                  "Shortest file, in tokens (the paper: 2048)")
      ->capture_default_str();
  cmd->add_option("--max-doc-tokens", a->workload.corpus.max_tokens,
                  "Longest file, in tokens (the paper: 4096)")
      ->capture_default_str();
  cmd->add_option("--server", a->server_url,
                  "Bench this running server (http://host:port) "
                  "with one scheme instead of starting efim serve");
  cmd->add_option("--api-key", a->api_key, "Bearer key for --server");
  cmd->add_option("-t,--threads", a->threads, "Server threads (0 = all cores)")
      ->capture_default_str();
  cmd->add_option("--kv-cache-mb", a->kv_cache_mb, "Server K/V cache in MiB")
      ->capture_default_str();
  cmd->add_option("--max-requests", a->max_requests, "Passed to efim serve when > 0");
  cmd->add_option("--speculative", a->speculative,
                  "Server speculative decoding: off, ngram, draft, ngram+draft, or a comma list "
                  "of them (each scheme once per mode: rows '+spec' for ngram, '+draft', and how "
                  "many texts are the same as without); both = off,ngram")
      ->capture_default_str();
  cmd->add_option("--draft-model", a->draft_model,
                  "The servers' --draft-model for the modes draft and ngram+draft");
  cmd->add_option("--peer-llama-server", a->peer_llama_server,
                  "Path to llama.cpp's llama-server (peers/llama_cpp/build_server.sh builds it): "
                  "each token-prompt scheme is run again against it on the same GGUF and "
                  "workload (one slot per user, its default f16 K/V), rows '<scheme> "
                  "(llama-server)'");
  cmd->add_option("--out", a->out_dir, "Write bench_infill.json, .md, .svg and server logs here");
  cmd->add_flag("--no-progress", a->no_progress, "No progress line on stderr");
  cmd->callback([a] { run_bench_infill(*a); });
}

}  // namespace efim::app
