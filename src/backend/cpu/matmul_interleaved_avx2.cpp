// AVX2 GEMV and GEMM on Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights interleaved 8 rows at a time
// (interleave.h) against Q8_K activations, and on Q8_0, Q4_0 and IQ4_NL ones against Q8_0
// activations: decode and prefill of these types on CPUs without AVX-512 VNNI.
//
// One 32-byte register of the layout holds 4 bytes of each of 8 weight rows (int32 lane r =
// row r). With x's 4 matching quants broadcast to every lane,
//     maddubs(q, x4) = [q0 x0 + q1 x1, q2 x2 + q3 x3] per lane     (two int16 per row)
// so one maddubs serves 8 rows, partial sums stay in int16 across a sub-block, and one madd
// with the sub-block's scale as an int16 pair (sc_r, sc_r) per lane gives sc_r t_r in int32:
//     Q4_K, Q5_K (32-element sub-blocks j): S_r = sum_j sc_rj t_rj,  M_r = sum_j mn_rj bsum32_j,
//                                     y_r += d_r dx S_r - dmin_r dx M_r
//     Q6_K (16-element sub-blocks j): S_r = sum_j sc_rj t_rj,  O_r = sum_j 32 sc_rj bsum16_j,
//                                     y_r += d_r dx (S_r - O_r)   (the folded offset q - 32)
//     Q3_K (16-element sub-blocks j): the same with O_r = sum_j 4 sc_rj bsum16_j   (q - 4)
//     Q2_K (16-element sub-blocks j): S_r = sum_j sc_rj t_rj,  M_r = sum_j mn_rj bsum16_j,
//                                     y_r += d_r dx S_r - dmin_r dx M_r
//     IQ4_XS (32-element sub-blocks j, grid values w): S_r = sum_j sc_rj t_rj, y_r += d_r dx S_r
// The row kernels (matmul_blocks_avx2.cpp) spend, per 32 weights of one row, a maddubs, a
// madd, a scale shuffle and a horizontal sum per super-block; here a maddubs serves 8 rows and
// the scales cost one madd per sub-block of 8 rows: about half the instructions per weight.
// Bounds: Q4_K sums 8 maddubs per sub-block in int16, at most 8 * 2 * 15 * 127 = 30480; Q5_K
// sums 4, at most 4 * 2 * 31 * 127 = 31496 (two madds per 32 elements); Q6_K sums 2, at most
// 2 * 2 * 63 * 127 = 32004 (two madds per 16 elements); Q3_K sums 4, at most 4 * 2 * 7 * 127 =
// 7112 (one madd per 16 elements); IQ4_XS none (a madd per maddubs).
// The integer sums are the scalar kernel's exactly (quant_int.h); only the f32 order differs.
//
// Rows of x are taken kMaxX at a time against one group, so each unpacked register serves
// them all (prefill); threads take ranges of groups, so each streams its own part of W. A
// row of x is summed the same way whichever rows share its pass, so its result does not
// depend on m (batch invariance).
#include <immintrin.h>

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

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "backend/cpu/avx2_helpers.h"
#include "backend/cpu/block_unpack_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kMaxX = 4;  // rows of x per pass over a group

// With at most kMaxX rows of x (decode, short verify steps) each group is read once, streamed
// from memory: the kernel asks for the lines kStreamAhead bytes past each block it starts
// (prefetch_stream), since the hardware prefetcher alone leaves the GEMV below the machine's
// read rate. efim_bench_kernels --interleave, decode shapes, 2 threads, medians of 4 alternated
// runs on a 2-core AVX2 EPYC VM (2026-12-07), GB/s without / with: Q8_0 100M attn 22.8 / 32.0,
// lm head 23.5 / 29.5, Qwen 1.5B gate|up 24.2 / 32.6, ffn down 24.4 / 32.1 (1.09-1.40x on every
// shape); Q4_K 1.08-1.27x on the 100M and 1.5B shapes (0.90-0.94 on two small ones, within their
// noise). Q6_K gained nothing from it (0.84-1.14x, its 1.5B lm head 0.98x) while its blocks
// widened their scales 40 times each; with the scales made once per block (q6_scales) it gains
// too: the two together, medians of 10 alternated runs (2026-12-07), GB/s: 1.5B gate|up 24.8 -> 30.0,
// ffn down 25.8 -> 32.7, lm head 24.6 -> 30.4, kv 22.9 -> 26.6; 100M ffn up 24.5 -> 28.4, down
// 23.1 -> 27.5, lm head 26.1 -> 31.8 (1.16-1.27x). Prompts go without (their first pass over
// a chunk prefetching: 0.70-1.05x). 2 and 3 KB ahead did about the same, 1 KB less
// (kStreamAhead; Intel CPUs also ask 4 KB ahead into L2, kAvx2Stream in avx2_helpers.h).

