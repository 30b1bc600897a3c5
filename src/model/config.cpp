#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numbers>

#include "base/error.h"
#include "base/mmap_file.h"
#include "format/gguf.h"

namespace efim {

namespace {
using enum RopePairing;
using enum NormKind;
using enum MlpKind;
constexpr ArchTraits kArchs[] = {
    // arch, GGUF name, HF name, qkv bias always, qk_norm, sliding flag, GGUF RoPE, norm, mlp,
    // bias key, its default, covers the MLP, embedding scale, HF norm weight offset,
    // tied by default, sliding window (GGUF default), mixture of experts
    {ModelArch::Llama, "llama", "llama", false, false, false, Interleaved, Rms, SwiGlu,
     "attention_bias", false, false, false, 0.0f, false, 0, false},
    {ModelArch::Qwen2, "qwen2", "qwen2", true, false, true, RotateHalf, Rms, SwiGlu, "", false,
     false, false, 0.0f, false, 0, false},
    {ModelArch::Qwen3, "qwen3", "qwen3", false, true, true, RotateHalf, Rms, SwiGlu,
     "attention_bias", false, false, false, 0.0f, false, 0, false},
    {ModelArch::StarCoder2, "starcoder2", "starcoder2", false, false, false, RotateHalf, Layer, Gelu,
     "use_bias", true, true, false, 0.0f, false, 4096, false},
    {ModelArch::Gemma, "gemma", "gemma", false, false, false, RotateHalf, Rms, GeGlu,
     "attention_bias", false, false, true, 1.0f, true, 0, false},
    {ModelArch::Qwen3Moe, "qwen3moe", "qwen3_moe", false, true, true, RotateHalf, Rms, SwiGlu,
     "attention_bias", false, false, false, 0.0f, false, 0, true},
};
}  // namespace

const ArchTraits& arch_traits(ModelArch a) {
  for (const ArchTraits& t : kArchs)
    if (t.arch == a) return t;
  fail("arch_traits: unknown architecture code ", static_cast<int>(a));
}

const ArchTraits* find_arch(std::string_view name, bool hf) {
  for (const ArchTraits& t : kArchs)
    if ((hf ? t.hf_name : t.name) == name) return &t;
  return nullptr;
}

std::string arch_names(bool hf) {
  std::string out;
  for (const ArchTraits& t : kArchs)
    out += (out.empty() ? "" : ", ") + std::string(hf ? t.hf_name : t.name);
  return out;
}

std::string_view arch_name(ModelArch a) { return arch_traits(a).name; }

void ModelConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    EFIM_CHECK(v > 0, "model config: ", field, " must be > 0, got ", v);
  };
  positive("vocab", vocab);
  positive("hidden", hidden);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate", intermediate);
  positive("max_position", max_position);
  EFIM_CHECK(sliding_window >= 0, "model config: sliding_window must be >= 0, got ",
             sliding_window);
  EFIM_CHECK(n_heads % n_kv_heads == 0, "model config: n_kv_heads ", n_kv_heads,
             " does not divide n_heads ", n_heads);
  EFIM_CHECK(head_dim % 2 == 0, "model config: head_dim must be even for RoPE, got ", head_dim);
  EFIM_CHECK(rms_eps > 0 && std::isfinite(rms_eps), "model config: rms_eps must be > 0, got ",
             rms_eps);
  EFIM_CHECK(rope_theta > 0 && std::isfinite(rope_theta),
             "model config: rope_theta must be > 0, got ", rope_theta);
  if (rope_scaling.type != RopeScalingType::None) {
    EFIM_CHECK(rope_scaling.factor > 0, "model config: rope scaling factor must be > 0, got ",
               rope_scaling.factor);
  }
  if (rope_scaling.type == RopeScalingType::Llama3) {
    EFIM_CHECK(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor,
               "model config: llama3 rope high_freq_factor ", rope_scaling.high_freq_factor,
               " must exceed low_freq_factor ", rope_scaling.low_freq_factor);
    EFIM_CHECK(rope_scaling.low_freq_factor > 0 && rope_scaling.original_max_position > 0,
               "model config: llama3 rope low_freq_factor ", rope_scaling.low_freq_factor,
               " and original_max_position_embeddings ", rope_scaling.original_max_position,
               " must be > 0");
  }
  if (!rope_freq_factors.empty()) {
    EFIM_CHECK(static_cast<int64_t>(rope_freq_factors.size()) == head_dim / 2,
               "model config: rope_freqs has ", rope_freq_factors.size(),
               " entries, expected head_dim/2 = ", head_dim / 2);
    for (float f : rope_freq_factors)
      EFIM_CHECK(f > 0 && std::isfinite(f), "model config: rope_freqs entry ", f, " not > 0");
  }
  if (moe()) {
    positive("n_experts_used", n_experts_used);
    positive("expert_intermediate", expert_intermediate);
    EFIM_CHECK(n_experts_used <= n_experts, "model config: ", n_experts_used,
               " experts used per token but only ", n_experts, " experts");
    for (size_t i = 0; i < dense_layers.size(); ++i)
      EFIM_CHECK(dense_layers[i] >= 0 && dense_layers[i] < n_layers &&
                     (i == 0 || dense_layers[i - 1] < dense_layers[i]),
                 "model config: dense MLP layer ", dense_layers[i], " (entry ", i,
                 ") is not in [0, ", n_layers, ") or out of ascending order");
  } else {
    EFIM_CHECK(dense_layers.empty(), "model config: ", dense_layers.size(),
               " dense MLP layers listed but no experts");
  }
  EFIM_CHECK(bos_token < vocab, "model config: bos token ", bos_token, " >= vocab ", vocab);
  for (int64_t e : eos_tokens)
    EFIM_CHECK(e >= 0 && e < vocab, "model config: eos token ", e, " outside [0, ", vocab, ")");
}

