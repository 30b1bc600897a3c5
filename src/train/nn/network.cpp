#include "train/nn/network.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "backend/cpu/train_gemm.h"
#include "base/error.h"
#include "train/nn/train_attention.h"

namespace efim::train {

namespace {

using cpu::TrainGemm;
using Clock = std::chrono::steady_clock;

// Adds the wall time of its scope to one entry of OpTimes.
class Timed {
 public:
  Timed(double& slot) : slot_(slot), t0_(Clock::now()) {}
  ~Timed() { slot_ += std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  double& slot_;
  Clock::time_point t0_;
};

size_t idx(Op op) {
  return static_cast<size_t>(op);
}

// y[rows, out] = x[rows, in] . W[out, in]^T
void linear(ThreadPool& p, const float* x, int64_t rows, const float* W, int64_t out, int64_t in,
            float* y) {
  cpu::train_gemm(p, TrainGemm{rows, out, in, x, in, false, W, in, true, y, out, false});
}
// dx[rows, in] = dy[rows, out] . W[out, in]
void linear_dx(ThreadPool& p, const float* dy, int64_t rows, const float* W, int64_t out,
               int64_t in, float* dx) {
  cpu::train_gemm(p, TrainGemm{rows, in, out, dy, out, false, W, in, false, dx, in, false});
}
// dW[out, in] += dy[rows, out]^T . x[rows, in]
void linear_dw(ThreadPool& p, const float* dy, int64_t rows, const float* x, int64_t out,
               int64_t in, float* dW) {
  cpu::train_gemm(p, TrainGemm{out, in, rows, dy, out, true, x, in, false, dW, in, true});
}

int64_t row_grain(int64_t n, int threads) {
  return std::max<int64_t>(1, n / (8 * threads));
}

}  // namespace

std::string_view op_name(Op op) {
  static constexpr std::string_view names[] = {"embedding", "rms_norm",  "qkv proj",
                                               "rope",      "attention", "out proj",
                                               "mlp proj",  "swiglu",    "head+xent"};
  return names[idx(op)];
}

Network::Network(const ParamLayout& layout, ThreadPool& pool, const NetworkOptions& opts)
    : L_(layout), opt_(opts), c_(layout.config), pool_(pool), inv_freq_(c_.rope_inv_freq()) {
  EFIM_CHECK(opt_.head_rows >= 1 && opt_.attention_row_block >= 1, "train: head_rows ",
             opt_.head_rows, " and attention_row_block ", opt_.attention_row_block,
             " must be >= 1");
}

void Network::prepare(const TokenBatch& batch) {
  batch.validate(c_.vocab);
  EFIM_CHECK(batch.T <= c_.max_position, "train: sequence length ", batch.T,
             " exceeds max_position_embeddings ", c_.max_position);
  if (batch.B == B_ && batch.T == T_) return;
  B_ = batch.B, T_ = batch.T, N_ = B_ * T_;
  const auto n = [this](int64_t per_token) { return static_cast<size_t>(N_ * per_token); };
  const int64_t D = c_.hidden, F = c_.intermediate, QKV = c_.q_dim() + 2 * c_.kv_dim();
  acts_.resize(static_cast<size_t>(c_.n_layers));
  for (LayerActs& a : acts_) {
    for (auto* v : {&a.x, &a.xn1, &a.xmid, &a.xn2}) v->assign(n(D), 0.0f);
    a.rstd1.assign(n(1), 0.0f);
    a.rstd2.assign(n(1), 0.0f);
    a.qkv.assign(n(QKV), 0.0f);
    a.lse.assign(n(c_.n_heads), 0.0f);
    a.att.assign(n(c_.q_dim()), 0.0f);
    a.gu.assign(n(2 * F), 0.0f);
    a.act.assign(n(F), 0.0f);
  }
  for (auto* v : {&xf_, &xnf_, &dx_, &dxn_, &dtmp_}) v->assign(n(D), 0.0f);
  rstdf_.assign(n(1), 0.0f);
  dqkv_.assign(n(QKV), 0.0f);
  datt_.assign(n(c_.q_dim()), 0.0f);
  dgu_.assign(n(2 * F), 0.0f);
  dact_.assign(n(F), 0.0f);
  head_.assign(static_cast<size_t>(opt_.head_rows * c_.vocab), 0.0f);
  rope_.build(inv_freq_, T_);
}

void Network::forward(const float* w, const TokenBatch& batch) {
  prepare(batch);
  const int64_t D = c_.hidden;
  {
    Timed t(times_.forward[idx(Op::Embed)]);
    float* x0 = acts_[0].x.data();
    for (int64_t i = 0; i < N_; ++i)
      std::memcpy(x0 + i * D, w + L_.embed + int64_t{batch.inputs[i]} * D, D * sizeof(float));
  }
  for (int64_t l = 0; l < c_.n_layers; ++l)
    layer_forward(w, l, l + 1 < c_.n_layers ? acts_[l + 1].x.data() : xf_.data());
  Timed t(times_.forward[idx(Op::Norm)]);
  pool_.parallel_for(N_, row_grain(N_, pool_.size()), [&](int, int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      rstdf_[i] = ops::rms_norm_forward(xf_.data() + i * D, w + L_.final_norm, D, float(c_.rms_eps),
                                        xnf_.data() + i * D);
  });
}

void Network::layer_forward(const float* w, int64_t l, float* x_next) {
  LayerActs& a = acts_[l];
  const LayerOffsets& o = L_.layers[l];
  const int64_t D = c_.hidden, F = c_.intermediate, H = c_.n_heads, KV = c_.n_kv_heads;
  const int64_t hd = c_.head_dim, qd = c_.q_dim(), QKV = qd + 2 * c_.kv_dim();
  const float eps = float(c_.rms_eps);
  auto rows = [&](auto&& fn) {
    pool_.parallel_for(N_, row_grain(N_, pool_.size()), [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) fn(i);
    });
  };
  {
    Timed t(times_.forward[idx(Op::Norm)]);
    rows([&](int64_t i) {
      a.rstd1[i] = ops::rms_norm_forward(&a.x[i * D], w + o.attn_norm, D, eps, &a.xn1[i * D]);
    });
  }
  {
    Timed t(times_.forward[idx(Op::QkvProj)]);
    linear(pool_, a.xn1.data(), N_, w + o.wqkv, QKV, D, a.qkv.data());
  }
  {
    Timed t(times_.forward[idx(Op::Rope)]);
    rows([&](int64_t i) { ops::rope_forward(&a.qkv[i * QKV], H + KV, hd, rope_, i % T_); });
  }
  {
    Timed t(times_.forward[idx(Op::Attention)]);
    attention_forward(pool_, AttentionShape{B_, T_, H, KV, hd, opt_.attention_row_block},
                      a.qkv.data(), a.att.data(), a.lse.data());
  }
  {
    Timed t(times_.forward[idx(Op::OutProj)]);
    linear(pool_, a.att.data(), N_, w + o.wo, D, qd, a.xmid.data());
  }
  {
    Timed t(times_.forward[idx(Op::Norm)]);
    rows([&](int64_t i) {
      for (int64_t d = 0; d < D; ++d) a.xmid[i * D + d] += a.x[i * D + d];
      a.rstd2[i] = ops::rms_norm_forward(&a.xmid[i * D], w + o.ffn_norm, D, eps, &a.xn2[i * D]);
    });
  }
  {
    Timed t(times_.forward[idx(Op::MlpProj)]);
    linear(pool_, a.xn2.data(), N_, w + o.wgu, 2 * F, D, a.gu.data());
  }
  {
    Timed t(times_.forward[idx(Op::SwiGlu)]);
    rows([&](int64_t i) {
      ops::swiglu_forward(&a.gu[i * 2 * F], &a.gu[i * 2 * F + F], F, &a.act[i * F]);
    });
  }
  Timed t(times_.forward[idx(Op::MlpProj)]);
  linear(pool_, a.act.data(), N_, w + o.wdown, D, F, x_next);
  for (int64_t i = 0; i < N_ * D; ++i) x_next[i] += a.xmid[i];
}

void Network::norm_backward(const float* dy, const float* x, const float* rstd, const float* w,
                            float* dx, float* dw) {
  const int64_t D = c_.hidden;
  // A fixed split into chunks (not per thread): the pool hands chunks out dynamically, and
  // summing the partial dw in chunk order keeps the result independent of the scheduling.
  const int64_t chunks = std::min<int64_t>(N_, 32);
  dw_partial_.assign(static_cast<size_t>(chunks * D), 0.0f);
  pool_.parallel_for(chunks, 1, [&](int, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* part = dw_partial_.data() + c * D;
      for (int64_t i = c * N_ / chunks; i < (c + 1) * N_ / chunks; ++i)
        ops::rms_norm_backward(dy + i * D, x + i * D, w, rstd[i], D, dx + i * D, part);
    }
  });
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t d = 0; d < D; ++d) dw[d] += dw_partial_[c * D + d];
}

