// Causal attention over KV slots: the reference (scores of a whole unit, then softmax, then the
// weighted values) and the planning, dispatch and split merging of the flash variant, whose
// kernel is in ops_avx2.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "model/ops.h"
#include "model/ops_internal.h"
#include "tensor/quant.h"

namespace efim::ops {

namespace {

// ---------------------------------------------------------------- reference

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
  const float *k, *v;  // [slots, kv_stride] f32 keys and values
};

[[gnu::always_inline]] inline void unit_scores(const UnitRows& u,
                                               const AttentionScratch::Thread& w) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(u.hd));
  int64_t first = 0;  // rows [0, first) end before key j
  for (int64_t j = 0; j < u.n_keys; ++j) {
    while (w.last[first] < j) ++first;
    const float* kj = u.k + static_cast<int64_t>(u.ctx[j]) * u.kv_stride + u.kvh * u.hd;
    int64_t r = first;
    for (; r + 4 <= u.rows; r += 4) {
      float d[4];
      dot4(w.q[r], w.q[r + 1], w.q[r + 2], w.q[r + 3], kj, u.hd, d);
      for (int i = 0; i < 4; ++i) u.S[(r + i) * u.n_keys + j] = d[i] * scale;
    }
    for (; r < u.rows; ++r) u.S[r * u.n_keys + j] = dot(w.q[r], kj, u.hd) * scale;
  }
}

// Softmax of each row over its visible range [lo, last] (the only keys its values read).
[[gnu::always_inline]] inline void unit_softmax(const UnitRows& u,
                                                const AttentionScratch::Thread& w) {
  for (int64_t r = 0; r < u.rows; ++r) {
    float* s = u.S + r * u.n_keys;
    const int64_t lo = w.lo[r], n = w.last[r] + 1;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = lo; j < n; ++j) m = std::max(m, s[j]);
    float sum = 0;
    for (int64_t j = lo; j < n; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = lo; j < n; ++j) s[j] *= inv;
  }
}

// out[r] = sum_j P[r, j] V[slot j], 32 output dimensions at a time held in four 8-float
// registers across all keys (GCC vector extension: ymm in the AVX2 build, xmm pairs in the
// baseline; named variables because an array of them would stay in memory).
[[gnu::always_inline]] inline void unit_weighted_values(const UnitRows& u,
                                                        const AttentionScratch::Thread& w) {
  typedef float v8f __attribute__((vector_size(32)));
  const float* v0 = u.v + u.kvh * u.hd;
  for (int64_t r = 0; r < u.rows; ++r) {
    const float* p = u.S + r * u.n_keys;
    const int64_t lo = w.lo[r], n = w.last[r] + 1;
    int64_t c = 0;
    for (; c + 32 <= u.hd; c += 32) {
      v8f acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
      for (int64_t j = lo; j < n; ++j) {
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
      for (int64_t j = lo; j < n; ++j)
        axpy(p[j], v0 + static_cast<int64_t>(u.ctx[j]) * u.kv_stride + c, w.out[r] + c, u.hd - c);
    }
  }
}

// An f16 / q8_0 cache: the unit's n_keys K and V rows of head u.kvh, converted to f32 into
// the thread's buffers, which `ur` then reads as a cache of one head with slots 0..n_keys-1.
void gather_f32(const AttentionArgs& a, const Unit& u, int64_t n_keys,
                AttentionScratch::Thread& w, UnitRows& ur) {
  const int64_t hd = a.head_dim;
  w.k.resize(static_cast<size_t>(n_keys * hd));
  w.v.resize(w.k.size());
  w.ctx.resize(static_cast<size_t>(n_keys));
  const auto* k = static_cast<const uint8_t*>(a.k) + u.kvh * a.kv_head_stride;
  const auto* v = static_cast<const uint8_t*>(a.v) + u.kvh * a.kv_head_stride;
  for (int64_t j = 0; j < n_keys; ++j) {
    const int64_t slot = u.seq->ctx[j];
    dequantize(k + slot * a.kv_slot_stride, hd, a.kv_type, &w.k[j * hd]);
    dequantize(v + slot * a.kv_slot_stride, hd, a.kv_type, &w.v[j * hd]);
    w.ctx[j] = static_cast<int32_t>(j);
  }
  ur.k = w.k.data();
  ur.v = w.v.data();
  ur.ctx = w.ctx.data();
  ur.kv_stride = hd;
  ur.kvh = 0;
}

// Every input was validated by the caller: this runs on pool threads and must not throw.
void run_unit_ref(const AttentionArgs& a, const Unit& u,
                                                 AttentionScratch::Thread& w) {
  const int64_t hd = a.head_dim;
  const int64_t q_stride = a.q_stride ? a.q_stride : a.n_heads * hd;
  const int64_t out_stride = a.out_stride ? a.out_stride : a.n_heads * hd;
  const int64_t n_h = u.h1 - u.h0;
  const int64_t rows = (u.t1 - u.t0) * n_h;
  w.q.resize(static_cast<size_t>(rows));
  w.out.resize(w.q.size());
  w.last.resize(w.q.size());
  w.lo.resize(w.q.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = u.seq->tokens[u.t0 + r / n_h], h = u.h0 + r % n_h;
    w.q[r] = a.q + t * q_stride + h * hd;
    w.out[r] = a.out + t * out_stride + h * hd;
    w.last[r] = a.pos[t];  // last key this row may see (causal mask)
    w.lo[r] = detail::first_visible(a.window, a.pos[t]);
  }
  const int64_t n_keys = w.last[rows - 1] + 1;
  w.scores.resize(static_cast<size_t>(rows * n_keys));
  UnitRows ur{rows,      n_keys, a.n_kv_heads * hd,       hd, u.kvh, u.seq->ctx, w.scores.data(),
              static_cast<const float*>(a.k), static_cast<const float*>(a.v)};
  // Slot-major f32 rows are read in place; other types and layouts through f32 copies.
  const bool in_place = a.kv_type == DType::F32 && a.kv_head_stride == a.head_dim * 4 &&
                        a.kv_slot_stride == a.n_kv_heads * a.head_dim * 4;
  if (!in_place) gather_f32(a, u, n_keys, w, ur);
  unit_scores(ur, w);
  unit_softmax(ur, w);
  unit_weighted_values(ur, w);
}


void attention_ref(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  std::vector<Unit> units = plan_units(a, pool.size());
  scratch.per_thread.resize(static_cast<size_t>(pool.size()));
  pool.parallel_for(static_cast<int64_t>(units.size()), 1, [&](int thread, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) run_unit_ref(a, units[i], scratch.per_thread[thread]);
  });
}

