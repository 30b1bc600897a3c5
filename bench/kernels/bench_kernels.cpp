// efim_bench_kernels: matmul throughput per weight dtype and kernel variant.
//   prefill shapes (m = 64..512 rows of x): GFLOP/s (2*m*n*k / time) and % of the FMA peak;
//   decode shapes (m = 1): GB/s of weight bytes streamed and % of the measured DRAM bandwidth
//   (weights rotate through copies larger than the L3, as a model's layers do per token).
// Times are medians over repeated calls: wall time, or with --cpu-time the process CPU time per
// call divided by the thread count (what the wall time would be on an idle machine with
// balanced threads; use it when other jobs share the cores). Usage:
//   efim_bench_kernels [--threads N] [--variants avx2,scalar] [--dtypes f32,q4_k,...] [--quick]
//                      [--cpu-time] [--only prefill|decode] [--interleave] [--warm]
// --warm: decode reuses one copy of W (in the caches where it fits): the kernels' arithmetic
// rate rather than DRAM's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "backend/cpu/interleave.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/peak.h"
#include "base/error.h"
#include "tensor/quant.h"

namespace {

using efim::DType;
using efim::cpu::CpuKernel;
using Clock = std::chrono::steady_clock;

struct Shape {
  int64_t m, k, n;
  const char* what;
};

// The ~100M llama (hidden 768, ffn 2048, vocab 32000) and efim-base-py (384, kv 128, ffn 1024,
// vocab 16384).
const Shape kPrefill[] = {
    {256, 768, 2048, "llama100m ffn up"}, {256, 2048, 768, "llama100m ffn down"},
    {256, 768, 768, "llama100m attn"},    {64, 768, 2048, "llama100m ffn up"},
    {512, 768, 2048, "llama100m ffn up"}, {256, 384, 1024, "efim-py ffn up"},
    {256, 1024, 384, "efim-py ffn down"}, {256, 384, 128, "efim-py kv"},
};
const Shape kDecode[] = {
    {1, 768, 2048, "llama100m ffn up"}, {1, 2048, 768, "llama100m ffn down"},
    {1, 768, 768, "llama100m attn"},    {1, 768, 32000, "llama100m lm head"},
    {1, 384, 1024, "efim-py ffn up"},   {1, 1024, 384, "efim-py ffn down"},
    {1, 384, 16384, "efim-py lm head"},
    // Qwen2.5-Coder-1.5B (hidden 1536, kv 256, ffn 8960): the model users run most.
    {1, 1536, 17920, "qwen1.5b gate|up"}, {1, 8960, 1536, "qwen1.5b ffn down"},
    {1, 1536, 1536, "qwen1.5b attn"},     {1, 1536, 256, "qwen1.5b kv"},
    {1, 1536, 151669, "qwen1.5b lm head"},
};

// Super-block types need k % 256 == 0: efim-base-py's 384-wide shapes are left out for them.
bool whole_blocks(const Shape& s, DType t) {
  return s.k % static_cast<int64_t>(efim::dtype_info(t).block_elems) == 0;
}

struct Options {
  int threads = efim::ThreadPool::default_threads();
  std::vector<CpuKernel> variants;
  std::vector<DType> dtypes{DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};
  bool quick = false;
  bool cpu_time = false;
  bool prefill = true, decode = true;
  bool interleave = false;  // Q4_K weights interleaved 8 rows at a time (as the model loads them)
  bool warm = false;        // decode from one copy of W, not copies rotating through DRAM
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      EFIM_CHECK(i + 1 < argc, "option ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--threads") {
      o.threads = std::atoi(value().c_str());
    } else if (a == "--variants") {
      for (const auto& v : split(value())) {
        if (v == "scalar")
          o.variants.push_back(CpuKernel::Scalar);
        else if (v == "avx2")
          o.variants.push_back(CpuKernel::Avx2);
        else if (v == "avx512")
          o.variants.push_back(CpuKernel::Avx512);
        else
          efim::fail("unknown variant '", v, "' (expected scalar, avx2 or avx512)");
      }
    } else if (a == "--dtypes") {
      o.dtypes.clear();
      for (const auto& d : split(value())) o.dtypes.push_back(efim::dtype_from_name(d));
    } else if (a == "--only") {
      const std::string which = value();
      EFIM_CHECK(which == "prefill" || which == "decode", "--only takes prefill or decode, got '",
                 which, "'");
      o.prefill = which == "prefill";
      o.decode = which == "decode";
    } else if (a == "--cpu-time") {
      o.cpu_time = true;
    } else if (a == "--warm") {
      o.warm = true;
    } else if (a == "--interleave") {
      o.interleave = true;
    } else if (a == "--quick") {
      o.quick = true;
    } else {
      efim::fail("unknown option '", a, "' (see the comment at the top of bench_kernels.cpp)");
    }
  }
  if (o.variants.empty()) o.variants.push_back(efim::cpu::active_kernel());
  return o;
}

std::vector<uint8_t> random_weights(int64_t n, int64_t k, DType t, uint32_t seed) {
  std::mt19937 rng(seed);
  if (efim::is_quantized(t) && t != DType::Q8_0 && t != DType::Q4_0) {
    // No quantizer for the K / I types here: random blocks (the int8 kernels' speed does not
    // depend on the values).
    std::vector<uint8_t> bytes(n * efim::dtype_row_bytes(t, static_cast<uint64_t>(k)));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    return bytes;
  }
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = normal(rng);
  return efim::quantize(w.data(), n * k, t);
}