void Network::layer_backward(const float* w, int64_t l, float* dx, float* g) {
  LayerActs& a = acts_[l];
  const LayerOffsets& o = L_.layers[l];
  const int64_t D = c_.hidden, F = c_.intermediate, H = c_.n_heads, KV = c_.n_kv_heads;
  const int64_t hd = c_.head_dim, qd = c_.q_dim(), QKV = qd + 2 * c_.kv_dim();
  auto rows = [&](auto&& fn) {
    pool_.parallel_for(N_, row_grain(N_, pool_.size()), [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) fn(i);
    });
  };
  // MLP: x_next = xmid + act . Wdown^T
  {
    Timed t(times_.backward[idx(Op::MlpProj)]);
    linear_dx(pool_, dx, N_, w + o.wdown, D, F, dact_.data());
    linear_dw(pool_, dx, N_, a.act.data(), D, F, g + o.wdown);
  }
  {
    Timed t(times_.backward[idx(Op::SwiGlu)]);
    rows([&](int64_t i) {
      const float* gu = &a.gu[i * 2 * F];
      ops::swiglu_backward(gu, gu + F, &dact_[i * F], F, &dgu_[i * 2 * F], &dgu_[i * 2 * F + F]);
    });
  }
  {
    Timed t(times_.backward[idx(Op::MlpProj)]);
    linear_dw(pool_, dgu_.data(), N_, a.xn2.data(), 2 * F, D, g + o.wgu);
    linear_dx(pool_, dgu_.data(), N_, w + o.wgu, 2 * F, D, dxn_.data());
  }
  {  // dxmid = dx + norm backward; kept in dx
    Timed t(times_.backward[idx(Op::Norm)]);
    norm_backward(dxn_.data(), a.xmid.data(), a.rstd2.data(), w + o.ffn_norm, dtmp_.data(),
                  g + o.ffn_norm);
    for (int64_t i = 0; i < N_ * D; ++i) dx[i] += dtmp_[i];
  }
  // Attention: xmid = x + att . Wo^T
  {
    Timed t(times_.backward[idx(Op::OutProj)]);
    linear_dx(pool_, dx, N_, w + o.wo, D, qd, datt_.data());
    linear_dw(pool_, dx, N_, a.att.data(), D, qd, g + o.wo);
  }
  {
    Timed t(times_.backward[idx(Op::Attention)]);
    attention_backward(pool_, AttentionShape{B_, T_, H, KV, hd, opt_.attention_row_block},
                       a.qkv.data(), a.att.data(), a.lse.data(), datt_.data(), dqkv_.data());
  }
  {
    Timed t(times_.backward[idx(Op::Rope)]);
    rows([&](int64_t i) { ops::rope_backward(&dqkv_[i * QKV], H + KV, hd, rope_, i % T_); });
  }
  {
    Timed t(times_.backward[idx(Op::QkvProj)]);
    linear_dw(pool_, dqkv_.data(), N_, a.xn1.data(), QKV, D, g + o.wqkv);
    linear_dx(pool_, dqkv_.data(), N_, w + o.wqkv, QKV, D, dxn_.data());
  }
  Timed t(times_.backward[idx(Op::Norm)]);
  norm_backward(dxn_.data(), a.x.data(), a.rstd1.data(), w + o.attn_norm, dtmp_.data(),
                g + o.attn_norm);
  for (int64_t i = 0; i < N_ * D; ++i) dx[i] += dtmp_[i];
}

