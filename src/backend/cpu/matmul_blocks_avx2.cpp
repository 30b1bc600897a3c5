// AVX2 int8-dot kernels for the block types of llama.cpp's K-quant and I-quant files (Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K activations; Q4_1, Q5_0, Q5_1, IQ4_NL against
// int8 blocks of 32), in the integer forms of quant_int.h.
//
// Super-block types: a per-type unpacker gives, for chunk c (elements 32c..32c+31) of a weight
// super-block, its 32 quants in one register, and once per super-block the 16 sub-block scales
// and mins as int16. The dot of chunk c with the activations is
//     madd(maddubs(q, a), [sc_2c x 8 | sc_2c+1 x 8])
// (maddubs pairs stay inside one 16-element sub-block: lanes 0..7 of the int16 result are
// elements 0..15, lanes 8..15 elements 16..31), summed over the 8 chunks in int32 lanes; the
// mins cost one madd of mn against the activations' 16-element sums. Bounds: maddubs pairs are
// at most 2 * 63 * 127 = 16002 (Q6_K's q < 64; IQ4_XS is signed: |q| * sign(a, q), at most
// 2 * 127 * 127), madd with |sc| <= 128 and 8 chunks stay far below 2^31.
// 32-element types: one register of quants per block, int dot by maddubs + madd (minus the
// integer offset o times the activations' sum), scaled by d_w d_a, plus m_w s_a.
//
// Rows of x are processed up to 4 at a time against one weight row, so each unpacked register
// is used 4 times; threads take groups of weight rows, so each streams its own part of W.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "tensor/quant.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "backend/cpu/avx2_helpers.h"

namespace efim::cpu::detail {

namespace {

constexpr int kMaxRows = 4;       // rows of x per pass over a weight row
constexpr int kPrefetchRows = 4;  // weight rows fetched ahead

inline float f16(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

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

struct UQ4_K {
  using Block = BlockQ4_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = false, kFolded = false;
  static Scales prepare(const Block& b) {
    Scales s;
    k4_scales(b.scales, s);
    s.d = f16(b.d);
    s.dmin = f16(b.dmin);
    return s;
  }
  static __m256i chunk(const Block& b, int c) {
    const __m256i v = load32(b.qs + 32 * (c / 2));
    return c % 2 ? high_nibbles(v) : low_nibbles(v);
  }
};

struct UQ5_K {
  using Block = BlockQ5_K;
  static constexpr bool kSigned = false, kMins = true, kSub16 = false, kFolded = false;
  static Scales prepare(const Block& b) {
    Scales s;
    k4_scales(b.scales, s);
    s.d = f16(b.d);
    s.dmin = f16(b.dmin);
    return s;
  }
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
  static Scales prepare(const Block& b) {
    uint8_t ls[8];
    for (int j = 0; j < 8; ++j)
      ls[j] = static_cast<uint8_t>(((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) |
                                   (((b.scales_h >> (2 * j)) & 3) << 4));
    const __m256i sc = _mm256_sub_epi16(bytes_twice(load_u32(ls), load_u32(ls + 4)),
                                        _mm256_set1_epi16(32));
    return {sc, _mm256_setzero_si256(), f16(b.d), 0.0f};
  }
  static __m256i chunk(const Block& b, int c) {
    return _mm256_shuffle_epi8(iq4_table(), unpack_q4(b.qs + 16 * c));
  }
};

// acc[i] += (weight super-block wb) . (super-block s of x row i0 + i), for MX rows of x, in 8
// f32 lanes whose sum is the dot.
// isum[i] += chunk C of the weight super-block . the same 32 activations of x row i0 + i.
template <class U, int MX, int C>
inline void chunk_dot(const typename U::Block& wb, const Scales& sc, const QuantizedRowsK& a,
                      int64_t i0, int64_t s, __m256i isum[MX]) {
  const __m256i q = U::chunk(wb, C);
  const __m256i scv = chunk_scale<U::kSub16, C>(sc.sc);
  const __m256i qa = U::kSigned ? _mm256_abs_epi8(q) : q;
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) {
    __m256i x = load32(reinterpret_cast<const uint8_t*>(a.q.data() + (i0 + i) * a.k + s * kQKBlock + 32 * C));
    if constexpr (U::kSigned) x = _mm256_sign_epi8(x, q);
    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, x), scv));
    // Keep the sum a chain: reassociated into a tree, its 8 partial products per row of x
    // stay live at once and spill.
    asm("" : "+x"(isum[i]));
  }
}

