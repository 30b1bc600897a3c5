// Converter: Hugging Face folder (config.json + safetensors) -> GGUF in llama.cpp's layout.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/imatrix.h"
#include "model/config.h"
#include "tensor/dtype.h"

namespace efim {

class GgufWriter;

// llama.cpp's file types (enum llama_ftype's values, written to general.file_type) that
// `efim convert` writes. For the quantized ones llama.cpp's rules choose each tensor's type, as
// llama-quantize does without an importance matrix (llama_tensor_get_type in llama-quant.cpp):
// the output matrix (or tied embedding) in Q6_K, more bits for attn_v / ffn_down / attn_output
// in some layers of the K mixes, Q8_0 for attn_k / attn_v of 8-expert models, ...
enum class FileType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9, Q2_K = 10,
  Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15, Q5_K_S = 16, Q5_K_M = 17,
  Q6_K = 18, IQ4_NL = 25, IQ4_XS = 30, BF16 = 32,
};
// llama-quantize's name of a file type ("q4_k_m"; aliases "q3_k", "q4_k", "q5_k" are the _M
// mixes, as there) and its base type (Q4_K for q4_k_m); Error listing the names otherwise.
FileType file_type_from_name(std::string_view name);
std::string_view file_type_name(FileType t);
DType file_type_base(FileType t);
// llama.cpp's choice of the layers that get more bits in a _M mix (layer i of n): the first
// and last eighth, and every third layer in between.
bool use_more_bits(int64_t i, int64_t n);

struct ConvertOptions {
  std::string input_dir;    // HF folder
  std::string output_path;  // .gguf to write
  // llama.cpp's file type: its rules give each matrix its type. Unset: every matrix in
  // out_dtype (any type quantize() writes), except that the output matrix (or the tied
  // embedding) of a quantized type other than Q8_0 is Q6_K. Vectors (norms, biases) and the
  // expert router stay F32. Rows that are not whole blocks fall back as in llama.cpp (Q2_K,
  // Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, then F16).
  std::optional<FileType> file_type;
  DType out_dtype = DType::BF16;
  // Adds the tokenizer.* metadata (e.g. Tokenizer::write_gguf_metadata); optional. It runs after
  // the model keys, so it may override tokenizer.ggml.bos/eos_token_id taken from config.json.
  std::function<void(GgufWriter&)> tokenizer_writer;
  // An importance matrix (llama-imatrix's file, format/imatrix.h): each quantized matrix with an
  // entry fits its scales to the importance-weighted error (quantize()); matrices without one
  // (the token embedding, and any the calibration run did not reach) are quantized as without.
  // Null: none.
  const ImportanceMatrix* imatrix = nullptr;
  std::string imatrix_label;  // the file's name, for the GGUF's quantize.imatrix.file key
  // Called after each tensor is converted: (tensors done, total, name). Optional.
  std::function<void(int64_t, int64_t, const std::string&)> progress;
};

struct ConvertResult {
  ModelConfig config;  // as written (rope pairing of the GGUF)
  int64_t n_tensors = 0;
  uint64_t tensor_bytes = 0;  // bytes of tensor data written
  int64_t imatrix_used = 0;   // quantized matrices weighted by the importance matrix
  std::vector<std::string> imatrix_missing;  // quantized matrices it had no entry for
};

ConvertResult convert_hf_to_gguf(const ConvertOptions& opts);
// The same file types from a GGUF of f32 / f16 / bf16 tensors, as llama-quantize makes them from
// one: opts.input_dir names the .gguf. Its metadata is kept (tokenizer.* included), the model's
// tensors quantized by the same rules (and importance matrix), any other tensor copied as it is;
// a quantized model tensor is refused (requantizing loses precision).
ConvertResult quantize_gguf(const ConvertOptions& opts);

// llama.cpp's Q/K row permutation for llama-arch GGUFs: within each of n_heads heads of
// head_dim rows, HF row j*(head_dim/2) + i (rotate-half pair member j of frequency i) moves to
// row 2*i + j (interleaved pairs). rows: [n_heads * head_dim, cols] f32, permuted in place.
void permute_rope_rows(float* rows, int64_t n_heads, int64_t head_dim, int64_t cols);

}  // namespace efim
