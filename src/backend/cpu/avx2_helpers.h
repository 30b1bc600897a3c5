// AVX2 register helpers shared by the kernels (the AVX-512 ones too): horizontal sums and max,
// 8 x 8 transposes (unpack, shuffle, permute) and Q4_0 nibble unpacking. Include it only after `#pragma GCC target("avx2...")` in
// an AVX2 translation unit: like every AVX2 helper here it must never be emitted into generic
// code (see CMakeLists.txt); a generic includer fails to compile instead of running AVX2 by
// accident.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace efim::cpu {
// Internal linkage: every translation unit compiles these for its own target (AVX2, AVX-512,
// or SIMDe's emulation), and the linker must never let one TU call another's copy.
namespace {

// Software prefetch of one stream of weight blocks, the block of n bytes at p asking for the
// cache lines that start in [p + ahead, p + ahead + n): a stream of consecutive blocks asks for
// each line once, whatever the block size (a prefetch never faults, even past the matrix).
// kLevel 1 brings them into L1 (T0), 2 into L2 only (T2: lines that far ahead would crowd the
// L1). always_inline: a function that only prefetches counts as free of side effects, and
// GCC 12 drops the calls to it that it has not inlined.
template <int kLevel>
__attribute__((always_inline)) inline void prefetch_lines(const void* p, size_t n, size_t ahead) {
  static_assert(kLevel == 1 || kLevel == 2);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) + ahead;
  for (uintptr_t a = (begin + 63) & ~uintptr_t{63}; a < begin + n; a += 64) {
    if constexpr (kLevel == 1) {
      _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
    } else {
      _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T2);
    }
  }
}

// How far ahead the AVX2 decode GEMVs ask for their stream of weight blocks (and the AVX-512
// ones on Intel CPUs into L1, kAvx512Stream). On a 2-core AVX2 EPYC VM (2026-12-07) 2 and 3 KB
// did about the same and 1 KB less (matmul_interleaved_avx2.cpp). On a 2-core AVX-512 Xeon VM
// (Sapphire Rapids class, 2026-12-07, the VNNI GEMVs, whole-model decode of the 1.5B-shaped
// files, alternated pairs) the 8 KB chosen on Zen 4 was 0.76-0.85x of 2 KB (Q4_K_M, Q5_K_M,
// IQ4_XS, Q3_K_M), 4 KB 0.82x of none, 2 KB 1.03x of none; 8 KB with the T2 hint (L2 only)
// matched 2 KB: T0 lines that far ahead crowd the L1.
constexpr size_t kStreamAhead = 2048;

// How far ahead a decode GEMV asks for its stream of weight blocks: l1 bytes ahead into L1 and,
// where l2 is set, l2 bytes ahead into L2 (prefetch_stream).
struct StreamAhead {
  size_t l1, l2;  // bytes ahead into L1 and into L2 (0: none)
};

// The AVX2 GEMVs' distances: kStreamAhead into L1, and on Intel CPUs 4 KB into L2 as well
// (measured with the AVX2 kernels forced on the AVX-512 Xeon VM, 2026-12-07: efim_bench_kernels
// 1.5B shapes Q4_K 72-78 -> 89-93 GFLOP/s, Q6_K 51-58 -> 58-62, Q8_0 40-50 -> 54-56; 8 KB less;
// whole-model decode of the 1.5B-shaped files, 4 alternated pairs, Q4_K_M 1.05x, Q8_0 1.13x).
// The AMD EPYC measured only L1 distances, so it keeps those.
inline bool is_intel_cpu() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
}
inline const StreamAhead kAvx2Stream =
    is_intel_cpu() ? StreamAhead{kStreamAhead, 2 * kStreamAhead} : StreamAhead{kStreamAhead, 0};

__attribute__((always_inline)) inline void prefetch_stream(const void* p, size_t n,
                                                          const StreamAhead& ahead) {
  prefetch_lines<1>(p, n, ahead.l1);
  if (ahead.l2 != 0) prefetch_lines<2>(p, n, ahead.l2);
}

// Sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Max of the 8 lanes.
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of the 8 int32 lanes.
inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// r[i] holds row i on entry and column i on exit.
inline void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 8; h += 4) {
    u[h + 0] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(u[c], u[c + 4], 0x31);
  }
}

// In-place transpose of an 8 x 8 matrix of 32-bit elements (r[i] = row i -> column i).
inline void transpose8_epi32(__m256i r[8]) {
  __m256 v[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) v[i] = _mm256_castsi256_ps(r[i]);
  transpose8x8(v);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_castps_si256(v[i]);
}

// The 32 quants of a Q4_0 block (16 bytes of nibbles: element j in the low nibble of byte j,
// element 16 + j in its high nibble) as bytes 0..15 in element order.
inline __m256i unpack_q4(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(v, mask);                     // elements 0..15
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);  // elements 16..31
  return _mm256_set_m128i(hi, lo);
}

}  // namespace
}  // namespace efim::cpu
