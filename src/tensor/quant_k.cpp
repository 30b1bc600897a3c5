// Quantizers for the K-quant types efim writes (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), the I-quants
// IQ4_NL and IQ4_XS, and the 32-element types llama.cpp's mixes fall back to (Q4_1, Q5_0,
// Q5_1). Layouts in tensor/quant.h.
//
// K-quants, per super-block of 256:
//   1. Each sub-block gets a float scale (and, for Q4_K / Q5_K, a min) by a small search: for a
//      few candidate scales around range / nmax, round every element to its level, refit scale
//      (and min) to those levels by weighted least squares, keep the fit with the lowest
//      weighted squared error. Weights w_i = rms(x) + |x_i| favour the large elements a dot
//      product depends on most.
//   2. The sub-block scales (and mins) are quantized against one super-scale each (6 bits for
//      Q4_K / Q5_K, signed 8 bits for Q6_K).
//   3. Every element is rounded once more against its quantized scale and min.
// Not byte-equal to llama.cpp's quantizer (its search differs in detail); its errors are tested
// against ggml's on the same data (tests/backend/quant_test.cpp).
//
// Importance (an importance matrix, llama.cpp's imatrix: the mean square of each input column's
// activations): the search weights become w_i = imp_i * sqrt(2 rms^2 + x_i^2) (imp_i: the
// importance of element i's column; llama.cpp's form, which measured 1-4% below rms + |x_i|
// times imp_i in weighted error), so the fits favour the columns a dot product leans on. The 32-element types, ggml's reference
// rounding without importance, then search too: Q4_0 / Q5_0 a signed scale (the K-quants'
// fit_scale_signed), Q4_1 / Q5_1 a scale and free offset, both by weighted least squares.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "base/error.h"
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

namespace efim {

namespace {

int round_clamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

float rms_of(const float* x, int n) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(std::sqrt(ss / n));
}

// The value of largest magnitude, with its sign (the first of equals; 0 for all zeros).
float signed_extreme(const float* v, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      max = v[i];
    }
  return max;
}

// The importance of each element of a tensor of rows of `cols` elements: imp[column] (empty: none).
struct Importance {
  const float* w = nullptr;  // [cols]
  int64_t cols = 0;
  // The importance of the elements from `offset` on (a block never crosses a row), or null.
  const float* at(int64_t offset) const { return w ? w + offset % cols : nullptr; }
};
const float* offset_or_null(const float* p, int64_t by) { return p ? p + by : nullptr; }

// The search weights of n elements: w_i = (rms + |x_i|) * qw_i (rms of the whole super-block;
// qw: the elements' importance, null for none).
void search_weights(const float* x, int n, float rms, float* w, const float* qw) {
  if (!qw) {
    for (int i = 0; i < n; ++i) w[i] = rms + std::fabs(x[i]);
    return;
  }
  for (int i = 0; i < n; ++i) w[i] = qw[i] * std::sqrt(2 * rms * rms + x[i] * x[i]);
}

// Unsigned levels 0..nmax with x ~= scale * l - m: the search of step 1, with m >= 0 (the
// K-quants' subtracted min) or, free_min, any m (Q4_1 / Q5_1 store the offset itself).
struct ScaleMin {
  float scale = 0, m = 0;
};
ScaleMin fit_scale_min(const float* x, const float* w, int n, int nmax, bool free_min = false) {
  float lo = *std::min_element(x, x + n), hi = *std::max_element(x, x + n);
  if (!free_min) lo = std::min(lo, 0.0f);  // x = scale * l - m with m >= 0
  if (hi <= lo) return {0.0f, -lo};
  ScaleMin best{(hi - lo) / nmax, -lo};
  double best_err = INFINITY;
  for (int step = -10; step <= 10; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / (hi - lo);
    // Levels for this candidate, then the weighted least-squares (scale, offset) through them.
    double sw = 0, sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const double l = round_clamp(iscale * (x[i] - lo), 0, nmax);
      sw += w[i];
      sl += w[i] * l;
      sll += w[i] * l * l;
      sx += w[i] * x[i];
      slx += w[i] * l * x[i];
    }
    const double det = sw * sll - sl * sl;
    if (det <= 0) continue;
    double scale = (sw * slx - sx * sl) / det;
    double offset = (sll * sx - sl * slx) / det;  // x ~= scale * l + offset
    if (offset > 0 && !free_min) {  // the offset must be a subtracted min: refit with offset 0
      offset = 0;
      scale = slx / sll;
    }
    if (scale <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double l = round_clamp(iscale * (x[i] - lo), 0, nmax);
      const double e = scale * l + offset - x[i];
      err += w[i] * e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = {static_cast<float>(scale), static_cast<float>(-offset)};
    }
  }
  return best;
}

