#include "train/nn/train_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/train_gemm.h"
#include "train/nn/train_ops.h"

namespace efim::train {

namespace {

using cpu::TrainGemm;

// c[rows, cols] = a[rows, k] . b[cols, k]^T  (all with their own strides), on this thread.
void nt(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
        int64_t rows, int64_t cols, int64_t k, bool acc = false) {
  cpu::train_gemm_serial(TrainGemm{rows, cols, k, a, lda, false, b, ldb, true, c, ldc, acc});
}
// c[rows, cols] (+)= a[rows, k] . b[k, cols]
void nn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
        int64_t rows, int64_t cols, int64_t k, bool acc = false) {
  cpu::train_gemm_serial(TrainGemm{rows, cols, k, a, lda, false, b, ldb, false, c, ldc, acc});
}
// c[rows, cols] (+)= a[k, rows]^T . b[k, cols]
void tn(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
        int64_t rows, int64_t cols, int64_t k, bool acc) {
  cpu::train_gemm_serial(TrainGemm{rows, cols, k, a, lda, true, b, ldb, false, c, ldc, acc});
}

// Max and sum of x[0, n) in 8 independent lanes: one running max (or a double sum) is a serial
// dependency chain, ~4 cycles per element; lanes let the compiler use vector instructions.
float row_max(const float* x, int64_t n) {
  float lane[8];
  std::fill_n(lane, 8, -INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] = std::max(lane[k], x[j + k]);
  float m = -INFINITY;
  for (int k = 0; k < 8; ++k) m = std::max(m, lane[k]);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

double row_sum(const float* x, int64_t n) {
  float lane[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) lane[k] += x[j + k];
  double s = 0;
  for (int k = 0; k < 8; ++k) s += lane[k];
  for (; j < n; ++j) s += x[j];
  return s;
}

// Per thread: scores / probabilities and their gradient, [row_block, T] each.
struct Scratch {
  std::vector<float> p, dp;
};

}  // namespace

void attention_forward(ThreadPool& pool, const AttentionShape& s, const float* qkv, float* out,
                       float* lse) {
  const int64_t H = s.n_heads, G = s.n_heads / s.n_kv_heads, hd = s.head_dim, T = s.T;
  const int64_t ld = s.qkv_stride(), qd = s.q_dim();
  const float scale = 1.0f / std::sqrt(float(hd));
  pool.parallel_for(s.B * s.n_kv_heads, 1, [&](int, int64_t u0, int64_t u1) {
    static thread_local Scratch sc;
    sc.p.resize(static_cast<size_t>(s.row_block * T));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / s.n_kv_heads, g = u % s.n_kv_heads;
      const float* rows = qkv + b * T * ld;
      const float* K = rows + (H + g) * hd;                 // [T, hd], stride ld
      const float* V = rows + (H + s.n_kv_heads + g) * hd;  // [T, hd], stride ld
      for (int64_t h = g * G; h < (g + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < T; i0 += s.row_block) {
          const int64_t i1 = std::min(T, i0 + s.row_block), nr = i1 - i0;
          float* P = sc.p.data();  // [nr, i1], row stride T
          nt(rows + i0 * ld + h * hd, ld, K, ld, P, T, nr, i1, hd);
          for (int64_t r = 0; r < nr; ++r) {
            float* pr = P + r * T;
            const int64_t n_keys = i0 + r + 1;  // causal: keys 0 .. i
            for (int64_t j = 0; j < n_keys; ++j) pr[j] *= scale;
            const float m = row_max(pr, n_keys);
            for (int64_t j = 0; j < n_keys; ++j) pr[j] -= m;
            ops::exp_inplace(pr, n_keys);
            const double sum = row_sum(pr, n_keys);
            const float inv = float(1.0 / sum);
            for (int64_t j = 0; j < n_keys; ++j) pr[j] *= inv;
            std::fill(pr + n_keys, pr + i1, 0.0f);
            lse[(b * T + i0 + r) * H + h] = m + float(std::log(sum));
          }
          nn(P, T, V, ld, out + (b * T + i0) * qd + h * hd, qd, nr, hd, i1);
        }
      }
    }
  });
}

// With P = softmax(S), S = scale Q K^T and O = P V:
//   dV = P^T dO,  dP = dO V^T,  dS_ij = P_ij (dP_ij - D_i) with D_i = sum_j P_ij dP_ij = dO_i .
//   O_i, dQ = scale dS K,  dK = scale dS^T Q.
void attention_backward(ThreadPool& pool, const AttentionShape& s, const float* qkv,
                        const float* out, const float* lse, const float* dout, float* dqkv) {
  const int64_t H = s.n_heads, KV = s.n_kv_heads, G = H / KV, hd = s.head_dim, T = s.T;
  const int64_t ld = s.qkv_stride(), qd = s.q_dim();
  const float scale = 1.0f / std::sqrt(float(hd));
  pool.parallel_for(s.B * KV, 1, [&](int, int64_t u0, int64_t u1) {
    static thread_local Scratch sc;
    sc.p.resize(static_cast<size_t>(s.row_block * T));
    sc.dp.resize(static_cast<size_t>(s.row_block * T));
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t b = u / KV, g = u % KV;
      const float* rows = qkv + b * T * ld;
      const float* K = rows + (H + g) * hd;
      const float* V = rows + (H + KV + g) * hd;
      float* drows = dqkv + b * T * ld;
      float* dK = drows + (H + g) * hd;
      float* dV = drows + (H + KV + g) * hd;
      for (int64_t t = 0; t < T; ++t) {
        std::fill_n(dK + t * ld, hd, 0.0f);
        std::fill_n(dV + t * ld, hd, 0.0f);
      }
      for (int64_t h = g * G; h < (g + 1) * G; ++h) {
        for (int64_t i0 = 0; i0 < T; i0 += s.row_block) {
          const int64_t i1 = std::min(T, i0 + s.row_block), nr = i1 - i0;
          const float* Q = rows + i0 * ld + h * hd;             // [nr, hd], stride ld
          const float* O = out + (b * T + i0) * qd + h * hd;    // [nr, hd], stride qd
          const float* dO = dout + (b * T + i0) * qd + h * hd;  // [nr, hd], stride qd
          float* P = sc.p.data();                               // [nr, i1], stride T
          float* dS = sc.dp.data();  // [nr, i1], stride T: dP, then dS in place
          nt(Q, ld, K, ld, P, T, nr, i1, hd);
          nt(dO, qd, V, ld, dS, T, nr, i1, hd);
          for (int64_t r = 0; r < nr; ++r) {
            float* pr = P + r * T;
            float* dr = dS + r * T;
            const int64_t n_keys = i0 + r + 1;
            const float l = lse[(b * T + i0 + r) * H + h];
            double Di = 0;
            for (int64_t d = 0; d < hd; ++d) Di += double(dO[r * qd + d]) * O[r * qd + d];
            for (int64_t j = 0; j < n_keys; ++j) pr[j] = pr[j] * scale - l;
            ops::exp_inplace(pr, n_keys);
            for (int64_t j = 0; j < n_keys; ++j) dr[j] = pr[j] * (dr[j] - float(Di)) * scale;
            std::fill(pr + n_keys, pr + i1, 0.0f);
            std::fill(dr + n_keys, dr + i1, 0.0f);
          }
          nn(dS, T, K, ld, drows + i0 * ld + h * hd, ld, nr, hd, i1);  // dQ rows of this block
          tn(dS, T, Q, ld, dK, ld, i1, hd, nr, true);
          tn(P, T, dO, qd, dV, ld, i1, hd, nr, true);
        }
      }
    }
  });
}

}  // namespace efim::train