// x's 4 quants at p in every int32 lane.
inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// 8 int8 values (one per row) as int16 pairs (lo_r, hi_r) in lane r.
inline __m256i pair16(const int8_t* lo, const int8_t* hi) {
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(lo));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(hi));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
}

// ---- Q4_K and Q5_K ----

// The levels of elements 32J + 4g .. + 3 of 8 interleaved Q4_K or Q5_K rows: the low nibbles
// (even J) or high nibbles (odd J) of qs register (J / 2, g); for Q5_K bit J of qh register g
// moved to bit 4.
template <int J, class B>
inline __m256i k_level(const B& b, int g) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i v = load32(b.qs[J / 2][g][0]);
  const __m256i low = J % 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m4) : _mm256_and_si256(v, m4);
  if constexpr (std::is_same_v<B, BlockQ4_Kx8>) {
    return low;
  } else {
    const __m256i bit = _mm256_and_si256(load32(b.qh[g][0]), _mm256_set1_epi8(static_cast<char>(1 << J)));
    if constexpr (J < 4) return _mm256_or_si256(low, _mm256_slli_epi16(bit, 4 - J));
    if constexpr (J == 4) return _mm256_or_si256(low, bit);
    if constexpr (J > 4) return _mm256_or_si256(low, _mm256_srli_epi16(bit, J - 4));
  }
}

// S[i] += sc_J t_J for sub-block J (elements 32J..32J+31) of the 8 rows against x rows xs[i]:
// the int16 sums take 8 maddubs for Q4_K (levels < 16), 4 for Q5_K (levels < 32).
template <int J, int MX, class B>
inline void k_sub(const B& b, const int8_t* const xs[MX], __m256i scale, __m256i S[MX]) {
  constexpr int kRun = std::is_same_v<B, BlockQ4_Kx8> ? 8 : 4;  // maddubs per int16 sum
#pragma GCC unroll 2
  for (int g0 = 0; g0 < 8; g0 += kRun) {
    __m256i t[MX];
#pragma GCC unroll 8
    for (int g = g0; g < g0 + kRun; ++g) {
      const __m256i q = k_level<J>(b, g);
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const __m256i p = _mm256_maddubs_epi16(q, bcast4(xs[i] + 32 * J + 4 * g));
        t[i] = g == g0 ? p : _mm256_add_epi16(t[i], p);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) S[i] = _mm256_add_epi32(S[i], _mm256_madd_epi16(t[i], scale));
  }
}

// y[(i0 + i) * ldy + r] = x row i0 + i . weight row 8 group + r, r < 8, i < MX.
// bpair[i][s][q]: x's 32-element sums of sub-blocks (q / 2) * 4 + q % 2 and + 2 as an int16
// pair (the mins' madd operand).
template <int MX, class B>
void k_group(const B* grp, const QuantizedRowsK& a, const int32_t* bpair, int64_t i0,
              float* y, int64_t ldy) {
  const __m256i lo16 = _mm256_set1_epi32(0x00ff00ff);
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const B& b = grp[s];
    if (a.m <= kMaxX) prefetch_stream(&b, sizeof(b), kAvx2Stream);
    const int8_t* xs[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) xs[i] = a.q.data() + (i0 + i) * a.k + s * kQKBlock;
    const X8Scales sc = x8_scales(b);
    __m256i S[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) S[i] = _mm256_setzero_si256();
    [&]<int... J>(std::integer_sequence<int, J...>) {
      (k_sub<J, MX>(b, xs, twice16(x8_sub<J>(sc.sc_lo, sc.sc_hi)), S), ...);
    }(std::make_integer_sequence<int, 8>{});
    // Mins: the even and odd bytes of each mins word as int16 pairs (sub-blocks 0 and 2, 1 and
    // 3, 4 and 6, 5 and 7).
    const __m256i mn[4] = {_mm256_and_si256(sc.mn_lo, lo16),
                           _mm256_and_si256(_mm256_srli_epi32(sc.mn_lo, 8), lo16),
                           _mm256_and_si256(sc.mn_hi, lo16),
                           _mm256_and_si256(_mm256_srli_epi32(sc.mn_hi, 8), lo16)};
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const int32_t* bp = bpair + ((i0 + i) * a.ns + s) * 4;
      __m256i M = _mm256_madd_epi16(mn[0], _mm256_set1_epi32(bp[0]));
#pragma GCC unroll 3
      for (int q = 1; q < 4; ++q) M = _mm256_add_epi32(M, _mm256_madd_epi16(mn[q], _mm256_set1_epi32(bp[q])));
      const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>((i0 + i) * a.ns + s)]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[i]), _mm256_mul_ps(d, dx), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dx), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + (i0 + i) * ldy, acc[i]);
}

