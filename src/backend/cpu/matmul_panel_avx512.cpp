// AVX-512 VNNI GEMM for the super-block K-quants with unsigned levels (Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K) against Q8_K activations: prefill, m >= kPanelMinRows rows of x.
//
// The row kernels (matmul_blocks_avx2.cpp) multiply one weight row by a few rows of x; each
// 32-element chunk costs a maddubs and a madd (the sub-block scale) per row of x, so half the
// multiplies apply scales. Here a panel of 16 weight rows is unpacked once per thread into
// int8 levels laid out so that one 64-byte register holds 4 consecutive elements of each of the
// 16 rows (int32 lane r = row r), and every row of x reuses it:
//     t_r  = sum over the sub-block's 4-element groups g of dpbusd(q[g][r], x[4g..4g+3])
//     S_r += sc_r * t_r                                    (one mullo per sub-block, not per chunk)
//     M_r  = sum over 16-element sub-blocks j of mn_rj * bsum_j  (dpwssd on int16 pairs)
//     y_r += d_r dx S_r - dmin_r dx M_r,  or d_r dx (S_r - M_r) for folded offsets (Q3_K, Q6_K)
// with x's 4 bytes broadcast from memory into each dpbusd. The integer sums are the scalar
// kernel's (quant_int.h) exactly; only the f32 accumulation order differs. Bounds: t_r <=
// 32 * 63 * 127, |S_r| <= 256 * 63 * 127 * 128 < 2^31.
//
// 8 rows of x per pass over the panel (24 of the 32 registers hold t, S and the f32 sums).
// Threads take (panel, block of x rows) items as in the other GEMMs and pack a panel once for
// their consecutive items of it. A panel of k = 8960 is 200 KB: it stays in L2 while the rows
// of x stream past it.
//
// Weights interleaved 8 rows at a time (all six types; interleave.h) are packed from that
// layout without transposes, and below kPanelMinRows rows of x (decode) run the GEMV of the
// layout: the same dpbusd per 4 bytes of 8 rows, straight from the weights, with the 8 rows'
// sums in the lanes of one register (x8_group, x8_group_q6, x8_group_iq4xs; Q5_K's fifth bits
// or-ed into its nibbles by x8_levels), or 8 rows in two super-blocks for Q3_K and Q2_K
// (x8_group_q23, 512-bit registers). Each
// GEMV forms the panel's exact integer sum per super-block and applies it with the panel's f32
// steps, so GEMV and GEMM give a row the same bits. Q8_0, Q4_0 and IQ4_NL interleaved the same
// way have kernels of their own (matmul_b32x8_avx512.cpp).
//
// This file is compiled twice: natively for AVX-512 CPUs, and for tests on SIMDe's emulation of
// the intrinsics (EFIM_AVX512_EMULATED, see avx512_emulation.h).

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (GCC bug 105593, see
// matmul_quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/cpu/interleave.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "base/thread_pool.h"
#include "tensor/quant.h"

#ifdef EFIM_AVX512_EMULATED
#include "backend/cpu/avx512_emulation.h"
#else
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif
#include "backend/cpu/avx512_helpers.h"
#include "backend/cpu/block_unpack_avx2.h"
#include "backend/cpu/q23_x8_avx512.h"

namespace efim::cpu::detail {

namespace {

constexpr int kPanelRows = 16;  // weight rows per panel: one int32 lane each
constexpr int kTileRows = 8;    // rows of x per pass over a panel

// One super-block of a panel of 16 weight rows in the form the tile kernel reads.
struct alignas(64) PanelBlock {
  uint8_t q[64][kPanelRows][4];  // q[g][r]: the levels of elements 4g..4g+3 of row r
  int32_t sc[16][kPanelRows];    // sc[j][r]: scale of sub-block j of row r (16 of 16 or 8 of 32)
  int16_t mn[8][kPanelRows][2];  // mn[p][r]: mins (or folded offsets) of 16-element sub-blocks
                                 // 2p and 2p + 1 of row r
  float d[kPanelRows], dmin[kPanelRows];
};

// The levels of elements 4g..4g+3 of sub-blocks 2P (lo) and 2P + 1 (hi) of 8 interleaved Q4_K
// or Q5_K rows: the low and high nibbles of qs register (P, g); for Q5_K bits 2P and 2P + 1 of
// qh register g moved to bit 4.
struct X8Levels {
  __m256i lo, hi;
};
template <class B>
inline X8Levels x8_levels(const B& b, int P, int g) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs[P][g]));
  X8Levels e{_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)};
  if constexpr (std::is_same_v<B, BlockQ5_Kx8>) {
    const __m256i qh = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh[g][0])),
                                        _mm_cvtsi32_si128(2 * P));
    const __m256i bit4 = _mm256_set1_epi8(0x10);
    e.lo = _mm256_or_si256(e.lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
    e.hi = _mm256_or_si256(e.hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
  }
  return e;
}

