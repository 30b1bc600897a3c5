// `efim bench-model MODEL.gguf...`: prefill and single-sequence decode speed of efim next to
// llama.cpp (the prebuilt library, through .deps/bin/llama_ref) on the same GGUF, in the same
// run, with ratios and the share of this machine's measured FMA peak (prefill) and memory
// bandwidth (decode).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/loaded.h"
#include "engine/engine.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/peak.h"
#include "base/error.h"
#include "format/gguf.h"
#include "model/config.h"

namespace efim::app {
namespace {

struct BenchArgs {
  std::vector<std::string> models;
  std::string peer = ".deps/bin/llama_ref";
  std::string json_out;
  int prompt_len = 256, gen = 64, reps = 3, threads = 2;
  int depth = 0;                 // tokens in the K/V cache before the decode test (llama-bench -d)
  std::string kv_type = "f16";   // both engines' K/V cache element type
  bool no_peer = false;
  std::string peer_cpu;  // the peer's CPU backend variant (haswell, alderlake, ...), "" = its best
  bool mmap = false;  // weights mapped from the page cache instead of copied into huge pages
  std::vector<int> users;  // batched decode: these numbers of sequences decoding together
};

struct Speed {
  double prefill_tps = 0, decode_tps = 0;
  std::string cpu_backend;  // the peer's: the libggml-cpu-*.so it ran on
  double bandwidth_gbs = 0;  // efim's: the read bandwidth probed just before its decode
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;

// One repetition of llama-bench's pp and tg tests at its depth: `depth` random tokens are put
// into the cache (untimed), then P random tokens in one step, then (the cache cut back to the
// depth) G tokens decoded one at a time. With a probe pool, the machine's read bandwidth is
// measured just before the decode, the roofline of that repetition's decode.
Speed run_efim_once(Model& model, const BenchArgs& a, std::mt19937& rng,
                    ThreadPool* probe = nullptr) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model.config().vocab - 1));
  Speed s;
  ContiguousSession session(model, a.depth + std::max(a.prompt_len, a.gen),
                            parse_kv_type(a.kv_type));
  if (a.depth > 0) {
    std::vector<int32_t> context(static_cast<size_t>(a.depth));
    for (auto& t : context) t = tok(rng);
    session.eval(context);
  }
  std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_len));
  for (auto& t : prompt) t = tok(rng);
  auto t0 = Clock::now();
  session.eval(prompt);
  s.prefill_tps = a.prompt_len / std::chrono::duration<double>(Clock::now() - t0).count();

  session.truncate(a.depth);
  if (probe) s.bandwidth_gbs = cpu::measure_memory_bandwidth_gbs(*probe);
  t0 = Clock::now();
  for (int i = 0; i < a.gen; ++i) session.eval({tok(rng)});
  s.decode_tps = a.gen / std::chrono::duration<double>(Clock::now() - t0).count();
  return s;
}

Speed run_peer_once(const BenchArgs& a, const std::string& model) {
  const std::string env = a.peer_cpu.empty() ? "" : "LLAMA_REF_CPU_VARIANT=" + a.peer_cpu + " ";
  std::string cmd = env + a.peer + " bench '" + model + "' --prompt-len " + std::to_string(a.prompt_len) +
                    " --gen " + std::to_string(a.gen) + " --depth " + std::to_string(a.depth) +
                    " --kv-type " + a.kv_type + " --threads " + std::to_string(a.threads) +
                    " --reps 1 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  EFIM_CHECK(p, "cannot run the peer: ", cmd);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  int rc = ::pclose(p);
  EFIM_CHECK(rc == 0, "peer failed (exit ", rc, "): ", cmd);
  auto j = nlohmann::json::parse(out);
  return Speed{j.at("prefill_tps").get<double>(), j.at("decode_tps").get<double>(),
               j.value("cpu_backend", std::string())};
}

// Bytes a decode step streams: every weight except the embedding table (one row is read),
// unless the output projection is tied to it; of a mixture of experts' stacked tensors, the k
// experts a token uses (k / n_experts of them).
struct ModelCost {
  double decode_bytes = 0;
  double prefill_flops_per_token = 0;  // matmuls + attention at the benchmark's prompt length
  std::string dtype;
};

