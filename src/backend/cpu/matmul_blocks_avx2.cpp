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
#include "backend/cpu/block_unpack_avx2.h"

namespace efim::cpu::detail {

namespace {

constexpr int kMaxRows = 4;  // rows of x per pass over a weight row

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
  for (int i = 0; i < MX; ++i)
    finish_superblock<U>(isum[i], sc, a, static_cast<size_t>((i0 + i) * a.ns + s), acc[i]);
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
      if constexpr (U::kMin) off[i] += m * a.s[at];
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

template <class U>
void matmul_k(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  block_matmul<kMaxRows, QuantizedRowsK, quantize_row_k_avx2, DotK<U>>(pool, x, m, w, y);
}

template <class U>
void matmul_32(ThreadPool& pool, const float* x, int64_t m, const WeightMatrix& w, float* y) {
  block_matmul<kMaxRows, QuantizedRows, quantize_row_q8_ggml_avx2, Dot32<U>>(pool, x, m, w, y);
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
