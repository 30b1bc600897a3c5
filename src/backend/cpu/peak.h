// Machine ceilings, measured, so benchmarks can print achieved throughput as a share of them.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace efim::cpu {

// Peak f32 FMA throughput of all pool threads, in GFLOP/s (an FMA counts 2 flops): a
// register-only loop of independent FMAs (AVX-512, else AVX2, else SSE: the widest the CPU
// has), ~300 ms.
double measure_fma_peak_gflops(ThreadPool& pool);

// Streaming read bandwidth in GB/s (1e9 bytes/s): all threads sum disjoint parts of a buffer of
// `bytes` (default 512 MiB, far beyond any L3); the best of 3 passes after one warm-up.
double measure_memory_bandwidth_gbs(ThreadPool& pool, uint64_t bytes = 512ull << 20);

}  // namespace efim::cpu