ModelCost model_cost(const std::string& path, const ModelConfig& c, int prompt_len, int depth) {
  GgufFile f = GgufFile::open(path);
  ModelCost cost;
  bool has_output = false;
  double matmul_params = 0;
  for (const auto& t : f.tensors()) {
    if (t.name == "output.weight") has_output = true;
    if (t.name == "blk.0.attn_q.weight") cost.dtype = std::string(dtype_name(t.dtype));
  }
  for (const auto& t : f.tensors()) {
    double numel = 1;
    for (auto d : t.dims) numel *= static_cast<double>(d);
    bool embed = t.name == "token_embd.weight";
    const bool experts = t.dims.size() == 3 && c.moe();
    const double used = experts ? static_cast<double>(c.n_experts_used) /
                                      static_cast<double>(c.n_experts)
                                : 1.0;
    if (!embed || !has_output) cost.decode_bytes += used * static_cast<double>(t.nbytes);
    if ((t.dims.size() == 2 || experts) && (!embed || !has_output)) matmul_params += used * numel;
  }
  // Prefill of P tokens after D in the cache: 2 flops per matmul weight per token (the output
  // head runs for the last token only, which the per-token figure ignores) plus attention, QK^T
  // and PV: 2 * 2 * q_dim * (D + (P + 1) / 2) per token and layer on average.
  double head = static_cast<double>(c.vocab * c.hidden);
  cost.prefill_flops_per_token = 2 * (matmul_params - head) +
                                 2.0 * static_cast<double>(c.q_dim()) *
                                     (prompt_len + 1 + 2.0 * depth) *
                                     static_cast<double>(c.n_layers);
  return cost;
}

// Batched decode (efim only): `users` sequences, each with max(depth, 1) random tokens in the
// cache (prefilled one sequence at a time, untimed), then `gen` steps that decode one token of
// every sequence. Returns the tokens per second of all sequences together.
double run_batched_once(Model& model, const BenchArgs& a, int users, std::mt19937& rng) {
  const ModelConfig& c = model.config();
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab - 1));
  const int64_t ctx = std::max(a.depth, 1), per = ctx + a.gen;  // slots per sequence
  KvCache cache = KvCache::for_model(c, users * per, parse_kv_type(a.kv_type));
  std::vector<float> logits(static_cast<size_t>(users * c.vocab));  // [users, vocab]
  auto slots = [&](int u, int64_t n) {  // sequence u's slots for positions [0, n)
    std::vector<int32_t> s(static_cast<size_t>(n));
    for (int64_t p = 0; p < n; ++p) s[size_t(p)] = static_cast<int32_t>(u * per + p);
    return s;
  };
  for (int u = 0; u < users; ++u) {
    Batch b;
    const int32_t si = b.add_sequence(slots(u, ctx));
    for (int64_t p = 0; p < ctx; ++p) b.add_token(tok(rng), int32_t(p), si, p == ctx - 1);
    model.forward(b, cache, logits.data());
  }
  const auto t0 = Clock::now();
  for (int g = 0; g < a.gen; ++g) {
    Batch b;
    for (int u = 0; u < users; ++u) {
      const int32_t si = b.add_sequence(slots(u, ctx + g + 1));
      b.add_token(tok(rng), int32_t(ctx + g), si, true);
    }
    model.forward(b, cache, logits.data());
  }
  return users * a.gen / std::chrono::duration<double>(Clock::now() - t0).count();
}