// Rows [r0, r0 + n) at a time: logits = xnf . Wlm^T; each masked row's loss; with g, the rows
// become dlogits = grad_scale * (softmax - onehot(target)) (0 for unmasked rows), then
// dxnf = dlogits . Wlm and dWlm += dlogits^T . xnf.
LossSum Network::head(const float* w, const TokenBatch& batch, float* g, float grad_scale) {
  const int64_t D = c_.hidden, V = c_.vocab;
  std::vector<double> row_loss(static_cast<size_t>(opt_.head_rows));  // summed in row order
  LossSum out;
  for (int64_t r0 = 0; r0 < N_; r0 += opt_.head_rows) {
    const int64_t n = std::min(opt_.head_rows, N_ - r0);
    linear(pool_, xnf_.data() + r0 * D, n, w + L_.lm_head, V, D, head_.data());
    std::fill(row_loss.begin(), row_loss.end(), 0.0);
    pool_.parallel_for(n, 1, [&](int, int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* row = head_.data() + i * V;
        const int64_t t = r0 + i;
        if (!batch.loss_mask[t]) {
          if (g) std::fill_n(row, V, 0.0f);
          continue;
        }
        const int32_t target = batch.targets[t];
        row_loss[i] = ops::softmax_xent(row, V, target, g != nullptr);
        if (!g) continue;
        row[target] -= 1.0f;
        for (int64_t v = 0; v < V; ++v) row[v] *= grad_scale;
      }
    });
    for (int64_t i = 0; i < n; ++i) out.sum += row_loss[i];
    if (!g) continue;
    linear_dx(pool_, head_.data(), n, w + L_.lm_head, V, D, dxn_.data() + r0 * D);
    linear_dw(pool_, head_.data(), n, xnf_.data() + r0 * D, V, D, g + L_.lm_head);
  }
  out.count = batch.n_targets();
  return out;
}

