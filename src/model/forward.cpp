// The forward pass over one step (Batch): embeddings, decoder layers, final norm, logits.
//
//   x = embed[token]
//   per layer:  h = x + Wo . attention(RoPE(Wq.rms(x) + bq), RoPE(Wk.rms(x) + bk), Wv.rms(x) + bv)
//               (qwen3: q and k heads rms-normalised, weights q_norm / k_norm, before RoPE)
//               x = h + Wdown . (silu(Wgate.rms(h)) * Wup.rms(h))
//   logits = Wout . rms(x)      (Wout = embed when tied)
// Qwen3-MoE: the MLP is a mixture of experts (moe_block):
//               p = softmax(Wrouter . rms(h)), E = the k largest p (renormalised to sum 1),
//               x = h + sum over e in E of p_e Wdown_e . (silu(Wgate_e.rms(h)) * Wup_e.rms(h))
// StarCoder2: LayerNorm with bias in place of rms, x = h + Wdown . gelu(Wup.norm(h) + bup) + bdown,
// biases on q, k, v, o. Gemma: x = embed[token] * sqrt(hidden), gelu in place of silu (GeGLU).
//
// All tokens of the step share each matmul: activations are [n_tokens, features] row-major.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "model/model.h"

namespace efim {

namespace {

// Runs fn(row) for rows [0, n) on the pool, 16 rows per chunk: a row costs about a microsecond,
// a pool wake-up ten, so a decode step runs its row ops inline.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n, Fn&& fn) {
  pool.parallel_for(n, 16, [&](int, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r);
  });
}

// p[0..n) = softmax(p): exp(p - max) / sum, in f32 as Hugging Face's router.
void softmax_inplace(float* p, int64_t n) {
  const float mx = *std::max_element(p, p + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += p[i] = std::exp(p[i] - mx);
  for (int64_t i = 0; i < n; ++i) p[i] /= sum;
}

void resize(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
}

}  // namespace

void Model::validate(const Batch& b, const KvCache& kv) const {
  const ModelConfig& c = config_;
  const int64_t n = b.size();
  EFIM_CHECK(n > 0, "forward: empty batch");
  EFIM_CHECK(
      static_cast<int64_t>(b.positions.size()) == n && static_cast<int64_t>(b.seq.size()) == n,
      "forward: batch has ", n, " tokens but ", b.positions.size(), " positions and ", b.seq.size(),
      " sequence indices");
  EFIM_CHECK(kv.n_layers() == c.n_layers && kv.kv_dim() == c.kv_dim() &&
                 kv.n_kv_heads() == c.n_kv_heads,
             "forward: kv cache has ", kv.n_layers(), " layers x ", kv.kv_dim(), " values in ",
             kv.n_kv_heads(), " heads, model needs ", c.n_layers, " x ", c.kv_dim(), " in ",
             c.n_kv_heads);
  const int block = dtype_info(kv.type()).block_elems;
  EFIM_CHECK(c.head_dim % block == 0, "forward: a ", dtype_name(kv.type()), " kv cache needs a "
             "head_dim that is a multiple of ", block, ", the model's is ", c.head_dim);
  for (const BatchSequence& s : b.sequences)
    for (int32_t slot : s.slots)
      EFIM_CHECK(slot >= 0 && slot < kv.n_slots(), "forward: kv slot ", slot, " outside [0, ",
                 kv.n_slots(), ")");
  std::vector<int32_t> written(static_cast<size_t>(n));  // slot each token writes
  for (int64_t i = 0; i < n; ++i) {
    EFIM_CHECK(b.tokens[i] >= 0 && b.tokens[i] < c.vocab, "forward: token ", b.tokens[i],
               " at batch index ", i, " outside [0, ", c.vocab, ")");
    EFIM_CHECK(b.seq[i] >= 0 && b.seq[i] < static_cast<int32_t>(b.sequences.size()),
               "forward: token ", i, " has sequence index ", b.seq[i], " but the batch has ",
               b.sequences.size(), " sequences");
    const auto& slots = b.sequences[b.seq[i]].slots;
    EFIM_CHECK(b.positions[i] >= 0 && b.positions[i] < static_cast<int64_t>(slots.size()),
               "forward: token ", i, " position ", b.positions[i], " has no slot (sequence ",
               b.seq[i], " lists ", slots.size(), ")");
    written[i] = slots[b.positions[i]];
  }
  std::sort(written.begin(), written.end());
  auto dup = std::adjacent_find(written.begin(), written.end());
  EFIM_CHECK(dup == written.end(), "forward: two tokens of the batch write kv slot ", *dup);
  for (int32_t r : b.logits_rows)
    EFIM_CHECK(r >= 0 && r < n, "forward: logits row ", r, " outside [0, ", n, ")");
}