// ---------------------------------------------------------------- flash

// Units of kFlashMaxRows rows: all heads of a KV group share each K/V load; the query tokens of
// a sequence are cut into blocks of kFlashMaxRows / group.
void plan_flash_units(const AttentionArgs& a, std::vector<FlashUnit>& units) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t heads = std::min(group, detail::kFlashMaxRows);
  const int64_t tokens = std::max<int64_t>(1, detail::kFlashMaxRows / heads);
  units.clear();
  for (const AttentionSeq& s : *a.seqs) {
    const int64_t n_tok = static_cast<int64_t>(s.tokens.size());
    for (int64_t kvh = 0; kvh < a.n_kv_heads; ++kvh)
      for (int64_t h0 = kvh * group; h0 < (kvh + 1) * group; h0 += heads)
        for (int64_t t0 = 0; t0 < n_tok; t0 += tokens) {
          FlashUnit u;
          u.seq = &s;
          u.kvh = kvh;
          u.h0 = h0;
          u.h1 = std::min(h0 + heads, (kvh + 1) * group);
          u.t0 = t0;
          u.t1 = std::min(n_tok, t0 + tokens);
          // From the key block holding the first token's first visible key (0 without a
          // window) to the last token's position.
          const int64_t lo = detail::first_visible(a.window, a.pos[s.tokens[u.t0]]);
          u.k0 = lo / detail::kFlashKeyBlock * detail::kFlashKeyBlock;
          u.k1 = a.pos[s.tokens[u.t1 - 1]] + 1;
          units.push_back(u);
        }
  }
}

// Cut every unit's keys at the multiples of kFlashKeyCell, whatever the threads and the
// batch, so a row's pieces depend on its position alone (a piece before its window adds
// exactly nothing); the pieces' (m, l, O) are merged after the loop. Long contexts so also
// give every thread work, even for one sequence's decode token. One unit runs through up to
// `run` consecutive cells of a split (each cell's sums its own, flash_unit_loop), so its
// kernel prefetches across the cells' ends instead of starting each cold (scratch.cells_per_run
// = 0: at least 4 units per thread, at most 8 cells a unit; runs of 4 for one decode token of
// the 100M model at depth 4096 on 2 threads). Decode attention at depth 4096, 12 layers from
// memory, f16, 2 threads, in-process alternation: runs of 1 cell 0.955x, 2 cells 0.98x, 8 and
// 16 cells 1.01x and 1.00x of the automatic 4 (2026-12-07, AVX2 VM).
void split_keys(const AttentionArgs& a, AttentionScratch& s, int threads) {
  s.splits.clear();
  const int64_t n_units = static_cast<int64_t>(s.units.size()), cell = detail::kFlashKeyCell;
  int64_t n_cells = 0;  // cells of the units that span more than one
  for (const FlashUnit& u : s.units)
    if (const int64_t n = detail::key_cells(u.k0, u.k1); n > 1) n_cells += n;
  const int64_t run = s.cells_per_run > 0
                          ? s.cells_per_run
                          : std::clamp<int64_t>(n_cells / (4 * int64_t{threads}), 1, 8);
  int64_t partial = 0;
  for (int64_t i = 0; i < n_units; ++i) {
    const FlashUnit u = s.units[i];
    const int64_t c0 = u.k0 / cell, c1 = c0 + detail::key_cells(u.k0, u.k1);  // cells [c0, c1)
    if (c1 - c0 == 1) continue;  // inside one cell
    const int64_t range_floats = u.rows() * (2 + a.head_dim);
    AttentionScratch::Split split{u, c1 - c0};
    split.whole.partial = partial;
    for (int64_t c = c0; c < c1; c += run) {
      FlashUnit piece = u;
      piece.k0 = std::max(u.k0, c * cell);
      piece.k1 = std::min(u.k1, (c + run) * cell);
      piece.partial = partial + (c - c0) * range_floats;
      if (c == c0) s.units[i] = piece;
      else s.units.push_back(piece);
    }
    partial += split.n_ranges * range_floats;
    s.splits.push_back(split);
  }
  s.partial.resize(static_cast<size_t>(partial));
}