// pack_panel for interleaved Q4_K and Q5_K (B = BlockQ4_Kx8, BlockQ5_Kx8): rows [n0, n0 + nr)
// are whole groups of 8 (nr = 8 or 16; a missing second group repeats the first). The nibbles
// of a group's register are already 4 bytes of 8 rows: no transpose.
template <class B>
void pack_panel_x8(const WeightMatrix& w, int64_t n0, int nr, int64_t ns, PanelBlock* panel) {
  const auto* blocks = static_cast<const B*>(w.data);
  for (int64_t s = 0; s < ns; ++s) {
    PanelBlock& p = panel[s];
    for (int h = 0; h < kPanelRows; h += kInterleaveRows) {
      const int64_t g = (n0 + std::min(h, nr - kInterleaveRows)) / kInterleaveRows;
      const B& b = blocks[g * ns + s];
      for (int q = 0; q < 4; ++q)
        for (int gq = 0; gq < 8; ++gq) {  // sub-blocks 2q and 2q + 1
          const X8Levels e = x8_levels(b, q, gq);
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[16 * q + gq][h][0]), e.lo);
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[16 * q + 8 + gq][h][0]), e.hi);
        }
      const X8Scales x = x8_scales(b);
      [&]<int... J>(std::integer_sequence<int, J...>) {
        ((_mm256_store_si256(reinterpret_cast<__m256i*>(&p.sc[J][h]), x8_sub<J>(x.sc_lo, x.sc_hi)),
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.mn[J][h][0]),
                             twice16(x8_sub<J>(x.mn_lo, x.mn_hi)))),
         ...);
      }(std::make_integer_sequence<int, 8>{});
      _mm256_store_ps(&p.d[h], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d))));
      _mm256_store_ps(&p.dmin[h], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin))));
    }
  }
}

// Scales of 16-element sub-block j of 8 interleaved Q6_K rows as int32 lanes.
inline __m256i q6_scale(const BlockQ6_Kx8& blk, int j) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk.scales[j])));
}

// pack_panel for interleaved Q6_K (as pack_panel_x8).
void pack_panel_x8_q6(const WeightMatrix& w, int64_t n0, int nr, int64_t ns, PanelBlock* panel) {
  const auto* blocks = static_cast<const BlockQ6_Kx8*>(w.data);
  for (int64_t s = 0; s < ns; ++s) {
    PanelBlock& p = panel[s];
    for (int h8 = 0; h8 < kPanelRows; h8 += kInterleaveRows) {
      const int64_t g = (n0 + std::min(h8, nr - kInterleaveRows)) / kInterleaveRows;
      const BlockQ6_Kx8& b = blocks[g * ns + s];
      for (int h = 0; h < 2; ++h)
        for (int gl = 0; gl < 8; ++gl) {
          const Q6Levels q = q6_levels(b, h, gl);
          for (int k = 0; k < 4; ++k)  // element 128h + 32k + 4gl: group 32h + 8k + gl
            _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[32 * h + 8 * k + gl][h8][0]), q.e[k]);
        }
      for (int j = 0; j < 16; ++j)
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.sc[j][h8]), q6_scale(b, j));
      for (int j = 0; j < 8; ++j) {  // folded offsets 32 sc of sub-blocks 2j, 2j + 1
        const __m256i lo = _mm256_slli_epi32(q6_scale(b, 2 * j), 5);
        const __m256i hi = _mm256_slli_epi32(q6_scale(b, 2 * j + 1), 5);
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.mn[j][h8][0]),
                           _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xffff)),
                                           _mm256_slli_epi32(hi, 16)));
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
      _mm256_store_ps(&p.d[h8], d);
      _mm256_store_ps(&p.dmin[h8], d);
    }
  }
}