void Model::matmul(const float* x, int64_t m, const cpu::WeightMatrix& w, float* y) {
  if (reference_matmul_) {
    cpu::matmul_reference(x, m, w, y);
  } else {
    cpu::matmul(*pool_, x, m, w, y);
  }
}

void Model::matmul_jobs(const std::vector<cpu::MatmulJob>& jobs) {
  if (!reference_matmul_) return cpu::matmul_jobs(*pool_, jobs);
  for (const cpu::MatmulJob& j : jobs) cpu::matmul_reference(j.x, j.m, j.w, j.y);
}

void Model::matmul(const float* x, int64_t m, const std::vector<cpu::WeightMatrix>& parts,
                   float* y) {
  if (parts.size() == 1) return matmul(x, m, parts.front(), y);
  int64_t width = 0;
  for (const cpu::WeightMatrix& p : parts) width += p.rows;
  int64_t col = 0;
  for (const cpu::WeightMatrix& p : parts) {
    s_.part.resize(static_cast<size_t>(m * p.rows));
    matmul(x, m, p, s_.part.data());  // [m, p.rows]
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(y + i * width + col, s_.part.data() + i * p.rows,
                  static_cast<size_t>(p.rows) * sizeof(float));
    col += p.rows;
  }
}

// In: s_.xn = rms(x) * attn_norm. Out: s_.proj = Wo . attention (+ bo).
void Model::attention_block(int64_t layer, const Batch& b, KvCache& kv) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const FusedLayer& f = fused_[layer];
  const int64_t n = b.size(), hd = c.head_dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t qkv_dim = q_dim + 2 * kv_dim;
  observe(MatmulSite::kAttnIn, layer, -1, s_.xn.data(), n, c.hidden);
  matmul(s_.xn.data(), n, f.qkv, s_.qkv.data());  // [n, q_dim + 2 kv_dim]
  // Per token: bias, RoPE on its q and k heads together, K/V into the token's cache slot.
  for_rows(*pool_, n, [&](int64_t i) {
    float* row = &s_.qkv[i * qkv_dim];
    if (c.qkv_bias) ops::add_inplace(row, f.bqkv.data(), qkv_dim);
    if (c.qk_norm) {  // each q head, then each k head: rms over head_dim (qwen3)
      for (int64_t h = 0; h < c.n_heads; ++h)
        ops::rms_norm(row + h * hd, w.q_norm.data(), hd, static_cast<float>(c.rms_eps), row + h * hd);
      for (int64_t h = 0; h < c.n_kv_heads; ++h) {
        float* kh = row + q_dim + h * hd;
        ops::rms_norm(kh, w.k_norm.data(), hd, static_cast<float>(c.rms_eps), kh);
      }
    }
    ops::rope_rows({row - i * qkv_dim, qkv_dim, c.n_heads + c.n_kv_heads, hd, i, i + 1,
                    c.rope_pairing},
                   s_.rope);
    const int64_t slot = b.sequences[b.seq[i]].slots[b.positions[i]];
    kv.store(layer, slot, row + q_dim, row + q_dim + kv_dim);  // in the cache's element type
  });
  ops::AttentionArgs a;
  a.q = s_.qkv.data();
  a.q_stride = qkv_dim;
  a.pos = b.positions.data();
  a.k = kv.k(layer);  // [n_slots] rows of kv.row_bytes()
  a.v = kv.v(layer);
  a.kv_type = kv.type();
  a.kv_slot_stride = kv.head_bytes();  // head-major
  a.kv_head_stride = kv.head_stride();
  a.out = s_.att.data();
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = hd;
  a.seqs = &s_.seqs;
  a.window = c.sliding_window;
  ops::attention(*pool_, a, s_.attention);
  observe(MatmulSite::kAttnOut, layer, -1, s_.att.data(), n, q_dim);
  matmul(s_.att.data(), n, w.wo, s_.proj.data());  // [n, hidden]
  if (c.o_bias) ops::add_bias(s_.proj.data(), w.bo.data(), n, c.hidden);
}

