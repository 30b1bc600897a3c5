// Trainable parameters of a Llama-family model in one contiguous f32 buffer, with a layout that
// names every tensor (Hugging Face names) and gives its offset. Gradients and the optimizer
// state use the same layout, so "tensor X" is the same range in each buffer.
//
// Supported: Llama without biases (attention_bias false), rotate-half RoPE (any HF rope
// scaling efim's ModelConfig knows), tied or untied output head. The q, k, v matrices of a
// layer are stored back to back, so [Wq; Wk; Wv] is one [q_dim + 2 kv_dim, hidden] matrix
// (one GEMM per layer); the same for [Wgate; Wup] ([2 intermediate, hidden]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/dtype.h"

namespace efim::train {

struct ParamTensor {
  std::string name;            // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // outermost first
  int64_t offset = 0, numel = 0;
  bool is_matrix() const { return shape.size() == 2; }  // weight decay applies to matrices
};

struct LayerOffsets {
  int64_t attn_norm;  // [hidden]
  int64_t wqkv;       // [q_dim + 2 kv_dim, hidden]: rows of Wq, then Wk, then Wv
  int64_t wo;         // [hidden, q_dim]
  int64_t ffn_norm;   // [hidden]
  int64_t wgu;        // [2 intermediate, hidden]: rows of Wgate, then Wup
  int64_t wdown;      // [hidden, intermediate]
};

struct ParamLayout {
  ModelConfig config;
  std::vector<ParamTensor> tensors;  // in HF file order
  std::vector<LayerOffsets> layers;
  int64_t embed = 0;       // [vocab, hidden]
  int64_t final_norm = 0;  // [hidden]
  int64_t lm_head = 0;     // [vocab, hidden]; == embed when the embeddings are tied
  int64_t total = 0;       // floats

  // Throws Error for configurations the trainer does not support (biases, interleaved RoPE).
  static ParamLayout build(const ModelConfig& c);
  const ParamTensor* find(const std::string& name) const;
};

struct Params {
  ParamLayout layout;
  std::vector<float> w;  // [layout.total]
};

// Reads config.json and the safetensors (single file or sharded index) of an HF folder;
// matrices and vectors may be f32, f16 or bf16. Error names the tensor on any mismatch.
Params load_hf_params(const std::string& dir);

// Random initialisation for tests: matrices N(0, 1/fan_in), norms 1 + N(0, 0.1^2), embedding
// N(0, 1) (a deterministic generator: same seed, same values).
Params random_params(const ModelConfig& c, uint64_t seed);

struct SaveOptions {
  std::string dir;            // created if missing
  DType dtype = DType::BF16;  // BF16 (round to nearest even) or F32
  // config.json (torch_dtype updated), tokenizer.json and tokenizer_config.json are copied from
  // here when present; without it config.json is generated from the ModelConfig.
  std::string source_dir;
  uint64_t max_shard_bytes = 0;  // > 0: shards + model.safetensors.index.json
};
void save_hf_params(const Params& p, const SaveOptions& opts);

}  // namespace efim::train
