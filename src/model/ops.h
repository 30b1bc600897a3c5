// Elementwise and attention operations of the forward pass, on f32 row-major activations.
// Each works on whole rows so the inner loops are plain contiguous loops the compiler vectorises.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "model/config.h"

namespace efim::ops {

// y = x / sqrt(mean(x^2) + eps) * w, for one row of n elements (y may alias x).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);

// y[i] += b[i] for every row of y[rows, n].
void add_bias(float* y, const float* b, int64_t rows, int64_t n);

// a[i] += b[i], n elements.
void add_inplace(float* a, const float* b, int64_t n);

// gate[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + exp(-z)); n elements.
void silu_mul(float* gate, const float* up, int64_t n);

// Rotary embedding angles of one step: cos/sin of positions[t] * inv_freq[i],
// each [n_tokens, head_dim / 2]. Angles are computed in double, then rounded.
struct RopeTable {
  std::vector<float> cos, sin;
  int64_t half = 0;
  void build(const std::vector<double>& inv_freq, const int32_t* positions, int64_t n_tokens);
};

// Rotates every head of x[n_tokens, n_heads * head_dim] in place with the pairing given.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, RopePairing pairing,
          const RopeTable& table);

// Causal attention over KV slots (the caller validates positions and slots first: the work
// runs on pool threads and does not check again) for the tokens of one step, grouped by sequence.
//
// Query token t (row t of q) belongs to sequence seq and sits at position pos[t]; it attends to
// the keys/values stored at slots ctx[0..pos[t]] of its sequence (ctx = that sequence's slot
// list, indexed by position). K/V rows of every one of those slots must already be written.
struct AttentionSeq {
  const int32_t* ctx = nullptr;  // [n_ctx] slot of each position
  int64_t n_ctx = 0;
  std::vector<int32_t> tokens;  // rows of q belonging to this sequence, ascending position
};

struct AttentionArgs {
  const float* q = nullptr;      // [n_tokens, n_heads * head_dim], RoPE applied
  const int32_t* pos = nullptr;  // [n_tokens]
  const float* k = nullptr;      // [n_slots, n_kv_heads * head_dim] one layer of the cache
  const float* v = nullptr;      // [n_slots, n_kv_heads * head_dim]
  float* out = nullptr;          // [n_tokens, n_heads * head_dim]
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const std::vector<AttentionSeq>* seqs = nullptr;
};

// Scratch buffers reused across calls (one per pool thread).
struct AttentionScratch {
  struct Thread {
    std::vector<float> scores;    // [rows, keys]
    std::vector<const float*> q;  // [rows] query row pointers
    std::vector<float*> out;      // [rows] output row pointers
    std::vector<int64_t> last;    // [rows] position of each row's query
  };
  std::vector<Thread> per_thread;
};

void attention(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch);

}  // namespace efim::ops