// ---- Q6_K, Q3_K and Q2_K (16-element sub-blocks; Q6_K's and Q3_K's offset folded into O) ----

// The 16 sub-block scales of a super-block of 8 rows as int16 pairs, made once per super-block
// for every row of x: sc[j] = (sc_jr, sc_jr) in int32 lane r, the madd operand of S;
// op[p] = (sc_2p,r, sc_2p+1,r), the madd operand of O (Q2_K: its mins (mn_2p,r, mn_2p+1,r)).
struct SubScales16 {
  __m256i sc[16], op[8];
};

// O_r = sum_j op_jr bsum_j over the pairs of sub-blocks (2p, 2p + 1), bsum: x's 16 sums of 16.
inline __m256i folded_offset(const SubScales16& sc, const int16_t* bsum) {
  __m256i O = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    int32_t pair;
    std::memcpy(&pair, bsum + 2 * p, 4);
    O = _mm256_add_epi32(O, _mm256_madd_epi16(sc.op[p], _mm256_set1_epi32(pair)));
  }
  return O;
}

// Q6_K's scales from scales[2p] and scales[2p + 1] (16 bytes, [j][r]) widened to int16 quarters
// (j r0-3, j r4-7, j+1 r0-3, j+1 r4-7), then permuted to (j r0-3, j+1 r0-3 | j r4-7, j+1 r4-7)
// so that in-lane unpacks pair them.
inline void q6_scales(const BlockQ6_Kx8& b, SubScales16& s) {
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    const auto* pair = reinterpret_cast<const __m128i*>(b.scales[2 * p]);
    const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(pair));
    const __m256i t = _mm256_permute4x64_epi64(v, _MM_SHUFFLE(3, 1, 2, 0));
    s.sc[2 * p] = _mm256_unpacklo_epi16(t, t);
    s.sc[2 * p + 1] = _mm256_unpackhi_epi16(t, t);
    s.op[p] = _mm256_unpacklo_epi16(t, _mm256_srli_si256(t, 8));
  }
}

// S[i] += sum_k sc_j t_j over the four 16-element sub-blocks j = 8H + 2k + T (k = 0..3; groups
// 4T..4T+3 of half H) of the 8 rows against x rows xs[i]: each pair of groups gives the levels
// of all four sub-blocks from three loads; two maddubs per int16 sum, then a madd.
template <int H, int T, int MX>
inline void q6_quad(const BlockQ6_Kx8& b, const SubScales16& sc, const int8_t* const xs[MX],
                    __m256i S[MX]) {
#pragma GCC unroll 2
  for (int pair = 0; pair < 2; ++pair) {
    const int g0 = 4 * T + 2 * pair;
    const Q6Levels e0 = q6_levels(b, H, g0), e1 = q6_levels(b, H, g0 + 1);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i scale = sc.sc[8 * H + 2 * k + T];
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const int8_t* x = xs[i] + 128 * H + 32 * k + 4 * g0;
        const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(e0.e[k], bcast4(x)),
                                           _mm256_maddubs_epi16(e1.e[k], bcast4(x + 4)));
        S[i] = _mm256_add_epi32(S[i], _mm256_madd_epi16(t, scale));
      }
    }
  }
}

// y[(i0 + i) * ldy + r] = x row i0 + i . weight row 8 group + r, r < 8, i < MX, for the types
// of 16-element sub-blocks: per super-block S_r = sum_j sc_j t_j and O_r = sum_j op_j bsum_j,
// where op_j is the folded offset's sc_j (kShift >= 0) or the sub-block's min (kOwnMins):
//     folded (Q6_K 32 = 2^5, Q3_K 4 = 2^2):  y_r += d_r dx (S_r - 2^kShift O_r),
//     own mins (Q2_K):                        y_r += d_r dx S_r - dmin_r dx O_r,
// the scalar kernels' integer sums; a folded offset is subtracted as integers, as they do.
// scales(b, sc) makes the super-block's SubScales16, sums(b, sc, xs, S) adds its S (lambdas,
// so both are inlined: a function reference left q6_scales and q3_scales out of line).
constexpr int kOwnMins = -1;
template <int kShift, int MX, class Block, class Scales, class Sums>
inline void sub16_group(const Block* grp, const QuantizedRowsK& a, int64_t i0, float* y,
                        int64_t ldy, Scales&& scales, Sums&& sums) {
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const Block& b = grp[s];
    if (a.m <= kMaxX) prefetch_stream(&b, sizeof(b), kAvx2Stream);
    const int8_t* xs[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) xs[i] = a.q.data() + (i0 + i) * a.k + s * kQKBlock;
    __m256i S[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) S[i] = _mm256_setzero_si256();
    SubScales16 sc;
    scales(b, sc);
    sums(b, sc, xs, S);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const __m256i O = folded_offset(sc, a.bsum.data() + ((i0 + i) * a.ns + s) * 16);
      const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>((i0 + i) * a.ns + s)]);
      if constexpr (kShift == kOwnMins) {
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.dmin)));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[i]), _mm256_mul_ps(d, dx), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(O), _mm256_mul_ps(dmin, dx), acc[i]);
      } else {
        const __m256i dot = _mm256_sub_epi32(S[i], _mm256_slli_epi32(O, kShift));
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, dx), acc[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + (i0 + i) * ldy, acc[i]);
}