// IQ4_XS as unsigned levels for the panel: grid value + 128 (1..241), the offset folded into
// the scales like Q6_K's: x_i = d sc_j (u_i - 128), mins 128 sc_j per 16-element half
// (|128 sc_j| <= 4096; |S| <= 8 * 32 * 32 * 241 * 127 < 2^31).
struct UIQ4_XS_Panel {
  using Block = BlockIQ4_XS;
  static constexpr bool kSigned = false, kMins = true, kSub16 = false, kFolded = true;
  static Scales prepare(const Block& b) {
    const Scales s = UIQ4_XS::prepare(b);  // sc_j in int16 lanes 2j and 2j + 1
    return {s.sc, _mm256_slli_epi16(s.sc, 7), s.d, s.d};
  }
  static __m256i chunk(const Block& b, int c) {
    return _mm256_shuffle_epi8(iq4_table_u8(), unpack_q4(b.qs + 16 * c));
  }
};

// Scale sc_j - 32 of 32-element sub-block j of 8 interleaved IQ4_XS rows as int32 lanes, from
// their scales_l words sl (nibble j) and scales_h sh (bit pair j) as int32 lanes.
inline __m256i iq4xs_scale(__m256i sl, __m256i sh, int j) {
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sl, _mm256_set1_epi32(4 * j)),
                                      _mm256_set1_epi32(0x0f));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_set1_epi32(2 * j)),
                                      _mm256_set1_epi32(0x03));
  return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}
inline __m256i iq4xs_scales_l(const BlockIQ4_XSx8& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.scales_l));
}
inline __m256i iq4xs_scales_h(const BlockIQ4_XSx8& b) {
  return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales_h)));
}

// pack_panel for interleaved IQ4_XS (as pack_panel_x8): the nibbles of register (j, g) are
// elements 32j + 4g.. (low) and 32j + 16 + 4g.. (high) of 8 rows, looked up as grid + 128.
void pack_panel_x8_iq4xs(const WeightMatrix& w, int64_t n0, int nr, int64_t ns, PanelBlock* panel) {
  const auto* blocks = static_cast<const BlockIQ4_XSx8*>(w.data);
  const __m256i grid = iq4_table_u8(), m4 = _mm256_set1_epi8(0x0f);
  for (int64_t s = 0; s < ns; ++s) {
    PanelBlock& p = panel[s];
    for (int h8 = 0; h8 < kPanelRows; h8 += kInterleaveRows) {
      const int64_t g = (n0 + std::min(h8, nr - kInterleaveRows)) / kInterleaveRows;
      const BlockIQ4_XSx8& b = blocks[g * ns + s];
      const __m256i sl = iq4xs_scales_l(b), sh = iq4xs_scales_h(b);
      for (int j = 0; j < 8; ++j) {
        for (int gq = 0; gq < 4; ++gq) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs[j][gq]));
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[8 * j + gq][h8][0]),
                             _mm256_shuffle_epi8(grid, _mm256_and_si256(v, m4)));
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[8 * j + 4 + gq][h8][0]),
                             _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)));
        }
        const __m256i sc = iq4xs_scale(sl, sh, j);
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.sc[j][h8]), sc);
        const __m256i mn = _mm256_slli_epi32(sc, 7);  // 128 sc_j for both 16-element halves
        _mm256_store_si256(reinterpret_cast<__m256i*>(&p.mn[j][h8][0]),
                           _mm256_or_si256(_mm256_and_si256(mn, _mm256_set1_epi32(0xffff)),
                                           _mm256_slli_epi32(mn, 16)));
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
      _mm256_store_ps(&p.d[h8], d);
      _mm256_store_ps(&p.dmin[h8], d);
    }
  }
}

