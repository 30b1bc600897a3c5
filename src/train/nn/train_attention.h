// Causal grouped-query attention for training, forward and backward, over a batch of B
// independent rows of T tokens (token t of a row sits at position t).
//
// Memory: the forward saves only the output O and the log-sum-exp of each (token, head) row of
// scores; the backward recomputes the probabilities P block by block from Q, K and the saved
// log-sum-exp (as FlashAttention does). Storing P instead would cost B * H * T^2 floats per layer:
// with efim-base-py (H = 6, 10 layers) at T = 1024 that is 24 MiB per layer per row, i.e. 240 MiB
// at B*T = 1024 and 960 MiB at B*T = 4096, growing with T^2; recomputing costs one extra Q K^T
// product (about 1/6 more attention FLOPs) and keeps the scratch at 2 x row_block x T floats
// per thread.
//
// Work is split over (row of the batch, KV head) pairs, so the dK, dV sums over the query heads
// of a group never race; within a pair, query rows are processed in blocks of row_block (64), each
// against the keys 0 .. (end of block) only (causality: about half of the T^2 products).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace efim::train {

struct AttentionShape {
  int64_t B = 0, T = 0;
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t row_block = 64;  // query rows per block (tests use small blocks to cover the edges)
  // Row layout of qkv / dqkv [B * T, qkv_stride]: q heads at 0, k heads at n_heads * head_dim,
  // v heads at (n_heads + n_kv_heads) * head_dim.
  int64_t qkv_stride() const { return (n_heads + 2 * n_kv_heads) * head_dim; }
  int64_t q_dim() const { return n_heads * head_dim; }
};

// out [B * T, q_dim] = softmax(Q K^T / sqrt(head_dim) + causal mask) V per head;
// lse [B * T, n_heads] = log sum_j exp(score_j) of each query row (natural log).
void attention_forward(ThreadPool& pool, const AttentionShape& s, const float* qkv, float* out,
                       float* lse);

// Writes every element of dqkv [B * T, qkv_stride] (dQ, dK, dV) from dout [B * T, q_dim] and the
// forward's inputs and outputs.
void attention_backward(ThreadPool& pool, const AttentionShape& s, const float* qkv,
                        const float* out, const float* lse, const float* dout, float* dqkv);

}  // namespace efim::train