template <int MX>
void q6_group(const BlockQ6_Kx8* grp, const QuantizedRowsK& a, int64_t i0, float* y, int64_t ldy) {
  sub16_group<5, MX>(grp, a, i0, y, ldy,
                     [](const BlockQ6_Kx8& b, SubScales16& sc) { q6_scales(b, sc); },
                     [](const BlockQ6_Kx8& b, const SubScales16& sc, const int8_t* const* xs,
                        __m256i* S) {
                       q6_quad<0, 0, MX>(b, sc, xs, S);
                       q6_quad<0, 1, MX>(b, sc, xs, S);
                       q6_quad<1, 0, MX>(b, sc, xs, S);
                       q6_quad<1, 1, MX>(b, sc, xs, S);
                     });
}

// (a, b) int32 lanes (|a|, |b| < 2^15) as the int16 pair (a, b).
inline __m256i pair_lanes(__m256i a, __m256i b) {
  return _mm256_blend_epi16(a, _mm256_slli_epi32(b, 16), 0xAA);
}

// The byte shuffle that puts byte k0 of every 4-byte lane in the lane's low int16 and byte k1
// in its high one (their upper bytes 0: index bit 7 set).
inline __m256i pick_pair(int k0, int k1) {
  const __m256i lane = _mm256_setr_epi32(0, 0x40004, 0x80008, 0xc000c, 0, 0x40004, 0x80008, 0xc000c);
  return _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int32_t>(0x80008000u | k0 | k1 << 16)));
}

// The pairs of sub-blocks 4i..4i+3 from registers whose lanes hold one byte per sub-block (byte
// k: sub-block 4i + k, at most 63): sc[4i + k] = (v_k, v_k) of sc_bytes, op[2i] = (v_0, v_1) and
// op[2i + 1] = (v_2, v_3) of op_bytes, each minus kBias.
template <int kBias>
inline __m256i byte_pair(__m256i v, int k0, int k1) {
  const __m256i p = _mm256_shuffle_epi8(v, pick_pair(k0, k1));
  return kBias ? _mm256_sub_epi16(p, _mm256_set1_epi16(kBias)) : p;
}
template <int kBias>
inline void byte_pairs(__m256i sc_bytes, __m256i op_bytes, int i, SubScales16& s) {
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) s.sc[4 * i + k] = byte_pair<kBias>(sc_bytes, k, k);
  s.op[2 * i] = byte_pair<kBias>(op_bytes, 0, 1);
  s.op[2 * i + 1] = byte_pair<kBias>(op_bytes, 2, 3);
}

// Q3_K's 16 scales sc_j = s_j - 32 of the 8 rows (s_j: q3k_scale): the 6-bit s_j of sub-blocks
// 4i..4i+3 as bytes 0..3 of each lane of V_i, from the words W0, W1 (scale bytes 0-7: the low 4
// bits, low nibbles for j < 8, high ones from 8 on) and W2 (bytes 8-11: bits 4, 5 of s_j at
// bits 2 (j / 4), 2 (j / 4) + 1 of byte j % 4); then each pair one byte shuffle of V_i and an
// int16 subtraction, byte_pairs (about 60 instructions per super-block instead of 160 by
// 32-bit lanes).
inline void q3_scales(const BlockQ3_Kx8& b, SubScales16& s) {
  const __m256i W0 = load32(reinterpret_cast<const uint8_t*>(b.scales[0]));
  const __m256i W1 = load32(reinterpret_cast<const uint8_t*>(b.scales[1]));
  const __m256i W2 = load32(reinterpret_cast<const uint8_t*>(b.scales[2]));
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  const __m256i V[4] = {
      _mm256_or_si256(_mm256_and_si256(W0, m4), _mm256_and_si256(_mm256_slli_epi16(W2, 4), m30)),
      _mm256_or_si256(_mm256_and_si256(W1, m4), _mm256_and_si256(_mm256_slli_epi16(W2, 2), m30)),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(W0, 4), m4), _mm256_and_si256(W2, m30)),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(W1, 4), m4),
                      _mm256_and_si256(_mm256_srli_epi16(W2, 2), m30))};
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) byte_pairs<32>(V[i], V[i], i, s);
}