// out = sum_c exp(m_c - M) O_c / sum_c exp(m_c - M) l_c over the key ranges c of each split row
// (a range where the row saw no key has m = -inf, l = 0 and adds nothing).
void merge_splits(const AttentionArgs& a, const AttentionScratch& s) {
  const int64_t hd = a.head_dim, os = a.out_stride ? a.out_stride : a.n_heads * hd;
  for (const AttentionScratch::Split& sp : s.splits) {
    const FlashUnit& u = sp.whole;
    const int64_t R = u.rows(), n_h = u.h1 - u.h0, row_floats = 2 + hd;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t tok = u.seq->tokens[u.t0 + r / n_h], h = u.h0 + r % n_h;
      float* out = a.out + tok * os + h * hd;
      const float* first = s.partial.data() + u.partial + r * row_floats;
      const int64_t range_floats = R * row_floats;
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t c = 0; c < sp.n_ranges; ++c) M = std::max(M, first[c * range_floats]);
      float L = 0;
      std::fill(out, out + hd, 0.0f);
      for (int64_t c = 0; c < sp.n_ranges; ++c) {
        const float* p = first + c * range_floats;
        const float w = std::exp(p[0] - M);
        L += w * p[1];
        for (int64_t d = 0; d < hd; ++d) out[d] += w * p[2 + d];
      }
      const float inv = 1.0f / L;
      for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
    }
  }
}

}  // namespace

void detail::attention_flash(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& s,
                             FlashKernel kernel) {
  plan_flash_units(a, s.units);
  split_keys(a, s, pool.size());
  // Largest first (the causal triangle makes late query blocks the longest), handed out one
  // at a time: the threads finish together.
  std::stable_sort(s.units.begin(), s.units.end(), [](const FlashUnit& x, const FlashUnit& y) {
    return x.rows() * (x.k1 - x.k0) > y.rows() * (y.k1 - y.k0);
  });
  int64_t max_rows = 0;
  for (const FlashUnit& u : s.units) max_rows = std::max(max_rows, u.rows());
  s.per_thread.resize(static_cast<size_t>(pool.size()));
  for (AttentionScratch::Thread& t : s.per_thread)
    t.scores.resize(static_cast<size_t>(detail::flash_work_floats(max_rows, a.head_dim)));
  pool.parallel_for(static_cast<int64_t>(s.units.size()), 1, [&](int thread, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const FlashUnit& u = s.units[i];
      float* work = s.per_thread[thread].scores.data();
      kernel(a, u, work, s.partial.data());
    }
  });
  merge_splits(a, s);
}

void attention(ThreadPool& pool, const AttentionArgs& args, AttentionScratch& scratch,
               CpuKernel k) {
  AttentionArgs a = args;
  EFIM_CHECK(a.kv_type == DType::F32 || a.kv_type == DType::F16 || a.kv_type == DType::Q8_0,
             "attention: K/V element type ", dtype_name(a.kv_type), " is not f32, f16 or q8_0");
  if (a.kv_slot_stride == 0 && a.kv_head_stride == 0) {  // slot-major rows
    const int block = dtype_info(a.kv_type).block_elems;
    if (a.head_dim % block == 0) {
      a.kv_head_stride = int64_t(dtype_row_bytes(a.kv_type, uint64_t(a.head_dim)));
      a.kv_slot_stride = a.n_kv_heads * a.kv_head_stride;
    }
  }
  EFIM_CHECK(cpu::kernel_supported(k), "attention: kernel variant ", cpu::kernel_name(k),
             " is not supported by this CPU");
  EFIM_CHECK(a.head_dim % dtype_info(a.kv_type).block_elems == 0, "attention: head_dim ",
             a.head_dim, " is not whole blocks of ", dtype_name(a.kv_type));
  const bool flash_shape = a.head_dim % 16 == 0 && a.head_dim <= detail::kFlashMaxHeadDim;
  // f16 and q8_0 rows are widened with F16C, which every AVX2 CPU made so far has.
  static const bool f16c = __builtin_cpu_supports("f16c");
  const bool flash_type = a.kv_type == DType::F32 || f16c;
  if (cpu::has_avx2(k) && flash_shape && flash_type) {
    return detail::attention_flash(pool, a, scratch,
                                   k == CpuKernel::Avx512 ? detail::kFlashAvx512
                                                          : detail::kFlashAvx2);
  }
  attention_ref(pool, a, scratch);
}

void attention(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch) {
  attention(pool, a, scratch, cpu::active_kernel());
}

}  // namespace efim::ops