LossSum Network::forward_backward(const float* w, const TokenBatch& batch, float* g,
                                  float grad_scale) {
  forward(w, batch);
  LossSum loss;
  {
    Timed t(times_.forward[idx(Op::Head)]);
    loss = head(w, batch, g, grad_scale);
  }
  if (!g) return loss;
  const int64_t D = c_.hidden;
  {
    Timed t(times_.backward[idx(Op::Norm)]);
    norm_backward(dxn_.data(), xf_.data(), rstdf_.data(), w + L_.final_norm, dx_.data(),
                  g + L_.final_norm);
  }
  for (int64_t l = c_.n_layers - 1; l >= 0; --l) {
    layer_backward(w, l, dx_.data(), g);
  }
  Timed t(times_.backward[idx(Op::Embed)]);
  for (int64_t i = 0; i < N_; ++i) {
    float* ge = g + L_.embed + int64_t{batch.inputs[i]} * D;
    for (int64_t d = 0; d < D; ++d) ge[d] += dx_[i * D + d];
  }
  return loss;
}

void Network::logits(const float* w, const TokenBatch& batch, float* out) {
  forward(w, batch);
  linear(pool_, xnf_.data(), N_, w + L_.lm_head, c_.vocab, c_.hidden, out);
}

}  // namespace efim::train