// The 3-bit levels of elements 128H + 32k + 4g .. + 3 of 8 interleaved Q3_K rows: bits 2k, 2k + 1
// of qs register (g, H) and, as bit 2, bit 4H + k of hmask register g.
template <int H, int K>
inline __m256i q23_level(const BlockQ3_Kx8& b, int g) {
  constexpr int c = 4 * H + K;
  const __m256i qs = load32(b.q[g][1 + H][0]), hm = load32(b.q[g][0][0]);
  const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * K), _mm256_set1_epi8(3));
  __m256i high;  // bit c moved to bit 2
  if constexpr (c >= 2) high = _mm256_srli_epi16(hm, c - 2);
  else high = _mm256_slli_epi16(hm, 2 - c);
  return _mm256_or_si256(low, _mm256_and_si256(high, _mm256_set1_epi8(4)));
}

// The 2-bit levels of the same elements of 8 interleaved Q2_K rows: bits 2k, 2k + 1 of qs
// register (g, H), as Q3_K's without the hmask bit.
template <int H, int K>
inline __m256i q23_level(const BlockQ2_Kx8& b, int g) {
  const __m256i qs = load32(b.qs[g][H][0]);
  return _mm256_and_si256(K ? _mm256_srli_epi16(qs, 2 * K) : qs, _mm256_set1_epi8(3));
}

// S[i] += sc_j t_j for sub-block j = 8H + 2K + T (elements 128H + 32K + 16T ..) of 8 Q3_K or
// Q2_K rows against x rows xs[i]: its 4 groups' maddubs summed in int16 (levels <= 7: at most
// 4 * 2 * 7 * 127 = 7112), then one madd.
template <int H, int K, int T, int MX, class Block>
inline void q23_sub(const Block& b, const SubScales16& sc, const int8_t* const xs[MX],
                    __m256i S[MX]) {
  __m256i t[MX];
#pragma GCC unroll 4
  for (int g = 4 * T; g < 4 * T + 4; ++g) {
    const __m256i q = q23_level<H, K>(b, g);
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const __m256i p = _mm256_maddubs_epi16(q, bcast4(xs[i] + 128 * H + 32 * K + 4 * g));
      t[i] = g == 4 * T ? p : _mm256_add_epi16(t[i], p);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i)
    S[i] = _mm256_add_epi32(S[i], _mm256_madd_epi16(t[i], sc.sc[8 * H + 2 * K + T]));
}

// The sums of all 16 sub-blocks of 8 Q3_K or Q2_K rows (sub-block Q = 8H + 2K + T).
template <int MX, class Block>
inline void q23_sums(const Block& b, const SubScales16& sc, const int8_t* const* xs, __m256i* S) {
  [&]<int... Q>(std::integer_sequence<int, Q...>) {
    (q23_sub<Q / 8, (Q / 2) % 4, Q % 2, MX>(b, sc, xs, S), ...);
  }(std::make_integer_sequence<int, 16>{});
}

template <int MX>
void q3_group(const BlockQ3_Kx8* grp, const QuantizedRowsK& a, int64_t i0, float* y,
              int64_t ldy) {
  sub16_group<2, MX>(grp, a, i0, y, ldy,
                     [](const BlockQ3_Kx8& b, SubScales16& sc) { q3_scales(b, sc); },
                     [](const BlockQ3_Kx8& b, const SubScales16& sc, const int8_t* const* xs,
                        __m256i* S) { q23_sums<MX>(b, sc, xs, S); });
}

// ---- Q2_K ----

// Q2_K's scales from the words of scale bytes 4i..4i+3 (scale of sub-block 4i + k in the low
// nibble of byte k, its min in the high one): sc[j] = (sc_j, sc_j) and, in op, the mins of
// sub-blocks 2p, 2p + 1 as the pair (mn_2p, mn_2p+1), byte pairs of the masked words.
inline void q2_scales(const BlockQ2_Kx8& b, SubScales16& s) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i w = load32(reinterpret_cast<const uint8_t*>(b.scales[i]));
    byte_pairs<0>(_mm256_and_si256(w, m4), _mm256_and_si256(_mm256_srli_epi16(w, 4), m4), i, s);
  }
}