// Signed levels -nmax..nmax-1 with x ~= scale * l: the search of step 1 for Q6_K.
float fit_scale_signed(const float* x, const float* w, int n, int nmax) {
  const float max = signed_extreme(x, n);
  if (max == 0) return 0.0f;
  float best = -max / static_cast<float>(nmax);
  double best_err = INFINITY;
  for (int step = -9; step <= 9; ++step) {
    const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(step)) / max;
    double slx = 0, sll = 0;
    for (int i = 0; i < n; ++i) {
      const double l = round_clamp(iscale * x[i], -nmax, nmax - 1);
      slx += w[i] * l * x[i];
      sll += w[i] * l * l;
    }
    if (sll <= 0) continue;
    const double scale = slx / sll;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double l = round_clamp(iscale * x[i], -nmax, nmax - 1);
      const double e = scale * l - x[i];
      err += w[i] * e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = static_cast<float>(scale);
    }
  }
  return best;
}

// Inverse of q4k_scale_min: 8 6-bit scales and mins into 12 bytes.
void pack_k4_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
  for (int s = 0; s < 4; ++s) {
    out[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    out[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    out[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0x0f) | ((mn[s + 4] & 0x0f) << 4));
  }
}

// Steps 1-3 for Q4_K (nmax 15) and Q5_K (nmax 31): levels q[256], packed scales, d, dmin.
void quantize_k4_superblock(const float* x, const float* qw, int nmax, uint8_t q[256],
                            uint8_t scales[12], uint16_t& d_out, uint16_t& dmin_out) {
  const float av = rms_of(x, 256);
  float w[32];
  ScaleMin fit[8];
  float max_scale = 0, max_m = 0;
  for (int s = 0; s < 8; ++s) {
    search_weights(x + 32 * s, 32, av, w, offset_or_null(qw, 32 * s));
    fit[s] = fit_scale_min(x + 32 * s, w, 32, nmax);
    max_scale = std::max(max_scale, fit[s].scale);
    max_m = std::max(max_m, fit[s].m);
  }
  const float d = max_scale / 63.0f, dmin = max_m / 63.0f;
  d_out = f32_to_f16(d);
  dmin_out = f32_to_f16(dmin);
  const float dq = f16_to_f32(d_out), dminq = f16_to_f32(dmin_out);  // what readers see
  uint8_t sc[8], mn[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = static_cast<uint8_t>(dq > 0 ? round_clamp(fit[s].scale / dq, 0, 63) : 0);
    mn[s] = static_cast<uint8_t>(dminq > 0 ? round_clamp(fit[s].m / dminq, 0, 63) : 0);
    const float step = dq * sc[s], off = dminq * mn[s];
    for (int i = 0; i < 32; ++i)
      q[32 * s + i] = static_cast<uint8_t>(
          step > 0 ? round_clamp((x[32 * s + i] + off) / step, 0, nmax) : 0);
  }
  pack_k4_scales(sc, mn, scales);
}

