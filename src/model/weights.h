// Weight binding: maps the tensors of a checkpoint (HF or GGUF names) onto one canonical layer
// struct, checking every shape and dtype. Matrices stay in the file's memory (mmap); small
// vectors (norms, biases) are converted to f32 at load.
#pragma once

#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "format/tensor_source.h"
#include "model/config.h"

namespace efim {

enum class WeightNaming { HF, GGUF };

struct LayerWeights {
  std::vector<float> attn_norm;   // [hidden]
  std::vector<float> ffn_norm;    // [hidden]
  std::vector<float> attn_norm_b, ffn_norm_b;  // [hidden]; LayerNorm only
  cpu::WeightMatrix wq;           // [q_dim, hidden]
  cpu::WeightMatrix wk;           // [kv_dim, hidden]
  cpu::WeightMatrix wv;           // [kv_dim, hidden]
  cpu::WeightMatrix wo;           // [hidden, q_dim]
  std::vector<float> bq, bk, bv;  // [q_dim], [kv_dim], [kv_dim]; empty without qkv_bias
  std::vector<float> bo;          // [hidden]; empty without o_bias
  std::vector<float> q_norm, k_norm;  // [head_dim] each; empty without qk_norm
  cpu::WeightMatrix w_gate;       // [intermediate, hidden]; SwiGLU only
  cpu::WeightMatrix w_up;         // [intermediate, hidden] (GELU MLP: c_fc)
  cpu::WeightMatrix w_down;       // [hidden, intermediate] (GELU MLP: c_proj)
  std::vector<float> b_up, b_down;  // [intermediate], [hidden]; empty without mlp_bias
  // Mixture of experts (config.moe_layer(l); the dense w_gate / w_up / w_down are then empty):
  cpu::WeightMatrix router;                      // [n_experts, hidden]
  std::vector<cpu::WeightMatrix> expert_gate;    // n_experts x [expert_intermediate, hidden]
  std::vector<cpu::WeightMatrix> expert_up;      // n_experts x [expert_intermediate, hidden]
  std::vector<cpu::WeightMatrix> expert_down;    // n_experts x [hidden, expert_intermediate]
};

struct ModelWeights {
  cpu::WeightMatrix embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> output_norm;  // [hidden]
  std::vector<float> output_norm_b;  // [hidden]; LayerNorm only
  cpu::WeightMatrix output;        // [vocab, hidden]; the embedding when tied
};

// Tensor names of each format, for the binder and the converter.
struct TensorNames {
  static std::string embed(WeightNaming n);
  static std::string output_norm(WeightNaming n, const std::string& suffix = "weight");
  static std::string output(WeightNaming n);
  // role: one of attn_norm, ffn_norm, q, k, v, o, q_norm, k_norm, gate, up, down, fc, proj
  // (fc / proj: the GELU MLP's c_fc / c_proj, GGUF ffn_up / ffn_down), router (the experts'
  // gate, GGUF ffn_gate_inp); suffix "weight" or "bias".
  static std::string layer(WeightNaming n, int64_t layer, const std::string& role,
                           const std::string& suffix = "weight");
  // One expert's matrix, role gate, up or down: HF model.layers.N.mlp.experts.E.gate_proj.weight;
  // GGUF stacks the experts into one tensor [n_experts, rows, cols], blk.N.ffn_gate_exps.weight
  // (expert is then ignored).
  static std::string expert(WeightNaming n, int64_t layer, int64_t expert,
                            const std::string& role);
  // transformers 5's fused experts of a layer (HF only), role gate_up or down:
  // model.layers.N.mlp.experts.gate_up_proj [n_experts, 2 * rows, cols] (gate rows, then up
  // rows) and ...down_proj [n_experts, rows, cols].
  static std::string fused_experts(int64_t layer, const std::string& role);
};

// Binds every tensor the config needs; throws Error naming the tensor with expected vs actual
// shape or dtype. The returned matrices point into `src`, which must outlive them.
ModelWeights bind_weights(const ModelConfig& c, const TensorSource& src, WeightNaming naming);

// True for the dtypes cpu::matmul accepts as weights.
bool is_matmul_dtype(DType t);

}  // namespace efim
