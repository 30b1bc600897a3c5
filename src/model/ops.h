// Elementwise and attention operations of the forward pass, on f32 row-major activations.
//
// Each op has two variants chosen at run time with the matmul convention (cpu::active_kernel():
// AVX2 when the CPU has AVX2 + FMA + F16C, EFIM_KERNEL=scalar forces the reference):
//   Scalar: the reference, plain loops the compiler vectorises for the x86-64 baseline;
//   Avx2:   intrinsics (ops_avx2.cpp); attention is flash-style (online softmax per key block).
// The overloads without a kernel argument use the active variant; the ones with it are for the
// differential tests and benchmarks (Error if the CPU lacks the variant).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/matmul.h"
#include "base/thread_pool.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace efim::ops {

using cpu::CpuKernel;

// y = x / sqrt(mean(x^2) + eps) * w, for one row of n elements (y may alias x).
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y);
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, CpuKernel k);

// The residual add and the next block's norm in one pass over the row:
// x += d; y = rms_norm(x) * w. n elements (y must not alias x or d).
void add_rms_norm(float* x, const float* d, const float* w, int64_t n, float eps, float* y);
void add_rms_norm(float* x, const float* d, const float* w, int64_t n, float eps, float* y,
                  CpuKernel k);

// LayerNorm of one row: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b (y may alias x). The
// mean and variance are accumulated in double (two passes), so rows with a large common offset
// lose nothing to cancellation.
void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* y);

// x[i] = gelu(x[i]) in the tanh form (PyTorch's "gelu_pytorch_tanh", ggml_gelu):
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); n elements.
void gelu_tanh(float* x, int64_t n);
// gate[i] = gelu_tanh(gate[i]) * up[i] (GeGLU), n elements.
void gelu_tanh_mul(float* gate, const float* up, int64_t n);

// y[i] += b[i] for every row of y[rows, n].
void add_bias(float* y, const float* b, int64_t rows, int64_t n);

// a[i] += b[i], n elements.
void add_inplace(float* a, const float* b, int64_t n);

// gate[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + exp(-z)); n elements. The AVX2 exp is
// within 2 ulp of std::exp; it overflows to inf slightly early (for z < -88.4 instead of -88.7),
// where silu is below 1e-36 anyway.
void silu_mul(float* gate, const float* up, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n, CpuKernel k);

// Rotary embedding angles of one step: cos/sin of positions[t] * inv_freq[i],
// each [n_tokens, head_dim / 2]. Angles are computed in double, then rounded.
// cos2/sin2 [n_tokens, head_dim] are the same values laid out for interleaved pairs
// (2i, 2i + 1): cos2 = (c_i, c_i), sin2 = (-s_i, s_i), so a rotation is x * cos2 + swap(x) * sin2.
struct RopeTable {
  std::vector<float> cos, sin;
  std::vector<float> cos2, sin2;
  int64_t half = 0;
  void build(const std::vector<double>& inv_freq, const int32_t* positions, int64_t n_tokens);
};

// Rotates every head of x[n_tokens, n_heads * head_dim] in place with the pairing given.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, RopePairing pairing,
          const RopeTable& table);

// Rotates the first n_heads heads of each row of x, rows `row_stride` floats apart (e.g. the q
// and k heads of a fused [n_tokens, q_dim + 2 kv_dim] projection in one call), rows
// [t0, t1) of the table's tokens.
struct RopeRows {
  float* x = nullptr;
  int64_t row_stride = 0, n_heads = 0, head_dim = 0;
  int64_t t0 = 0, t1 = 0;
  RopePairing pairing = RopePairing::RotateHalf;
};
void rope_rows(const RopeRows& r, const RopeTable& table);
void rope_rows(const RopeRows& r, const RopeTable& table, CpuKernel k);