void quantize_q4_k(const float* x, int64_t nb, BlockQ4_K* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    uint8_t q[256];
    BlockQ4_K& o = out[b];
    quantize_k4_superblock(x, imp.at(b * 256), 15, q, o.scales, o.d, o.dmin);
    for (int c = 0; c < 4; ++c)  // 64 elements: low nibbles, then high nibbles
      for (int l = 0; l < 32; ++l)
        o.qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, int64_t nb, BlockQ5_K* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    uint8_t q[256];
    BlockQ5_K& o = out[b];
    quantize_k4_superblock(x, imp.at(b * 256), 31, q, o.scales, o.d, o.dmin);
    std::memset(o.qh, 0, sizeof o.qh);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
        o.qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
        o.qh[l] = static_cast<uint8_t>(o.qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
      }
    }
  }
}

void quantize_q6_k(const float* x, int64_t nb, BlockQ6_K* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    BlockQ6_K& o = out[b];
    const float av = rms_of(x, 256);
    float w[16], scale[16];
    for (int j = 0; j < 16; ++j) {
      search_weights(x + 16 * j, 16, av, w, imp.at(b * 256 + 16 * j));
      scale[j] = fit_scale_signed(x + 16 * j, w, 16, 32);
    }
    const float max = signed_extreme(scale, 16);
    // Signed sub-scales against one super-scale: the largest maps to -128 (ggml's convention
    // keeps the int8 range's extra negative step for it).
    const float d = max != 0 ? -max / 128.0f : 0.0f;
    o.d = f32_to_f16(d);
    const float dq = f16_to_f32(o.d);
    uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      o.scales[j] = static_cast<int8_t>(dq != 0 ? round_clamp(scale[j] / dq, -128, 127) : 0);
      const float step = dq * o.scales[j];
      for (int i = 0; i < 16; ++i)
        q[16 * j + i] = static_cast<uint8_t>(
            (step != 0 ? round_clamp(x[16 * j + i] / step, -32, 31) : 0) + 32);
    }
    for (int h = 0; h < 2; ++h) {  // element 128h + 32t + l, see BlockQ6_K
      for (int l = 0; l < 32; ++l) {
        const uint8_t* e = q + 128 * h + l;
        o.ql[64 * h + l] = static_cast<uint8_t>((e[0] & 15) | ((e[64] & 15) << 4));
        o.ql[64 * h + 32 + l] = static_cast<uint8_t>((e[32] & 15) | ((e[96] & 15) << 4));
        o.qh[32 * h + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                                ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
      }
    }
  }
}

// Q3_K: per sub-block of 16 a signed scale with levels -4..3 (the search of Q6_K's step 1);
// the scales as signed 6-bit multiples of one super-scale, the largest at -32.
void pack_q3k_scale(int j, int ls, uint8_t scales[12]) {  // inverse of q3k_scale
  if (j < 8) scales[j] = static_cast<uint8_t>(scales[j] | (ls & 15));
  else scales[j - 8] = static_cast<uint8_t>(scales[j - 8] | ((ls & 15) << 4));
  scales[8 + j % 4] = static_cast<uint8_t>(scales[8 + j % 4] | ((ls >> 4) << (2 * (j / 4))));
}

void quantize_q3_k(const float* x, int64_t nb, BlockQ3_K* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    BlockQ3_K& o = out[b];
    std::memset(&o, 0, sizeof o);
    const float av = rms_of(x, 256);
    float w[16], scale[16];
    for (int j = 0; j < 16; ++j) {
      search_weights(x + 16 * j, 16, av, w, imp.at(b * 256 + 16 * j));
      scale[j] = fit_scale_signed(x + 16 * j, w, 16, 4);
    }
    const float max = signed_extreme(scale, 16);
    o.d = f32_to_f16(max != 0 ? -max / 32.0f : 0.0f);
    const float dq = f16_to_f32(o.d);
    for (int j = 0; j < 16; ++j) {
      const int l = dq != 0 ? round_clamp(scale[j] / dq, -32, 31) : 0;
      pack_q3k_scale(j, l + 32, o.scales);
      const float step = dq * static_cast<float>(l);
      for (int i = 0; i < 16; ++i) {  // element e = 128h + 32s + m (see BlockQ3_K)
        const int e = 16 * j + i, h = e / 128, s = (e % 128) / 32, m = e % 32;
        const int q = (step != 0 ? round_clamp(x[e] / step, -4, 3) : 0) + 4;  // 0..7
        o.qs[32 * h + m] = static_cast<uint8_t>(o.qs[32 * h + m] | ((q & 3) << (2 * s)));
        o.hmask[m] = static_cast<uint8_t>(o.hmask[m] | ((q >> 2) << (4 * h + s)));
      }
    }
  }
}

