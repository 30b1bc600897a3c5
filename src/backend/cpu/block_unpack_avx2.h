// The block types of llama.cpp's K-quant and I-quant files in AVX2 registers, shared by the
// AVX2 and AVX-512 block kernels: per-type unpackers (a weight block's quants and scales in the
// integer forms of quant_int.h) and the drivers that run a row-dot kernel over a matmul.
//
// Super-block types: U::prepare(block) gives the 16 sub-block scales and mins as int16 lanes
// and the two float super-scales; U::chunk(block, c) the 32 quants of elements 32c..32c+31.
// 32-element types: U::block(b, d, m) gives the 32 quants, d_w and m_w; U::kOffset = o.
// Interleaved rows (interleave.h): x8_scales gives 8 Q4_K / Q5_K rows' scales and mins at once,
// q6_levels the 6-bit levels of a 4-byte group of 8 Q6_K rows.
//
// Include it as avx2_helpers.h is included (after the target pragma, or after
// avx512_emulation.h), with tensor/quant.h and quant_int.h included before.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cpu/avx2_helpers.h"
#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_blocks_avx2.h"
#include "backend/cpu/quant_int.h"
#include "base/thread_pool.h"
#include "tensor/quant.h"

namespace efim::cpu::detail {
namespace {  // internal linkage, as in avx2_helpers.h

constexpr int kPrefetchRows = 4;  // weight rows fetched ahead

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
inline __m256i high_nibbles(__m256i v) {
  return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
}
// Bits s..s+width-1 of every byte, moved to bit 0.
inline __m256i byte_bits(__m256i v, int s, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(mask));
}
// The 16 IQ4 grid values, in both 128-bit lanes (for a byte shuffle lookup).
inline __m256i iq4_table() {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values));
  return _mm256_set_m128i(t, t);
}
// The same values + 128 (-127..113 -> 1..241): a grid operand for dpbusd's unsigned side.
inline __m256i iq4_table_u8() {
  return _mm256_xor_si256(iq4_table(), _mm256_set1_epi8(static_cast<char>(0x80)));
}

// Scales and mins of one super-block: 16 int16 lanes each (sub-block j of 16 elements in lane
// j; the 32-element sub-blocks of Q4_K, Q5_K and IQ4_XS fill two lanes), and the two float
// super-scales.
struct Scales {
  __m256i sc, mn;
  float d, dmin;
};

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 8 bytes (two little-endian words) -> 16 int16 lanes, each byte twice: [b0 b0 b1 b1 ...].
inline __m256i bytes_twice(uint32_t lo, uint32_t hi) {
  const __m128i v = _mm_set_epi32(0, 0, static_cast<int>(hi), static_cast<int>(lo));
  return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(v, v));
}

// Q4_K / Q5_K: 8 6-bit scales and mins from 12 bytes (words w0, w1, w2): sub-blocks 0..3 are the
// low 6 bits of w0 (scales) and w1 (mins); sub-blocks 4..7 take their low 4 bits from the nibbles
// of w2 (scale low, min high) and their top 2 bits from the top bits of w0 and w1.
inline void k4_scales(const uint8_t scales[12], Scales& s) {
  const uint32_t w0 = load_u32(scales), w1 = load_u32(scales + 4), w2 = load_u32(scales + 8);
  const uint32_t sc_lo = w0 & 0x3f3f3f3f, mn_lo = w1 & 0x3f3f3f3f;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0f) | (((w0 >> 6) & 0x03030303) << 4);
  const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0f) | (((w1 >> 6) & 0x03030303) << 4);
  s.sc = bytes_twice(sc_lo, sc_hi);
  s.mn = bytes_twice(mn_lo, mn_hi);
}

// The scale of chunk c (elements 32c..32c+31): sub-block 2c in int16 lanes 0..7, 2c + 1 in
// lanes 8..15. Dword c of sc holds that pair (with 32-element sub-blocks both halves are equal);
// it is broadcast by two shuffles with immediate controls (no index vectors to keep live).
template <bool kSub16, int C>
inline __m256i chunk_scale(__m256i sc) {
  const __m256i half = _mm256_permute2x128_si256(sc, sc, C / 4 ? 0x11 : 0x00);
  const __m256i pair = _mm256_shuffle_epi32(half, (C % 4) * 0x55);
  if constexpr (!kSub16) return pair;
  const __m256i pick = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,  //
                                        2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_shuffle_epi8(pair, pick);
}