// Q2_K: Q3_K's sums on 2-bit levels (at most 4 * 2 * 3 * 127 = 3048 per int16 sum), the mins
// apart: S_r = sum_j sc_j t_j, O_r = sum_j mn_j bsum_j, y_r += d_r dx S_r - dmin_r dx O_r.
template <int MX>
void q2_group(const BlockQ2_Kx8* grp, const QuantizedRowsK& a, int64_t i0, float* y,
              int64_t ldy) {
  sub16_group<kOwnMins, MX>(grp, a, i0, y, ldy,
                            [](const BlockQ2_Kx8& b, SubScales16& sc) { q2_scales(b, sc); },
                            [](const BlockQ2_Kx8& b, const SubScales16& sc,
                               const int8_t* const* xs, __m256i* S) { q23_sums<MX>(b, sc, xs, S); });
}

// ---- IQ4_XS ----

// Sub-block J's scale ls - 32 of the 8 rows as the int16 pair (sc, sc) in lane r (the madd
// operand), from the scales_l words L and H4 = the scales_h halves << 4:
//     ls = (L >> 4J) & 15 | ((H >> 2J) & 3) << 4.
template <int J>
inline __m256i iq4xs_scale(__m256i L, __m256i H4) {
  const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(L, 4 * J), _mm256_set1_epi32(0x0f));
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(H4, 2 * J), _mm256_set1_epi32(0x30));
  const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(lo, hi), _mm256_set1_epi32(32));
  return pair_lanes(sc, sc);
}

// S[i] += sc_J t_J for sub-block J (elements 32J..32J+31) of the 8 rows against x rows xs[i]:
// per 4-byte group g the grid values of the low nibbles (elements 32J + 4g..) and the high ones
// (32J + 16 + 4g..) by a byte shuffle, |w| times x with w's sign moved onto x as for IQ4_NL
// (pair sums <= 2 * 127 * 127), widened by a madd with the scale pair instead of ones.
template <int J, int MX>
inline void iq4xs_sub(const BlockIQ4_XSx8& b, __m256i table, const int8_t* const xs[MX],
                      __m256i scale, __m256i S[MX]) {
#pragma GCC unroll 2
  for (int g = 0; g < 4; ++g) {
    const __m256i v = load32(b.qs[J][g][0]);
    const __m256i wl = _mm256_shuffle_epi8(table, low_nibbles(v));
    const __m256i wh = _mm256_shuffle_epi8(table, high_nibbles(v));
    const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const int8_t* x = xs[i] + 32 * J + 4 * g;
      const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(x), wl));
      const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(x + 16), wh));
      S[i] = _mm256_add_epi32(S[i], _mm256_add_epi32(_mm256_madd_epi16(pl, scale),
                                                     _mm256_madd_epi16(ph, scale)));
    }
  }
}

// y[(i0 + i) * ldy + r] = x row i0 + i . weight row 8 group + r, r < 8, i < MX: per super-block
//     S_r = sum_J (ls_rJ - 32) t_rJ  (|S_r| <= 8 * 8 * 2 * 32 * 32258 < 2^31),
//     y_r += d_r dx S_r,
// the scalar kernel's integer sum exactly (IntSuperBlock: sc = ls - 32, no mins).
template <int MX>
void iq4xs_group(const BlockIQ4_XSx8* grp, const QuantizedRowsK& a, int64_t i0, float* y,
                 int64_t ldy) {
  const __m256i table = iq4_table();
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t s = 0; s < a.ns; ++s) {
    const BlockIQ4_XSx8& b = grp[s];
    if (a.m <= kMaxX) prefetch_stream(&b, sizeof(b), kAvx2Stream);
    const int8_t* xs[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) xs[i] = a.q.data() + (i0 + i) * a.k + s * kQKBlock;
    const __m256i L = load32(reinterpret_cast<const uint8_t*>(b.scales_l));
    const __m256i H4 = _mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales_h))), 4);
    __m256i S[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) S[i] = _mm256_setzero_si256();
    [&]<int... J>(std::integer_sequence<int, J...>) {
      (iq4xs_sub<J, MX>(b, table, xs, iq4xs_scale<J>(L, H4), S), ...);
    }(std::make_integer_sequence<int, 8>{});
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>((i0 + i) * a.ns + s)]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[i]), _mm256_mul_ps(d, dx), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + (i0 + i) * ldy, acc[i]);
}

// ---- Q8_0, Q4_0 and IQ4_NL (32-element blocks) ----

