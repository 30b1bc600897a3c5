// AVX-512 (F, BW, VNNI) int8-dot kernels for the super-block types of llama.cpp's K-quant and
// I-quant files whose unpacking is costly (Q3_K, Q5_K, Q6_K, IQ4_XS against Q8_K activations):
// the scheme of matmul_blocks_avx2.cpp on 64-byte registers.
//
// One register holds chunks 2p and 2p + 1 of a weight super-block (elements 64p..64p+63, the
// AVX2 unpackers' two halves joined) and their sub-block scales; the dot of the pair with 64
// activations is
//     dpwssd(isum, maddubs(q, a), [sc lanes of chunk 2p | of chunk 2p + 1])
// (VNNI's dpwssd is madd + add in one instruction; same int32 wrap-free bounds as the AVX2
// kernel). 32 registers hold 8 rows of x per pass over a weight row (AVX2: 4), so each unpacked
// pair is used 8 times. Per super-block the int32 lanes are folded to 256 bits and finished as
// in the AVX2 kernel (mins against the activations' 16-element sums, folded offsets exact in
// int32). (Finishing the 8 rows at once, their sums as the lanes of one vector by hadd, measured
// slower: 85-93 against 94-109 GFLOP/s, best of 6, on Q4_K.)
//
// Where it pays: on Zen 4 (512-bit operations take two 256-bit slots) the multiplies per
// element are the same as AVX2's, so the gain is the unpacking shared by 8 rows instead of 4
// and IQ4_XS's sign by mask. Best of 5 single-thread runs, GFLOP/s at 256 x 768 x 2048,
// AVX-512 / AVX2: IQ4_XS 80 / 51, Q3_K 81 / 76, Q6_K 88 / 82, Q5_K 91 / 89; Q4_K 94 / 101 and
// Q2_K 101 / 104 (cheap unpacking: no gain), which therefore stay on the AVX2 kernel, as do
// the 32-element types (Q4_1, Q5_0, Q5_1, IQ4_NL). Decode (GEMV) streams memory either way:
// within 5% on Q4_K, Q5_K and Q6_K.
//
// This file is compiled twice: natively for AVX-512 CPUs, and for tests on SIMDe's emulation of
// the intrinsics (EFIM_AVX512_EMULATED, see avx512_emulation.h).

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (GCC bug 105593, see
// matmul_quant_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>
#include <utility>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_int.h"
#include "base/thread_pool.h"
#include "tensor/quant.h"

#ifdef EFIM_AVX512_EMULATED
#include "backend/cpu/avx512_emulation.h"
#else
#include <immintrin.h>
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")
#endif
#include "backend/cpu/avx512_helpers.h"
#include "backend/cpu/block_unpack_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kMaxRows512 = 8;  // rows of x per pass over a weight row

inline __m512i load64(const int8_t* p) {
  return _mm512_loadu_si512(reinterpret_cast<const void*>(p));
}

// x with the sign of w (x where w > 0, -x where w < 0; where w == 0 |w| makes the product 0).
inline __m512i sign_of(__m512i x, __m512i w) {
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
}

// isum[i] += chunks 2P, 2P + 1 of the weight super-block . the same 64 activations of x row
// i0 + i.
template <class U, int MX, int P>
inline void pair_dot(const typename U::Block& wb, const Scales& sc, const QuantizedRowsK& a,
                     int64_t i0, int64_t s, __m512i isum[MX]) {
  const __m512i q = join256(U::chunk(wb, 2 * P), U::chunk(wb, 2 * P + 1));
  const __m512i scv = join256(chunk_scale<U::kSub16, 2 * P>(sc.sc),
                              chunk_scale<U::kSub16, 2 * P + 1>(sc.sc));
  const __m512i qa = U::kSigned ? _mm512_abs_epi8(q) : q;
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    __m512i x = load64(a.q.data() + (i0 + i) * a.k + s * kQKBlock + 64 * P);
    if constexpr (U::kSigned) x = sign_of(x, q);
    isum[i] = _mm512_dpwssd_epi32(isum[i], _mm512_maddubs_epi16(qa, x), scv);
#ifndef EFIM_AVX512_EMULATED
    asm("" : "+v"(isum[i]));  // keep the sums a chain (see matmul_blocks_avx2.cpp)
#endif
  }
}

// acc[i] += (weight super-block wb) . (super-block s of x row i0 + i), for MX rows of x, in 8
// f32 lanes whose sum is the dot.
template <class U, int MX>
inline void superblock_dot(const typename U::Block& wb, const QuantizedRowsK& a, int64_t i0,
                           int64_t s, __m256 acc[MX]) {
  const Scales sc = U::prepare(wb);
  __m512i isum[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) isum[i] = _mm512_setzero_si512();
  [&]<int... P>(std::integer_sequence<int, P...>) {
    (pair_dot<U, MX, P>(wb, sc, a, i0, s, isum), ...);
  }(std::make_integer_sequence<int, 4>{});
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    const __m256i sum8 = _mm256_add_epi32(_mm512_castsi512_si256(isum[i]),
                                          _mm512_extracti64x4_epi64(isum[i], 1));
    finish_superblock<U>(sum8, sc, a, static_cast<size_t>((i0 + i) * a.ns + s), acc[i]);
  }
}

template <class U>
struct DotK512 {
  // y[(i0 + i) * ldy] = weight row . x row i0 + i for MX rows.
  template <int MX>
  static void run(const uint8_t* wrow, const QuantizedRowsK& a, int64_t i0, float* y, int64_t ldy) {
    const auto* blocks = reinterpret_cast<const typename U::Block*>(wrow);
    __m256 acc[MX];
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
    for (int64_t s = 0; s < a.ns; ++s) superblock_dot<U, MX>(blocks[s], a, i0, s, acc);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) y[(i0 + i) * ldy] = hsum(acc[i]);
  }
};

template <class U>
void matmul_k(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  block_matmul<kMaxRows512, QuantizedRowsK, quantize_row_k_avx2, DotK512<U>>(pool, x, m, w, y);
}

}  // namespace

// Q3_K, Q5_K, Q6_K and IQ4_XS here; the other block types through the AVX2 kernel.
void EFIM_AVX512_ENTRY(matmul_blocks_avx512)(ThreadPool& pool, const float* x, int64_t m,
                                             const WeightMatrix& w, float* y) {
  if (m >= kPanelMinRows && is_panel_type(w.dtype))
    return EFIM_AVX512_ENTRY(matmul_panel_avx512)(pool, x, m, w, y, w.rows);
  switch (w.dtype) {
    case DType::Q3_K:
      return matmul_k<UQ3_K>(pool, x, m, w, y);
    case DType::Q5_K:
      return matmul_k<UQ5_K>(pool, x, m, w, y);
    case DType::Q6_K:
      return matmul_k<UQ6_K>(pool, x, m, w, y);
    case DType::IQ4_XS:
      return matmul_k<UIQ4_XS>(pool, x, m, w, y);
    default:
      return matmul_blocks_avx2(pool, x, m, w, y);
  }
}

}  // namespace efim::cpu::detail

#ifndef EFIM_AVX512_EMULATED
#pragma GCC pop_options
#endif
