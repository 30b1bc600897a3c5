// AVX-512 register helpers shared by the AVX-512 kernels: horizontal sum, 16 x 16 transpose,
// the pairing of two 256-bit halves, tiles of rows of x, software prefetch, and the entry-point
// names of the native and emulated builds. Include it only after `#pragma GCC target("avx512f,avx512bw,...")` or after
// avx512_emulation.h (see CMakeLists.txt), never into generic code.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/avx2_helpers.h"

// The emulated test build of an AVX-512 source defines the same functions under other names,
// so that both builds link into one test binary.
#ifdef EFIM_AVX512_EMULATED
#define EFIM_AVX512_ENTRY(name) name##_emulated
#else
#define EFIM_AVX512_ENTRY(name) name
#endif

namespace efim::cpu {
// Internal linkage: every translation unit compiles these for its own target (AVX2, AVX-512,
// or SIMDe's emulation), and the linker must never let one TU call another's copy.
namespace {

// lo in lanes 0..7, hi in lanes 8..15.
inline __m512 join256(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
inline __m512i join256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Sum of the 16 lanes.
inline float hsum(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum(_mm256_add_ps(lo, hi));
}

// r[i] holds row i on entry and column i on exit (16 x 16 f32).
inline void transpose16x16(__m512 r[16]) {
  __m512 t[16], u[16];
  // Within each 128-bit lane L (columns 4L..4L+3): pairs of rows interleaved ...
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3
  }
  // ... then quads: u[h + c] lane L = column 4L + c of rows h..h+3.
#pragma GCC unroll 4
  for (int h = 0; h < 16; h += 4) {
    u[h + 0] = _mm512_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 1] = _mm512_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // Column 4L + c gathers lane L of u[c], u[4 + c], u[8 + c], u[12 + c]: a 4 x 4 transpose of
  // 128-bit lanes in two rounds of lane shuffles.
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 p0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);       // a.L0 a.L1 b.L0 b.L1
    const __m512 p1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);       // a.L2 a.L3 b.L2 b.L3
    const __m512 p2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);  // c.L0 c.L1 d.L0 d.L1
    const __m512 p3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);  // c.L2 c.L3 d.L2 d.L3
    r[c] = _mm512_shuffle_f32x4(p0, p2, 0x88);       // lanes L0 of a b c d
    r[4 + c] = _mm512_shuffle_f32x4(p0, p2, 0xDD);   // L1
    r[8 + c] = _mm512_shuffle_f32x4(p1, p3, 0x88);   // L2
    r[12 + c] = _mm512_shuffle_f32x4(p1, p3, 0xDD);  // L3
  }
}

// 4 bytes as one int32 (the x operand broadcast into a dpbusd).
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Rows [i0, end) of x in tiles: tile.template operator()<MR>(i) for tiles of Max rows, then
// (when Max > 4) one of 4, then one of 3, 2 or 1.
template <int Max, class Tile>
void for_row_tiles(int64_t i0, int64_t end, Tile&& tile) {
  for (; i0 + Max <= end; i0 += Max) tile.template operator()<Max>(i0);
  if constexpr (Max > 4) {
    if (end - i0 >= 4) {
      tile.template operator()<4>(i0);
      i0 += 4;
    }
  }
  switch (end - i0) {
    case 3:
      return tile.template operator()<3>(i0);
    case 2:
      return tile.template operator()<2>(i0);
    case 1:
      return tile.template operator()<1>(i0);
    default:
      return;
  }
}

// Software prefetch for the decode GEMVs that read one stream of weight blocks, in two levels:
// the lines kAvx512Stream.l1 bytes ahead into L1, and where l2 is set the lines l2 bytes ahead
// into L2 (prefetch_stream, avx2_helpers.h). With the hardware prefetchers alone the interleaved
// Q4_K, Q5_K, IQ4_XS, Q3_K and Q2_K GEMVs ran 10-50% below DRAM bandwidth on 1.5B shapes
// (efim_bench_kernels --interleave, Zen 4, 2026-12-05; 8 KB ahead into L1, whole-model decode
// 1.05-1.23x). How far ahead depends on the CPU. Zen 4 takes those 8 KB into L1 alone. On a
// Xeon (2-core VM, 2026-12-07) 8 KB into L1 was slower than 2 KB (kStreamAhead), and 2 KB into
// L1 with 4 KB into L2 beat 2 KB alone: whole-model decode of the 1.5B-shaped files, 4
// alternated pairs each, Q4_K_M 1.12x, Q5_K_M 1.18x, IQ4_XS 1.10x, Q3_K_M 1.04x, Q4_0 1.07x,
// Q8_0 0.99x (already at the VM's read rate), 100M Q8_0 1.11x (8 or 16 KB into L2 did the same
// on the K-quants but cost Q8_0 5-12%; efim_bench_kernels: Q4_K from 61-68 to 79-87 GFLOP/s,
// Q6_K from 44 to 58-66). Q6_K takes the two levels only: 512 B to 8 KB into L1 alone lost
// 4-12% on either CPU; the two levels took its 1.5B lm head from 17.5 GB/s to 25-27.
inline const StreamAhead kAvx512Stream =
    is_intel_cpu() ? kAvx2Stream : StreamAhead{4 * kStreamAhead, 0};
__attribute__((always_inline)) inline void prefetch_ahead(const void* p, size_t n) {
  prefetch_stream(p, n, kAvx512Stream);
}

}  // namespace
}  // namespace efim::cpu
