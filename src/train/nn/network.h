// The training forward and backward pass of a Llama decoder over a TokenBatch.
//
// Per layer (x: residual stream [N = B*T, hidden]):
//   xn1 = rms_norm(x) * attn_norm;  qkv = xn1 . Wqkv^T;  q, k = rope(q, k)
//   att = causal_gqa_attention(q, k, v);  xmid = x + att . Wo^T
//   xn2 = rms_norm(xmid) * ffn_norm;  [gate | up] = xn2 . Wgu^T
//   act = silu(gate) * up;  x_next = xmid + act . Wdown^T
// then xnf = rms_norm(x_L) * final_norm, logits = xnf . Wlm^T, loss = sum over masked targets of
// -log softmax(logits)[target]. The head is fused with the loss and its backward: logits exist
// for NetworkOptions::head_rows rows at a time only ([head_rows, vocab] floats instead of [N,
// vocab]).
//
// Saved activations per layer and token (floats): x, xn1, xmid, xn2 (4 hidden), qkv, att,
// gate|up (2 intermediate), act (intermediate), 2 norm scales and one log-sum-exp per head.
// For efim-base-py that is 5,640 floats = 22 KiB per token per layer: 226 MiB at N = 1024,
// 904 MiB at N = 4096 (see train_attention.h for why attention probabilities are not saved).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/thread_pool.h"
#include "train/nn/batch.h"
#include "train/nn/params.h"
#include "train/nn/train_ops.h"

namespace efim::train {

// Wall time per part of the step, for the benchmark's breakdown.
enum class Op { Embed, Norm, QkvProj, Rope, Attention, OutProj, MlpProj, SwiGlu, Head, kCount };
std::string_view op_name(Op op);

struct OpTimes {
  std::array<double, static_cast<size_t>(Op::kCount)> forward{}, backward{};  // seconds
};

struct LossSum {
  double sum = 0;     // sum of -log p(target) over masked targets
  int64_t count = 0;  // masked targets
  double mean() const { return count ? sum / double(count) : 0.0; }
};

struct NetworkOptions {
  int64_t head_rows = 256;           // rows of logits computed at a time
  int64_t attention_row_block = 64;  // see AttentionShape::row_block
};

class Network {
 public:
  Network(const ParamLayout& layout, ThreadPool& pool, const NetworkOptions& opts = {});

  // Forward over `batch` (validated against the vocabulary). When grads is not null, also runs
  // the backward pass and ADDS grad_scale * d(loss sum)/d(params) to grads [layout.total]
  // (so micro-batches accumulate; the caller zeroes grads per optimizer step).
  LossSum forward_backward(const float* params, const TokenBatch& batch, float* grads,
                           float grad_scale);
  // logits [B * T, vocab] of every token (the mask is ignored).
  void logits(const float* params, const TokenBatch& batch, float* out);

  const OpTimes& times() const { return times_; }
  void reset_times() { times_ = {}; }

 private:
  struct LayerActs {
    std::vector<float> x, xn1, xmid, xn2;  // [N, hidden]
    std::vector<float> rstd1, rstd2;       // [N]
    std::vector<float> qkv;                // [N, q_dim + 2 kv_dim], q and k after RoPE
    std::vector<float> lse;                // [N, n_heads]
    std::vector<float> att;                // [N, q_dim]
    std::vector<float> gu;                 // [N, 2 intermediate]: gate | up
    std::vector<float> act;                // [N, intermediate]
  };
  void prepare(const TokenBatch& batch);
  void forward(const float* w, const TokenBatch& batch);
  void layer_forward(const float* w, int64_t l, float* x_next);
  // dx: gradient w.r.t. the layer's output on entry, w.r.t. its input on exit.
  void layer_backward(const float* w, int64_t l, float* dx, float* g);
  LossSum head(const float* w, const TokenBatch& batch, float* g, float grad_scale);
  // Row-parallel RMSNorm backward; dx = dL/dx written, dL/dw added to dw.
  void norm_backward(const float* dy, const float* x, const float* rstd, const float* w, float* dx,
                     float* dw);

  const ParamLayout& L_;
  NetworkOptions opt_;
  const ModelConfig& c_;
  ThreadPool& pool_;
  int64_t B_ = 0, T_ = 0, N_ = 0;
  ops::RopeAngles rope_;
  std::vector<double> inv_freq_;
  std::vector<LayerActs> acts_;
  std::vector<float> xf_, xnf_, rstdf_;  // final norm input and output [N, hidden], [N]
  // Backward scratch: [N, hidden] x3, [N, qkv], [N, q_dim], [N, 2 F], [N, F], [head_rows, V].
  std::vector<float> dx_, dxn_, dtmp_, dqkv_, datt_, dgu_, dact_, head_;
  std::vector<float> dw_partial_;  // [threads, hidden] per-thread norm weight gradients
  OpTimes times_;
};

}  // namespace efim::train