// ---- per-type unpackers: prepare(block) = scales; chunk(block, c) = 32 quants ----

struct UQ2_K {
  using Block = BlockQ2_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = true, kFolded = false;
  static Scales prepare(const Block& b) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return {_mm256_cvtepu8_epi16(_mm_and_si128(v, m4)),
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4)), f16(b.d), f16(b.dmin)};
  }
  static __m256i chunk(const Block& b, int c) {
    return byte_bits(load32(b.qs + 32 * (c / 4)), 2 * (c % 4), 3);
  }
};

struct UQ3_K {
  using Block = BlockQ3_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = true, kFolded = true;
  // 16 6-bit scales: low 4 bits in the nibbles of words w0, w1 (j < 8 low nibbles, j >= 8
  // high), top 2 bits in bit pair j / 4 of byte j % 4 of w2.
  static Scales prepare(const Block& b) {
    const uint32_t w0 = load_u32(b.scales), w1 = load_u32(b.scales + 4), w2 = load_u32(b.scales + 8);
    const uint32_t m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const __m128i v = _mm_set_epi32(static_cast<int>(((w1 >> 4) & m4) | (((w2 >> 6) & m2) << 4)),
                                    static_cast<int>(((w0 >> 4) & m4) | (((w2 >> 4) & m2) << 4)),
                                    static_cast<int>((w1 & m4) | (((w2 >> 2) & m2) << 4)),
                                    static_cast<int>((w0 & m4) | ((w2 & m2) << 4)));
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
    const float d = f16(b.d);
    return {sc, _mm256_slli_epi16(sc, 2), d, d};
  }
  static __m256i chunk(const Block& b, int c) {
    const __m256i low = byte_bits(load32(b.qs + 32 * (c / 4)), 2 * (c % 4), 3);
    const __m256i high = byte_bits(load32(b.hmask), c, 1);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
  }
};

// Q4_K / Q5_K: the scales and mins of k4_scales and the two f16 super-scales.
template <class B>
inline Scales k4_prepare(const B& b) {
  Scales s;
  k4_scales(b.scales, s);
  s.d = f16(b.d);
  s.dmin = f16(b.dmin);
  return s;
}

struct UQ4_K {
  using Block = BlockQ4_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = false, kFolded = false;
  static Scales prepare(const Block& b) { return k4_prepare(b); }
  static __m256i chunk(const Block& b, int c) {
    const __m256i v = load32(b.qs + 32 * (c / 2));
    return c % 2 ? high_nibbles(v) : low_nibbles(v);
  }
};

struct UQ5_K {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = false, kFolded = false;
  static Scales prepare(const Block& b) { return k4_prepare(b); }
  static __m256i chunk(const Block& b, int c) {
    const __m256i v = load32(b.qs + 32 * (c / 2));
    const __m256i low = c % 2 ? high_nibbles(v) : low_nibbles(v);
    return _mm256_or_si256(low, _mm256_slli_epi16(byte_bits(load32(b.qh), c, 1), 4));
  }
};