// Q2_K: per sub-block of 16 a scale and min with levels 0..3 (Q4_K's search), both as 4-bit
// multiples of their super-scales.
void quantize_q2_k(const float* x, int64_t nb, BlockQ2_K* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    BlockQ2_K& o = out[b];
    std::memset(&o, 0, sizeof o);
    const float av = rms_of(x, 256);
    float w[16];
    ScaleMin fit[16];
    float max_scale = 0, max_m = 0;
    for (int j = 0; j < 16; ++j) {
      search_weights(x + 16 * j, 16, av, w, imp.at(b * 256 + 16 * j));
      fit[j] = fit_scale_min(x + 16 * j, w, 16, 3);
      max_scale = std::max(max_scale, fit[j].scale);
      max_m = std::max(max_m, fit[j].m);
    }
    o.d = f32_to_f16(max_scale / 15.0f);
    o.dmin = f32_to_f16(max_m / 15.0f);
    const float dq = f16_to_f32(o.d), dminq = f16_to_f32(o.dmin);
    for (int j = 0; j < 16; ++j) {
      const int sc = dq > 0 ? round_clamp(fit[j].scale / dq, 0, 15) : 0;
      const int mn = dminq > 0 ? round_clamp(fit[j].m / dminq, 0, 15) : 0;
      o.scales[j] = static_cast<uint8_t>(sc | (mn << 4));
      const float step = dq * static_cast<float>(sc), off = dminq * static_cast<float>(mn);
      for (int i = 0; i < 16; ++i) {  // element e = 128h + 32s + m (see BlockQ2_K)
        const int e = 16 * j + i, h = e / 128, s = (e % 128) / 32, m = e % 32;
        const int q = step > 0 ? round_clamp((x[e] + off) / step, 0, 3) : 0;
        o.qs[32 * h + m] = static_cast<uint8_t>(o.qs[32 * h + m] | (q << (2 * s)));
      }
    }
  }
}

// IQ4: codes into the non-uniform grid kIq4Values, x ~= scale * kIq4Values[code].
int iq4_nearest(float v) {  // the code whose grid value is nearest v (the grid ascends)
  int c = 0;
  while (c < 15 && v > 0.5f * static_cast<float>(kIq4Values[c] + kIq4Values[c + 1])) ++c;
  return c;
}

// The scale of n elements (weights w) that minimises sum w (scale * grid(code) - x)^2 over
// candidates mapping the signed extreme to either end of the grid (-127 or 113) with a few
// stretches, each refit by least squares through its codes.
float fit_scale_iq4(const float* x, const float* w, int n) {
  const float max = signed_extreme(x, n);
  if (max == 0) return 0.0f;
  float best = -max / 127.0f;
  double best_gain = -1;  // (sum w q x)^2 / sum w q^2: the error it removes
  for (float end : {-127.0f, 113.0f})
    for (int step = -8; step <= 8; ++step) {
      const float iscale = (end + static_cast<float>(step) * (end < 0 ? -1.0f : 1.0f)) / max;
      double sqx = 0, sqq = 0;
      for (int i = 0; i < n; ++i) {
        const double q = kIq4Values[iq4_nearest(iscale * x[i])];
        sqx += w[i] * q * x[i];
        sqq += w[i] * q * q;
      }
      if (sqq <= 0 || sqx * sqx / sqq <= best_gain) continue;
      best_gain = sqx * sqx / sqq;
      best = static_cast<float>(sqx / sqq);
    }
  return best;
}