// The dot of block b of 8 interleaved rows with x's 32 quants at xs[i], in int32 lane r = row
// r, for MX rows of x:
//     Q4_0:   levels u in 0..15 (low nibbles: elements 4g + i, high: 16 + 4g + i), eight
//             maddubs summed in int16 (<= 8 * 2 * 15 * 127 = 30480), one madd, minus 8 sum(x);
//     Q8_0:   the quants stored + 128 (the VNNI operand) flipped back to signed, IQ4_NL: the
//             grid values by a byte shuffle; both |w| times x with w's sign moved onto x (pair
//             sums <= 2 * 128 * 127 = 32512), widened by a madd each 4 elements.
// Exact integers, so every lane is the scalar kernel's block dot whatever MX is.
template <DType T, int MX, class B>
inline void b32_dots(const B& b, const int8_t* const xs[MX], const int32_t xsum[MX],
                     __m256i dot[MX]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (T == DType::Q8_0) {
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) dot[i] = _mm256_setzero_si256();
// Unrolled by 2 only, as the Q8_0 GEMM tiles (matmul_quant_avx2.cpp): fully unrolled, GCC
// reassociates the integer sums into a tree whose partial results spill.
#pragma GCC unroll 2
    for (int g = 0; g < 8; ++g) {
      const __m256i w = _mm256_xor_si256(load32(b.qs[g][0]), _mm256_set1_epi8(static_cast<char>(0x80)));
      const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(xs[i] + 4 * g), w));
        dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(p, ones));
      }
    }
  } else if constexpr (T == DType::Q4_0) {
    __m256i t[MX];
#pragma GCC unroll 2
    for (int g = 0; g < 4; ++g) {
      const __m256i v = load32(b.qs[g][0]);
      const __m256i lo = low_nibbles(v), hi = high_nibbles(v);
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(xs[i] + 4 * g)),
                                           _mm256_maddubs_epi16(hi, bcast4(xs[i] + 16 + 4 * g)));
        t[i] = g == 0 ? p : _mm256_add_epi16(t[i], p);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i)
      dot[i] = _mm256_sub_epi32(_mm256_madd_epi16(t[i], ones), _mm256_set1_epi32(8 * xsum[i]));
  } else {
    static_assert(T == DType::IQ4_NL);
    const __m256i table = iq4_table();
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) dot[i] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int g = 0; g < 4; ++g) {
      const __m256i v = load32(b.qs[g][0]);
      const __m256i wl = _mm256_shuffle_epi8(table, low_nibbles(v));
      const __m256i wh = _mm256_shuffle_epi8(table, high_nibbles(v));
      const __m256i al = _mm256_abs_epi8(wl), ah = _mm256_abs_epi8(wh);
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const __m256i pl = _mm256_maddubs_epi16(al, _mm256_sign_epi8(bcast4(xs[i] + 4 * g), wl));
        const __m256i ph = _mm256_maddubs_epi16(ah, _mm256_sign_epi8(bcast4(xs[i] + 16 + 4 * g), wh));
        dot[i] = _mm256_add_epi32(dot[i], _mm256_add_epi32(_mm256_madd_epi16(pl, ones),
                                                           _mm256_madd_epi16(ph, ones)));
      }
    }
  }
}

// y[(i0 + i) * ldy + r] = x row i0 + i . weight row 8 group + r, r < 8, i < MX: per block,
// acc_r += dot_r * (d_r * dx), blocks in order. A row of x gets the same bits at every MX, so
// decode, a verify step and a prefill give a row the same result (batch invariance).
template <DType T, int MX, class B>
void b32_group(const B* grp, const QuantizedRows& a, int64_t i0, float* y, int64_t ldy) {
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t blk = 0; blk < a.nb; ++blk) {
    const B& b = grp[blk];
    if (a.m <= kMaxX) prefetch_stream(&b, sizeof(b), kAvx2Stream);
    const int8_t* xs[MX];
    int32_t xsum[MX];
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      xs[i] = a.q.data() + (i0 + i) * a.k + blk * kQBlock;
      xsum[i] = a.sum[static_cast<size_t>((i0 + i) * a.nb + blk)];
    }
    __m256i dot[MX];
    b32_dots<T, MX>(b, xs, xsum, dot);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.d)));
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) {
      const __m256 dx = _mm256_set1_ps(a.d[static_cast<size_t>((i0 + i) * a.nb + blk)]);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(d, dx), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + (i0 + i) * ldy, acc[i]);
}