// Causal attention over KV slots (the caller validates positions and slots first: the work
// runs on pool threads and does not check again) for the tokens of one step, grouped by sequence.
//
// Query token t (row t of q) belongs to sequence seq and sits at position pos[t]; it attends to
// the keys/values stored at slots ctx[lo..pos[t]] of its sequence (ctx = that sequence's slot
// list, indexed by position), lo = 0, or with a sliding window W, lo = max(0, pos[t] - W + 1)
// (the W most recent positions, itself included). K/V rows of those slots must be written.
struct AttentionSeq {
  const int32_t* ctx = nullptr;  // [n_ctx] slot of each position
  int64_t n_ctx = 0;
  std::vector<int32_t> tokens;  // rows of q belonging to this sequence, ascending position
};

struct AttentionArgs {
  const float* q = nullptr;      // [n_tokens, q_stride] (n_heads * head_dim used), RoPE applied
  const int32_t* pos = nullptr;  // [n_tokens]
  // One layer of the cache, values in kv_type (f32, f16 or q8_0 whose blocks do not straddle
  // heads), read in place: KV head h of slot s starts kv_slot_stride * s + kv_head_stride * h
  // bytes in. Strides 0: rows of n_kv_heads * head_dim values per slot (slot-major).
  const void* k = nullptr;
  const void* v = nullptr;
  float* out = nullptr;          // [n_tokens, out_stride] (n_heads * head_dim written)
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const std::vector<AttentionSeq>* seqs = nullptr;
  int64_t q_stride = 0, out_stride = 0;  // floats between rows; 0: n_heads * head_dim
  DType kv_type = DType::F32;
  int64_t kv_slot_stride = 0, kv_head_stride = 0;
  int64_t window = 0;  // sliding window W in positions (starcoder2); 0: every earlier position
};

// One unit of flash attention work: query heads [h0, h1) (all reading KV head kvh) for the
// query tokens seq->tokens[t0, t1), over key positions [k0, k1) (k0 a multiple of the key
// block, so every unit of a sequence reads its keys in the same blocks).
// Rows of a unit: row r is token t0 + r / (h1 - h0), head h0 + r % (h1 - h0); positions ascend
// with r, so the rows that see no key of a block form a prefix and, with a sliding window,
// the rows whose window starts after the block a suffix.
struct FlashUnit {
  const AttentionSeq* seq = nullptr;
  int64_t kvh = 0, h0 = 0, h1 = 0, t0 = 0, t1 = 0, k0 = 0, k1 = 0;
  // -1: normalise and write the output rows. Otherwise the unit covers part of the keys and
  // writes each row's running max, sum and unnormalised output, [rows, 2 + head_dim] floats,
  // at partial + this offset, one such range per key cell (kFlashKeyCell) its keys span, in
  // order; the splits are merged after the parallel loop.
  int64_t partial = -1;
  int64_t rows() const { return (t1 - t0) * (h1 - h0); }
};

// Scratch buffers reused across calls.
struct AttentionScratch {
  struct Thread {
    std::vector<float> scores;    // reference: [rows, keys]; flash: Q, O, S, m, l tiles
    std::vector<const float*> q;  // [rows] query row pointers
    std::vector<float*> out;      // [rows] output row pointers
    std::vector<int64_t> last;    // [rows] position of each row's query
    std::vector<int64_t> lo;      // [rows] first position each row sees (sliding window)
    // Reference over an f16 / q8_0 cache: the unit's K and V rows as f32 [keys, head_dim],
    // read through ctx = 0, 1, 2, ...
    std::vector<float> k, v;
    std::vector<int32_t> ctx;
  };
  std::vector<Thread> per_thread;
  // Flash variant: this step's units (largest first), the units whose keys were split across
  // threads and the split results, (m, l, O[head_dim]) per row and key range.
  std::vector<FlashUnit> units;
  struct Split {
    FlashUnit whole;  // whole.partial: offset of the first key range's rows
    int64_t n_ranges = 0;
  };
  std::vector<Split> splits;
  std::vector<float> partial;
  // Key cells one flash unit runs through (0: chosen by the step's size and the threads).
  // Each cell's sums are the same whatever it is; tests set it.
  int64_t cells_per_run = 0;
};

void attention(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch);
void attention(ThreadPool& pool, const AttentionArgs& a, AttentionScratch& scratch, CpuKernel k);

}  // namespace efim::ops
