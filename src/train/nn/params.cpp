// Parameter layout, loading from and saving to Hugging Face folders.
#include "train/nn/params.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "base/error.h"
#include "base/mmap_file.h"
#include "format/safetensors.h"
#include "tensor/quant.h"

namespace efim::train {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

ParamLayout ParamLayout::build(const ModelConfig& c) {
  c.validate();
  EFIM_CHECK(c.arch == ModelArch::Llama && !c.qkv_bias && !c.o_bias,
             "train: only Llama models without biases are supported (arch ", arch_name(c.arch),
             ", qkv_bias ", c.qkv_bias, ", o_bias ", c.o_bias, ")");
  EFIM_CHECK(c.rope_pairing == RopePairing::RotateHalf,
             "train: only rotate-half RoPE (Hugging Face layout) is supported");
  EFIM_CHECK(c.head_dim % 2 == 0, "train: head_dim ", c.head_dim, " must be even");
  ParamLayout L;
  L.config = c;
  auto add = [&L](std::string name, std::vector<int64_t> shape) {
    ParamTensor t{std::move(name), std::move(shape), L.total, 1};
    for (int64_t d : t.shape) t.numel *= d;
    L.total += t.numel;
    L.tensors.push_back(t);
    return t.offset;
  };
  const int64_t D = c.hidden, F = c.intermediate;
  L.embed = add("model.embed_tokens.weight", {c.vocab, D});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = str("model.layers.", i, ".");
    LayerOffsets o{};
    o.attn_norm = add(p + "input_layernorm.weight", {D});
    o.wqkv = add(p + "self_attn.q_proj.weight", {c.q_dim(), D});
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), D});  // directly after Wq: see params.h
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), D});
    o.wo = add(p + "self_attn.o_proj.weight", {D, c.q_dim()});
    o.ffn_norm = add(p + "post_attention_layernorm.weight", {D});
    o.wgu = add(p + "mlp.gate_proj.weight", {F, D});
    add(p + "mlp.up_proj.weight", {F, D});
    o.wdown = add(p + "mlp.down_proj.weight", {D, F});
    L.layers.push_back(o);
  }
  L.final_norm = add("model.norm.weight", {D});
  L.lm_head = c.tied_embeddings ? L.embed : add("lm_head.weight", {c.vocab, D});
  return L;
}

const ParamTensor* ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

Params load_hf_params(const std::string& dir) {
  Params p;
  p.layout = ParamLayout::build(config_from_hf_file((fs::path(dir) / "config.json").string()));
  p.w.assign(static_cast<size_t>(p.layout.total), 0.0f);
  std::unique_ptr<SafetensorsFolder> src = SafetensorsFolder::open(dir);
  for (const ParamTensor& t : p.layout.tensors) {
    std::optional<TensorView> v = src->find(t.name);
    EFIM_CHECK(v, "train: ", dir, " has no tensor ", t.name, " (expected shape ",
               shape_str(t.shape), ")");
    EFIM_CHECK(v->shape == t.shape, "train: tensor ", t.name, " has shape ", shape_str(v->shape),
               ", expected ", shape_str(t.shape));
    EFIM_CHECK(v->dtype == DType::F32 || v->dtype == DType::F16 || v->dtype == DType::BF16,
               "train: tensor ", t.name, " has dtype ", dtype_name(v->dtype),
               ", expected f32, f16 or bf16");
    EFIM_CHECK(v->nbytes == dtype_row_bytes(v->dtype, static_cast<uint64_t>(t.numel)),
               "train: tensor ", t.name, " holds ", v->nbytes, " bytes for ", t.numel,
               " elements of ", dtype_name(v->dtype));
    dequantize(v->data, t.numel, v->dtype, p.w.data() + t.offset);
  }
  return p;
}

Params random_params(const ModelConfig& c, uint64_t seed) {
  Params p;
  p.layout = ParamLayout::build(c);
  p.w.assign(static_cast<size_t>(p.layout.total), 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const ParamTensor& t : p.layout.tensors) {
    float* w = p.w.data() + t.offset;
    const bool embed = t.offset == p.layout.embed;
    const double scale = t.is_matrix() && !embed ? 1.0 / std::sqrt(double(t.shape[1])) : 1.0;
    for (int64_t i = 0; i < t.numel; ++i)
      w[i] = t.is_matrix() ? float(scale * normal(rng)) : float(1.0 + 0.1 * normal(rng));
  }
  return p;
}

namespace {

// config.json of a Llama model from its ModelConfig (no source folder to copy it from).
nlohmann::ordered_json generated_config(const ModelConfig& c) {
  EFIM_CHECK(c.rope_scaling.type == RopeScalingType::None && c.rope_freq_factors.empty(),
             "train: cannot generate config.json for a model with RoPE scaling; save with a "
             "source folder");
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["mlp_bias"] = false;
  j["vocab_size"] = c.vocab;
  j["hidden_size"] = c.hidden;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate;
  j["max_position_embeddings"] = c.max_position;
  j["rms_norm_eps"] = c.rms_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (c.bos_token >= 0) j["bos_token_id"] = c.bos_token;
  if (!c.eos_tokens.empty()) j["eos_token_id"] = c.eos_tokens;
  return j;
}

std::string tensor_bytes(const float* w, int64_t n, DType dtype) {
  if (dtype == DType::F32)
    return std::string(reinterpret_cast<const char*>(w), static_cast<size_t>(n) * 4);
  std::string out(static_cast<size_t>(n) * 2, '\0');
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(w[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

}  // namespace

void save_hf_params(const Params& p, const SaveOptions& o) {
  EFIM_CHECK(o.dtype == DType::F32 || o.dtype == DType::BF16, "train: save dtype ",
             dtype_name(o.dtype), " is not supported (f32, bf16)");
  std::vector<SafetensorsTensor> out;
  for (const ParamTensor& t : p.layout.tensors)
    out.push_back(
        {t.name, o.dtype, t.shape, tensor_bytes(p.w.data() + t.offset, t.numel, o.dtype)});
  write_safetensors_folder(o.dir, out, o.max_shard_bytes);

  nlohmann::ordered_json cfg;
  const fs::path src_cfg = fs::path(o.source_dir) / "config.json";
  std::error_code ec;
  if (!o.source_dir.empty() && fs::exists(src_cfg, ec)) {
    cfg = nlohmann::ordered_json::parse(read_file(src_cfg.string()), nullptr, false);
    EFIM_CHECK(!cfg.is_discarded() && cfg.is_object(), src_cfg.string(), ": not a JSON object");
  } else {
    cfg = generated_config(p.layout.config);
  }
  cfg["torch_dtype"] = o.dtype == DType::F32 ? "float32" : "bfloat16";
  write_file((fs::path(o.dir) / "config.json").string(), cfg.dump(1) + "\n");
  if (o.source_dir.empty()) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const fs::path from = fs::path(o.source_dir) / name;
    if (fs::exists(from, ec))
      write_file((fs::path(o.dir) / name).string(), read_file(from.string()));
  }
}

}  // namespace efim::train