// pack_panel for interleaved Q3_K and Q2_K (as pack_panel_x8, both groups at once): chunk c
// of group g goes to panel group 8c + g; Q3_K's offsets folded as 4 sc (UQ3_K), Q2_K's mins
// as they are.
template <class B>
void pack_panel_x8_q23(const WeightMatrix& w, int64_t n0, int nr, int64_t ns, PanelBlock* panel) {
  const auto* blocks = static_cast<const B*>(w.data);
  const int64_t g0 = n0 / kInterleaveRows, g1 = (n0 + nr) / kInterleaveRows - 1;  // g1 = g0: 8 rows
  for (int64_t s = 0; s < ns; ++s) {
    PanelBlock& p = panel[s];
    const BlockPair<B, false> b{blocks[g0 * ns + s], blocks[g1 * ns + s]};
    for (int g = 0; g < 8; ++g)
      x16_chunks(b, g, [&](auto c, __m512i e) { _mm512_store_si512(p.q[8 * c + g], e); });
    const __m512 d = b.d();
    _mm512_store_ps(p.d, d);
    if constexpr (std::is_same_v<B, BlockQ3_Kx8>) {
      const Q3Scales sc = q3_scales(b);
      for (int j = 0; j < 16; ++j) _mm512_store_si512(p.sc[j], q3_scale(sc, j));
      for (int j = 0; j < 8; ++j) {  // folded offsets 4 sc of sub-blocks 2j, 2j + 1
        const __m512i lo = _mm512_slli_epi32(q3_scale(sc, 2 * j), 2);
        const __m512i hi = _mm512_slli_epi32(q3_scale(sc, 2 * j + 1), 2);
        _mm512_store_si512(p.mn[j], _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)),
                                                    _mm512_slli_epi32(hi, 16)));
      }
      _mm512_store_ps(p.dmin, d);
    } else {
      const Q2Words words = q2_words(b);
      for (int j = 0; j < 16; ++j) _mm512_store_si512(p.sc[j], q2_scale(words, j));
      for (int k = 0; k < 4; ++k) {
        _mm512_store_si512(p.mn[2 * k], q2_min_pair<0>(words, k));
        _mm512_store_si512(p.mn[2 * k + 1], q2_min_pair<1>(words, k));
      }
      _mm512_store_ps(p.dmin, b.f16x16(b.lo.dmin, b.hi.dmin));
    }
  }
}

// Unpacks weight rows [n0, n0 + nr) into panel[0..ns) (rows past nr repeat row n0 + nr - 1;
// their outputs are dropped).
template <class U>
void pack_panel(const WeightMatrix& w, int64_t n0, int nr, int64_t ns, PanelBlock* panel) {
  if constexpr (std::is_same_v<U, UQ4_K>) {
    if (w.interleave != 1) return pack_panel_x8<BlockQ4_Kx8>(w, n0, nr, ns, panel);
  }
  if constexpr (std::is_same_v<U, UQ5_K>) {
    if (w.interleave != 1) return pack_panel_x8<BlockQ5_Kx8>(w, n0, nr, ns, panel);
  }
  if constexpr (std::is_same_v<U, UQ6_K>) {
    if (w.interleave != 1) return pack_panel_x8_q6(w, n0, nr, ns, panel);
  }
  if constexpr (std::is_same_v<U, UIQ4_XS_Panel>) {
    if (w.interleave != 1) return pack_panel_x8_iq4xs(w, n0, nr, ns, panel);
  }
  if constexpr (std::is_same_v<U, UQ3_K>) {
    if (w.interleave != 1) return pack_panel_x8_q23<BlockQ3_Kx8>(w, n0, nr, ns, panel);
  }
  if constexpr (std::is_same_v<U, UQ2_K>) {
    if (w.interleave != 1) return pack_panel_x8_q23<BlockQ2_Kx8>(w, n0, nr, ns, panel);
  }
  const uint64_t stride = dtype_row_bytes(w.dtype, static_cast<uint64_t>(w.cols));
  const typename U::Block* row0[kPanelRows];  // file layout: super-block 0 of each row
  for (int r = 0; r < kPanelRows; ++r)
    row0[r] = reinterpret_cast<const typename U::Block*>(
        static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(n0 + std::min(r, nr - 1)) * stride);
  alignas(32) int16_t sc16[kPanelRows][16], mn16[kPanelRows][16];
  for (int64_t s = 0; s < ns; ++s) {
    PanelBlock& p = panel[s];
    const typename U::Block* rows[kPanelRows];  // rows[r][0]: super-block s of row r
    for (int r = 0; r < kPanelRows; ++r) rows[r] = row0[r] + s;
    // Levels: chunk c of 8 rows, transposed as 8 x 8 dwords, gives groups 8c..8c+7 of those rows.
    for (int h = 0; h < kPanelRows; h += 8) {
      for (int c = 0; c < 8; ++c) {
        __m256i v[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) v[k] = U::chunk(rows[h + k][0], c);
        transpose8_epi32(v);
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k)
          _mm256_store_si256(reinterpret_cast<__m256i*>(&p.q[8 * c + k][h][0]), v[k]);
      }
    }
    for (int r = 0; r < kPanelRows; ++r) {
      const Scales sc = U::prepare(rows[r][0]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc16[r]), sc.sc);
      _mm256_store_si256(reinterpret_cast<__m256i*>(mn16[r]), sc.mn);
      p.d[r] = sc.d;
      p.dmin[r] = sc.dmin;
    }
    for (int j = 0; j < 16; ++j)
      for (int r = 0; r < kPanelRows; ++r) p.sc[j][r] = sc16[r][U::kSub16 ? j : 2 * (j % 8)];
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < kPanelRows; ++r) {
        p.mn[j][r][0] = mn16[r][2 * j];
        p.mn[j][r][1] = mn16[r][2 * j + 1];
      }
  }
}

