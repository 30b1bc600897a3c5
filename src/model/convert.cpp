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

bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

namespace {
bool writable(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0 ||
         t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}
}  // namespace

ConvertType convert_type_from_name(std::string_view name) {
  constexpr const char* kNames =
      "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q4_k_m, q5_k_m";
  if (name == "q4_k_m") return {DType::Q4_K, true};
  if (name == "q5_k_m") return {DType::Q5_K, true};
  DType t;
  try {
    t = dtype_from_name(name);
  } catch (const Error&) {
    fail("convert: unknown type '", name, "' (expected one of ", kNames, ")");
  }
  EFIM_CHECK(writable(t), "convert: cannot write ", name, " (expected one of ", kNames, ")");
  return {t, false};
}

namespace {

// One tensor to write: its HF source name, GGUF name, and Q/K permutation heads (0: none);
// `add` is added to every value (Gemma's RMSNorm weights: llama.cpp's converter folds in the 1
// of x^ (1 + w)).
struct Job {
  std::string hf, gguf;
  int64_t permute_heads = 0;
  float add = 0.0f;
  bool output = false;   // the output matrix, or the embedding when the head is tied to it
  int64_t layer = -1;
  bool more_bits_role = false;  // attn_v or ffn_down: a _M mix gives these Q6_K in some layers
  std::string role = {};  // the layer role (TensorNames::layer), empty outside the layers
  // More HF tensors of hf's shape, stacked after it into one [1 + n, rows, cols] tensor (the
  // experts of a layer: llama.cpp's blk.N.ffn_*_exps).
  std::vector<std::string> stack = {};
  bool keep_f32 = false;  // the expert router stays f32, as llama.cpp's converter and quantizer keep it
};

std::vector<Job> plan_jobs(const ModelConfig& c) {
  auto hf = WeightNaming::HF;
  auto gg = WeightNaming::GGUF;
  // llama.cpp runs llama with interleaved RoPE pairs: its converter permutes the Q/K rows.
  const bool permute = arch_traits(c.arch).gguf_rope == RopePairing::Interleaved;
  std::vector<Job> jobs;
  jobs.push_back({TensorNames::embed(hf), TensorNames::embed(gg)});
  jobs.back().output = c.tied_embeddings;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto add = [&](const char* role, const char* suffix, int64_t heads) {
      jobs.push_back({TensorNames::layer(hf, l, role, suffix),
                      TensorNames::layer(gg, l, role, suffix), permute ? heads : 0});
      jobs.back().layer = l;
      jobs.back().role = role;
      const std::string_view r = role;
      jobs.back().more_bits_role = r == "v" || r == "down" || r == "proj";
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
    } else if (c.moe()) {
      add("router", "weight", 0);
      jobs.back().keep_f32 = true;
      for (const char* role : {"gate", "up", "down"}) {
        Job j;
        j.hf = TensorNames::expert(hf, l, 0, role);
        j.gguf = TensorNames::expert(gg, l, 0, role);
        for (int64_t e = 1; e < c.n_experts; ++e) j.stack.push_back(TensorNames::expert(hf, l, e, role));
        j.layer = l;
        j.more_bits_role = std::string_view(role) == "down";
        jobs.push_back(std::move(j));
      }
    } else {
      add("gate", "weight", 0);
      add("up", "weight", 0);
      add("down", "weight", 0);
    }
  }
  jobs.push_back({TensorNames::output_norm(hf), TensorNames::output_norm(gg), 0,
                  c.norm_weight_offset});
  if (c.norm == NormKind::Layer)
    jobs.push_back({TensorNames::output_norm(hf, "bias"), TensorNames::output_norm(gg, "bias")});
  if (!c.tied_embeddings) {
    jobs.push_back({TensorNames::output(hf), TensorNames::output(gg)});
    jobs.back().output = true;
  }
  return jobs;
}

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// llama.cpp's fallback for rows that are not whole blocks of the chosen type.
DType fallback(DType t) {
  switch (t) {
    case DType::Q4_K:
      return DType::Q5_0;
    case DType::Q5_K:
      return DType::Q5_1;
    case DType::Q6_K:
      return DType::Q8_0;
    default:
      return DType::F16;
  }
}

