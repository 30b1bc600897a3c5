#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"

namespace efim::ops {

namespace {

// `#pragma omp simd` (enabled by -fopenmp-simd, no OpenMP runtime) lets the compiler vectorise
// these reductions without -ffast-math; results differ from a serial sum only by rounding.
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Four dot products against one shared vector b (a key row): b is loaded once per element.
[[gnu::always_inline]] inline void dot4(const float* a0, const float* a1, const float* a2,
                                        const float* a3, const float* b, int64_t n, float* out) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < n; ++i) {
    s0 += a0[i] * b[i];
    s1 += a1[i] * b[i];
    s2 += a2[i] * b[i];
    s3 += a3[i] * b[i];
  }
  out[0] = s0;
  out[1] = s1;
  out[2] = s2;
  out[3] = s3;
}

[[gnu::always_inline]] inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y) {
  float ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void add_bias(float* y, const float* b, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) add_inplace(y + r * n, b, n);
}

void add_inplace(float* a, const float* b, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void RopeTable::build(const std::vector<double>& inv_freq, const int32_t* positions,
                      int64_t n_tokens) {
  half = static_cast<int64_t>(inv_freq.size());
  cos.resize(static_cast<size_t>(n_tokens * half));
  sin.resize(cos.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[t]) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(angle));
      sin[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, RopePairing pairing,
          const RopeTable& table) {
  const int64_t half = head_dim / 2;
  EFIM_CHECK(table.half == half, "rope: table has ", table.half, " frequencies, head_dim ",
             head_dim);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = &table.cos[t * half];
    const float* s = &table.sin[t * half];
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (pairing == RopePairing::RotateHalf) {  // pair (i, i + half)
        float* lo = v;
        float* hi = v + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = lo[i], b = hi[i];
          lo[i] = a * c[i] - b * s[i];
          hi[i] = b * c[i] + a * s[i];
        }
      } else {  // pair (2i, 2i + 1)
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c[i] - b * s[i];
          v[2 * i + 1] = b * c[i] + a * s[i];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- attention

namespace {

// One unit of attention work: query heads [h0, h1) (all reading KV head kvh) for the query
// tokens seq.tokens[t0, t1). Scores of the whole unit share each K/V row read.
struct Unit {
  const AttentionSeq* seq;
  int64_t kvh, h0, h1, t0, t1;
};

// Scores buffer budget per unit (floats): bounds the query block at long contexts.
constexpr int64_t kScoreBudget = int64_t{1} << 18;
constexpr int64_t kMaxQueryBlock = 32;

std::vector<Unit> plan_units(const AttentionArgs& a, int n_threads) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  // With few sequences and KV heads (decode), split groups per query head to use all threads.
  int64_t full_group_units = 0;
  for (const AttentionSeq& s : *a.seqs)
    if (!s.tokens.empty()) full_group_units += a.n_kv_heads;
  const int64_t heads_per_unit = full_group_units >= n_threads ? group : 1;
  std::vector<Unit> units;
  for (const AttentionSeq& s : *a.seqs) {
    const int64_t n_tok = static_cast<int64_t>(s.tokens.size());
    if (n_tok == 0) continue;
    const int64_t block = std::clamp<int64_t>(
        kScoreBudget / (heads_per_unit * std::max<int64_t>(s.n_ctx, 1)), 1, kMaxQueryBlock);
    for (int64_t h0 = 0; h0 < a.n_heads; h0 += heads_per_unit)
      for (int64_t t0 = 0; t0 < n_tok; t0 += block)
        units.push_back({&s, h0 / group, h0, h0 + heads_per_unit, t0, std::min(n_tok, t0 + block)});
  }
  return units;
}

// The rows of one unit: row r is query token t0 + r / n_h, head h0 + r % n_h; tokens ascend in
// position, so rows that may not see key j form a prefix.
struct UnitRows {
  int64_t rows, n_keys, kv_stride, hd, kvh;
  const int32_t* ctx;  // slot of each key position
  float* S;            // [rows, n_keys] scores, then probabilities
};

[[gnu::always_inline]] inline void unit_scores(const AttentionArgs& a, const UnitRows& u,
                                               const AttentionScratch::Thread& w) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(u.hd));
  int64_t first = 0;  // rows [0, first) end before key j
  for (int64_t j = 0; j < u.n_keys; ++j) {
    while (w.last[first] < j) ++first;
    const float* kj = a.k + static_cast<int64_t>(u.ctx[j]) * u.kv_stride + u.kvh * u.hd;
    int64_t r = first;
    for (; r + 4 <= u.rows; r += 4) {
      float d[4];
      dot4(w.q[r], w.q[r + 1], w.q[r + 2], w.q[r + 3], kj, u.hd, d);
      for (int i = 0; i < 4; ++i) u.S[(r + i) * u.n_keys + j] = d[i] * scale;
    }
    for (; r < u.rows; ++r) u.S[r * u.n_keys + j] = dot(w.q[r], kj, u.hd) * scale;
  }
}

