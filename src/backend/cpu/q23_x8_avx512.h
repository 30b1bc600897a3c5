// Q3_K and Q2_K rows interleaved 8 at a time (BlockQ3_Kx8, BlockQ2_Kx8; interleave.h) in
// 512-bit registers, two 8-row blocks at a time: these types need ~4 integer operations per
// weight byte (Q4_K ~2), and on 512 bits a byte costs half as many. The panel GEMM packs
// super-block s of two groups (int32 lane r = row r of the first, 8 + r = row r of the
// second); the GEMV (matmul_q23x8_avx512.cpp) takes super-blocks s and s + 1 of one group,
// zipped (lane 2r = row r in s, 2r + 1 = row r in s + 1), so it reads one stream (two groups'
// streams measured up to 2x slower from DRAM) and x's operand is one 64-bit broadcast. The 2-bit
// levels of chunk c = 4h + k (elements 32c + 4g..) are bits 2k, 2k + 1 of qs register (g, h);
// Q3_K's third bit is bit c of its hmask register g.
//
// Include it as avx512_helpers.h is included (after the target pragma, or after
// avx512_emulation.h), with interleave.h included before.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cpu/avx512_helpers.h"
#include "backend/cpu/interleave.h"

namespace efim::cpu::detail {
namespace {  // internal linkage, as in avx2_helpers.h

template <class B, bool kZip>
struct BlockPair {
  const B& lo;
  const B& hi;
  static __m512i combine(__m256i a, __m256i b) {
    if constexpr (kZip) {
      const __m512i idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      return _mm512_permutex2var_epi32(_mm512_castsi256_si512(a), idx, _mm512_castsi256_si512(b));
    } else {
      return join256(a, b);
    }
  }
  // The 32 bytes at `at` in lo and at the same offset in hi.
  __m512i load(const void* at) const {
    const auto off = static_cast<const uint8_t*>(at) - reinterpret_cast<const uint8_t*>(&lo);
    return combine(_mm256_loadu_si256(static_cast<const __m256i*>(at)),
                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint8_t*>(&hi) + off)));
  }
  __m512 f16x16(const uint16_t (&v)[8], const uint16_t (&w)[8]) const {
    return _mm512_castsi512_ps(
        combine(_mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)))),
                _mm256_castps_si256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))))));
  }
  __m512 d() const { return f16x16(lo.d, hi.d); }
};

// Q3_K's 16 6-bit scales (UQ3_K::prepare on 16 lanes at once): lane r of v[k] holds its row's
// scales (sc + 32) of sub-blocks 4k..4k+3, one per byte.
struct Q3Scales {
  __m512i v[4];
};
template <bool Z>
inline Q3Scales q3_scales(const BlockPair<BlockQ3_Kx8, Z>& b) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x03);
  const __m512i w0 = b.load(b.lo.scales[0]), w1 = b.load(b.lo.scales[1]), w2 = b.load(b.lo.scales[2]);
  auto top = [&](int shift) {  // bit pair `shift / 2` of each w2 byte, at bits 4 and 5
    return _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w2, shift), m2), 4);
  };
  return {{_mm512_or_si512(_mm512_and_si512(w0, m4), top(0)),
           _mm512_or_si512(_mm512_and_si512(w1, m4), top(2)),
           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w0, 4), m4), top(4)),
           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w1, 4), m4), top(6))}};
}
// Scale byte j of 16 sub-blocks held 4 per int32 lane in words[j / 4], as int32 lanes.
inline __m512i sub_block_byte(const __m512i words[4], int j) {
  return _mm512_and_si512(_mm512_srlv_epi32(words[j / 4], _mm512_set1_epi32(8 * (j % 4))),
                          _mm512_set1_epi32(0xff));
}
// sc_j - 32 of sub-block j as int32 lanes.
inline __m512i q3_scale(const Q3Scales& s, int j) {
  return _mm512_sub_epi32(sub_block_byte(s.v, j), _mm512_set1_epi32(32));
}

// Q2_K's 4 scale words (scale low nibble, min high nibble of sub-blocks 4k..4k+3 in word k).
struct Q2Words {
  __m512i w[4];
};
template <bool Z>
inline Q2Words q2_words(const BlockPair<BlockQ2_Kx8, Z>& b) {
  return {{b.load(b.lo.scales[0]), b.load(b.lo.scales[1]), b.load(b.lo.scales[2]), b.load(b.lo.scales[3])}};
}
// The scale of sub-block j as int32 lanes.
inline __m512i q2_scale(const Q2Words& s, int j) {
  return _mm512_and_si512(sub_block_byte(s.w, j), _mm512_set1_epi32(0x0f));
}
// The mins of sub-blocks 4k + 2e and 4k + 2e + 1 as the int16 pairs of the int32 lanes (the
// operand of a madd with x's sums of those two sub-blocks).
template <int E>
inline __m512i q2_min_pair(const Q2Words& s, int k) {
  const __m512i mins = _mm512_and_si512(_mm512_srli_epi32(s.w[k], 4), _mm512_set1_epi8(0x0f));
  constexpr char o = 2 * E, z = -128;  // bytes 2E, 2E + 1 of each lane, zero-extended
  const __m128i pick = _mm_setr_epi8(o, z, o + 1, z, o + 4, z, o + 5, z, o + 8, z, o + 9, z, o + 12, z, o + 13, z);
  return _mm512_shuffle_epi8(mins, _mm512_broadcast_i32x4(pick));
}

// The 2-bit levels of chunk C from qs register q (h = C / 4), or-ed for Q3_K with bit C of the
// hmask register hm moved to bit 2.
template <int C>
inline __m512i q2_levels(__m512i q) {
  const __m512i m3 = _mm512_set1_epi8(0x03);
  if constexpr (C % 4 == 0) return _mm512_and_si512(q, m3);
  return _mm512_and_si512(_mm512_srli_epi16(q, 2 * (C % 4)), m3);
}
template <int C>
inline __m512i q3_levels(__m512i q, __m512i hm) {
  __m512i high = hm;  // bit C at bit 2 (the other bits masked off)
  if constexpr (C < 2) high = _mm512_slli_epi16(hm, 2 - C);
  if constexpr (C > 2) high = _mm512_srli_epi16(hm, C - 2);
  return _mm512_or_si512(q2_levels<C>(q), _mm512_and_si512(high, _mm512_set1_epi8(0x04)));
}

// The levels of chunks 0..7 for 4-byte group g of the pair: f(C, e) with e the levels of
// elements 32C + 4g.. (C as std::integral_constant).
template <bool Z, class F>
inline void x16_chunks(const BlockPair<BlockQ3_Kx8, Z>& b, int g, F&& f) {
  const __m512i hm = b.load(b.lo.q[g][0]), q0 = b.load(b.lo.q[g][1]), q1 = b.load(b.lo.q[g][2]);
  [&]<int... C>(std::integer_sequence<int, C...>) {
    (f(std::integral_constant<int, C>{}, q3_levels<C>(C < 4 ? q0 : q1, hm)), ...);
  }(std::make_integer_sequence<int, 8>{});
}
template <bool Z, class F>
inline void x16_chunks(const BlockPair<BlockQ2_Kx8, Z>& b, int g, F&& f) {
  const __m512i q0 = b.load(b.lo.qs[g][0]), q1 = b.load(b.lo.qs[g][1]);
  [&]<int... C>(std::integer_sequence<int, C...>) {
    (f(std::integral_constant<int, C>{}, q2_levels<C>(C < 4 ? q0 : q1)), ...);
  }(std::make_integer_sequence<int, 8>{});
}

}  // namespace
}  // namespace efim::cpu::detail