void iq4_codes(const float* x, float scale, uint8_t qs[16]) {  // 32 elements as in Q4_0
  const float inv = scale != 0 ? 1.0f / scale : 0.0f;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>(iq4_nearest(x[j] * inv) | (iq4_nearest(x[j + 16] * inv) << 4));
}

void quantize_iq4_nl(const float* x, int64_t nb, BlockIQ4_NL* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float w[32];
    search_weights(x, 32, rms_of(x, 32), w, imp.at(b * 32));
    out[b].d = f32_to_f16(fit_scale_iq4(x, w, 32));
    iq4_codes(x, f16_to_f32(out[b].d), out[b].qs);
  }
}

// IQ4_XS: each sub-block of 32's scale as a signed 6-bit multiple of one super-scale (the
// largest at -32), then its codes against that scale.
void quantize_iq4_xs(const float* x, int64_t nb, BlockIQ4_XS* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    BlockIQ4_XS& o = out[b];
    std::memset(&o, 0, sizeof o);
    const float av = rms_of(x, 256);
    float w[32], scale[8];
    for (int j = 0; j < 8; ++j) {
      search_weights(x + 32 * j, 32, av, w, imp.at(b * 256 + 32 * j));
      scale[j] = fit_scale_iq4(x + 32 * j, w, 32);
    }
    const float max = signed_extreme(scale, 8);
    o.d = f32_to_f16(max != 0 ? -max / 32.0f : 0.0f);
    const float dq = f16_to_f32(o.d);
    for (int j = 0; j < 8; ++j) {
      const int l = dq != 0 ? round_clamp(scale[j] / dq, -32, 31) : 0;
      const int ls = l + 32;
      o.scales_l[j / 2] = static_cast<uint8_t>(o.scales_l[j / 2] | ((ls & 15) << (4 * (j % 2))));
      o.scales_h = static_cast<uint16_t>(o.scales_h | ((ls >> 4) << (2 * j)));
      iq4_codes(x + 32 * j, dq * static_cast<float>(l), o.qs + 16 * j);
    }
  }
}

// 32-element types, as ggml's reference quantizers: Q4_1 / Q5_1 map [min, max] onto the
// levels (x = d q + m), Q5_0 maps the signed extreme to -16 (x = d (q - 16)).
// Q4_1 / Q5_1 levels: [min, max] onto 0..nmax, x = d q + m, rounding half up (ggml's reference).
template <class Block>
void min_max_levels(const float* x, int nmax, Block& o, int q[32]) {
  const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
  const float d = (hi - lo) / static_cast<float>(nmax), id = d != 0 ? 1.0f / d : 0.0f;
  o.d = f32_to_f16(d);
  o.m = f32_to_f16(lo);
  for (int j = 0; j < 32; ++j) q[j] = std::min(nmax, static_cast<int>((x[j] - lo) * id + 0.5f));
}

// With importance: the K-quants' scale-and-min search (fit_scale_min) with the offset free, as
// Q4_1 / Q5_1 store any offset.
template <class Block>
void weighted_min_levels(const float* x, const float* qw, int nmax, Block& o, int q[32]) {
  float w[32];
  search_weights(x, 32, rms_of(x, 32), w, qw);
  const ScaleMin fit = fit_scale_min(x, w, 32, nmax, /*free_min=*/true);
  o.d = f32_to_f16(fit.scale);
  o.m = f32_to_f16(-fit.m);  // x = d q + m
  const float dq = f16_to_f32(o.d), mq = f16_to_f32(o.m);
  for (int j = 0; j < 32; ++j) q[j] = dq > 0 ? round_clamp((x[j] - mq) / dq, 0, nmax) : 0;
}

