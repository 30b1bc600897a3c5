// An independent, straightforward double-precision forward pass of a Llama decoder and its mean
// cross-entropy: plain loops over tokens, heads and features, tensors looked up by their
// Hugging Face names (no fused matrices, no GEMM, no saved activations). It is the oracle of the
// trainer's gradient check (central differences of this function) and of its loss.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "train/nn/batch.h"
#include "train/nn/params.h"

namespace efim::test {

class RefModel {
 public:
  RefModel(const train::ParamLayout& layout, std::vector<double> w)
      : L_(layout), c_(layout.config), w_(std::move(w)) {}
  std::vector<double>& weights() { return w_; }

  // Mean over masked targets of -log softmax(logits)[target].
  double loss(const train::TokenBatch& b) const {
    double sum = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < b.B; ++r) {
      std::vector<int32_t> row(b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
      const auto logits = row_logits(row);
      for (int64_t t = 0; t < b.T; ++t) {
        const size_t i = static_cast<size_t>(r * b.T + t);
        if (!b.loss_mask[i]) continue;
        const auto& z = logits[t];
        double m = z[0];
        for (double v : z) m = std::max(m, v);
        double s = 0;
        for (double v : z) s += std::exp(v - m);
        sum += m + std::log(s) - z[b.targets[i]];
        ++n;
      }
    }
    return sum / double(n);
  }

  // logits[t][v] of one row of tokens at positions 0..T-1.
  std::vector<std::vector<double>> row_logits(const std::vector<int32_t>& tokens) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), D = c_.hidden;
    Mat x(T, Vec(D));
    const double* E = tensor("model.embed_tokens.weight");
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) x[t][d] = E[tokens[t] * D + d];
    for (int64_t l = 0; l < c_.n_layers; ++l) layer(l, x);
    const std::string head = c_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    Mat out(T, Vec(c_.vocab));
    for (int64_t t = 0; t < T; ++t) {
      Vec xn = norm(x[t], "model.norm.weight");
      out[t] = matvec(head, xn);
    }
    return out;
  }

 private:
  using Vec = std::vector<double>;
  using Mat = std::vector<Vec>;

  // Start of tensor `name` in w_ (row-major, outermost dimension first).
  const double* tensor(const std::string& name) const {
    const train::ParamTensor* t = L_.find(name);
    if (!t) throw std::runtime_error("reference model: no tensor " + name);
    return w_.data() + t->offset;
  }
  Vec matvec(const std::string& name, const Vec& x) const {  // W x, W [rows, x.size()]
    const double* W = tensor(name);
    const int64_t rows = L_.find(name)->shape[0], cols = static_cast<int64_t>(x.size());
    Vec y(static_cast<size_t>(rows), 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) y[i] += W[i * cols + j] * x[j];
    return y;
  }
  Vec norm(const Vec& x, const std::string& name) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / double(x.size()) + c_.rms_eps);
    Vec y(x.size());
    const double* w = tensor(name);
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
    return y;
  }
  // Rotate-half RoPE of every head of v at position pos.
  void rope(Vec& v, int64_t n_heads, int64_t pos) const {
    const int64_t hd = c_.head_dim, half = hd / 2;
    const std::vector<double> inv = c_.rope_inv_freq();
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double a = double(pos) * inv[i], cs = std::cos(a), sn = std::sin(a);
        double& x0 = v[h * hd + i];
        double& x1 = v[h * hd + i + half];
        const double y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
        x0 = y0, x1 = y1;
      }
  }
  void layer(int64_t l, Mat& x) const {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int64_t T = static_cast<int64_t>(x.size()), H = c_.n_heads, hd = c_.head_dim;
    const int64_t group = H / c_.n_kv_heads;
    Mat q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      Vec xn = norm(x[t], p + "input_layernorm.weight");
      q[t] = matvec(p + "self_attn.q_proj.weight", xn);
      k[t] = matvec(p + "self_attn.k_proj.weight", xn);
      v[t] = matvec(p + "self_attn.v_proj.weight", xn);
      rope(q[t], H, t);
      rope(k[t], c_.n_kv_heads, t);
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec att(static_cast<size_t>(H * hd), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / group;
        Vec s(static_cast<size_t>(t + 1));
        double m = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[t][h * hd + e] * k[j][kh * hd + e];
          s[j] = d / std::sqrt(double(hd));
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - m));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t e = 0; e < hd; ++e) att[h * hd + e] += s[j] / z * v[j][kh * hd + e];
      }
      Vec o = matvec(p + "self_attn.o_proj.weight", att);
      for (int64_t d = 0; d < c_.hidden; ++d) x[t][d] += o[d];
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec xn = norm(x[t], p + "post_attention_layernorm.weight");
      Vec g = matvec(p + "mlp.gate_proj.weight", xn);
      Vec u = matvec(p + "mlp.up_proj.weight", xn);
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      Vec dn = matvec(p + "mlp.down_proj.weight", g);
      for (int64_t d = 0; d < c_.hidden; ++d) x[t][d] += dn[d];
    }
  }

  const train::ParamLayout& L_;
  const ModelConfig& c_;
  std::vector<double> w_;
};

}  // namespace efim::test