// The batched-decode table of one model: every --users count, median of --reps.
void batched_rows(Model& model, const BenchArgs& a, const std::string& name,
                  const ModelCost& cost, double bandwidth_gbs, nlohmann::json& report) {
  const double kv_token = double(Engine::kv_bytes_per_token(model.config(),
                                                            parse_kv_type(a.kv_type)));
  std::printf("\n| model | users | decode tok/s, all | per user | ms per step | bytes per step "
              "(MB) | share of bandwidth |\n|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(1);
  for (int users : a.users) {
    std::vector<double> tps;
    for (int r = 0; r < a.reps; ++r) tps.push_back(run_batched_once(model, a, users, rng));
    const double all = median(tps), step_s = users / all;
    // Each step reads the weights once and every sequence's K/V (depth + gen / 2 on average).
    const double bytes = cost.decode_bytes + users * kv_token * (std::max(a.depth, 1) + a.gen / 2.0);
    const double share = bytes / step_s / 1e9 / bandwidth_gbs;
    std::printf("| %s | %d | %.1f | %.1f | %.2f | %.1f | %.0f%% |\n", name.c_str(), users, all,
                all / users, 1000 * step_s, bytes / 1e6, 100 * share);
    report.push_back({{"model", name}, {"users", users}, {"decode_tps_all", all},
                      {"decode_tps_per_user", all / users}, {"bytes_per_step", bytes},
                      {"share_of_bandwidth", share}, {"depth", a.depth}, {"kv_type", a.kv_type}});
  }
}

void run_bench(const BenchArgs& a) {
  EFIM_CHECK(a.prompt_len > 0 && a.gen > 0 && a.reps > 0, "--prompt-len, --gen and --reps must be"
             " positive");
  EFIM_CHECK(a.depth >= 0, "--depth must be >= 0, got ", a.depth);
  for (int u : a.users) EFIM_CHECK(u >= 1 && u <= 256, "--users takes 1..256, got ", u);
  (void)parse_kv_type(a.kv_type);  // a bad name fails before any model loads
  bool peer = !a.no_peer;
  // The variant goes into a shell command line: a plain name only.
  EFIM_CHECK(a.peer_cpu.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                 std::string::npos,
             "--peer-cpu takes a variant name such as haswell or alderlake, got '", a.peer_cpu, "'");
  if (peer)
    EFIM_CHECK(std::filesystem::exists(a.peer), "peer harness '", a.peer, "' not found: run "
               "scripts/build_llama_ref.sh (make deps), or pass --no-peer");
  ThreadPool probe(a.threads);
  double peak_gflops = cpu::measure_fma_peak_gflops(probe);
  double bandwidth_gbs = cpu::measure_memory_bandwidth_gbs(probe);
  std::printf("machine: FMA peak %.1f GFLOP/s, read bandwidth %.1f GB/s (%d threads)\n",
              peak_gflops, bandwidth_gbs, a.threads);
  std::printf("efim weights: %s\n\n", a.mmap ? "mapped from the page cache (--mmap)"
                                            : "copied into transparent huge pages");
  std::printf("| model | dtype | test | efim tok/s | llama.cpp tok/s | ratio | efim share of peak |\n"
              "|---|---|---|---|---|---|---|\n");
  nlohmann::json report = nlohmann::json::array();
  const std::string kernels(cpu::kernel_name(cpu::active_kernel()));
  std::string peer_backend;  // the libggml-cpu-*.so the peer ran on, as it reported
  double probed_min = 1e300, probed_max = 0;  // the bandwidth probed before each decode
  for (const auto& path : a.models) {
    EFIM_CHECK(is_gguf_path(path), "bench-model needs .gguf files (the peer reads GGUF), got '",
               path, "'");
    LoadOptions lo;
    lo.n_threads = a.threads;
    lo.huge_pages = !a.mmap;
    auto model = Model::load(path, lo);
    ModelCost cost = model_cost(path, model->config(), a.prompt_len, a.depth);
    // Decode also reads the K/V of the context, depth + gen / 2 tokens on average.
    const double kv_bytes = double(Engine::kv_bytes_per_token(model->config(),
                                                              parse_kv_type(a.kv_type))) *
                            (a.depth + a.gen / 2.0);
    std::mt19937 rng(0);
    run_efim_once(*model, a, rng);  // warm-up (page in the weights)
    std::vector<double> pp, tg, peer_pp, peer_tg, tg_shares, rep_bandwidth;
    for (int r = 0; r < a.reps; ++r) {  // interleaved so both see the same machine noise
      Speed s = run_efim_once(*model, a, rng, &probe);
      pp.push_back(s.prefill_tps);
      tg.push_back(s.decode_tps);
      rep_bandwidth.push_back(s.bandwidth_gbs);
      probed_min = std::min(probed_min, s.bandwidth_gbs);
      probed_max = std::max(probed_max, s.bandwidth_gbs);
      tg_shares.push_back(s.decode_tps * (cost.decode_bytes + kv_bytes) / 1e9 / s.bandwidth_gbs);
      if (peer) {
        Speed p = run_peer_once(a, path);
        peer_pp.push_back(p.prefill_tps);
        peer_tg.push_back(p.decode_tps);
        peer_backend = std::filesystem::path(p.cpu_backend).filename().string();
      }
    }
    std::string name = std::filesystem::path(path).filename().string();
    double e_pp = median(pp), e_tg = median(tg), p_pp = median(peer_pp), p_tg = median(peer_tg);
    double pp_share = e_pp * cost.prefill_flops_per_token / 1e9 / peak_gflops;
    // Decode against the bandwidth probed just before each repetition's decode (this VM's
    // bandwidth swings by 20-30% from minute to minute): the median of the repetitions' shares.
    const double tg_share = median(tg_shares);
    auto row = [&](const char* test, double e, double p, double share, const char* of) {
      char peer_tps[32] = "-", ratio[32] = "-";
      if (peer) {
        std::snprintf(peer_tps, sizeof peer_tps, "%.1f", p);
        std::snprintf(ratio, sizeof ratio, "%.2f", e / p);
      }
      std::printf("| %s | %s | %s | %.1f | %s | %s | %.0f%% of %s |\n", name.c_str(),
                  cost.dtype.c_str(), test, e, peer_tps, ratio, 100 * share, of);
    };
    const std::string at = a.depth > 0 ? " @ " + std::to_string(a.depth) : "";
    row(("prefill " + std::to_string(a.prompt_len) + at).c_str(), e_pp, p_pp, pp_share,
        "FMA peak");
    row(("decode " + std::to_string(a.gen) + at + " (" + a.kv_type + " K/V)").c_str(), e_tg, p_tg,
        tg_share, "bandwidth");
    report.push_back({{"model", path}, {"dtype", cost.dtype}, {"prefill_tps", e_pp},
                      {"decode_tps", e_tg}, {"peer_prefill_tps", p_pp}, {"peer_decode_tps", p_tg},
                      {"prefill_share_of_fma_peak", pp_share},
                      {"decode_share_of_bandwidth", tg_share}, {"fma_peak_gflops", peak_gflops},
                      {"bandwidth_gbs", bandwidth_gbs}, {"decode_bandwidth_gbs", rep_bandwidth},
                      {"threads", a.threads}, {"huge_pages", !a.mmap},
                      {"prompt_len", a.prompt_len}, {"gen", a.gen}, {"reps", a.reps},
                      {"depth", a.depth}, {"kv_type", a.kv_type}, {"decode_kv_bytes", kv_bytes},
                      {"efim_kernel", kernels}, {"peer_cpu_backend", peer_backend}});
    if (!a.users.empty()) batched_rows(*model, a, name, cost, bandwidth_gbs, report);
  }
  if (probed_max > 0)
    std::printf("\ndecode shares: of the read bandwidth probed just before each repetition's "
                "decode, %.1f-%.1f GB/s (median of the repetitions' shares)",
                probed_min, probed_max);
  std::printf("\nefim kernels: %s", kernels.c_str());
  if (peer) std::printf("; llama.cpp CPU backend: %s", peer_backend.empty() ? "?" : peer_backend.c_str());
  std::printf("\n");
  if (!a.json_out.empty()) std::ofstream(a.json_out) << report.dump(1) << "\n";
}

}  // namespace

