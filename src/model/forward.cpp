// The forward pass over one step (Batch): embeddings, decoder layers, final norm, logits.
//
//   x = embed[token]
//   per layer:  h = x + Wo . attention(RoPE(Wq.rms(x) + bq), RoPE(Wk.rms(x) + bk), Wv.rms(x) + bv)
//               x = h + Wdown . (silu(Wgate.rms(h)) * Wup.rms(h))
//   logits = Wout . rms(x)      (Wout = embed when tied)
//
// All tokens of the step share each matmul: activations are [n_tokens, features] row-major.
#include <algorithm>

#include "base/error.h"
#include "model/model.h"

namespace efim {

namespace {

// Runs fn(row) for rows [0, n) on the pool, a few rows per chunk.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n, Fn&& fn) {
  pool.parallel_for(n, 4, [&](int, int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) fn(r);
  });
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
  EFIM_CHECK(kv.n_layers() == c.n_layers && kv.kv_dim() == c.kv_dim(), "forward: kv cache has ",
             kv.n_layers(), " layers x ", kv.kv_dim(), ", model needs ", c.n_layers, " x ",
             c.kv_dim());
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

void Model::attention_block(int64_t layer, const Batch& b, KvCache& kv) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  const int64_t n = b.size(), hd = c.head_dim;
  ThreadPool& pool = *pool_;
  const float eps = static_cast<float>(c.rms_eps);
  for_rows(pool, n, [&](int64_t r) {
    ops::rms_norm(&s_.x[r * c.hidden], w.attn_norm.data(), c.hidden, eps, &s_.xn[r * c.hidden]);
  });
  matmul(s_.xn.data(), n, w.wq, s_.q.data());  // [n, q_dim]
  matmul(s_.xn.data(), n, w.wk, s_.k.data());  // [n, kv_dim]
  matmul(s_.xn.data(), n, w.wv, s_.v.data());  // [n, kv_dim]
  if (c.qkv_bias) {
    ops::add_bias(s_.q.data(), w.bq.data(), n, c.q_dim());
    ops::add_bias(s_.k.data(), w.bk.data(), n, c.kv_dim());
    ops::add_bias(s_.v.data(), w.bv.data(), n, c.kv_dim());
  }
  ops::rope(s_.q.data(), n, c.n_heads, hd, c.rope_pairing, s_.rope);
  ops::rope(s_.k.data(), n, c.n_kv_heads, hd, c.rope_pairing, s_.rope);
  float* K = kv.k(layer);  // [n_slots, kv_dim]
  float* V = kv.v(layer);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = b.sequences[b.seq[i]].slots[b.positions[i]];
    std::copy_n(&s_.k[i * c.kv_dim()], c.kv_dim(), K + slot * c.kv_dim());
    std::copy_n(&s_.v[i * c.kv_dim()], c.kv_dim(), V + slot * c.kv_dim());
  }
  ops::AttentionArgs a;
  a.q = s_.q.data();
  a.pos = b.positions.data();
  a.k = K;
  a.v = V;
  a.out = s_.att.data();
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = hd;
  a.seqs = &s_.seqs;
  ops::attention(pool, a, s_.attention);
  matmul(s_.att.data(), n, w.wo, s_.proj.data());  // [n, hidden]
  if (c.o_bias) ops::add_bias(s_.proj.data(), w.bo.data(), n, c.hidden);
  ops::add_inplace(s_.x.data(), s_.proj.data(), n * c.hidden);
}

void Model::mlp_block(int64_t layer, int64_t n) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[layer];
  ThreadPool& pool = *pool_;
  const float eps = static_cast<float>(c.rms_eps);
  for_rows(pool, n, [&](int64_t r) {
    ops::rms_norm(&s_.x[r * c.hidden], w.ffn_norm.data(), c.hidden, eps, &s_.xn[r * c.hidden]);
  });
  matmul(s_.xn.data(), n, w.w_gate, s_.gate.data());  // [n, intermediate]
  matmul(s_.xn.data(), n, w.w_up, s_.up.data());      // [n, intermediate]
  for_rows(pool, n, [&](int64_t r) {
    ops::silu_mul(&s_.gate[r * c.intermediate], &s_.up[r * c.intermediate], c.intermediate);
  });
  matmul(s_.gate.data(), n, w.w_down, s_.proj.data());  // [n, hidden]
  ops::add_inplace(s_.x.data(), s_.proj.data(), n * c.hidden);
}

void Model::forward(const Batch& b, KvCache& kv, float* logits) {
  validate(b, kv);
  const ModelConfig& c = config_;
  const int64_t n = b.size();
  resize(s_.x, n * c.hidden);
  // xn also holds the final-normed rows of the logits tokens (logits_rows may repeat a token).
  resize(s_.xn, std::max<int64_t>(n, static_cast<int64_t>(b.logits_rows.size())) * c.hidden);
  resize(s_.q, n * c.q_dim());
  resize(s_.k, n * c.kv_dim());
  resize(s_.v, n * c.kv_dim());
  resize(s_.att, n * c.q_dim());
  resize(s_.proj, n * c.hidden);
  resize(s_.gate, n * c.intermediate);
  resize(s_.up, n * c.intermediate);

  for_rows(*pool_, n, [&](int64_t i) {
    cpu::dequantize_row(weights_.embed, b.tokens[i], &s_.x[i * c.hidden]);
  });
  s_.rope.build(inv_freq_, b.positions.data(), n);
  // Group the step's tokens by sequence, ascending in position (attention relies on it).
  s_.seqs.assign(b.sequences.size(), {});
  for (size_t q = 0; q < b.sequences.size(); ++q) {
    s_.seqs[q].ctx = b.sequences[q].slots.data();
    s_.seqs[q].n_ctx = static_cast<int64_t>(b.sequences[q].slots.size());
  }
  for (int64_t i = 0; i < n; ++i) s_.seqs[b.seq[i]].tokens.push_back(static_cast<int32_t>(i));
  for (ops::AttentionSeq& s : s_.seqs)
    std::stable_sort(s.tokens.begin(), s.tokens.end(),
                     [&](int32_t x, int32_t y) { return b.positions[x] < b.positions[y]; });

  for (int64_t l = 0; l < c.n_layers; ++l) {
    attention_block(l, b, kv);
    mlp_block(l, n);
  }

  const int64_t n_out = static_cast<int64_t>(b.logits_rows.size());
  if (n_out == 0) return;
  for_rows(*pool_, n_out, [&](int64_t j) {
    ops::rms_norm(&s_.x[b.logits_rows[j] * c.hidden], weights_.output_norm.data(), c.hidden,
                  static_cast<float>(c.rms_eps), &s_.xn[j * c.hidden]);
  });
  matmul(s_.xn.data(), n_out, weights_.output, logits);  // [n_out, vocab]
}

std::vector<float> Model::forward(const Batch& b, KvCache& kv) {
  std::vector<float> logits(b.logits_rows.size() * static_cast<size_t>(config_.vocab));
  forward(b, kv, logits.data());
  return logits;
}

}  // namespace efim
