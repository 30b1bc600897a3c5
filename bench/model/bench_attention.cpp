// Decode attention at depth, alone: one sequence with D keys in a head-major cache of L layers
// (so the K/V stream comes from memory, as in a decode step), T query tokens (1, or a token
// and its speculative draft), timed over all layers; prints ms per step and the K/V read rate
// against the machine's read bandwidth. For profiling the attention kernels without the
// weights' GEMVs around them.
//
//   efim_bench_attention [--depth 4096] [--tokens 1] [--kv-type f16] [--layers 12]
//                        [--heads 12] [--kv-heads 4] [--head-dim 64] [--threads 2] [--reps 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/peak.h"
#include "base/error.h"
#include "base/huge_buffer.h"
#include "base/thread_pool.h"
#include "model/ops.h"
#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int64_t depth = 4096, tokens = 1, layers = 12, heads = 12, kv_heads = 4, head_dim = 64;
  int threads = 2, reps = 200;
  std::string kv_type = "f16";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      EFIM_CHECK(i + 1 < argc, "missing value after ", s);
      return argv[++i];
    };
    if (s == "--depth") a.depth = std::stoll(next());
    else if (s == "--tokens") a.tokens = std::stoll(next());
    else if (s == "--layers") a.layers = std::stoll(next());
    else if (s == "--heads") a.heads = std::stoll(next());
    else if (s == "--kv-heads") a.kv_heads = std::stoll(next());
    else if (s == "--head-dim") a.head_dim = std::stoll(next());
    else if (s == "--threads") a.threads = std::stoi(next());
    else if (s == "--reps") a.reps = std::stoi(next());
    else if (s == "--kv-type") a.kv_type = next();
    else efim::fail("unknown argument ", s);
  }
  return a;
}

efim::DType kv_dtype(const std::string& s) {
  if (s == "f32") return efim::DType::F32;
  if (s == "f16") return efim::DType::F16;
  if (s == "q8_0") return efim::DType::Q8_0;
  efim::fail("--kv-type ", s, ": f32, f16 or q8_0");
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace efim;
  const Args a = parse(argc, argv);
  const DType t = kv_dtype(a.kv_type);
  const int64_t n_ctx = a.depth + a.tokens, hd = a.head_dim;
  // Head-major layer: [kv_heads][n_ctx] rows of head_dim values.
  const uint64_t head_bytes = dtype_row_bytes(t, uint64_t(hd));
  const uint64_t layer_bytes = head_bytes * uint64_t(n_ctx * a.kv_heads);
  // Huge pages, as the engine's KvCache.
  HugePageBuffer k(layer_bytes * a.layers), v(layer_bytes * a.layers);
  std::mt19937 rng(7);
  {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(hd));
    for (uint64_t off = 0; off < k.size(); off += head_bytes) {
      for (uint8_t* dst : {k.data() + off, v.data() + off}) {
        for (float& x : row) x = nd(rng);
        const std::vector<uint8_t> bytes = quantize(row.data(), hd, t);
        std::copy(bytes.begin(), bytes.end(), dst);
      }
    }
  }
  std::vector<int32_t> ctx(static_cast<size_t>(n_ctx)), pos(static_cast<size_t>(a.tokens));
  for (int64_t i = 0; i < n_ctx; ++i) ctx[size_t(i)] = int32_t(i);
  std::vector<ops::AttentionSeq> seqs(1);
  seqs[0].ctx = ctx.data();
  seqs[0].n_ctx = n_ctx;
  for (int64_t i = 0; i < a.tokens; ++i) {
    seqs[0].tokens.push_back(int32_t(i));
    pos[size_t(i)] = int32_t(a.depth + i);
  }
  std::vector<float> q(static_cast<size_t>(a.tokens * a.heads * hd));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& x : q) x = nd(rng);
  std::vector<float> out(q.size());
  ThreadPool pool(a.threads);
  ops::AttentionScratch scratch;
  auto step = [&] {
    for (int64_t l = 0; l < a.layers; ++l) {
      ops::AttentionArgs args;
      args.q = q.data();
      args.pos = pos.data();
      args.k = k.data() + l * layer_bytes;
      args.v = v.data() + l * layer_bytes;
      args.out = out.data();
      args.n_heads = a.heads;
      args.n_kv_heads = a.kv_heads;
      args.head_dim = hd;
      args.seqs = &seqs;
      args.kv_type = t;
      args.kv_slot_stride = int64_t(head_bytes);
      args.kv_head_stride = int64_t(head_bytes) * n_ctx;
      ops::attention(pool, args, scratch);
    }
  };
  for (int i = 0; i < 5; ++i) step();
  std::vector<double> ms;
  for (int r = 0; r < a.reps; ++r) {
    const auto t0 = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double bytes = 2.0 * double(layer_bytes) * double(a.layers);
  const double bw = cpu::measure_memory_bandwidth_gbs(pool);
  std::printf("depth %lld, %lld query tokens, %s K/V, %lld layers x %lld/%lld heads x %lld: "
              "%.3f ms per step (min %.3f), K/V %.1f MB -> %.1f GB/s = %.0f%% of %.1f GB/s\n",
              (long long)a.depth, (long long)a.tokens, a.kv_type.c_str(), (long long)a.layers,
              (long long)a.heads, (long long)a.kv_heads, (long long)hd, med, ms.front(),
              bytes / 1e6, bytes / med / 1e6, 100.0 * bytes / med / 1e6 / bw, bw);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