// Groups [g0, g1) against all rows of x, in chunks of groups small enough to stay in L2 while
// the rows of x pass kMaxX at a time (each block of x rows, in L1, then serves every group of
// the chunk; x rows of 768 columns x 512 rows overflow L2 when every group rereads them all).
template <class Group>
void groups_range(int64_t g0, int64_t g1, int64_t m, int64_t group_bytes, Group&& group) {
  constexpr int64_t kChunkBytes = 128 * 1024;
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / group_bytes);
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = std::min(g1, c0 + chunk);
    int64_t i = 0;
    for (; i + kMaxX <= m; i += kMaxX)
      for (int64_t g = c0; g < c1; ++g) group(std::integral_constant<int, kMaxX>{}, g, i);
    for (int64_t g = c0; g < c1; ++g) switch (m - i) {
        case 3:
          group(std::integral_constant<int, 3>{}, g, i);
          break;
        case 2:
          group(std::integral_constant<int, 2>{}, g, i);
          break;
        case 1:
          group(std::integral_constant<int, 1>{}, g, i);
          break;
        default:
          break;
      }
  }
}

}  // namespace

void matmul_interleaved_avx2(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w,
                             float* y, int64_t ldy) {
  const int64_t groups = w.rows / kInterleaveRows;
  const int64_t grain = grain_for(groups, m * w.rows * w.cols, pool.size());
  if (is_block32_x8(w.dtype)) {
    const QuantizedRows& a =
        quantize_activations<QuantizedRows, quantize_row_q8_ggml_avx2>(pool, x, m, w.cols);
    auto run = [&]<DType T, class B>(const B* blocks) {
      pool.parallel_for(groups, grain, [&](int, int64_t g0, int64_t g1) {
        groups_range(g0, g1, m, a.nb * static_cast<int64_t>(sizeof(B)), [&](auto mx, int64_t g, int64_t i) {
          b32_group<T, decltype(mx)::value>(blocks + g * a.nb, a, i, y + g * kInterleaveRows, ldy);
        });
      });
    };
    const auto* b4 = static_cast<const BlockQ4_0x8*>(w.data);
    if (w.dtype == DType::Q8_0) return run.template operator()<DType::Q8_0>(static_cast<const BlockQ8_0x8*>(w.data));
    if (w.dtype == DType::Q4_0) return run.template operator()<DType::Q4_0>(b4);
    return run.template operator()<DType::IQ4_NL>(b4);
  }
  const QuantizedRowsK& a = quantize_activations<QuantizedRowsK, quantize_row_k_avx2>(pool, x, m, w.cols);
  // group(mx, the group's super-blocks, first row of x, the group's y) over the groups, threads
  // taking ranges of them.
  auto over_groups = [&]<class B>(const B* blocks, auto&& group) {
    pool.parallel_for(groups, grain, [&](int, int64_t g0, int64_t g1) {
      groups_range(g0, g1, m, a.ns * static_cast<int64_t>(sizeof(B)), [&](auto mx, int64_t g, int64_t i) {
        group(mx, blocks + g * a.ns, i, y + g * kInterleaveRows);
      });
    });
  };
  if (w.dtype == DType::Q3_K)
    return over_groups(static_cast<const BlockQ3_Kx8*>(w.data), [&](auto mx, auto* b, int64_t i, float* yg) {
      q3_group<decltype(mx)::value>(b, a, i, yg, ldy);
    });
  if (w.dtype == DType::Q2_K)
    return over_groups(static_cast<const BlockQ2_Kx8*>(w.data), [&](auto mx, auto* b, int64_t i, float* yg) {
      q2_group<decltype(mx)::value>(b, a, i, yg, ldy);
    });
  if (w.dtype == DType::Q6_K)
    return over_groups(static_cast<const BlockQ6_Kx8*>(w.data), [&](auto mx, auto* b, int64_t i, float* yg) {
      q6_group<decltype(mx)::value>(b, a, i, yg, ldy);
    });
  if (w.dtype == DType::IQ4_XS)
    return over_groups(static_cast<const BlockIQ4_XSx8*>(w.data), [&](auto mx, auto* b, int64_t i, float* yg) {
      iq4xs_group<decltype(mx)::value>(b, a, i, yg, ldy);
    });
  static thread_local std::vector<int32_t> bpair_buf;  // see k_group
  std::vector<int32_t>& bpair = bpair_buf;
  paired_sub_block_sums(a, bpair);
  auto with_mins = [&](auto mx, const auto* blocks, int64_t i, float* yg) {
    k_group<decltype(mx)::value>(blocks, a, bpair.data(), i, yg, ldy);
  };
  if (w.dtype == DType::Q5_K) return over_groups(static_cast<const BlockQ5_Kx8*>(w.data), with_mins);
  over_groups(static_cast<const BlockQ4_Kx8*>(w.data), with_mins);
}

}  // namespace efim::cpu::detail

#pragma GCC pop_options
