// ModelConfig: the normalised hyper-parameters of a Llama-family decoder, whatever file it came
// from (Hugging Face config.json or GGUF metadata).
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace efim {

class GgufFile;
class GgufWriter;

enum class ModelArch { Llama, Qwen2, Qwen3, StarCoder2, Gemma, Qwen3Moe };

// Normalisation of the residual stream: RMSNorm x / rms(x) * w, or LayerNorm
// (x - mean) / sqrt(var + eps) * w + b.
enum class NormKind { Rms, Layer };
// Feed-forward: SwiGLU Wdown (silu(Wgate x) * Wup x), GeGLU Wdown (gelu(Wgate x) * Wup x), or
// GELU Wdown gelu(Wup x + b) + b (gelu in its tanh form throughout).
enum class MlpKind { SwiGlu, GeGlu, Gelu };

// Which dimensions RoPE rotates together inside one head of size d, for frequency i < d/2:
//   RotateHalf  (HF "rotate_half", llama.cpp NEOX): (x[i], x[i + d/2])
//   Interleaved (llama.cpp NORM, GGUF llama after the converter's Q/K row permutation):
//               (x[2i], x[2i + 1])
enum class RopePairing { RotateHalf, Interleaved };

enum class RopeScalingType { None, Linear, Llama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;            // linear: positions / factor; llama3: low-frequency slow-down
  double low_freq_factor = 1.0;   // llama3 only
  double high_freq_factor = 4.0;  // llama3 only
  int64_t original_max_position = 8192;  // llama3 only
};

struct ModelConfig {
  ModelArch arch = ModelArch::Llama;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  RopePairing rope_pairing = RopePairing::RotateHalf;
  RopeScaling rope_scaling;
  // Per-frequency divisors of the inverse frequencies, [head_dim / 2] (GGUF `rope_freqs.weight`,
  // which is how llama3 scaling is stored in GGUF). When non-empty they replace rope_scaling.
  std::vector<float> rope_freq_factors;
  int64_t max_position = 2048;
  // Sliding-window attention: a query at position p sees keys p - sliding_window + 1 .. p
  // (starcoder2's 4096); 0: all of 0 .. p.
  int64_t sliding_window = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;   // q/k/v projections have biases (qwen2; llama with attention_bias)
  bool o_bias = false;     // output projection has a bias (llama with attention_bias)
  bool qk_norm = false;    // per-head RMSNorm of q and k (weights [head_dim]) before RoPE (qwen3)
  NormKind norm = NormKind::Rms;  // rms_eps is the epsilon of either kind
  MlpKind mlp = MlpKind::SwiGlu;
  bool mlp_bias = false;   // Wup / Wdown have biases (starcoder2)
  bool embed_scale = false;  // embeddings multiplied by sqrt(hidden) (gemma)
  // Added to the stored RMSNorm weights at load: Gemma's HF checkpoints store w and compute
  // x^ (1 + w); llama.cpp's converter folds the 1 into the GGUF (there: 0).
  float norm_weight_offset = 0.0f;
  int64_t bos_token = -1;  // -1: none
  std::vector<int64_t> eos_tokens;  // may be empty
  // The model was trained on fragment-tokenized FIM data (efim train writes it: GGUF key
  // efim.fragment_tokenization, config.json "efim_fragment_tokenization"): it continues a
  // partial word after the middle sentinel, so the server does not token-heal EFIM for it.
  bool fragment_tokenization = false;
  // Mixture of experts (qwen3moe), every layer but dense_layers: a router W[n_experts, hidden]
  // scores the experts, p = softmax(router . x), the n_experts_used most probable run (their p
  // renormalised to sum 1 when expert_weights_norm), each a SwiGLU MLP of width
  // expert_intermediate, summed with weights p. n_experts = 0: a dense MLP of width intermediate
  // in every layer.
  int64_t n_experts = 0;
  int64_t n_experts_used = 0;
  int64_t expert_intermediate = 0;
  bool expert_weights_norm = true;
  // Layers of a mixture-of-experts model whose MLP is dense (width intermediate), ascending:
  // Qwen3MoeConfig's mlp_only_layers and the layers decoder_sparse_step skips; in a GGUF the
  // layers without blk.N.ffn_gate_inp.
  std::vector<int64_t> dense_layers;

  bool moe() const { return n_experts > 0; }
  // Layer l's MLP is the mixture of experts.
  bool moe_layer(int64_t l) const {
    return moe() && !std::binary_search(dense_layers.begin(), dense_layers.end(), l);
  }
  // Some layer has a dense MLP (the forward pass's scratch for it).
  bool any_dense_mlp() const { return !moe() || !dense_layers.empty(); }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }

  // Checks positivity and divisibility; throws Error naming the field and value.
  void validate() const;
  // RoPE inverse frequencies after scaling, [head_dim / 2]: angle(pos, i) = pos * inv_freq[i].
  std::vector<double> rope_inv_freq() const;
  // One-line human summary (for logs and `inspect`).
  std::string summary() const;
};

