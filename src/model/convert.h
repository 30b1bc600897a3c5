// Converter: Hugging Face folder (config.json + safetensors) -> GGUF in llama.cpp's layout.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/dtype.h"

namespace efim {

class GgufWriter;

// What `efim convert --dtype` writes: a matrix dtype, or one of llama.cpp's K-quant file types.
struct ConvertType {
  DType dtype = DType::BF16;
  // llama.cpp's _M mixes: attn_v and ffn_down of the layers use_more_bits picks get Q6_K.
  bool more_bits_mix = false;
};
// "bf16", "q8_0", "q4_k", "q6_k", ... (dtype names) or "q4_k_m", "q5_k_m"; Error listing the
// accepted names otherwise.
ConvertType convert_type_from_name(std::string_view name);
// llama.cpp's choice of the layers that get more bits in a _M mix (layer i of n): the first
// and last eighth, and every third layer in between.
bool use_more_bits(int64_t i, int64_t n);

struct ConvertOptions {
  std::string input_dir;    // HF folder
  std::string output_path;  // .gguf to write
  // Matrix dtype: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K or Q6_K. Vectors
  // (norms, biases) stay F32. As llama.cpp's quantizer: the output matrix (or the tied
  // embedding) uses Q6_K unless the type is Q8_0; rows that are not whole blocks fall back
  // (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, 32-element types -> F16).
  DType out_dtype = DType::BF16;
  bool more_bits_mix = false;  // see ConvertType
  // Adds the tokenizer.* metadata (e.g. Tokenizer::write_gguf_metadata); optional. It runs after
  // the model keys, so it may override tokenizer.ggml.bos/eos_token_id taken from config.json.
  std::function<void(GgufWriter&)> tokenizer_writer;
  // Called after each tensor is converted: (tensors done, total, name). Optional.
  std::function<void(int64_t, int64_t, const std::string&)> progress;
};

struct ConvertResult {
  ModelConfig config;  // as written (rope pairing of the GGUF)
  int64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;  // bytes of tensor data written
};

ConvertResult convert_hf_to_gguf(const ConvertOptions& opts);

// llama.cpp's Q/K row permutation for llama-arch GGUFs: within each of n_heads heads of
// head_dim rows, HF row j*(head_dim/2) + i (rotate-half pair member j of frequency i) moves to
// row 2*i + j (interleaved pairs). rows: [n_heads * head_dim, cols] f32, permuted in place.
void permute_rope_rows(float* rows, int64_t n_heads, int64_t head_dim, int64_t cols);

}  // namespace efim