// acc[i] += (weight super-block wb) . (super-block s of x row i0 + i), for MX rows of x, in 8
// f32 lanes whose sum is the dot.
template <class U, int MX>
inline void superblock_dot(const typename U::Block& wb, const QuantizedRowsK& a, int64_t i0,
                           int64_t s, __m256 acc[MX]) {
  const Scales sc = U::prepare(wb);
  __m256i isum[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) isum[i] = _mm256_setzero_si256();
  [&]<int... C>(std::integer_sequence<int, C...>) {
    (chunk_dot<U, MX, C>(wb, sc, a, i0, s, isum), ...);
  }(std::make_integer_sequence<int, 8>{});
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) {
    const size_t at = static_cast<size_t>((i0 + i) * a.ns + s);
    const float dx = a.d[at];
    if constexpr (U::kFolded) {
      // q - offset: the two integer sums nearly cancel (q ~ 32 at level 0) and their lanes
      // hold different elements, so they are summed and subtracted as integers (exact within
      // int32), then converted once.
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsum.data() + at * 16));
      const int32_t dot = hsum_epi32(_mm256_sub_epi32(isum[i], _mm256_madd_epi16(sc.mn, bs)));
      const float v = static_cast<float>(dot) * (sc.d * dx);
      acc[i] = _mm256_add_ps(acc[i], _mm256_setr_ps(v, 0, 0, 0, 0, 0, 0, 0));
      continue;
    }
    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(sc.d * dx), acc[i]);
    if constexpr (U::kMins) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.bsum.data() + at * 16));
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(sc.mn, bs)),
                                _mm256_set1_ps(sc.dmin * dx), acc[i]);
    }
  }
}

// y[(i0 + i) * ldy] = weight row . x row i0 + i for MX rows.
template <class U, int MX>
void row_dot_k(const uint8_t* wrow, const QuantizedRowsK& a, int64_t i0, float* y, int64_t ldy) {
  const auto* blocks = reinterpret_cast<const typename U::Block*>(wrow);
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) superblock_dot<U, MX>(blocks[s], a, i0, s, acc);
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) y[(i0 + i) * ldy] = hsum(acc[i]);
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
  static __m256i block(const Block& b, float& d, float& m) {
    d = f16(b.d);
    m = 0.0f;
    return _mm256_shuffle_epi8(iq4_table(), unpack_q4(b.qs));
  }
};

template <class U, int MX>
void row_dot_32(const uint8_t* wrow, const QuantizedRows& a, int64_t i0, float* y, int64_t ldy) {
  const auto* blocks = reinterpret_cast<const typename U::Block*>(wrow);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MX];
  float off[MX];  // sum over blocks of m_w * s_a
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) {
    acc[i] = _mm256_setzero_ps();
    off[i] = 0.0f;
  }
  for (int64_t b = 0; b < a.nb; ++b) {
    float d, m;
    const __m256i q = U::block(blocks[b], d, m);
    const __m256i qa = U::kSigned ? _mm256_abs_epi8(q) : q;
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const size_t at = static_cast<size_t>((i0 + i) * a.nb + b);
      __m256i x = load32(reinterpret_cast<const uint8_t*>(a.q.data() + (i0 + i) * a.k + b * kQBlock));
      if constexpr (U::kSigned) x = _mm256_sign_epi8(x, q);
      __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(qa, x), ones);
      if constexpr (U::kOffset != 0)  // one lane carries -o * sum(a): the lane sum is the dot
        dot = _mm256_sub_epi32(dot, _mm256_zextsi128_si256(_mm_cvtsi32_si128(U::kOffset * a.sum[at])));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[at]), acc[i]);
      off[i] += m * a.s[at];
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) y[(i0 + i) * ldy] = hsum(acc[i]) + off[i];
}

// The dot kernels of a type as one class for the drivers below: run<MX>(wrow, a, i0, y, ldy).
template <class U>
struct DotK {
  template <int MX>
  static void run(const uint8_t* wrow, const QuantizedRowsK& a, int64_t i0, float* y, int64_t ldy) {
    row_dot_k<U, MX>(wrow, a, i0, y, ldy);
  }
};
template <class U>
struct Dot32 {
  template <int MX>
  static void run(const uint8_t* wrow, const QuantizedRows& a, int64_t i0, float* y, int64_t ldy) {
    row_dot_32<U, MX>(wrow, a, i0, y, ldy);
  }
};

// y[m, n] over weight rows [r0, r1): each weight row against all rows of x, kMaxRows at a time.
template <class Acts, class D>
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

// x quantized row by row (rows in parallel for prefill), then threads take ranges of weight
// rows, so each streams its own part of W.
template <class Acts, void (*QuantizeRow)(const float*, int64_t, Acts&), class D>
void block_matmul(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  static thread_local Acts buffer;  // reused across calls of this thread
  Acts& acts = buffer;              // the workers see this thread's instance
  acts.resize(m, w.cols);
  pool.parallel_for(m, grain_for(m, m * w.cols * 8, pool.size(), 4),
                    [&](int, int64_t i0, int64_t i1) {
                      for (int64_t i = i0; i < i1; ++i) QuantizeRow(x, i, acts);
                    });
  pool.parallel_for(w.rows, grain_for(w.rows, m * w.rows * w.cols, pool.size(), 4),
                    [&](int, int64_t r0, int64_t r1) { rows_range<Acts, D>(w, acts, r0, r1, y); });
}