// y[(i0 + i) * ldy + r] = x row i0 + i . weight row n0 + r of the panel, i < MX, r < nr.
template <class U, int MX>
void panel_tile(const PanelBlock* panel, const QuantizedRowsK& a, int64_t i0, float* y,
                int64_t ldy, int nr) {
  constexpr int kSubs = U::kSub16 ? 16 : 8;  // sub-blocks per super-block
  constexpr int kGroups = 64 / kSubs;        // 4-element groups per sub-block
  __m512 acc[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const PanelBlock& p = panel[s];
    const int8_t* xq = a.q.data() + i0 * a.k + s * kQKBlock;  // x row i0 + i at xq + i * a.k
    __m512i S[MX];
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) S[i] = _mm512_setzero_si512();
    for (int j = 0; j < kSubs; ++j) {
      __m512i t[MX];
#pragma GCC unroll 8
      for (int i = 0; i < MX; ++i) t[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int g = j * kGroups; g < (j + 1) * kGroups; ++g) {
        const __m512i q = _mm512_load_si512(p.q[g]);
#pragma GCC unroll 8
        for (int i = 0; i < MX; ++i)
          t[i] = _mm512_dpbusd_epi32(t[i], q, _mm512_set1_epi32(load_i32(xq + i * a.k + 4 * g)));
      }
      const __m512i scv = _mm512_load_si512(p.sc[j]);
#pragma GCC unroll 8
      for (int i = 0; i < MX; ++i) S[i] = _mm512_add_epi32(S[i], _mm512_mullo_epi32(t[i], scv));
    }
    const int16_t* bsum = a.bsum.data() + (i0 * a.ns + s) * 16;  // x row i0 + i at + i * ns * 16
    __m512i M[MX];
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) M[i] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m512i mn = _mm512_load_si512(p.mn[j]);
#pragma GCC unroll 8
      for (int i = 0; i < MX; ++i)
        M[i] = _mm512_dpwssd_epi32(M[i], mn, _mm512_set1_epi32(load_i32(bsum + i * a.ns * 16 + 2 * j)));
    }
    const __m512 d = _mm512_load_ps(p.d), dmin = _mm512_load_ps(p.dmin);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) {
      const __m512 dx = _mm512_set1_ps(a.d[static_cast<size_t>((i0 + i) * a.ns + s)]);
      if constexpr (U::kFolded) {  // exact in int32: the two sums nearly cancel
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(S[i], M[i])),
                                 _mm512_mul_ps(d, dx), acc[i]);
      } else {
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[i]), _mm512_mul_ps(d, dx), acc[i]);
        acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M[i]), _mm512_mul_ps(dmin, dx), acc[i]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    alignas(64) float out[kPanelRows];
    _mm512_store_ps(out, acc[i]);
    std::memcpy(y + (i0 + i) * ldy, out, static_cast<size_t>(nr) * sizeof(float));
  }
}