struct UQ6_K {
  using Block = BlockQ6_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = true, kFolded = true;
  static Scales prepare(const Block& b) {
    const __m256i sc =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    const float d = f16(b.d);
    return {sc, _mm256_slli_epi16(sc, 5), d, d};  // mins 32 sc: q - 32 with q in 0..63
  }
  static __m256i chunk(const Block& b, int c) {
    const int h = c / 4, t = c % 4;
    const __m256i v = load32(b.ql + 64 * h + 32 * (t & 1));
    const __m256i low = t < 2 ? low_nibbles(v) : high_nibbles(v);
    const __m256i high = byte_bits(load32(b.qh + 32 * h), 2 * t, 3);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
};

struct UIQ4_XS {
  using Block = BlockIQ4_XS;
  static constexpr bool kSigned = true, kMins = false, kSub16 = false, kFolded = false;
  // The 8 6-bit scales ls_j (byte j of one word): nibble j of scales_l spread to byte j, and
  // bit pair j of scales_h spread to bits 4-5 of byte j, by shifts and masks (no loop).
  static Scales prepare(const Block& b) {
    uint64_t lo = load_u32(b.scales_l);  // nibble j -> low nibble of byte j
    lo = (lo | (lo << 16)) & 0x0000ffff0000ffffULL;
    lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffULL;
    lo = (lo | (lo << 4)) & 0x0f0f0f0f0f0f0f0fULL;
    uint64_t hi = b.scales_h;  // bit pair j -> bits 0-1 of byte j
    hi = (hi | (hi << 24)) & 0x000000ff000000ffULL;
    hi = (hi | (hi << 12)) & 0x000f000f000f000fULL;
    hi = (hi | (hi << 6)) & 0x0303030303030303ULL;
    const uint64_t ls = lo | (hi << 4);
    const __m256i sc = _mm256_sub_epi16(
        bytes_twice(static_cast<uint32_t>(ls), static_cast<uint32_t>(ls >> 32)),
        _mm256_set1_epi16(32));
    return {sc, _mm256_setzero_si256(), f16(b.d), 0.0f};
  }
  static __m256i chunk(const Block& b, int c) {
    return _mm256_shuffle_epi8(iq4_table(), unpack_q4(b.qs + 16 * c));
  }
};

// acc += the super-block dot whose integer sums over the 8 chunks are the lanes of isum, for
// the x row whose super-block scale and 16-element sums sit at index `at` of `a` (d[at],
// bsum[16 at..]): d d_x isum - dmin d_x (mn . bsum), or for folded offsets d d_x (isum - mn .
// bsum) with the difference taken in int32 (exact: the two sums nearly cancel, q ~ 32 at level
// 0, and their lanes hold different elements).
template <class U>
inline void finish_superblock(__m256i isum, const Scales& sc, const QuantizedRowsK& a, size_t at,
                              __m256& acc) {
  const float dx = a.d[at];
  if constexpr (U::kFolded) {
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsum.data() + at * 16));
    const int32_t dot = hsum_epi32(_mm256_sub_epi32(isum, _mm256_madd_epi16(sc.mn, bs)));
    const float v = static_cast<float>(dot) * (sc.d * dx);
    acc = _mm256_add_ps(acc, _mm256_setr_ps(v, 0, 0, 0, 0, 0, 0, 0));
    return;
  }
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(sc.d * dx), acc);
  if constexpr (U::kMins) {
    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsum.data() + at * 16));
    acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc.mn, bs)),
                           _mm256_set1_ps(sc.dmin * dx), acc);
  }
}

// ---- 32-element types: block(b, d, m) = 32 quants, d_w and m_w; kOffset = o ----

// The 32 fifth bits of Q5_0 / Q5_1 (bit j of qh -> 0x10 in byte j).
inline __m256i q5_high(const uint8_t qh[4]) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  // Byte j takes byte j / 8 of h, then tests bit j % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                         0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

struct UQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;  // m_w is stored (else 0)
  static __m256i block(const Block& b, float& d, float& m) {
    d = f16(b.d);
    m = f16(b.m);
    return unpack_q4(b.qs);
  }
};
struct UQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 16;
  static constexpr bool kMin = false;  // m_w is stored (else 0)
  static __m256i block(const Block& b, float& d, float& m) {
    d = f16(b.d);
    m = 0.0f;
    return _mm256_or_si256(unpack_q4(b.qs), q5_high(b.qh));
  }
};
struct UQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kSigned = false;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;  // m_w is stored (else 0)
  static __m256i block(const Block& b, float& d, float& m) {
    d = f16(b.d);
    m = f16(b.m);
    return _mm256_or_si256(unpack_q4(b.qs), q5_high(b.qh));
  }
};
struct UIQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr bool kSigned = true;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = false;  // m_w is stored (else 0)
  static __m256i block(const Block& b, float& d, float& m) {
    d = f16(b.d);
    m = 0.0f;
    return _mm256_shuffle_epi8(iq4_table(), unpack_q4(b.qs));
  }
};

