#include "backend/cpu/peak.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/error.h"

namespace efim::cpu {

namespace {

// CPU time of the calling thread: unlike wall time it does not count time the thread spent
// descheduled, so the ceilings stay right on a machine shared with other work.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// 12 independent accumulators cover FMA latency (4-5 cycles) x 2 pipes on current cores.
constexpr int kChains = 12;

#pragma GCC push_options
#pragma GCC target("avx2,fma")
__attribute__((noinline)) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains];  // every loop over c unrolled: the chains live in registers only
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm256_add_ps(s, acc[c]);
  return _mm256_cvtss_f32(s);
}
#pragma GCC pop_options

// The same on 16 lanes (on CPUs with one 512-bit FMA pipe, or Zen 4's split one, it measures
// no more than the AVX2 loop; the kernels then gain little from AVX-512, and the peak says so).
#pragma GCC push_options
#pragma GCC target("avx512f")
__attribute__((noinline)) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains];  // every loop over c unrolled: the chains live in registers only
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.001f * c);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  return _mm512_cvtss_f32(s);
}
#pragma GCC pop_options

// Without FMA: a multiply and an add per "FMA" (SSE, 4 lanes).
__attribute__((noinline)) float fma_loop_sse(int64_t iters) {
  __m128 acc[kChains];
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm_set1_ps(0.001f * c);
  const __m128 a = _mm_set1_ps(0.999999f), b = _mm_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm_add_ps(_mm_mul_ps(acc[c], a), b);
  }
  __m128 s = acc[0];
#pragma GCC unroll 12
  for (int c = 1; c < kChains; ++c) s = _mm_add_ps(s, acc[c]);
  return _mm_cvtss_f32(s);
}

}  // namespace

double measure_fma_peak_gflops(ThreadPool& pool) {
  const bool avx512 = kernel_supported(CpuKernel::Avx512);
  const bool avx2 = kernel_supported(CpuKernel::Avx2);
  const double flops_per_iter = kChains * 2.0 * (avx512 ? 16 : avx2 ? 8 : 4);
  auto loop = [&](int64_t iters) {
    return avx512 ? fma_loop_avx512(iters) : avx2 ? fma_loop_avx2(iters) : fma_loop_sse(iters);
  };
  // Calibrate on one thread (~30 ms of CPU time), then run ~300 ms on all threads at once.
  volatile float sink = 0;
  int64_t iters = 1 << 16;
  double t = 0;
  while (t < 0.03) {
    iters *= 2;
    const double c0 = thread_cpu_seconds();
    sink = sink + loop(iters);
    t = thread_cpu_seconds() - c0;
  }
  const int64_t run_iters = static_cast<int64_t>(static_cast<double>(iters) * 0.3 / t) + 1;
  // Sum of the threads' rates, each over its own CPU time.
  std::vector<double> rate(static_cast<size_t>(pool.size()), 0.0);
  pool.run_on_all([&](int c) {
    const double c0 = thread_cpu_seconds();
    sink = sink + loop(run_iters);
    rate[static_cast<size_t>(c)] =
        flops_per_iter * static_cast<double>(run_iters) / (thread_cpu_seconds() - c0) / 1e9;
  });
  double total = 0;
  for (double r : rate) total += r;
  return total;
}

namespace {

// Sum of floats in [p, p + n): 4 independent accumulators to keep several loads in flight.
#pragma GCC push_options
#pragma GCC target("avx2")
__attribute__((noinline)) float sum_avx2(const float* p, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    s0 = _mm256_add_ps(s0, _mm256_load_ps(p + i));
    s1 = _mm256_add_ps(s1, _mm256_load_ps(p + i + 8));
    s2 = _mm256_add_ps(s2, _mm256_load_ps(p + i + 16));
    s3 = _mm256_add_ps(s3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  return _mm256_cvtss_f32(s);
}
#pragma GCC pop_options

__attribute__((noinline)) float sum_sse(const float* p, int64_t n) {
  __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    s0 = _mm_add_ps(s0, _mm_load_ps(p + i));
    s1 = _mm_add_ps(s1, _mm_load_ps(p + i + 4));
    s2 = _mm_add_ps(s2, _mm_load_ps(p + i + 8));
    s3 = _mm_add_ps(s3, _mm_load_ps(p + i + 12));
  }
  return _mm_cvtss_f32(_mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
}

}  // namespace

double measure_memory_bandwidth_gbs(ThreadPool& pool, uint64_t bytes) {
  EFIM_CHECK(bytes >= (1u << 20), "measure_memory_bandwidth_gbs: buffer of ", bytes,
             " bytes is too small (need >= 1 MiB)");
  const int64_t n = static_cast<int64_t>(bytes / sizeof(float)) / 1024 * 1024;
  std::unique_ptr<float, decltype(&std::free)> buf(
      static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(n) * sizeof(float))),
      &std::free);
  EFIM_CHECK(buf != nullptr, "measure_memory_bandwidth_gbs: cannot allocate ", bytes, " bytes");
  float* p = buf.get();
  // Touch every page from the threads that will read it (first-touch placement).
  pool.parallel_for(n, 1 << 18, [&](int, int64_t b, int64_t e) {
    std::memset(p + b, 1, static_cast<size_t>(e - b) * sizeof(float));
  });
  const bool avx2 = kernel_supported(CpuKernel::Avx2);
  const int64_t chunk = n / pool.size() / 1024 * 1024;
  volatile float sink = 0;
  double best = 0;
  std::vector<double> rate(static_cast<size_t>(pool.size()), 0.0);
  for (int pass = 0; pass < 4; ++pass) {
    // Sum of the threads' rates, each over its own CPU time (see thread_cpu_seconds).
    pool.run_on_all([&](int c) {
      const int64_t b = c * chunk, e = c + 1 == pool.size() ? n : b + chunk;
      const double t0 = thread_cpu_seconds();
      sink = sink + (avx2 ? sum_avx2(p + b, e - b) : sum_sse(p + b, e - b));
      rate[static_cast<size_t>(c)] =
          static_cast<double>(e - b) * sizeof(float) / (thread_cpu_seconds() - t0) / 1e9;
    });
    double gbs = 0;
    for (double r : rate) gbs += r;
    if (pass > 0) best = std::max(best, gbs);  // pass 0 warms TLBs and the pool
  }
  return best;
}

}  // namespace efim::cpu