// In: s_.xn = rms(h) * ffn_norm. Out: s_.proj = Wdown . (silu(Wgate . xn) * (Wup . xn)).
void Model::mlp_block(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const int64_t inter = c.intermediate;
  const LayerWeights& w = weights_.layers[layer];
  observe(MatmulSite::kFfnIn, layer, -1, s_.xn.data(), n, c.hidden);
  if (c.mlp == MlpKind::Gelu) {  // [n, intermediate] = gelu(Wup . xn + bup), then Wdown + bdown
    matmul(s_.xn.data(), n, fused_[layer].gate_up, s_.gate_up.data());
    for_rows(*pool_, n, [&](int64_t r) {
      float* u = &s_.gate_up[r * inter];
      if (c.mlp_bias) ops::add_inplace(u, w.b_up.data(), inter);
      ops::gelu_tanh(u, inter);
    });
    observe(MatmulSite::kFfnDownIn, layer, -1, s_.gate_up.data(), n, inter);
    matmul(s_.gate_up.data(), n, w.w_down, s_.proj.data());  // [n, hidden]
    if (c.mlp_bias) ops::add_bias(s_.proj.data(), w.b_down.data(), n, c.hidden);
    return;
  }
  matmul(s_.xn.data(), n, fused_[layer].gate_up, s_.gate_up.data());  // [n, 2 intermediate]
  // One token's gate half is already the contiguous input of Wdown; several need a copy.
  float* act = n == 1 ? s_.gate_up.data() : s_.act.data();
  for_rows(*pool_, n, [&](int64_t r) {
    float* gate = &s_.gate_up[r * 2 * inter];
    if (c.mlp == MlpKind::GeGlu)
      ops::gelu_tanh_mul(gate, gate + inter, inter);
    else
      ops::silu_mul(gate, gate + inter, inter);
    if (n > 1) std::copy_n(gate, inter, &s_.act[r * inter]);
  });
  observe(MatmulSite::kFfnDownIn, layer, -1, act, n, inter);
  matmul(act, n, w.w_down, s_.proj.data());  // [n, hidden]
}

// In: s_.xn = rms(h) * ffn_norm. Out: s_.proj = the experts' weighted sum (see the top).
// Tokens are grouped by expert, so each chosen expert runs one matmul per matrix over its
// tokens; a token's sum runs over its experts in ascending index (whatever the batch holds).
void Model::moe_block(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const int64_t E = c.n_experts, k = c.n_experts_used, H = c.hidden, ff = c.expert_intermediate;
  resize(s_.router, n * E);
  s_.route.resize(static_cast<size_t>(n * k));
  s_.route_w.resize(static_cast<size_t>(n * k));
  observe(MatmulSite::kFfnIn, layer, -1, s_.xn.data(), n, H);
  matmul(s_.xn.data(), n, w.router, s_.router.data());  // [n, E]
  for_rows(*pool_, n, [&](int64_t i) {
    float* p = &s_.router[i * E];
    softmax_inplace(p, E);
    // The k largest probabilities, ties to the lower index; then ascending expert order.
    int32_t* r = &s_.route[i * k];
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int32_t e = 0; e < E; ++e) {
        if (std::find(r, r + j, e) != r + j) continue;
        if (best < 0 || p[e] > p[best]) best = e;
      }
      r[j] = best;
    }
    std::sort(r, r + k);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += p[r[j]];
    for (int64_t j = 0; j < k; ++j)
      s_.route_w[i * k + j] = c.expert_weights_norm ? p[r[j]] / sum : p[r[j]];
  });
  if (n == 1) return moe_one_token(layer);
  // Counting sort of (token, weight) by expert.
  s_.expert_begin.assign(static_cast<size_t>(E + 1), 0);
  for (int32_t e : s_.route) ++s_.expert_begin[e + 1];
  for (int64_t e = 0; e < E; ++e) s_.expert_begin[e + 1] += s_.expert_begin[e];
  s_.expert_rows.resize(s_.route.size());
  s_.expert_rows_w.resize(s_.route.size());
  std::vector<int64_t>& fill = s_.expert_fill;  // next free entry of each expert
  fill.assign(s_.expert_begin.begin(), s_.expert_begin.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = fill[s_.route[i * k + j]]++;
      s_.expert_rows[slot] = static_cast<int32_t>(i);
      s_.expert_rows_w[slot] = s_.route_w[i * k + j];
    }
  std::fill(s_.proj.begin(), s_.proj.begin() + n * H, 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = s_.expert_begin[e], m = s_.expert_begin[e + 1] - b;
    if (m == 0) continue;
    const int32_t* tok = &s_.expert_rows[b];
    const float* xe = s_.xn.data();  // [m, H]: the expert's tokens (all of them when n == 1)
    if (n > 1) {
      resize(s_.ex, m * H);
      for (int64_t r = 0; r < m; ++r) std::copy_n(&s_.xn[tok[r] * H], H, &s_.ex[r * H]);
      xe = s_.ex.data();
    }
    resize(s_.eg, m * ff);
    resize(s_.eu, m * ff);
    resize(s_.ey, m * H);
    observe(MatmulSite::kExpertIn, layer, e, xe, m, H);
    matmul(xe, m, w.expert_gate[e], s_.eg.data());  // [m, ff]
    matmul(xe, m, w.expert_up[e], s_.eu.data());    // [m, ff]
    ops::silu_mul(s_.eg.data(), s_.eu.data(), m * ff);  // rows side by side in both
    observe(MatmulSite::kExpertDownIn, layer, e, s_.eg.data(), m, ff);
    matmul(s_.eg.data(), m, w.expert_down[e], s_.ey.data());  // [m, H]
    for (int64_t r = 0; r < m; ++r) {
      float* out = &s_.proj[tok[r] * H];
      const float* y = &s_.ey[r * H];
      const float pw = s_.expert_rows_w[b + r];
      for (int64_t j = 0; j < H; ++j) out[j] += pw * y[j];
    }
  }
}

