// efim_bench_ggml: our matmul against llama.cpp's ggml mul_mat on the same shapes and data.
// ggml comes from the prebuilt libraries that scripts/deps.sh unpacks under .deps (the
// AVX2 "haswell" CPU variant, which is what llama.cpp's loader picks on an AVX2 CPU without
// AVX-512/VNNI), loaded with dlopen; only the few C entry points used are declared here.
// ggml gets a persistent thread pool, as llama.cpp uses. Weights are in ggml's plain layout
// (no load-time repacking: llama.cpp repacks Q4_0 into interleaved rows on AVX2 by default,
// which this comparison does not cover). Both sides are timed alternately with wall clocks;
// the minimum over repetitions is reported (robust to other jobs on the machine).
//   efim_bench_ggml [--threads N] [--dtypes bf16,q8_0,q4_k,...]  (EFIM_GGML_CPU=zen4: that ggml build)
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/error.h"
#include "format/gguf.h"
#include "tensor/quant.h"

namespace {

// ---- the ggml C API subset (see ggml/include/ggml.h and ggml-cpu.h) ----
struct GgmlInitParams {
  size_t mem_size;
  void* mem_buffer;
  bool no_alloc;
};
struct GgmlCplan {
  size_t work_size;
  uint8_t* work_data;
  int n_threads;
  void* threadpool;
  void* abort_callback;
  void* abort_callback_data;
  bool use_ref;
};
struct GgmlThreadpoolParams {  // opaque, larger than ggml's struct
  alignas(16) unsigned char bytes[4096];
};

struct Ggml {
  void* init_fn;
  void* (*init)(GgmlInitParams);
  void (*free)(void*);
  void* (*new_tensor_2d)(void*, int, int64_t, int64_t);
  void* (*get_data)(void*);
  void* (*mul_mat)(void*, void*, void*);
  void* (*new_graph)(void*);
  void (*build_forward_expand)(void*, void*);
  GgmlCplan (*graph_plan)(const void*, int, void*);
  int (*graph_compute)(void*, GgmlCplan*);
  void (*cpu_init)();
  GgmlThreadpoolParams (*threadpool_params_default)(int);
  void* (*threadpool_new)(GgmlThreadpoolParams*);
  size_t (*quantize_chunk)(int, const float*, void*, int64_t, int64_t, int64_t, const float*);
};

template <typename F>
void bind(void* lib, const char* name, F& fn) {
  void* p = dlsym(lib, name);
  EFIM_CHECK(p != nullptr, "ggml library lacks symbol ", name);
  fn = reinterpret_cast<F>(p);
}

Ggml load_ggml() {
  const std::string dir = std::string(EFIM_SOURCE_DIR) +
                          "/.deps/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/";
  void* base = dlopen((dir + "libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
  EFIM_CHECK(base != nullptr, "cannot load ggml (run scripts/deps.sh): ", dlerror());
  // The AVX2 build by default (what efim's AVX2 kernels compare with); EFIM_GGML_CPU picks
  // another, e.g. zen4 or skylakex.
  const char* variant = std::getenv("EFIM_GGML_CPU");
  const std::string cpu_lib = "libggml-cpu-" + std::string(variant ? variant : "haswell") + ".so";
  void* cpu = dlopen((dir + cpu_lib).c_str(), RTLD_NOW | RTLD_GLOBAL);
  EFIM_CHECK(cpu != nullptr, "cannot load ", cpu_lib, ": ", dlerror());
  Ggml g{};
  bind(base, "ggml_init", g.init);
  bind(base, "ggml_quantize_chunk", g.quantize_chunk);
  bind(base, "ggml_free", g.free);
  bind(base, "ggml_new_tensor_2d", g.new_tensor_2d);
  bind(base, "ggml_get_data", g.get_data);
  bind(base, "ggml_mul_mat", g.mul_mat);
  bind(base, "ggml_new_graph", g.new_graph);
  bind(base, "ggml_build_forward_expand", g.build_forward_expand);
  bind(cpu, "ggml_graph_plan", g.graph_plan);
  bind(cpu, "ggml_graph_compute", g.graph_compute);
  bind(cpu, "ggml_cpu_init", g.cpu_init);
  bind(cpu, "ggml_threadpool_params_default", g.threadpool_params_default);
  bind(cpu, "ggml_threadpool_new", g.threadpool_new);
  g.cpu_init();
  return g;
}

int ggml_type_of(efim::DType t) { return static_cast<int>(efim::ggml_type_id(t)); }

struct Shape {
  int64_t m, k, n;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void compare(const Ggml& g, void* threadpool, efim::ThreadPool& pool, int threads, efim::DType t,
             Shape s) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(s.n * s.k)), x(static_cast<size_t>(s.m * s.k));
  for (auto& v : wf) v = 0.02f * normal(rng);
  for (auto& v : x) v = normal(rng);
  // efim's quantizers where it has them (f32, f16, bf16, q8_0, q4_0), ggml's for the others.
  std::vector<uint8_t> wbytes;
  const bool ours = !efim::is_quantized(t) || t == efim::DType::Q8_0 || t == efim::DType::Q4_0;
  if (ours) {
    wbytes = efim::quantize(wf.data(), s.n * s.k, t);
  } else {
    wbytes.resize(s.n * efim::dtype_row_bytes(t, static_cast<uint64_t>(s.k)));
    g.quantize_chunk(ggml_type_of(t), wf.data(), wbytes.data(), 0, s.n, s.k, nullptr);
  }

  GgmlInitParams ip{wbytes.size() + x.size() * 4 + static_cast<size_t>(s.m * s.n) * 4 + (1 << 20),
                    nullptr, false};
  void* ctx = g.init(ip);
  void* W = g.new_tensor_2d(ctx, ggml_type_of(t), s.k, s.n);  // ne0 = k (contiguous), ne1 = n
  void* X = g.new_tensor_2d(ctx, 0, s.k, s.m);
  std::memcpy(g.get_data(W), wbytes.data(), wbytes.size());
  std::memcpy(g.get_data(X), x.data(), x.size() * 4);
  void* Y = g.mul_mat(ctx, W, X);  // [n, m]: y[i][r] at i * n + r, like ours
  void* graph = g.new_graph(ctx);
  g.build_forward_expand(graph, Y);
  GgmlCplan plan = g.graph_plan(graph, threads, threadpool);
  std::vector<uint8_t> work(plan.work_size + 64);
  plan.work_data = work.data();

  std::vector<float> y(static_cast<size_t>(s.m * s.n));
  efim::cpu::WeightMatrix wm{t, s.n, s.k, wbytes.data()};
  double best_ours = 1e30, best_ggml = 1e30;
  const int reps = s.m == 1 ? 200 : 12;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    efim::cpu::matmul(pool, x.data(), s.m, wm, y.data());
    best_ours = std::min(best_ours, now() - t0);
    t0 = now();
    EFIM_CHECK(g.graph_compute(graph, &plan) == 0, "ggml_graph_compute failed");
    best_ggml = std::min(best_ggml, now() - t0);
  }
  // Same results up to activation rounding: a cross-check that both computed the same thing.
  const float* yg = static_cast<const float*>(g.get_data(Y));
  double err = 0, norm = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    err += (y[i] - yg[i]) * static_cast<double>(y[i] - yg[i]);
    norm += yg[i] * static_cast<double>(yg[i]);
  }
  const double flops = 2.0 * s.m * s.n * s.k;
  std::printf(
      "%-5s m=%4lld k=%5lld n=%6lld  efim %8.1f us %7.1f %s | ggml %8.1f us %7.1f %s | "
      "speedup %.2fx  rel diff %.1e\n",
      std::string(efim::dtype_name(t)).c_str(), static_cast<long long>(s.m),
      static_cast<long long>(s.k), static_cast<long long>(s.n), best_ours * 1e6,
      s.m == 1 ? wbytes.size() / best_ours / 1e9 : flops / best_ours / 1e9,
      s.m == 1 ? "GB/s   " : "GFLOP/s", best_ggml * 1e6,
      s.m == 1 ? wbytes.size() / best_ggml / 1e9 : flops / best_ggml / 1e9,
      s.m == 1 ? "GB/s   " : "GFLOP/s", best_ggml / best_ours, std::sqrt(err / norm));
  std::fflush(stdout);
  g.free(ctx);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int threads = efim::ThreadPool::default_threads();
    std::vector<efim::DType> dtypes{efim::DType::F32, efim::DType::BF16, efim::DType::F16,
                                    efim::DType::Q8_0, efim::DType::Q4_0};
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      EFIM_CHECK(i + 1 < argc, "option ", a, " needs a value");
      if (a == "--threads") {
        threads = std::atoi(argv[++i]);
      } else if (a == "--dtypes") {
        dtypes.clear();
        std::string list = argv[++i];
        for (size_t p = 0; p < list.size();) {
          size_t c = list.find(',', p);
          if (c == std::string::npos) c = list.size();
          dtypes.push_back(efim::dtype_from_name(list.substr(p, c - p)));
          p = c + 1;
        }
      } else {
        efim::fail("unknown option '", a, "'");
      }
    }
    const Ggml g = load_ggml();
    GgmlThreadpoolParams tpp = g.threadpool_params_default(threads);
    void* tp = g.threadpool_new(&tpp);
    efim::ThreadPool pool(threads);
    std::printf("threads %d, efim kernel %s, best-of wall times\n", threads,
                std::string(efim::cpu::kernel_name(efim::cpu::active_kernel())).c_str());
    const Shape shapes[] = {{256, 768, 2048}, {64, 768, 2048}, {256, 2048, 768}, {256, 384, 1024},
                            {1, 768, 2048},   {1, 2048, 768},  {1, 768, 32000},  {1, 384, 1024},
                            // Qwen2.5-Coder-1.5B decode: gate|up, down, attention
                            {1, 1536, 17920}, {1, 8960, 1536}, {1, 1536, 1536}};
    for (efim::DType t : dtypes)
      for (const Shape& s : shapes)
        if (s.k % efim::dtype_info(t).block_elems == 0) compare(g, tp, pool, threads, t, s);
    return 0;
  } catch (const efim::Error& e) {
    std::fprintf(stderr, "efim_bench_ggml: %s\n", e.what());
    return 1;
  }
}