template <class U>
void panel_gemm(ThreadPool& pool, const QuantizedRowsK& a, const WeightMatrix& w, float* y,
                int64_t ldy) {
  const int64_t m = a.m, n = w.rows;
  const GemmSplit split = split_gemm(m, n, kTileRows, kPanelRows, pool.size());
  const int64_t m_blocks = split.m_blocks, m_block = split.m_block, items = split.items();
  pool.parallel_for(items, grain_for(items, m * n * a.k, pool.size()),
                    [&](int, int64_t it0, int64_t it1) {
                      static thread_local std::vector<PanelBlock> panel;  // [ns]
                      panel.resize(static_cast<size_t>(a.ns));
                      int64_t packed = -1;
                      for (int64_t it = it0; it < it1; ++it) {
                        const int64_t p = it / m_blocks, mb = it % m_blocks;
                        const int64_t n0 = p * kPanelRows;
                        const int nr = static_cast<int>(std::min<int64_t>(kPanelRows, n - n0));
                        if (packed != p) {
                          pack_panel<U>(w, n0, nr, a.ns, panel.data());
                          packed = p;
                        }
                        const int64_t i0 = mb * m_block;
                        for_row_tiles<kTileRows>(i0, i0 + std::min(m_block, m - i0), [&]<int MR>(int64_t i) {
                          panel_tile<U, MR>(panel.data(), a, i, y + n0, ldy, nr);
                        });
                      }
                    });
}

// ---- interleaved Q4_K, Q5_K (interleave.h): one row of x against groups of 8 weight rows ----

// Sub-blocks 2P and 2P + 1 (x8_levels) of 8 rows against the x quants xs of the super-block:
// S += sc_2P t_2P + sc_2P+1 t_2P+1, t = the 32-element dots.
template <int P, class B>
inline void x8_pair(const B& b, const int8_t* xs, __m256i sc, __m256i& S) {
  __m256i tl = _mm256_setzero_si256(), th = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    const X8Levels e = x8_levels(b, P, g);
    tl = _mm256_dpbusd_epi32(tl, e.lo, _mm256_set1_epi32(load_i32(xs + 64 * P + 4 * g)));
    th = _mm256_dpbusd_epi32(th, e.hi, _mm256_set1_epi32(load_i32(xs + 64 * P + 32 + 4 * g)));
  }
  S = _mm256_add_epi32(S, _mm256_mullo_epi32(tl, lane_byte<(2 * P) % 4>(sc)));
  S = _mm256_add_epi32(S, _mm256_mullo_epi32(th, lane_byte<(2 * P + 1) % 4>(sc)));
}

// y[r] = x row i . weight row 8 group + r, r < 8. bpair[s][q]: x's 32-element sums of
// sub-blocks (q / 2) * 4 + q % 2 and + 2 of super-block s as an int16 pair (the operand of the
// mins' madd).
template <class B>
void x8_group(const B* grp, const QuantizedRowsK& a, int64_t i, const int32_t* bpair, float* y) {
  const __m256i lo16 = _mm256_set1_epi32(0x00ff00ff);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const B& b = grp[s];
    prefetch_ahead(&b, sizeof(b));
    const X8Scales x = x8_scales(b);
    const int8_t* xs = a.q.data() + i * a.k + s * kQKBlock;
    __m256i S = _mm256_setzero_si256();
    x8_pair<0>(b, xs, x.sc_lo, S);
    x8_pair<1>(b, xs, x.sc_lo, S);
    x8_pair<2>(b, xs, x.sc_hi, S);
    x8_pair<3>(b, xs, x.sc_hi, S);
    // M = sum_j mn_j bsum32_j: the even and odd bytes of each mins word as int16 pairs.
    const int32_t* bp = bpair + s * 4;
    __m256i M = _mm256_madd_epi16(_mm256_and_si256(x.mn_lo, lo16), _mm256_set1_epi32(bp[0]));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(x.mn_lo, 8), lo16),
                                              _mm256_set1_epi32(bp[1])));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(_mm256_and_si256(x.mn_hi, lo16), _mm256_set1_epi32(bp[2])));
    M = _mm256_add_epi32(M, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(x.mn_hi, 8), lo16),
                                              _mm256_set1_epi32(bp[3])));
    const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>(i * a.ns + s)]);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(d, dx), acc);
    acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dx), acc);
  }
  _mm256_storeu_ps(y, acc);
}