// Matches Hugging Face's rope initialisation (_compute_default / _linear / _llama3_parameters).
std::vector<double> ModelConfig::rope_inv_freq() const {
  const int64_t half = head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0 / std::pow(rope_theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  if (!rope_freq_factors.empty()) {
    for (int64_t i = 0; i < half; ++i) inv[i] /= rope_freq_factors[i];
    return inv;
  }
  const RopeScaling& s = rope_scaling;
  if (s.type == RopeScalingType::Linear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RopeScalingType::Llama3) {
    const double old_ctx = static_cast<double>(s.original_max_position);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < high_wavelen) continue;  // high frequencies keep their speed
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else {  // smooth interpolation between scaled and unscaled
        const double smooth =
            (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

std::string ModelConfig::summary() const {
  return str(arch_name(arch), ": vocab ", vocab, ", hidden ", hidden, ", layers ", n_layers,
             ", heads ", n_heads, "/", n_kv_heads, " kv, head_dim ", head_dim, ", ffn ",
             intermediate, ", rope theta ", rope_theta,
             rope_pairing == RopePairing::Interleaved ? " (interleaved)" : " (rotate-half)",
             tied_embeddings ? ", tied embeddings" : "", qkv_bias ? ", qkv bias" : "",
             qk_norm ? ", q/k norm" : "", norm == NormKind::Layer ? ", layer norm" : "",
             mlp == MlpKind::Gelu ? ", gelu mlp" : "", mlp == MlpKind::GeGlu ? ", geglu mlp" : "",
             mlp_bias ? ", mlp bias" : "",
             sliding_window > 0 ? str(", sliding window ", sliding_window) : std::string(),
             embed_scale ? ", embeddings x sqrt(hidden)" : "",
             moe() ? str(", ", n_experts_used, " of ", n_experts, " experts of width ",
                         expert_intermediate, expert_weights_norm ? " (renormalised)" : "")
                   : std::string(),
             dense_layers.empty() ? std::string()
                                  : str(", dense MLP in ", dense_layers.size(), " layers"),
             fragment_tokenization ? ", fragment-tokenized training" : "");
}

// ---------------------------------------------------------------- HF config.json

namespace {

struct JsonReader {
  const nlohmann::json& j;
  const std::string& label;

  const nlohmann::json* get(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const char* key) const {
    const nlohmann::json* v = get(key);
    EFIM_CHECK(v, label, ": missing field \"", key, "\"");
    EFIM_CHECK(v->is_number_integer(), label, ": field \"", key, "\" must be an integer, got ",
               v->dump());
    return v->get<int64_t>();
  }
  int64_t integer_or(const char* key, int64_t dflt) const { return get(key) ? integer(key) : dflt; }
  double number_or(const char* key, double dflt) const {
    const nlohmann::json* v = get(key);
    if (!v) return dflt;
    EFIM_CHECK(v->is_number(), label, ": field \"", key, "\" must be a number, got ", v->dump());
    return v->get<double>();
  }
  bool boolean_or(const char* key, bool dflt) const {
    const nlohmann::json* v = get(key);
    if (!v) return dflt;
    EFIM_CHECK(v->is_boolean(), label, ": field \"", key, "\" must be a boolean, got ", v->dump());
    return v->get<bool>();
  }
  std::string string_or(const char* key, const std::string& dflt) const {
    const nlohmann::json* v = get(key);
    if (!v) return dflt;
    EFIM_CHECK(v->is_string(), label, ": field \"", key, "\" must be a string, got ", v->dump());
    return v->get<std::string>();
  }
};

RopeScaling parse_hf_rope_scaling(const nlohmann::json& s, const std::string& label) {
  EFIM_CHECK(s.is_object(), label, ": rope_scaling must be an object, got ", s.dump());
  JsonReader r{s, label};
  std::string type = r.string_or("rope_type", r.string_or("type", "default"));
  RopeScaling out;
  if (type == "default") return out;
  out.factor = r.number_or("factor", 1.0);
  if (type == "linear") {
    out.type = RopeScalingType::Linear;
  } else if (type == "llama3") {
    out.type = RopeScalingType::Llama3;
    out.low_freq_factor = r.number_or("low_freq_factor", 1.0);
    out.high_freq_factor = r.number_or("high_freq_factor", 4.0);
    out.original_max_position = r.integer_or("original_max_position_embeddings", 8192);
  } else {
    fail(label, ": rope scaling type \"", type, "\" is not supported (default, linear, llama3)");
  }
  return out;
}

std::vector<int64_t> token_list(const nlohmann::json* v, const std::string& label,
                                const char* key) {
  std::vector<int64_t> out;
  if (!v) return out;
  if (v->is_number_integer()) return {v->get<int64_t>()};
  EFIM_CHECK(v->is_array(), label, ": field \"", key, "\" must be an id or a list, got ",
             v->dump());
  for (const auto& e : *v) {
    EFIM_CHECK(e.is_number_integer(), label, ": field \"", key, "\" has a non-integer entry ",
               e.dump());
    out.push_back(e.get<int64_t>());
  }
  return out;
}

}  // namespace

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& label) {
  EFIM_CHECK(j.is_object(), label, ": config must be a JSON object");
  JsonReader r{j, label};
  ModelConfig c;
  std::string type = r.string_or("model_type", "");
  const ArchTraits* arch = find_arch(type, /*hf=*/true);
  EFIM_CHECK(arch, label, ": model_type \"", type, "\" is not supported (", arch_names(true),
             ")");
  c.arch = arch->arch;
  if (arch->always_qkv_bias) {
    c.qkv_bias = true;  // Qwen2: q/k/v biases, no output bias
  } else {
    c.qkv_bias = c.o_bias = r.boolean_or(std::string(arch->bias_key).c_str(), arch->bias_default);
  }
  c.mlp_bias = arch->bias_in_mlp && c.qkv_bias;
  c.qk_norm = arch->qk_norm;
  c.norm = arch->norm;
  c.mlp = arch->mlp;
  if (arch->sliding_window_flag)
    EFIM_CHECK(!r.boolean_or("use_sliding_window", false), label,
               ": use_sliding_window = true is not supported");
  c.embed_scale = arch->embed_scale;
  c.norm_weight_offset = arch->hf_norm_weight_offset;
  // The activation: silu for SwiGLU, the tanh GELU otherwise (Gemma names it in
  // hidden_activation; its hidden_act "gelu" means the same tanh form there).
  const bool gelu = c.mlp != MlpKind::SwiGlu;
  const char* want_act = gelu ? "gelu_pytorch_tanh" : "silu";
  std::string act = r.string_or("hidden_activation", r.string_or("hidden_act", want_act));
  EFIM_CHECK(act == want_act || (gelu && act == "gelu"), label, ": hidden_act \"", act,
             "\" is not supported (", want_act, ")");
  EFIM_CHECK(!r.boolean_or("mlp_bias", false), label, ": mlp_bias = true is not supported");
  c.vocab = r.integer("vocab_size");
  c.hidden = r.integer("hidden_size");
  c.n_layers = r.integer("num_hidden_layers");
  c.n_heads = r.integer("num_attention_heads");
  c.n_kv_heads = r.integer_or("num_key_value_heads", c.n_heads);
  EFIM_CHECK(c.n_heads > 0 && c.n_kv_heads > 0 && c.n_heads % c.n_kv_heads == 0, label,
             ": num_key_value_heads ", c.n_kv_heads, " must divide num_attention_heads ",
             c.n_heads);
  EFIM_CHECK(c.hidden % c.n_heads == 0 || r.get("head_dim"), label, ": hidden_size ", c.hidden,
             " is not a multiple of num_attention_heads ", c.n_heads, " and head_dim is absent");
  c.head_dim = r.integer_or("head_dim", c.hidden / c.n_heads);
  c.intermediate = r.integer("intermediate_size");
  c.rms_eps = c.norm == NormKind::Layer ? r.number_or("norm_epsilon", 1e-5)
                                         : r.number_or("rms_norm_eps", 1e-6);
  c.max_position = r.integer_or("max_position_embeddings", 2048);
  if (arch->window_default > 0) {  // null or absent: full attention (Starcoder2Config's default)
    if (r.get("sliding_window")) c.sliding_window = r.integer("sliding_window");
  }
  c.tied_embeddings = r.boolean_or("tie_word_embeddings", arch->tied_default);
  c.rope_pairing = RopePairing::RotateHalf;  // HF checkpoints: rotate-half
  // transformers >= 4.56 may move theta and scaling into "rope_parameters".
  const nlohmann::json* rp = r.get("rope_scaling");
  if (!rp) rp = r.get("rope_parameters");
  double theta = 10000.0;
  if (rp && rp->is_object()) theta = JsonReader{*rp, label}.number_or("rope_theta", theta);
  c.rope_theta = r.number_or("rope_theta", theta);
  if (rp) c.rope_scaling = parse_hf_rope_scaling(*rp, label);
  std::vector<int64_t> bos = token_list(r.get("bos_token_id"), label, "bos_token_id");
  c.bos_token = bos.empty() ? -1 : bos[0];
  c.eos_tokens = token_list(r.get("eos_token_id"), label, "eos_token_id");
  c.fragment_tokenization = r.boolean_or("efim_fragment_tokenization", false);
  if (arch->moe) {  // Qwen3MoeConfig: every layer sparse unless mlp_only_layers / decoder_sparse_step
    c.n_experts = r.integer("num_experts");
    c.n_experts_used = r.integer("num_experts_per_tok");
    c.expert_intermediate = r.integer("moe_intermediate_size");
    c.expert_weights_norm = r.boolean_or("norm_topk_prob", false);
    // modeling_qwen3_moe: layer l is sparse iff l is not in mlp_only_layers and
    // (l + 1) % decoder_sparse_step == 0; the others run a dense MLP of intermediate_size.
    const int64_t step = r.integer_or("decoder_sparse_step", 1);
    EFIM_CHECK(step >= 1, label, ": decoder_sparse_step ", step, " must be >= 1");
    std::vector<int64_t> only;
    if (const nlohmann::json* d = r.get("mlp_only_layers"); d && !d->is_null()) {
      EFIM_CHECK(d->is_array(), label, ": mlp_only_layers must be a list of layer indices, got ",
                 d->dump());
      for (const nlohmann::json& e : *d) {
        EFIM_CHECK(e.is_number_integer() && e.get<int64_t>() >= 0 &&
                       e.get<int64_t>() < c.n_layers,
                   label, ": mlp_only_layers entry ", e.dump(), " is not a layer index in [0, ",
                   c.n_layers, ")");
        only.push_back(e.get<int64_t>());
      }
    }
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (std::find(only.begin(), only.end(), l) != only.end() || (l + 1) % step != 0)
        c.dense_layers.push_back(l);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail(label, ": ", e.what());
  }
  return c;
}

ModelConfig config_from_hf_file(const std::string& path) {
  std::string text = read_file(path);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EFIM_CHECK(!j.is_discarded(), path, ": not valid JSON");
  return config_from_hf_json(j, path);
}

// ---------------------------------------------------------------- GGUF

namespace {

struct GgufReader {
  const GgufFile& f;
  std::string arch;

  const GgufValue* get(const std::string& key) const { return f.get(arch + "." + key); }
  int64_t integer(const std::string& key) const {
    const GgufValue* v = get(key);
    EFIM_CHECK(v, "GGUF: missing metadata key ", arch, ".", key);
    return v->as_i64();
  }
  int64_t integer_or(const std::string& key, int64_t dflt) const {
    const GgufValue* v = get(key);
    return v ? v->as_i64() : dflt;
  }
  double number_or(const std::string& key, double dflt) const {
    const GgufValue* v = get(key);
    return v ? v->as_f64() : dflt;
  }
};

void read_gguf_rope(const GgufFile& f, const GgufReader& r, ModelConfig& c) {
  c.rope_theta = r.number_or("rope.freq_base", 10000.0);
  if (const GgufValue* t = r.get("rope.scaling.type")) {
    const std::string& type = t->as_string();
    if (type == "linear") {
      c.rope_scaling.type = RopeScalingType::Linear;
      c.rope_scaling.factor = r.number_or("rope.scaling.factor", 1.0);
    } else if (type != "none") {
      fail("GGUF: ", r.arch, ".rope.scaling.type \"", type, "\" is not supported (none, linear)");
    }
  } else if (const GgufValue* lin = r.get("rope.scale_linear")) {
    c.rope_scaling.type = RopeScalingType::Linear;
    c.rope_scaling.factor = lin->as_f64();
  }
  if (auto t = f.find("rope_freqs.weight")) {  // llama3 scaling as per-frequency divisors
    EFIM_CHECK(t->dtype == DType::F32 && t->shape.size() == 1 && t->shape[0] == c.head_dim / 2,
               "GGUF: rope_freqs.weight must be f32 [", c.head_dim / 2, "], got ",
               dtype_name(t->dtype), " ", t->shape_str());
    c.rope_freq_factors.resize(static_cast<size_t>(c.head_dim / 2));
    std::memcpy(c.rope_freq_factors.data(), t->data, c.rope_freq_factors.size() * sizeof(float));
  }
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& f) {
  const GgufValue* a = f.get("general.architecture");
  EFIM_CHECK(a, "GGUF: missing metadata key general.architecture");
  GgufReader r{f, a->as_string()};
  ModelConfig c;
  const ArchTraits* arch = find_arch(r.arch);
  EFIM_CHECK(arch, "GGUF: general.architecture \"", r.arch, "\" is not supported (", arch_names(),
             ")");
  c.arch = arch->arch;
  c.rope_pairing = arch->gguf_rope;
  c.hidden = r.integer("embedding_length");
  c.n_layers = r.integer("block_count");
  c.n_heads = r.integer("attention.head_count");
  c.n_kv_heads = r.integer_or("attention.head_count_kv", c.n_heads);
  EFIM_CHECK(c.n_heads > 0, "GGUF: ", r.arch, ".attention.head_count must be > 0, got ", c.n_heads);
  c.head_dim = r.integer_or("attention.key_length", c.hidden / c.n_heads);
  int64_t v_len = r.integer_or("attention.value_length", c.head_dim);
  EFIM_CHECK(v_len == c.head_dim, "GGUF: ", r.arch, ".attention.value_length ", v_len,
             " differs from key_length ", c.head_dim);
  c.intermediate = r.integer("feed_forward_length");
  c.norm = arch->norm;
  c.mlp = arch->mlp;
  c.embed_scale = arch->embed_scale;  // norm weights: the converter folded Gemma's 1 in
  c.rms_eps = c.norm == NormKind::Layer ? r.number_or("attention.layer_norm_epsilon", 1e-5)
                                        : r.number_or("attention.layer_norm_rms_epsilon", 1e-5);
  c.max_position = r.integer_or("context_length", 2048);
  if (arch->window_default > 0)
    c.sliding_window = r.integer_or("attention.sliding_window", arch->window_default);
  if (const GgufValue* v = r.get("vocab_size")) {
    c.vocab = v->as_i64();
  } else if (const GgufValue* toks = f.get("tokenizer.ggml.tokens")) {
    c.vocab = static_cast<int64_t>(toks->as_array().items.size());
  } else if (auto emb = f.find("token_embd.weight"); emb && emb->shape.size() == 2) {
    c.vocab = emb->shape[0];
  }
  read_gguf_rope(f, r, c);
  c.tied_embeddings = !f.find("output.weight").has_value();
  c.qkv_bias = f.find("blk.0.attn_q.bias").has_value();
  c.o_bias = f.find("blk.0.attn_output.bias").has_value();
  c.mlp_bias = f.find("blk.0.ffn_up.bias").has_value();
  c.qk_norm = arch->qk_norm;
  if (const GgufValue* b = f.get("tokenizer.ggml.bos_token_id")) c.bos_token = b->as_i64();
  if (const GgufValue* e = f.get("tokenizer.ggml.eos_token_id")) c.eos_tokens = {e->as_i64()};
  if (const GgufValue* e = f.get("tokenizer.ggml.eot_token_id")) {
    if (c.eos_tokens.empty() || c.eos_tokens[0] != e->as_i64()) c.eos_tokens.push_back(e->as_i64());
  }
  if (const GgufValue* v = f.get(kGgufFragmentKey)) c.fragment_tokenization = v->as_bool();
  if (arch->moe) {  // llama.cpp: expert width defaults to n_ff / n_expert_used
    c.n_experts = r.integer("expert_count");
    c.n_experts_used = r.integer("expert_used_count");
    EFIM_CHECK(c.n_experts > 0 && c.n_experts_used > 0, "GGUF: ", r.arch, ".expert_count ",
               c.n_experts, " and expert_used_count ", c.n_experts_used, " must be > 0");
    c.expert_intermediate =
        r.integer_or("expert_feed_forward_length", c.intermediate / c.n_experts_used);
    // llama.cpp's qwen3moe always renormalises; efim also reads the key it writes for a
    // checkpoint with norm_topk_prob = false.
    if (const GgufValue* v = r.get("expert_weights_norm")) c.expert_weights_norm = v->as_bool();
    // A layer with a dense MLP (Qwen3MoeConfig's mlp_only_layers; llama.cpp loads none) has
    // ffn_gate / ffn_up / ffn_down and no router; a layer with neither is left to the binder,
    // whose error names the missing router.
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (!f.find(str("blk.", l, ".ffn_gate_inp.weight")) && f.find(str("blk.", l, ".ffn_down.weight")))
        c.dense_layers.push_back(l);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("GGUF: ", e.what());
  }
  return c;
}

void write_gguf_metadata(const ModelConfig& c, GgufWriter& w) {
  const std::string a(arch_name(c.arch));
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set_string("general.architecture", a);
  w.set_u32(a + ".vocab_size", u32(c.vocab));
  w.set_u32(a + ".context_length", u32(c.max_position));
  w.set_u32(a + ".embedding_length", u32(c.hidden));
  w.set_u32(a + ".block_count", u32(c.n_layers));
  w.set_u32(a + ".feed_forward_length", u32(c.intermediate));
  w.set_u32(a + ".attention.head_count", u32(c.n_heads));
  w.set_u32(a + ".attention.head_count_kv", u32(c.n_kv_heads));
  w.set_u32(a + ".attention.key_length", u32(c.head_dim));
  w.set_u32(a + ".attention.value_length", u32(c.head_dim));
  w.set_f32(a + (c.norm == NormKind::Layer ? ".attention.layer_norm_epsilon"
                                            : ".attention.layer_norm_rms_epsilon"),
            static_cast<float>(c.rms_eps));
  // Also when 0 (full attention), so a windowed architecture's default does not apply.
  if (arch_traits(c.arch).window_default > 0)
    w.set_u32(a + ".attention.sliding_window", u32(c.sliding_window));
  w.set_u32(a + ".rope.dimension_count", u32(c.head_dim));
  w.set_f32(a + ".rope.freq_base", static_cast<float>(c.rope_theta));
  if (c.rope_scaling.type == RopeScalingType::Linear) {
    w.set_string(a + ".rope.scaling.type", "linear");
    w.set_f32(a + ".rope.scaling.factor", static_cast<float>(c.rope_scaling.factor));
  }
  // Llama3 scaling travels as the rope_freqs.weight tensor (written by the converter).
  if (c.fragment_tokenization) w.set_bool(kGgufFragmentKey, true);
  if (c.moe()) {
    w.set_u32(a + ".expert_count", u32(c.n_experts));
    w.set_u32(a + ".expert_used_count", u32(c.n_experts_used));
    w.set_u32(a + ".expert_feed_forward_length", u32(c.expert_intermediate));
    w.set_bool(a + ".expert_weights_norm", c.expert_weights_norm);
  }
}

}  // namespace efim