template <class U>
void matmul_k(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  block_matmul<QuantizedRowsK, quantize_row_k_avx2, DotK<U>>(pool, x, m, w, y);
}

template <class U>
void matmul_32(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  block_matmul<QuantizedRows, quantize_row_q8_ggml_avx2, Dot32<U>>(pool, x, m, w, y);
}

}  // namespace

void matmul_blocks_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                        float* y) {
  switch (w.dtype) {
    case DType::Q2_K:
      return matmul_k<UQ2_K>(pool, x, m, w, y);
    case DType::Q3_K:
      return matmul_k<UQ3_K>(pool, x, m, w, y);
    case DType::Q4_K:
      return matmul_k<UQ4_K>(pool, x, m, w, y);
    case DType::Q5_K:
      return matmul_k<UQ5_K>(pool, x, m, w, y);
    case DType::Q6_K:
      return matmul_k<UQ6_K>(pool, x, m, w, y);
    case DType::IQ4_XS:
      return matmul_k<UIQ4_XS>(pool, x, m, w, y);
    case DType::Q4_1:
      return matmul_32<UQ4_1>(pool, x, m, w, y);
    case DType::Q5_0:
      return matmul_32<UQ5_0>(pool, x, m, w, y);
    case DType::Q5_1:
      return matmul_32<UQ5_1>(pool, x, m, w, y);
    case DType::IQ4_NL:
      return matmul_32<UIQ4_NL>(pool, x, m, w, y);
    default:
      return;  // matmul() routes only the types above here
  }
}

// Same float operations as quantize_row_q8_ggml_scalar.
void quantize_row_q8_ggml_avx2(const float* x, int64_t i, QuantizedRows& out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < out.nb; ++b) {
    const float* xb = x + i * out.k + b * kQBlock;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
    }
    const float max = hmax(amax);
    const float d = max / 127.0f;
    const __m256 id = _mm256_set1_ps(max != 0.0f ? 127.0f / max : 0.0f);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
    const int32_t sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                                    _mm256_add_epi32(q[2], q[3])));
    __m256i q8 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    q8 = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + i * out.k + b * kQBlock), q8);
    const size_t at = static_cast<size_t>(i * out.nb + b);
    out.d[at] = f16(static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(d), 0))));
    out.sum[at] = sum;
    out.s[at] = f16(static_cast<uint16_t>(
        _mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(d * static_cast<float>(sum)), 0))));
  }
}

}  // namespace efim::cpu::detail

namespace efim::cpu {

// Same float operations as quantize_row_k_scalar: iscale = -127 / (first value of largest
// magnitude), q = round(iscale * x), then the sums of each 16 quants.
void quantize_row_k_avx2(const float* x, int64_t i, QuantizedRowsK& out) {
  for (int64_t s = 0; s < out.ns; ++s) {
    const float* xs = x + i * out.k + s * kQKBlock;
    // The scale search of quantize_row_k_scalar: amax by vectors, then the first element of
    // that magnitude gives the sign.
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < kQKBlock; j += 8)
      amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(xs + j)));
    const float amax = hmax(amax8);
    float iscale = 0.0f;
    if (amax != 0.0f) {
      const __m256 target = _mm256_set1_ps(amax);
      for (int j = 0; j < kQKBlock; j += 8) {
        const int hit = _mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xs + j)), target, _CMP_EQ_OQ));
        if (hit != 0) {
          iscale = -127.0f / xs[j + __builtin_ctz(static_cast<unsigned>(hit))];
          break;
        }
      }
    }
    const __m256 is = _mm256_set1_ps(iscale);
    int8_t* q = out.q.data() + i * out.k + s * kQKBlock;
    int16_t* bsum = out.bsum.data() + (i * out.ns + s) * 16;
    for (int g = 0; g < kQKBlock; g += 32) {
      __m256i v[4];
      for (int j = 0; j < 4; ++j)  // cvtps rounds to nearest even (default MXCSR); |q| <= 127
        v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(xs + g + 8 * j)));
      // Sums of each 16: lanes of v[0] + v[1] and of v[2] + v[3].
      bsum[g / 16] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(v[0], v[1])));
      bsum[g / 16 + 1] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(v[2], v[3])));
      const __m256i q16a = _mm256_packs_epi32(v[0], v[1]);
      const __m256i q16b = _mm256_packs_epi32(v[2], v[3]);
      __m256i q8 = _mm256_packs_epi16(q16a, q16b);
      q8 = _mm256_permutevar8x32_epi32(q8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g), q8);
    }
    out.d[static_cast<size_t>(i * out.ns + s)] = iscale != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

}  // namespace efim::cpu

#pragma GCC pop_options