// The n == 1 case of moe_block, after routing: s_.route[0..k) ascending, weights in
// s_.route_w. The same products and the same sum order as the grouped path.
void Model::moe_one_token(int64_t layer) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const int64_t k = c.n_experts_used, H = c.hidden, ff = c.expert_intermediate;
  resize(s_.eg, k * ff);
  resize(s_.eu, k * ff);
  resize(s_.ey, k * H);
  s_.jobs.clear();
  for (int64_t j = 0; j < k; ++j) {  // [ff] gate and up of expert route[j] at row j
    const int32_t e = s_.route[j];
    s_.jobs.push_back({s_.xn.data(), 1, w.expert_gate[e], &s_.eg[j * ff]});
    s_.jobs.push_back({s_.xn.data(), 1, w.expert_up[e], &s_.eu[j * ff]});
  }
  matmul_jobs(s_.jobs);
  for (int64_t j = 0; j < k; ++j) {
    ops::silu_mul(&s_.eg[j * ff], &s_.eu[j * ff], ff);
    observe(MatmulSite::kExpertIn, layer, s_.route[j], s_.xn.data(), 1, H);
    observe(MatmulSite::kExpertDownIn, layer, s_.route[j], &s_.eg[j * ff], 1, ff);
  }
  s_.jobs.clear();
  for (int64_t j = 0; j < k; ++j)  // [H] down of expert route[j] at row j
    s_.jobs.push_back({&s_.eg[j * ff], 1, w.expert_down[s_.route[j]], &s_.ey[j * H]});
  matmul_jobs(s_.jobs);
  float* out = s_.proj.data();
  std::fill(out, out + H, 0.0f);
  for (int64_t j = 0; j < k; ++j) {
    const float pw = s_.route_w[j];
    const float* y = &s_.ey[j * H];
    for (int64_t i = 0; i < H; ++i) out[i] += pw * y[i];
  }
}

void Model::norm_row(const float* x, const std::vector<float>& w, const std::vector<float>& b,
                     float* y) const {
  const float eps = static_cast<float>(config_.rms_eps);
  if (config_.norm == NormKind::Layer)
    ops::layer_norm(x, w.data(), b.data(), config_.hidden, eps, y);
  else
    ops::rms_norm(x, w.data(), config_.hidden, eps, y);
}

void Model::add_norm_row(float* x, const float* d, const std::vector<float>& w,
                         const std::vector<float>& b, float* y) const {
  if (config_.norm == NormKind::Rms)
    return ops::add_rms_norm(x, d, w.data(), config_.hidden, static_cast<float>(config_.rms_eps), y);
  ops::add_inplace(x, d, config_.hidden);
  norm_row(x, w, b, y);
}