// Softmax of each row over its causal range [0, last].
[[gnu::always_inline]] inline void unit_softmax(const UnitRows& u,
                                                const AttentionScratch::Thread& w) {
  for (int64_t r = 0; r < u.rows; ++r) {
    float* s = u.S + r * u.n_keys;
    const int64_t n = w.last[r] + 1;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  }
}

// out[r] = sum_j P[r, j] V[slot j], 32 output dimensions at a time held in four 8-float
// registers across all keys (GCC vector extension: ymm in the AVX2 build, xmm pairs in the
// baseline; named variables because an array of them would stay in memory).
[[gnu::always_inline]] inline void unit_weighted_values(const AttentionArgs& a, const UnitRows& u,
                                                        const AttentionScratch::Thread& w) {
  typedef float v8f __attribute__((vector_size(32)));
  const float* v0 = a.v + u.kvh * u.hd;
  for (int64_t r = 0; r < u.rows; ++r) {
    const float* p = u.S + r * u.n_keys;
    const int64_t n = w.last[r] + 1;
    int64_t c = 0;
    for (; c + 32 <= u.hd; c += 32) {
      v8f acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
      for (int64_t j = 0; j < n; ++j) {
        const float* vj = v0 + static_cast<int64_t>(u.ctx[j]) * u.kv_stride + c;
        v8f x0, x1, x2, x3;
        std::memcpy(&x0, vj, 32);
        std::memcpy(&x1, vj + 8, 32);
        std::memcpy(&x2, vj + 16, 32);
        std::memcpy(&x3, vj + 24, 32);
        acc0 += p[j] * x0;
        acc1 += p[j] * x1;
        acc2 += p[j] * x2;
        acc3 += p[j] * x3;
      }
      float* o = w.out[r] + c;
      std::memcpy(o, &acc0, 32);
      std::memcpy(o + 8, &acc1, 32);
      std::memcpy(o + 16, &acc2, 32);
      std::memcpy(o + 24, &acc3, 32);
    }
    if (c < u.hd) {  // head sizes that are not a multiple of 32
      std::fill(w.out[r] + c, w.out[r] + u.hd, 0.0f);
      for (int64_t j = 0; j < n; ++j)
        axpy(p[j], v0 + static_cast<int64_t>(u.ctx[j]) * u.kv_stride + c, w.out[r] + c, u.hd - c);
    }
  }
}

// Every input was validated by the caller: this runs on pool threads and must not throw.
[[gnu::always_inline]] inline void run_unit_body(const AttentionArgs& a, const Unit& u,
                                                 AttentionScratch::Thread& w) {
  const int64_t hd = a.head_dim, q_stride = a.n_heads * hd;
  const int64_t n_h = u.h1 - u.h0;
  const int64_t rows = (u.t1 - u.t0) * n_h;
  w.q.resize(static_cast<size_t>(rows));
  w.out.resize(w.q.size());
  w.last.resize(w.q.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = u.seq->tokens[u.t0 + r / n_h], h = u.h0 + r % n_h;
    w.q[r] = a.q + t * q_stride + h * hd;
    w.out[r] = a.out + t * q_stride + h * hd;
    w.last[r] = a.pos[t];  // last key this row may see (causal mask)
  }
  const int64_t n_keys = w.last[rows - 1] + 1;
  w.scores.resize(static_cast<size_t>(rows * n_keys));
  const UnitRows ur{rows, n_keys, a.n_kv_heads * hd, hd, u.kvh, u.seq->ctx, w.scores.data()};
  unit_scores(a, ur, w);
  unit_softmax(ur, w);
  unit_weighted_values(a, ur, w);
}

// The body compiled twice: for AVX2+FMA CPUs and for the x86-64 baseline; chosen at run time.
__attribute__((target("avx2,fma"))) void run_unit_avx2(const AttentionArgs& a, const Unit& u,
                                                       AttentionScratch::Thread& w) {
  run_unit_body(a, u, w);
}
void run_unit_baseline(const AttentionArgs& a, const Unit& u, AttentionScratch::Thread& w) {
  run_unit_body(a, u, w);
}
using UnitFn = void (*)(const AttentionArgs&, const Unit&, AttentionScratch::Thread&);
UnitFn choose_unit_fn() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return avx2 ? run_unit_avx2 : run_unit_baseline;
}

}  // namespace

void attention(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  static const UnitFn run_unit = choose_unit_fn();
  std::vector<Unit> units = plan_units(a, pool.size());
  scratch.per_thread.resize(static_cast<size_t>(pool.size()));
  pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int thread, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run_unit(a, units[i], scratch.per_thread[thread]);
  });
}

}  // namespace efim::ops