// What distinguishes an architecture, one row per ModelArch (config.cpp); the one forward pass
// reads the ModelConfig flags these set.
struct ArchTraits {
  ModelArch arch;
  std::string_view name;     // GGUF general.architecture
  std::string_view hf_name;  // HF model_type
  bool always_qkv_bias;      // q/k/v biases whatever config.json says (qwen2)
  bool qk_norm;              // per-head q/k RMSNorm before RoPE (qwen3)
  bool sliding_window_flag;  // config.json may carry use_sliding_window (must be false)
  // RoPE pairing of the GGUF as llama.cpp's converter writes it: llama permutes the Q/K rows
  // into interleaved pairs (llama.cpp NORM rope), the others keep rotate-half (NEOX).
  RopePairing gguf_rope;
  NormKind norm;
  MlpKind mlp;
  // config.json's switch for the linear layers' biases and its default ("attention_bias"
  // false for llama and qwen3; starcoder2's "use_bias" true, which covers the MLP too).
  std::string_view bias_key;
  bool bias_default;
  bool bias_in_mlp;
  bool embed_scale;            // embeddings times sqrt(hidden)
  float hf_norm_weight_offset;  // added to HF RMSNorm weights (gemma: 1)
  bool tied_default;           // config.json's tie_word_embeddings when absent (gemma: true)
  // Sliding-window attention (starcoder2): > 0 reads config.json's sliding_window and GGUF's
  // {arch}.attention.sliding_window, and is the window of a GGUF without that key (llama.cpp's
  // converter drops it: 4096, every StarCoder2 release's); 0: full attention.
  int64_t window_default;
  bool moe;  // the MLP is a mixture of experts (ModelConfig::n_experts)
};

std::string_view arch_name(ModelArch a);
const ArchTraits& arch_traits(ModelArch a);
// The row whose GGUF name (or, with hf, HF model_type) is `name`, or nullptr.
const ArchTraits* find_arch(std::string_view name, bool hf = false);
// "llama, qwen2, qwen3, starcoder2, gemma, qwen3moe" (hf: "..., qwen3_moe"): for error messages.
std::string arch_names(bool hf = false);

// GGUF key of ModelConfig::fragment_tokenization (bool).
inline constexpr const char* kGgufFragmentKey = "efim.fragment_tokenization";  // "llama", "qwen2"

// From a parsed HF config.json; `label` (usually the path) prefixes error messages.
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& label);
ModelConfig config_from_hf_file(const std::string& config_json_path);
// From GGUF metadata (and the optional `rope_freqs.weight` tensor).
ModelConfig config_from_gguf(const GgufFile& f);
// Writes general.architecture and the {arch}.* keys that config_from_gguf reads back.
// Tokenizer keys (including BOS/EOS ids) belong to the tokenizer's writer.
void write_gguf_metadata(const ModelConfig& c, GgufWriter& w);

}  // namespace efim