// Median seconds per call of fn(call_index), after one warm-up call.
template <typename Fn>
double median_seconds(Fn fn, double budget_s, int min_reps, bool cpu_time, int threads) {
  fn(0);
  std::vector<double> times;
  const auto start = Clock::now();
  for (int rep = 1;; ++rep) {
    const auto t0 = Clock::now();
    const double c0 = process_cpu_seconds();
    fn(rep);
    if (cpu_time)
      times.push_back((process_cpu_seconds() - c0) / threads);
    else
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    const double spent = std::chrono::duration<double>(Clock::now() - start).count();
    if (static_cast<int>(times.size()) >= min_reps && spent >= budget_s) break;
    if (times.size() >= 1000) break;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

// The last-level cache's size as the OS reports it, at least 32 MiB.
uint64_t l3_bytes() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return std::max<uint64_t>(32ull << 20, l3 > 0 ? static_cast<uint64_t>(l3) : 0);
}

void run_shape(efim::ThreadPool& pool, const Options& o, const Shape& s, DType t, CpuKernel v,
               double peak_gflops, double bw_gbs) {
  const bool decode = s.m == 1;
  const uint64_t wbytes = efim::dtype_row_bytes(t, static_cast<uint64_t>(s.n * s.k));
  // Decode: enough copies of W to exceed the L3 three times over (a Xeon VM reports 480 MB,
  // where copies sized for 32 MiB ran from its L3 at 120-200% of DRAM's rate). The copies past
  // the first are byte copies of it (the kernels' speed does not depend on the values).
  const int copies =
      decode && !o.warm
          ? static_cast<int>(std::clamp<uint64_t>(3 * l3_bytes() / wbytes + 1, 1, 8192))
          : 1;
  std::vector<std::vector<uint8_t>> w(1, random_weights(s.n, s.k, t, 7));
  const bool x8 = o.interleave && efim::cpu::can_interleave({t, s.n, s.k, w[0].data()});
  if (x8) {
    std::vector<uint8_t> out(w[0].size());
    efim::cpu::interleave_rows8({t, s.n, s.k, w[0].data()}, out.data());
    w[0] = std::move(out);
  }
  w.resize(static_cast<size_t>(copies), w[0]);
  std::vector<float> x(static_cast<size_t>(s.m * s.k)), y(static_cast<size_t>(s.m * s.n));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& v : x) v = normal(rng);
  const double sec = median_seconds(
      [&](int call) {
        efim::cpu::WeightMatrix wm{t, s.n, s.k, w[static_cast<size_t>(call % copies)].data(),
                                   static_cast<int8_t>(x8 ? 8 : 1)};
        efim::cpu::matmul(pool, x.data(), s.m, wm, y.data(), v);
      },
      o.quick ? 0.1 : 0.4, v == CpuKernel::Scalar ? 2 : 5, o.cpu_time, o.threads);
  const double gflops = 2.0 * s.m * s.n * s.k / sec / 1e9;
  const double gbs = static_cast<double>(wbytes) / sec / 1e9;
  if (decode) {
    std::printf(
        "%-6s %-6s %4lld %5lld %6lld  %9.1f us  %7.1f GB/s  %5.1f%% of bw   (%5.1f GFLOP/s)  %s\n",
        std::string(efim::dtype_name(t)).c_str(), std::string(efim::cpu::kernel_name(v)).c_str(),
        static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.n),
        sec * 1e6, gbs, 100.0 * gbs / bw_gbs, gflops, s.what);
  } else {
    std::printf("%-6s %-6s %4lld %5lld %6lld  %9.1f us  %7.1f GFLOP/s  %5.1f%% of peak  %s\n",
                std::string(efim::dtype_name(t)).c_str(),
                std::string(efim::cpu::kernel_name(v)).c_str(), static_cast<long long>(s.m),
                static_cast<long long>(s.k), static_cast<long long>(s.n), sec * 1e6, gflops,
                100.0 * gflops / peak_gflops, s.what);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    efim::ThreadPool pool(o.threads);
    const double peak = efim::cpu::measure_fma_peak_gflops(pool);
    const double bw = efim::cpu::measure_memory_bandwidth_gbs(pool);
    std::printf(
        "threads %d, active kernel %s, FMA peak %.1f GFLOP/s, memory bandwidth %.1f GB/s, "
        "timing: %s\n\n",
        o.threads, std::string(efim::cpu::kernel_name(efim::cpu::active_kernel())).c_str(), peak,
        bw, o.cpu_time ? "process CPU time / threads" : "wall");
    if (o.prefill)
      std::printf("prefill (GEMM)\ndtype  kernel    m     k      n       time        throughput\n");
    for (DType t : o.prefill ? o.dtypes : std::vector<DType>{})
      for (CpuKernel v : o.variants)
        for (const Shape& s : kPrefill) {
          if (o.quick && s.m != 256) continue;
          if (!whole_blocks(s, t)) continue;
          run_shape(pool, o, s, t, v, peak, bw);
        }
    if (o.decode)
      std::printf(
          "\ndecode (GEMV)\ndtype  kernel    m     k      n       time        throughput\n");
    for (DType t : o.decode ? o.dtypes : std::vector<DType>{})
      for (CpuKernel v : o.variants)
        for (const Shape& s : kDecode)
          if (whole_blocks(s, t)) run_shape(pool, o, s, t, v, peak, bw);
    return 0;
  } catch (const efim::Error& e) {
    std::fprintf(stderr, "efim_bench_kernels: %s\n", e.what());
    return 1;
  }
}