// y[m, n] over weight rows [r0, r1): each weight row against all rows of x, kMaxRows at a time.
template <int kMaxRows, class Acts, class D>
void rows_range(const WeightMatrix& w, const Acts& a, int64_t r0, int64_t r1, float* y) {
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wrow = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * stride;
    // Rows of a few hundred bytes defeat the hardware prefetcher (decode streams W from DRAM
    // once per token): fetch the whole row kPrefetchRows ahead, within W.
    if (r + kPrefetchRows < w.rows) {
      const char* ahead = reinterpret_cast<const char*>(wrow + kPrefetchRows * stride);
      for (uint64_t off = 0; off < stride; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    int64_t i = 0;
    for (; i + kMaxRows <= a.m; i += kMaxRows) D::template run<kMaxRows>(wrow, a, i, y + r, w.rows);
    // The remaining rows of x (fewer than kMaxRows): 4 at once when kMaxRows > 4, then 3, 2 or 1.
    if constexpr (kMaxRows > 4) {
      if (a.m - i >= 4) {
        D::template run<4>(wrow, a, i, y + r, w.rows);
        i += 4;
      }
    }
    switch (a.m - i) {
      case 3:
        D::template run<3>(wrow, a, i, y + r, w.rows);
        break;
      case 2:
        D::template run<2>(wrow, a, i, y + r, w.rows);
        break;
      case 1:
        D::template run<1>(wrow, a, i, y + r, w.rows);
        break;
      default:
        break;
    }
  }
}

// ---- interleaved rows (interleave.h): 8 rows side by side, row r in int32 lane r ----

// 8 int32 lanes (row r in lane r) holding byte j of each lane of v.
template <int J>
inline __m256i lane_byte(__m256i v) {
  if constexpr (J == 3) return _mm256_srli_epi32(v, 24);
  if constexpr (J == 0) return _mm256_and_si256(v, _mm256_set1_epi32(0xff));
  return _mm256_and_si256(_mm256_srli_epi32(v, 8 * J), _mm256_set1_epi32(0xff));
}

// The 8 6-bit scales and mins of 8 interleaved Q4_K or Q5_K rows (k4_scales on 8 rows at
// once): lane r of sc_lo / sc_hi holds row r's scales of sub-blocks 0..3 / 4..7, one per byte;
// mn_lo / mn_hi its mins.
struct X8Scales {
  __m256i sc_lo, sc_hi, mn_lo, mn_hi;
};
template <class B>  // BlockQ4_Kx8 or BlockQ5_Kx8
inline X8Scales x8_scales(const B& b) {
  const __m256i m6 = _mm256_set1_epi8(0x3f), m4 = _mm256_set1_epi8(0x0f),
                m2 = _mm256_set1_epi8(0x03);
  const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.scales[0]));
  const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.scales[1]));
  const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.scales[2]));
  X8Scales x;
  x.sc_lo = _mm256_and_si256(w0, m6);
  x.mn_lo = _mm256_and_si256(w1, m6);
  x.sc_hi = _mm256_or_si256(_mm256_and_si256(w2, m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), m2), 4));
  x.mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), m2), 4));
  return x;
}

// Scale (or min) of sub-block J of each of the 8 rows, as int32 lanes.
template <int J>
inline __m256i x8_sub(__m256i lo, __m256i hi) {
  return lane_byte<J % 4>(J < 4 ? lo : hi);
}

// Each int32 lane v (< 2^15) as the int16 pair (v, v).
inline __m256i twice16(__m256i v) { return _mm256_or_si256(v, _mm256_slli_epi32(v, 16)); }

// The 6-bit levels of Q6_K elements 128h + 32k + 4g .. + 3 (k = 0..3) of 8 interleaved rows,
// from ql bytes a (c = 0), b (c = 1) and qh bytes hb of group g.
struct Q6Levels {
  __m256i e[4];
};
inline Q6Levels q6_levels(const BlockQ6_Kx8& blk, int h, int g) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q[h][g][0]));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q[h][g][1]));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.q[h][g][2]));
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i hi0 = _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x03)), 4);
  const __m256i hi1 = _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0c)), 2);
  const __m256i hi2 = _mm256_and_si256(hb, _mm256_set1_epi8(0x30));
  const __m256i hi3 = _mm256_and_si256(_mm256_srli_epi16(hb, 2), _mm256_set1_epi8(0x30));
  return {{_mm256_or_si256(_mm256_and_si256(a, m4), hi0),
           _mm256_or_si256(_mm256_and_si256(b, m4), hi1),
           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), hi2),
           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), hi3)}};
}

// x quantized row by row (rows in parallel for prefill), then threads take ranges of weight
// rows, so each streams its own part of W.
template <int kMaxRows, class Acts, void (*QuantizeRow)(const float*, int64_t, Acts&), class D>
void block_matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  const Acts& acts = quantize_activations<Acts, QuantizeRow>(pool, x, m, w.cols);
  pool.parallel_for(w.rows, grain_for(w.rows, m * w.rows * w.cols, pool.size(), 4),
                    [&](int, int64_t r0, int64_t r1) { rows_range<kMaxRows, Acts, D>(w, acts, r0, r1, y); });
}

}  // namespace
}  // namespace efim::cpu::detail
