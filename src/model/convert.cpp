#include "model/convert.h"

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/weights.h"
#include "tensor/quant.h"

namespace efim {

void permute_rope_rows(float* rows, int64_t n_heads, int64_t head_dim, int64_t cols) {
  const int64_t half = head_dim / 2;
  std::vector<float> head(static_cast<size_t>(head_dim * cols));
  for (int64_t h = 0; h < n_heads; ++h) {
    float* base = rows + h * head_dim * cols;
    std::memcpy(head.data(), base, head.size() * sizeof(float));
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(base + (2 * i + j) * cols, head.data() + (j * half + i) * cols,
                    static_cast<size_t>(cols) * sizeof(float));
  }
}

namespace {

// One tensor to write: its HF source name, GGUF name, and Q/K permutation heads (0: none);
// `add` is added to every value (Gemma's RMSNorm weights: llama.cpp's converter folds in the 1
// of x^ (1 + w)).
struct Job {
  std::string hf, gguf;
  int64_t permute_heads = 0;
  bool embedding_or_output = false;
  float add = 0.0f;
};

std::vector<Job> plan_jobs(const ModelConfig& c) {
  auto hf = WeightNaming::HF;
  auto gg = WeightNaming::GGUF;
  // llama.cpp runs llama with interleaved RoPE pairs: its converter permutes the Q/K rows.
  const bool permute = arch_traits(c.arch).gguf_rope == RopePairing::Interleaved;
  std::vector<Job> jobs;
  jobs.push_back({TensorNames::embed(hf), TensorNames::embed(gg), 0, true});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto add = [&](const char* role, const char* suffix, int64_t heads) {
      jobs.push_back({TensorNames::layer(hf, l, role, suffix),
                      TensorNames::layer(gg, l, role, suffix), permute ? heads : 0, false});
    };
    const bool layer_norm = c.norm == NormKind::Layer;
    add("attn_norm", "weight", 0);
    jobs.back().add = c.norm_weight_offset;
    if (layer_norm) add("attn_norm", "bias", 0);
    add("q", "weight", c.n_heads);
    add("k", "weight", c.n_kv_heads);
    add("v", "weight", 0);
    if (c.qkv_bias) {
      add("q", "bias", c.n_heads);
      add("k", "bias", c.n_kv_heads);
      add("v", "bias", 0);
    }
    if (c.qk_norm) {  // per-head weights [head_dim]: not permuted (qwen3 keeps rotate-half)
      add("q_norm", "weight", 0);
      add("k_norm", "weight", 0);
    }
    add("o", "weight", 0);
    if (c.o_bias) add("o", "bias", 0);
    add("ffn_norm", "weight", 0);
    jobs.back().add = c.norm_weight_offset;
    if (layer_norm) add("ffn_norm", "bias", 0);
    if (c.mlp == MlpKind::Gelu) {
      add("fc", "weight", 0);
      if (c.mlp_bias) add("fc", "bias", 0);
      add("proj", "weight", 0);
      if (c.mlp_bias) add("proj", "bias", 0);
    } else {
      add("gate", "weight", 0);
      add("up", "weight", 0);
      add("down", "weight", 0);
    }
  }
  jobs.push_back({TensorNames::output_norm(hf), TensorNames::output_norm(gg), 0, false,
                  c.norm_weight_offset});
  if (c.norm == NormKind::Layer)
    jobs.push_back({"model.norm.bias", "output_norm.bias", 0, false});
  if (!c.tied_embeddings)
    jobs.push_back({TensorNames::output(hf), TensorNames::output(gg), 0, true});
  return jobs;
}

DType choose_dtype(const ConvertOptions& o, const Job& job, const TensorView& t) {
  if (t.shape.size() != 2) return DType::F32;  // norms and biases
  const bool quantized = o.out_dtype == DType::Q8_0 || o.out_dtype == DType::Q4_0;
  if (!quantized) return o.out_dtype;
  if (t.shape[1] % kQBlock != 0) return DType::F16;
  if (o.out_dtype == DType::Q4_0 && job.embedding_or_output) return DType::Q8_0;
  return o.out_dtype;
}

uint32_t ggml_file_type(DType t) {  // llama_ftype: ALL_F32, MOSTLY_F16, Q4_0, Q8_0, BF16
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q8_0:
      return 7;
    default:
      return 32;  // BF16
  }
}

}  // namespace

ConvertResult convert_hf_to_gguf(const ConvertOptions& o) {
  namespace fs = std::filesystem;
  const DType out = o.out_dtype;
  EFIM_CHECK(out == DType::F32 || out == DType::F16 || out == DType::BF16 || out == DType::Q8_0 ||
                 out == DType::Q4_0,
             "convert: output dtype ", dtype_name(out),
             " not supported (f32, f16, bf16, q8_0, q4_0)");
  ModelConfig c = config_from_hf_file((fs::path(o.input_dir) / "config.json").string());
  auto src = SafetensorsFolder::open(o.input_dir);
  bind_weights(c, *src, WeightNaming::HF);  // checks every shape and dtype up front

  ConvertResult res;
  res.config = c;
  res.config.rope_pairing = arch_traits(c.arch).gguf_rope;
  res.config.norm_weight_offset = 0.0f;  // folded into the written norm weights
  GgufWriter w;
  write_gguf_metadata(c, w);
  w.set_string("general.name", fs::path(o.input_dir).filename().string());
  w.set_u32("general.file_type", ggml_file_type(out));
  if (c.bos_token >= 0)
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_token));
  if (!c.eos_tokens.empty())
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_tokens[0]));
  if (o.tokenizer_writer) o.tokenizer_writer(w);

  if (c.rope_scaling.type == RopeScalingType::Llama3) {
    // GGUF stores llama3 scaling as per-frequency divisors of the unscaled inverse frequencies.
    ModelConfig plain = c;
    plain.rope_scaling = {};
    std::vector<double> base = plain.rope_inv_freq(), scaled = c.rope_inv_freq();
    std::vector<float> factors(base.size());
    for (size_t i = 0; i < base.size(); ++i) factors[i] = static_cast<float>(base[i] / scaled[i]);
    w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(factors.size())},
                 factors.data(), factors.size() * sizeof(float));
    res.config.rope_freq_factors = factors;
    res.config.rope_scaling = {};
    res.tensor_bytes += factors.size() * sizeof(float);
    ++res.n_tensors;
  }

  std::vector<Job> jobs = plan_jobs(c);
  std::vector<float> f32;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Job& job = jobs[i];
    TensorView t = *src->find(job.hf);  // present: bind_weights checked
    f32.resize(static_cast<size_t>(t.numel()));
    dequantize(t.data, t.numel(), t.dtype, f32.data());
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    if (job.permute_heads > 0) permute_rope_rows(f32.data(), job.permute_heads, c.head_dim, cols);
    if (job.add != 0.0f)
      for (float& v : f32) v += job.add;
    const DType dt = choose_dtype(o, job, t);
    std::vector<uint8_t> bytes = quantize(f32.data(), t.numel(), dt);
    w.add_tensor(job.gguf, dt, t.shape, bytes.data(), bytes.size());
    res.tensor_bytes += bytes.size();
    ++res.n_tensors;
    if (o.progress)
      o.progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(jobs.size()), job.gguf);
  }
  w.write(o.output_path);
  return res;
}

}  // namespace efim
