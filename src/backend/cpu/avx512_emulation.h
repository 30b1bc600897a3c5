// Test builds only (EFIM_AVX512_EMULATED): the x86 intrinsics of the AVX-512 kernels, by their
// native names, on SIMDe (Debian libsimde-dev), which implements each one with the operations
// this CPU has. The kernel sources compile unchanged against it, so their differential tests
// run on machines without AVX-512; the native build of the same sources runs where AVX-512 is.
//
// SIMDe 0.7.4 (Debian 12) lacks a few intrinsics the kernels use and maps one name wrongly;
// they are defined below from SIMDe's 256-bit operations, each exactly as Intel's guide defines
// the 512-bit one (the same operation on the two 256-bit halves). Include this header instead
// of <immintrin.h> and after every project header (see CMakeLists.txt).
#pragma once

#ifndef EFIM_AVX512_EMULATED
#error "avx512_emulation.h belongs to the emulated test build (EFIM_AVX512_EMULATED) only"
#endif

// GCC's own header first, so that later includes of it are skipped by its guard instead of
// declaring its functions under SIMDe's alias macros.
#include <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

namespace efim::cpu::emulated {
namespace {  // internal linkage, as in avx2_helpers.h

inline simde__m512 join(simde__m256 lo, simde__m256 hi) {
  return simde_mm512_castpd_ps(simde_mm512_insertf64x4(
      simde_mm512_castpd256_pd512(simde_mm256_castps_pd(lo)), simde_mm256_castps_pd(hi), 1));
}
inline simde__m512i join(simde__m256i lo, simde__m256i hi) {
  return simde_mm512_inserti64x4(simde_mm512_castsi256_si512(lo), hi, 1);
}
inline simde__m256i low_half(simde__m512i v) { return simde_mm512_castsi512_si256(v); }
inline simde__m256i high_half(simde__m512i v) { return simde_mm512_extracti64x4_epi64(v, 1); }

// 16 x i32 -> 16 x f32 (round to nearest even, as cvtdq2ps under the default MXCSR)
inline simde__m512 cvtepi32_ps(simde__m512i a) {
  return join(simde_mm256_cvtepi32_ps(low_half(a)), simde_mm256_cvtepi32_ps(high_half(a)));
}
// 16 x u16 -> 16 x i32, zero extended
inline simde__m512i cvtepu16_epi32(simde__m256i a) {
  return join(simde_mm256_cvtepu16_epi32(simde_mm256_castsi256_si128(a)),
              simde_mm256_cvtepu16_epi32(simde_mm256_extracti128_si256(a, 1)));
}
// 16 x f16 -> 16 x f32
inline simde__m512 cvtph_ps(simde__m256i a) {
  return join(simde_mm256_cvtph_ps(simde_mm256_castsi256_si128(a)),
              simde_mm256_cvtph_ps(simde_mm256_extracti128_si256(a, 1)));
}
// 16 x f32 -> 16 x i32, truncated
inline simde__m512i cvttps_epi32(simde__m512 a) {
  return join(simde_mm256_cvttps_epi32(simde_mm512_castps512_ps256(a)),
              simde_mm256_cvttps_epi32(simde_mm256_castpd_ps(simde_mm512_extractf64x4_pd(simde_mm512_castps_pd(a), 1))));
}
// 16 x i8 -> 16 x i32, sign extended
inline simde__m512i cvtepi8_epi32(simde__m128i a) {
  return join(simde_mm256_cvtepi8_epi32(a), simde_mm256_cvtepi8_epi32(simde_mm_srli_si128(a, 8)));
}

}  // namespace
}  // namespace efim::cpu::emulated

// SIMDe 0.7.4 binds this name to its 4-argument masked form (_mm512_mask_madd_epi16).
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
// Names SIMDe implements but does not alias.
#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)
// Defined above.
#define _mm512_cvtepi32_ps(a) efim::cpu::emulated::cvtepi32_ps(a)
#define _mm512_cvtepu16_epi32(a) efim::cpu::emulated::cvtepu16_epi32(a)
#define _mm512_cvtph_ps(a) efim::cpu::emulated::cvtph_ps(a)
#define _mm512_cvttps_epi32(a) efim::cpu::emulated::cvttps_epi32(a)
#define _mm512_cvtepi8_epi32(a) efim::cpu::emulated::cvtepi8_epi32(a)