void register_bench_model(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench-model", "Prefill/decode tokens/s vs llama.cpp");
  cmd->add_option("models", a->models, "GGUF files")->required();
  cmd->add_option("--peer", a->peer, "llama_ref harness")->capture_default_str();
  cmd->add_flag("--no-peer", a->no_peer, "Measure efim only");
  cmd->add_option("--peer-cpu", a->peer_cpu,
                  "llama.cpp's CPU backend variant (haswell, alderlake, zen4, ...; default: the "
                  "best for this CPU); with EFIM_KERNEL=avx2, both engines on AVX2");
  cmd->add_flag("--mmap", a->mmap,
                "Map efim's weights from the page cache (as llama.cpp does) instead of copying "
                "them into transparent huge pages");
  cmd->add_option("--prompt-len", a->prompt_len, "Prefill tokens")->capture_default_str();
  cmd->add_option("--gen", a->gen, "Decoded tokens")->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions (median)")->capture_default_str();
  cmd->add_option("--depth", a->depth,
                  "Tokens in the K/V cache before the decode test (as llama-bench -d)")
      ->capture_default_str();
  cmd->add_option("--kv-type", a->kv_type, "K/V cache element type of both engines: f16, q8_0, f32")
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads for both engines")->capture_default_str();
  cmd->add_option("--json", a->json_out, "Also write the results as JSON");
  cmd->add_option("--users", a->users,
                  "Batched decode (efim only): decode these numbers of sequences together, each "
                  "at --depth, e.g. --users 1,2,4,8,16")
      ->delimiter(',');
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace efim::app
