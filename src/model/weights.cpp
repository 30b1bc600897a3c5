#include "model/weights.h"

#include <map>

#include "base/error.h"
#include "tensor/quant.h"

namespace efim {

namespace {

const std::map<std::string, std::pair<std::string, std::string>>& role_names() {
  // role -> {HF name inside model.layers.N., GGUF name inside blk.N.}
  static const std::map<std::string, std::pair<std::string, std::string>> m = {
      {"attn_norm", {"input_layernorm", "attn_norm"}},
      {"ffn_norm", {"post_attention_layernorm", "ffn_norm"}},
      {"q", {"self_attn.q_proj", "attn_q"}},
      {"k", {"self_attn.k_proj", "attn_k"}},
      {"v", {"self_attn.v_proj", "attn_v"}},
      {"o", {"self_attn.o_proj", "attn_output"}},
      {"q_norm", {"self_attn.q_norm", "attn_q_norm"}},
      {"k_norm", {"self_attn.k_norm", "attn_k_norm"}},
      {"gate", {"mlp.gate_proj", "ffn_gate"}},
      {"up", {"mlp.up_proj", "ffn_up"}},
      {"down", {"mlp.down_proj", "ffn_down"}},
      {"fc", {"mlp.c_fc", "ffn_up"}},
      {"proj", {"mlp.c_proj", "ffn_down"}},
      {"router", {"mlp.gate", "ffn_gate_inp"}},
  };
  return m;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

TensorView require(const TensorSource& src, const std::string& name,
                   const std::vector<int64_t>& shape) {
  std::optional<TensorView> t = src.find(name);
  EFIM_CHECK(t, "weights: missing tensor ", name, " (expected shape ", shape_str(shape), ")");
  EFIM_CHECK(t->shape == shape, "weights: tensor ", name, " has shape ", shape_str(t->shape),
             ", expected ", shape_str(shape));
  return *t;
}

// A matrix of `rows` rows of `cols` elements in t (for stacked experts, all their rows): its
// dtype can be multiplied, rows are whole blocks, and the bytes are exactly that many rows.
cpu::WeightMatrix check_matrix(const TensorView& t, const std::string& name, int64_t rows,
                               int64_t cols) {
  EFIM_CHECK(is_matmul_dtype(t.dtype), "weights: tensor ", name, " has dtype ", dtype_name(t.dtype),
             ", expected f32, f16, bf16 or a block-quantized type");
  EFIM_CHECK(cols % dtype_info(t.dtype).block_elems == 0, "weights: tensor ", name, " row length ",
             cols, " is not a multiple of the ", dtype_name(t.dtype), " block size");
  const uint64_t expect = static_cast<uint64_t>(rows) * dtype_row_bytes(t.dtype, cols);
  EFIM_CHECK(t.nbytes == expect, "weights: tensor ", name, " holds ", t.nbytes, " bytes, expected ",
             expect);
  return cpu::WeightMatrix{t.dtype, rows, cols, t.data};
}

cpu::WeightMatrix bind_matrix(const TensorSource& src, const std::string& name, int64_t rows,
                              int64_t cols) {
  return check_matrix(require(src, name, {rows, cols}), name, rows, cols);
}

std::vector<float> bind_vector(const TensorSource& src, const std::string& name, int64_t n) {
  TensorView t = require(src, name, {n});
  EFIM_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
             "weights: tensor ", name, " has dtype ", dtype_name(t.dtype),
             ", expected one of f32, f16, bf16");
  EFIM_CHECK(t.nbytes == dtype_row_bytes(t.dtype, n), "weights: tensor ", name, " holds ", t.nbytes,
             " bytes, expected ", dtype_row_bytes(t.dtype, n));
  std::vector<float> out(static_cast<size_t>(n));
  dequantize(t.data, n, t.dtype, out.data());
  return out;
}

// The experts' [rows, cols] matrices inside one stacked tensor [n_experts, parts * rows, cols]:
// expert e's is its part `part` (rows e * parts * rows + part * rows on), bound in place.
std::vector<cpu::WeightMatrix> stacked_experts(const ModelConfig& c, const TensorSource& src,
                                               const std::string& name, int64_t parts,
                                               int64_t part, int64_t rows, int64_t cols) {
  const cpu::WeightMatrix all =  // [n_experts * parts * rows, cols]
      check_matrix(require(src, name, {c.n_experts, parts * rows, cols}), name,
                   c.n_experts * parts * rows, cols);
  const uint64_t part_bytes = static_cast<uint64_t>(rows) * dtype_row_bytes(all.dtype, cols);
  std::vector<cpu::WeightMatrix> out;
  for (int64_t e = 0; e < c.n_experts; ++e)
    out.push_back(cpu::WeightMatrix{
        all.dtype, rows, cols,
        static_cast<const uint8_t*>(all.data) + (e * parts + part) * part_bytes});
  return out;
}

// The experts' matrices of one role: HF has one [rows, cols] tensor per expert (or, as
// transformers 5 saves them, gate and up fused into gate_up_proj [n_experts, 2 rows, cols] and
// down_proj [n_experts, rows, cols]); GGUF one [n_experts, rows, cols] tensor per role.
std::vector<cpu::WeightMatrix> bind_experts(const ModelConfig& c, const TensorSource& src,
                                            WeightNaming nm, int64_t layer, const char* role,
                                            int64_t rows, int64_t cols) {
  if (nm == WeightNaming::GGUF)
    return stacked_experts(c, src, TensorNames::expert(nm, layer, 0, role), 1, 0, rows, cols);
  const std::string_view r = role;
  const std::string fused = TensorNames::fused_experts(layer, r == "down" ? "down" : "gate_up");
  if (src.find(fused)) {
    if (r == "down") return stacked_experts(c, src, fused, 1, 0, rows, cols);
    return stacked_experts(c, src, fused, 2, r == "gate" ? 0 : 1, rows, cols);
  }
  std::vector<cpu::WeightMatrix> out;
  for (int64_t e = 0; e < c.n_experts; ++e)
    out.push_back(bind_matrix(src, TensorNames::expert(nm, layer, e, role), rows, cols));
  return out;
}

// Gemma's HF RMSNorm weights are stored minus one (ModelConfig::norm_weight_offset).
void add_offset(std::vector<float>& w, float offset) {
  if (offset != 0.0f)
    for (float& v : w) v += offset;
}

LayerWeights bind_layer(const ModelConfig& c, const TensorSource& src, WeightNaming nm, int64_t i) {
  auto name = [&](const char* role, const char* suffix = "weight") {
    return TensorNames::layer(nm, i, role, suffix);
  };
  LayerWeights l;
  l.attn_norm = bind_vector(src, name("attn_norm"), c.hidden);
  l.ffn_norm = bind_vector(src, name("ffn_norm"), c.hidden);
  if (c.norm == NormKind::Layer) {
    l.attn_norm_b = bind_vector(src, name("attn_norm", "bias"), c.hidden);
    l.ffn_norm_b = bind_vector(src, name("ffn_norm", "bias"), c.hidden);
  }
  add_offset(l.attn_norm, c.norm_weight_offset);
  add_offset(l.ffn_norm, c.norm_weight_offset);
  l.wq = bind_matrix(src, name("q"), c.q_dim(), c.hidden);
  l.wk = bind_matrix(src, name("k"), c.kv_dim(), c.hidden);
  l.wv = bind_matrix(src, name("v"), c.kv_dim(), c.hidden);
  l.wo = bind_matrix(src, name("o"), c.hidden, c.q_dim());
  if (c.qkv_bias) {
    l.bq = bind_vector(src, name("q", "bias"), c.q_dim());
    l.bk = bind_vector(src, name("k", "bias"), c.kv_dim());
    l.bv = bind_vector(src, name("v", "bias"), c.kv_dim());
  }
  if (c.o_bias) l.bo = bind_vector(src, name("o", "bias"), c.hidden);
  if (c.qk_norm) {
    l.q_norm = bind_vector(src, name("q_norm"), c.head_dim);
    l.k_norm = bind_vector(src, name("k_norm"), c.head_dim);
  }
  if (c.moe_layer(i)) {
    const int64_t ff = c.expert_intermediate;
    l.router = bind_matrix(src, name("router"), c.n_experts, c.hidden);
    l.expert_gate = bind_experts(c, src, nm, i, "gate", ff, c.hidden);
    l.expert_up = bind_experts(c, src, nm, i, "up", ff, c.hidden);
    l.expert_down = bind_experts(c, src, nm, i, "down", c.hidden, ff);
    return l;
  }
  const bool gelu = c.mlp == MlpKind::Gelu;  // no gate: c_fc / c_proj
  const char* up = gelu ? "fc" : "up";
  const char* down = gelu ? "proj" : "down";
  if (!gelu) l.w_gate = bind_matrix(src, name("gate"), c.intermediate, c.hidden);
  l.w_up = bind_matrix(src, name(up), c.intermediate, c.hidden);
  l.w_down = bind_matrix(src, name(down), c.hidden, c.intermediate);
  if (c.mlp_bias) {
    l.b_up = bind_vector(src, name(up, "bias"), c.intermediate);
    l.b_down = bind_vector(src, name(down, "bias"), c.hidden);
  }
  return l;
}

}  // namespace

bool is_matmul_dtype(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || is_quantized(t);
}

std::string TensorNames::embed(WeightNaming n) {
  return n == WeightNaming::HF ? "model.embed_tokens.weight" : "token_embd.weight";
}
std::string TensorNames::output_norm(WeightNaming n, const std::string& suffix) {
  return (n == WeightNaming::HF ? "model.norm." : "output_norm.") + suffix;
}
std::string TensorNames::output(WeightNaming n) {
  return n == WeightNaming::HF ? "lm_head.weight" : "output.weight";
}
std::string TensorNames::layer(WeightNaming n, int64_t layer, const std::string& role,
                               const std::string& suffix) {
  auto it = role_names().find(role);
  EFIM_CHECK(it != role_names().end(), "weights: unknown layer tensor role ", role);
  if (n == WeightNaming::HF) return str("model.layers.", layer, ".", it->second.first, ".", suffix);
  return str("blk.", layer, ".", it->second.second, ".", suffix);
}

std::string TensorNames::expert(WeightNaming n, int64_t layer, int64_t expert,
                                const std::string& role) {
  EFIM_CHECK(role == "gate" || role == "up" || role == "down", "weights: unknown expert role ",
             role);
  if (n == WeightNaming::HF)
    return str("model.layers.", layer, ".mlp.experts.", expert, ".", role, "_proj.weight");
  return str("blk.", layer, ".ffn_", role, "_exps.weight");
}

std::string TensorNames::fused_experts(int64_t layer, const std::string& role) {
  EFIM_CHECK(role == "gate_up" || role == "down", "weights: unknown fused expert role ", role);
  return str("model.layers.", layer, ".mlp.experts.", role, "_proj");
}

ModelWeights bind_weights(const ModelConfig& c, const TensorSource& src, WeightNaming naming) {
  c.validate();
  ModelWeights w;
  w.embed = bind_matrix(src, TensorNames::embed(naming), c.vocab, c.hidden);
  w.layers.reserve(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) w.layers.push_back(bind_layer(c, src, naming, i));
  w.output_norm = bind_vector(src, TensorNames::output_norm(naming), c.hidden);
  add_offset(w.output_norm, c.norm_weight_offset);
  if (c.norm == NormKind::Layer)
    w.output_norm_b = bind_vector(src, TensorNames::output_norm(naming, "bias"), c.hidden);
  w.output = c.tied_embeddings ? w.embed
                               : bind_matrix(src, TensorNames::output(naming), c.vocab, c.hidden);
  return w;
}

}  // namespace efim
