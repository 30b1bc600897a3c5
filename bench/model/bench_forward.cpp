// Forward-pass timing without the peer: prefill of P tokens in one step and decode of G tokens
// one at a time from an empty cache (the two tests of `efim bench-model`), median over reps.
// Run it under `perf record` with --only prefill|decode for a per-op time breakdown.
//
//   efim_bench_forward MODEL.gguf [--threads 2] [--prompt-len 256] [--gen 64] [--reps 5]
//                      [--only prefill|decode]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/model.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, only;
  int threads = 2, prompt_len = 256, gen = 64, reps = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      EFIM_CHECK(i + 1 < argc, "missing value after ", s);
      return argv[++i];
    };
    if (s == "--threads") a.threads = std::stoi(next());
    else if (s == "--prompt-len") a.prompt_len = std::stoi(next());
    else if (s == "--gen") a.gen = std::stoi(next());
    else if (s == "--reps") a.reps = std::stoi(next());
    else if (s == "--only") a.only = next();
    else a.model = s;
  }
  EFIM_CHECK(!a.model.empty(), "usage: efim_bench_forward MODEL.gguf [options]");
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  efim::LoadOptions lo;
  lo.n_threads = a.threads;
  auto model = efim::Model::load(a.model, lo);
  std::mt19937 rng(0);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(model->config().vocab - 1));
  std::vector<double> pp_ms, tg_ms;
  for (int r = 0; r <= a.reps; ++r) {  // rep 0 warms up (pages in the weights)
    if (a.only != "decode") {
      std::vector<int32_t> prompt(static_cast<size_t>(a.prompt_len));
      for (auto& t : prompt) t = tok(rng);
      efim::ContiguousSession s(*model, a.prompt_len);
      auto t0 = Clock::now();
      s.eval(prompt);
      if (r > 0) pp_ms.push_back(1e3 * seconds_since(t0));
    }
    if (a.only != "prefill") {
      efim::ContiguousSession s(*model, a.gen);
      auto t0 = Clock::now();
      for (int i = 0; i < a.gen; ++i) s.eval({tok(rng)});
      if (r > 0) tg_ms.push_back(1e3 * seconds_since(t0) / a.gen);
    }
  }
  if (!pp_ms.empty())
    std::printf("prefill %d: %.2f ms (%.1f tok/s)\n", a.prompt_len, median(pp_ms),
                1e3 * a.prompt_len / median(pp_ms));
  if (!tg_ms.empty())
    std::printf("decode %d: %.3f ms/token (%.1f tok/s)\n", a.gen, median(tg_ms),
                1e3 / median(tg_ms));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