// Group the step's tokens by sequence, ascending in position (attention relies on it); reuses
// the token lists' memory across steps.
void Model::group_tokens(const Batch& b) {
  s_.seqs.resize(b.sequences.size());
  for (size_t q = 0; q < b.sequences.size(); ++q) {
    s_.seqs[q].ctx = b.sequences[q].slots.data();
    s_.seqs[q].n_ctx = static_cast<int64_t>(b.sequences[q].slots.size());
    s_.seqs[q].tokens.clear();
  }
  for (int64_t i = 0; i < b.size(); ++i) s_.seqs[b.seq[i]].tokens.push_back(static_cast<int32_t>(i));
  for (ops::AttentionSeq& s : s_.seqs)
    if (!std::is_sorted(s.tokens.begin(), s.tokens.end(), [&](int32_t x, int32_t y) {
          return b.positions[x] < b.positions[y];
        }))
      std::stable_sort(s.tokens.begin(), s.tokens.end(),
                       [&](int32_t x, int32_t y) { return b.positions[x] < b.positions[y]; });
}

void Model::forward(const Batch& b, KvCache& kv, float* logits) {
  validate(b, kv);
  const ModelConfig& c = config_;
  const int64_t n = b.size(), H = c.hidden;
  resize(s_.x, n * H);
  // xn also holds the final-normed rows of the logits tokens (logits_rows may repeat a token).
  resize(s_.xn, std::max<int64_t>(n, static_cast<int64_t>(b.logits_rows.size())) * H);
  resize(s_.qkv, n * (c.q_dim() + 2 * c.kv_dim()));
  resize(s_.att, n * c.q_dim());
  resize(s_.proj, n * H);
  resize(s_.gate_up, c.any_dense_mlp() ? n * 2 * c.intermediate : 0);
  resize(s_.act, n > 1 && c.any_dense_mlp() ? n * c.intermediate : 0);
  s_.rope.build(inv_freq_, b.positions.data(), n);
  group_tokens(b);

  // x = embed[token]; xn = norm(x) with layer 0's attn_norm.
  const auto& layers = weights_.layers;
  const float embed_scale = std::sqrt(static_cast<float>(H));  // gemma
  for_rows(*pool_, n, [&](int64_t i) {
    cpu::dequantize_row(weights_.embed, b.tokens[i], &s_.x[i * H]);
    if (c.embed_scale)
      for (int64_t j = 0; j < H; ++j) s_.x[i * H + j] *= embed_scale;
    norm_row(&s_.x[i * H], layers[0].attn_norm, layers[0].attn_norm_b, &s_.xn[i * H]);
  });
  for (int64_t l = 0; l < c.n_layers; ++l) {
    attention_block(l, b, kv);
    // h = x + attention; xn = norm(h) with ffn_norm
    for_rows(*pool_, n, [&](int64_t i) {
      add_norm_row(&s_.x[i * H], &s_.proj[i * H], layers[l].ffn_norm, layers[l].ffn_norm_b,
                   &s_.xn[i * H]);
    });
    if (c.moe_layer(l))
      moe_block(l, n);
    else
      mlp_block(l, n);
    // x = h + mlp; xn = norm(x) with the next layer's attn_norm (the last layer's sum only).
    const bool last = l + 1 == c.n_layers;
    for_rows(*pool_, n, [&](int64_t i) {
      if (last)
        ops::add_inplace(&s_.x[i * H], &s_.proj[i * H], H);
      else
        add_norm_row(&s_.x[i * H], &s_.proj[i * H], layers[l + 1].attn_norm,
                     layers[l + 1].attn_norm_b, &s_.xn[i * H]);
    });
  }

  const int64_t n_out = static_cast<int64_t>(b.logits_rows.size());
  if (n_out == 0) return;
  for_rows(*pool_, n_out, [&](int64_t j) {
    norm_row(&s_.x[b.logits_rows[j] * H], weights_.output_norm, weights_.output_norm_b,
             &s_.xn[j * H]);
  });
  observe(MatmulSite::kOutput, -1, -1, s_.xn.data(), n_out, H);
  matmul(s_.xn.data(), n_out, weights_.output, logits);  // [n_out, vocab]
}

std::vector<float> Model::forward(const Batch& b, KvCache& kv) {
  std::vector<float> logits(b.logits_rows.size() * static_cast<size_t>(config_.vocab));
  forward(b, kv, logits.data());
  return logits;
}

}  // namespace efim