void quantize_q4_1(const float* x, int64_t nb, BlockQ4_1* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int q[32];
    if (imp.w)
      weighted_min_levels(x, imp.at(b * 32), 15, out[b], q);
    else
      min_max_levels(x, 15, out[b], q);
    for (int j = 0; j < 16; ++j) out[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

// With importance, Q4_0 (nmax 8) and Q5_0 (nmax 16): x ~= d (q - nmax), d from fit_scale_signed.
template <class Block>
void weighted_signed_levels(const float* x, const float* qw, int nmax, Block& o, int q[32]) {
  float w[32];
  search_weights(x, 32, rms_of(x, 32), w, qw);
  o.d = f32_to_f16(fit_scale_signed(x, w, 32, nmax));
  const float dq = f16_to_f32(o.d);
  for (int j = 0; j < 32; ++j) q[j] = (dq != 0 ? round_clamp(x[j] / dq, -nmax, nmax - 1) : 0) + nmax;
}

void quantize_q4_0_weighted(const float* x, int64_t nb, BlockQ4_0* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int q[32];
    weighted_signed_levels(x, imp.at(b * 32), 8, out[b], q);
    for (int j = 0; j < 16; ++j) out[b].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

template <class Block>
void pack_q5(const int q[32], Block& o) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    o.qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
    h |= static_cast<uint32_t>(q[j] >> 4) << j;
    h |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(o.qh, &h, 4);
}

void quantize_q5_0(const float* x, int64_t nb, BlockQ5_0* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int q[32];
    if (imp.w) {
      weighted_signed_levels(x, imp.at(b * 32), 16, out[b], q);
    } else {
      const float max = signed_extreme(x, 32);
      const float d = max / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
      out[b].d = f32_to_f16(d);
      for (int j = 0; j < 32; ++j) q[j] = std::min(31, static_cast<int>(x[j] * id + 16.5f));
    }
    pack_q5(q, out[b]);
  }
}

void quantize_q5_1(const float* x, int64_t nb, BlockQ5_1* out, const Importance& imp) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    int q[32];
    if (imp.w)
      weighted_min_levels(x, imp.at(b * 32), 31, out[b], q);
    else
      min_max_levels(x, 31, out[b], q);
    pack_q5(q, out[b]);
  }
}

template <class Block>
Block* blocks(void* p) {
  return static_cast<Block*>(p);
}

}  // namespace

bool quantize_more_blocks(const float* x, int64_t n, DType t, void* out,
                          std::span<const float> importance) {
  const int64_t nb = n / dtype_info(t).block_elems;
  const Importance imp{importance.empty() ? nullptr : importance.data(),
                       static_cast<int64_t>(importance.size())};
  switch (t) {
    case DType::Q4_K:
      return quantize_q4_k(x, nb, blocks<BlockQ4_K>(out), imp), true;
    case DType::Q5_K:
      return quantize_q5_k(x, nb, blocks<BlockQ5_K>(out), imp), true;
    case DType::Q6_K:
      return quantize_q6_k(x, nb, blocks<BlockQ6_K>(out), imp), true;
    case DType::Q3_K:
      return quantize_q3_k(x, nb, blocks<BlockQ3_K>(out), imp), true;
    case DType::Q2_K:
      return quantize_q2_k(x, nb, blocks<BlockQ2_K>(out), imp), true;
    case DType::IQ4_NL:
      return quantize_iq4_nl(x, nb, blocks<BlockIQ4_NL>(out), imp), true;
    case DType::IQ4_XS:
      return quantize_iq4_xs(x, nb, blocks<BlockIQ4_XS>(out), imp), true;
    case DType::Q4_1:
      return quantize_q4_1(x, nb, blocks<BlockQ4_1>(out), imp), true;
    case DType::Q5_0:
      return quantize_q5_0(x, nb, blocks<BlockQ5_0>(out), imp), true;
    case DType::Q5_1:
      return quantize_q5_1(x, nb, blocks<BlockQ5_1>(out), imp), true;
    case DType::Q4_0:  // ggml's reference rounding (quant.cpp) unless importance is given
      if (!imp.w) return false;
      return quantize_q4_0_weighted(x, nb, blocks<BlockQ4_0>(out), imp), true;
    default:
      return false;
  }
}

}  // namespace efim