// y[r] = x row i . weight row 8 group + r for interleaved Q6_K: per 16-element sub-block j,
// S += sc_j (t_j - 32 bsum_j) (the folded offset, exact in int32).
void x8_group_q6(const BlockQ6_Kx8* grp, const QuantizedRowsK& a, int64_t i, float* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const BlockQ6_Kx8& b = grp[s];
    if (kAvx512Stream.l2 != 0) prefetch_ahead(&b, sizeof(b));  // the two levels only (kAvx512Stream)
    const int8_t* xs = a.q.data() + i * a.k + s * kQKBlock;
    const int16_t* bsum = a.bsum.data() + (i * a.ns + s) * 16;
    __m256i S = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h)
      for (int tq = 0; tq < 2; ++tq) {  // groups 4tq..4tq+3: sub-blocks 8h + 2k + tq
        __m256i t[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
#pragma GCC unroll 4
        for (int gi = 0; gi < 4; ++gi) {
          const int gl = 4 * tq + gi;
          const Q6Levels q = q6_levels(b, h, gl);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k)
            t[k] = _mm256_dpbusd_epi32(t[k], q.e[k],
                                       _mm256_set1_epi32(load_i32(xs + 128 * h + 32 * k + 4 * gl)));
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const int j = 8 * h + 2 * k + tq;
          const __m256i dot = _mm256_sub_epi32(t[k], _mm256_set1_epi32(32 * bsum[j]));
          S = _mm256_add_epi32(S, _mm256_mullo_epi32(dot, q6_scale(b, j)));
        }
      }
    const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>(i * a.ns + s)]);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(d, dx), acc);
  }
  _mm256_storeu_ps(y, acc);
}

// y[r] = x row i . weight row 8 group + r for interleaved IQ4_XS: per 32-element sub-block j,
// S += sc_j (t_j - 128 bsum_j), t_j the dot of the levels as grid + 128 (the folded offset of
// the panel GEMM, exact in int32: |t_j| <= 32 * 241 * 127), so both give a row the same bits.
void x8_group_iq4xs(const BlockIQ4_XSx8* grp, const QuantizedRowsK& a, int64_t i, float* y) {
  const __m256i grid = iq4_table_u8(), m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const BlockIQ4_XSx8& b = grp[s];
    prefetch_ahead(&b, sizeof(b));
    const int8_t* xs = a.q.data() + i * a.k + s * kQKBlock;
    const int16_t* bsum = a.bsum.data() + (i * a.ns + s) * 16;
    const __m256i sl = iq4xs_scales_l(b), sh = iq4xs_scales_h(b);
    __m256i S = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m256i tl = _mm256_setzero_si256(), th = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs[j][g]));
        tl = _mm256_dpbusd_epi32(tl, _mm256_shuffle_epi8(grid, _mm256_and_si256(v, m4)),
                                 _mm256_set1_epi32(load_i32(xs + 32 * j + 4 * g)));
        th = _mm256_dpbusd_epi32(
            th, _mm256_shuffle_epi8(grid, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)),
            _mm256_set1_epi32(load_i32(xs + 32 * j + 16 + 4 * g)));
      }
      const __m256i t = _mm256_sub_epi32(_mm256_add_epi32(tl, th),
                                         _mm256_set1_epi32(128 * (bsum[2 * j] + bsum[2 * j + 1])));
      S = _mm256_add_epi32(S, _mm256_mullo_epi32(t, iq4xs_scale(sl, sh, j)));
    }
    const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>(i * a.ns + s)]);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(d, dx), acc);
  }
  _mm256_storeu_ps(y, acc);
}