DType choose_dtype(const ConvertOptions& o, const ModelConfig& c, const Job& job,
                   const TensorView& t) {
  if (t.shape.size() != 2 || job.keep_f32) return DType::F32;  // norms, biases, the router
  if (!is_quantized(o.out_dtype)) return o.out_dtype;
  DType want = o.out_dtype;
  // The output matrix (or the tied embedding) keeps more bits, as llama.cpp's quantizer does.
  if (want != DType::Q8_0 && job.output) want = DType::Q6_K;
  if (is_k_quant(want) && o.more_bits_mix && job.more_bits_role &&
      use_more_bits(job.layer, c.n_layers))
    want = DType::Q6_K;
  // llama.cpp's rules for a model of exactly 8 experts (Mixtral's count): attn_k and attn_v in
  // Q8_0, and in the Q4_K mix attn_output in Q5_K.
  if (c.n_experts == 8 && want != DType::Q8_0) {
    if (job.role == "k" || job.role == "v") want = DType::Q8_0;
    if (job.role == "o" && o.more_bits_mix && o.out_dtype == DType::Q4_K) want = DType::Q5_K;
  }
  while (is_quantized(want) && t.shape[1] % dtype_info(want).block_elems != 0)
    want = fallback(want);
  return want;
}

uint32_t ggml_file_type(DType t, bool mix) {  // llama_ftype (llama.h)
  switch (t) {
    case DType::F32:
      return 0;
    case DType::F16:
      return 1;
    case DType::Q4_0:
      return 2;
    case DType::Q4_1:
      return 3;
    case DType::Q8_0:
      return 7;
    case DType::Q5_0:
      return 8;
    case DType::Q5_1:
      return 9;
    case DType::Q4_K:
      return mix ? 15 : 14;  // Q4_K_M, else Q4_K_S
    case DType::Q5_K:
      return mix ? 17 : 16;
    case DType::Q6_K:
      return 18;
    default:
      return 32;  // BF16
  }
}

}  // namespace

ConvertResult convert_hf_to_gguf(const ConvertOptions& o) {
  namespace fs = std::filesystem;
  const DType out = o.out_dtype;
  EFIM_CHECK(writable(out), "convert: cannot write dtype ", dtype_name(out));
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
  w.set_u32("general.file_type", ggml_file_type(out, o.more_bits_mix));
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
    const int64_t n_parts = 1 + static_cast<int64_t>(job.stack.size());
    f32.resize(static_cast<size_t>(t.numel() * n_parts));
    dequantize(t.data, t.numel(), t.dtype, f32.data());
    for (int64_t p = 1; p < n_parts; ++p) {  // same shape: bind_weights checked
      TensorView part = *src->find(job.stack[p - 1]);
      dequantize(part.data, part.numel(), part.dtype, f32.data() + p * t.numel());
    }
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    if (job.permute_heads > 0) permute_rope_rows(f32.data(), job.permute_heads, c.head_dim, cols);
    if (job.add != 0.0f)
      for (float& v : f32) v += job.add;
    const DType dt = choose_dtype(o, c, job, t);
    std::vector<uint8_t> bytes = quantize(f32.data(), t.numel() * n_parts, dt);
    std::vector<int64_t> shape = t.shape;
    if (n_parts > 1) shape.insert(shape.begin(), n_parts);
    w.add_tensor(job.gguf, dt, shape, bytes.data(), bytes.size());
    res.tensor_bytes += bytes.size();
    ++res.n_tensors;
    if (o.progress)
      o.progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(jobs.size()), job.gguf);
  }
  w.write(o.output_path);
  return res;
}

}  // namespace efim
