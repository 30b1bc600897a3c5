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

struct ConvertOptions {
  std::string input_dir;    // HF folder
  std::string output_path;  // .gguf to write
  // Matrix dtype: F32, F16, BF16, Q8_0 or Q4_0. Vectors (norms, biases) stay F32; a quantized
  // matrix whose row length is not a multiple of 32 falls back to F16 (as llama.cpp does); with
  // Q4_0 the embedding/output matrices use Q8_0 (llama.cpp keeps them at higher precision too).
  DType out_dtype = DType::BF16;
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