// GEMV (few rows of x) on interleaved Q2_K..Q6_K / IQ4_XS: threads take ranges of
// 8-row groups.
void x8_gemv(ThreadPool& pool, const QuantizedRowsK& a, const WeightMatrix& w, float* y,
             int64_t ldy) {
  const int64_t groups = w.rows / kInterleaveRows;
  if (w.dtype == DType::IQ4_XS) {
    const auto* blocks = static_cast<const BlockIQ4_XSx8*>(w.data);
    pool.parallel_for(groups, grain_for(groups, a.m * w.rows * a.k, pool.size()),
                      [&](int, int64_t g0, int64_t g1) {
                        for (int64_t g = g0; g < g1; ++g)
                          for (int64_t i = 0; i < a.m; ++i)
                            x8_group_iq4xs(blocks + g * a.ns, a, i, y + i * ldy + g * kInterleaveRows);
                      });
    return;
  }
  if (w.dtype == DType::Q3_K || w.dtype == DType::Q2_K)
    return EFIM_AVX512_ENTRY(x8_gemv_q23_avx512)(pool, a, w, y, ldy);
  if (w.dtype == DType::Q6_K) {
    const auto* blocks = static_cast<const BlockQ6_Kx8*>(w.data);
    pool.parallel_for(groups, grain_for(groups, a.m * w.rows * a.k, pool.size()),
                      [&](int, int64_t g0, int64_t g1) {
                        for (int64_t g = g0; g < g1; ++g)
                          for (int64_t i = 0; i < a.m; ++i)
                            x8_group_q6(blocks + g * a.ns, a, i, y + i * ldy + g * kInterleaveRows);
                      });
    return;
  }
  // x's sums per 32-element sub-block, paired for the mins (see x8_group): [m][ns][4].
  static thread_local std::vector<int32_t> bpair_buf;
  std::vector<int32_t>& bpair = bpair_buf;
  paired_sub_block_sums(a, bpair);
  auto run = [&]<class B>(const B* blocks) {
    pool.parallel_for(groups, grain_for(groups, a.m * w.rows * a.k, pool.size()),
                      [&](int, int64_t g0, int64_t g1) {
                        for (int64_t g = g0; g < g1; ++g)
                          for (int64_t i = 0; i < a.m; ++i)
                            x8_group(blocks + g * a.ns, a, i, &bpair[static_cast<size_t>(i * a.ns * 4)],
                                     y + i * ldy + g * kInterleaveRows);
                      });
  };
  if (w.dtype == DType::Q5_K) return run(static_cast<const BlockQ5_Kx8*>(w.data));
  run(static_cast<const BlockQ4_Kx8*>(w.data));
}

}  // namespace

void EFIM_AVX512_ENTRY(matmul_panel_avx512)(ThreadPool& pool, const float* x, int64_t m,
                                            const WeightMatrix& w, float* y, int64_t ldy) {
  const QuantizedRowsK& acts =
      quantize_activations<QuantizedRowsK, quantize_row_k_avx2>(pool, x, m, w.cols);
  if (w.interleave != 1 && m < kPanelMinRows) return x8_gemv(pool, acts, w, y, ldy);
  switch (w.dtype) {
    case DType::Q2_K:
      return panel_gemm<UQ2_K>(pool, acts, w, y, ldy);
    case DType::Q3_K:
      return panel_gemm<UQ3_K>(pool, acts, w, y, ldy);
    case DType::Q4_K:
      return panel_gemm<UQ4_K>(pool, acts, w, y, ldy);
    case DType::Q5_K:
      return panel_gemm<UQ5_K>(pool, acts, w, y, ldy);
    case DType::Q6_K:
      return panel_gemm<UQ6_K>(pool, acts, w, y, ldy);
    case DType::IQ4_XS:
      return panel_gemm<UIQ4_XS_Panel>(pool, acts, w, y, ldy);
    default:
      return;  // matmul_blocks_avx512 routes only is_panel_type here
  }
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
