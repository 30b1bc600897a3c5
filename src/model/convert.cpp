#include "model/convert.h"

#include <cstring>
#include <filesystem>
#include <set>

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
struct FileTypeRow {
  FileType type;
  std::string_view name;
  DType base;
};
constexpr FileTypeRow kFileTypes[] = {
    {FileType::F32, "f32", DType::F32},          {FileType::F16, "f16", DType::F16},
    {FileType::BF16, "bf16", DType::BF16},       {FileType::Q8_0, "q8_0", DType::Q8_0},
    {FileType::Q4_0, "q4_0", DType::Q4_0},       {FileType::Q4_1, "q4_1", DType::Q4_1},
    {FileType::Q5_0, "q5_0", DType::Q5_0},       {FileType::Q5_1, "q5_1", DType::Q5_1},
    {FileType::Q2_K, "q2_k", DType::Q2_K},       {FileType::Q3_K_S, "q3_k_s", DType::Q3_K},
    {FileType::Q3_K_M, "q3_k_m", DType::Q3_K},   {FileType::Q3_K_L, "q3_k_l", DType::Q3_K},
    {FileType::Q4_K_S, "q4_k_s", DType::Q4_K},   {FileType::Q4_K_M, "q4_k_m", DType::Q4_K},
    {FileType::Q5_K_S, "q5_k_s", DType::Q5_K},   {FileType::Q5_K_M, "q5_k_m", DType::Q5_K},
    {FileType::Q6_K, "q6_k", DType::Q6_K},       {FileType::IQ4_NL, "iq4_nl", DType::IQ4_NL},
    {FileType::IQ4_XS, "iq4_xs", DType::IQ4_XS},
};

const FileTypeRow& row_of(FileType t) {
  for (const FileTypeRow& r : kFileTypes)
    if (r.type == t) return r;
  fail("convert: unknown file type ", static_cast<uint32_t>(t));
}
}  // namespace

FileType file_type_from_name(std::string_view name) {
  // llama-quantize's aliases: Q3_K, Q4_K and Q5_K are its _M mixes.
  if (name == "q3_k") return FileType::Q3_K_M;
  if (name == "q4_k") return FileType::Q4_K_M;
  if (name == "q5_k") return FileType::Q5_K_M;
  std::string names;
  for (const FileTypeRow& r : kFileTypes) {
    if (r.name == name) return r.type;
    names += (names.empty() ? "" : ", ") + std::string(r.name);
  }
  fail("convert: unknown type '", name, "' (expected one of ", names,
       "; q3_k, q4_k, q5_k mean the _m mixes)");
}

std::string_view file_type_name(FileType t) { return row_of(t).name; }
DType file_type_base(FileType t) { return row_of(t).base; }

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
  std::string role = {};  // the layer role (TensorNames::layer), empty outside the layers
  // Non-empty (gate, up or down): the layer's experts of that role stacked into one
  // [n_experts, rows, cols] tensor (llama.cpp's blk.N.ffn_*_exps), read through the binder
  // (HF's tensor per expert or transformers 5's fused gate_up_proj / down_proj); hf is unused.
  std::string experts = {};
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
    } else if (c.moe_layer(l)) {
      add("router", "weight", 0);
      jobs.back().keep_f32 = true;
      for (const char* role : {"gate", "up", "down"}) {
        Job j;
        j.gguf = TensorNames::expert(gg, l, 0, role);
        j.experts = role;
        j.layer = l;
        j.role = role;
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

// llama.cpp's fallback for rows that are not whole blocks of the chosen type.
DType fallback(DType t) {
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K:
      return DType::Q4_0;
    case DType::Q4_K:
      return DType::Q5_0;
    case DType::Q5_K:
      return DType::Q5_1;
    case DType::Q6_K:
      return DType::Q8_0;
    case DType::IQ4_XS:
      return DType::IQ4_NL;
    default:
      return DType::F16;
  }
}

// llama.cpp's type for a matrix of the layers (llama_tensor_get_type_impl, for the file types
// above, with or without an importance matrix; of its special cases only the 70B type applies to
// efim's architectures). The layer index counts attn_v and ffn_down tensors as llama.cpp's
// i_attention_wv / i_ffn_down do: one per layer.
DType layer_rule(FileType ft, const ModelConfig& c, const Job& job, DType t, bool imatrix) {
  using F = FileType;
  const int64_t i = job.layer, n = c.n_layers;
  const bool gqa4 = c.n_heads / c.n_kv_heads >= 4, eight_experts = c.n_experts == 8;
  const std::string_view role = job.role;
  if (role == "v") {
    if (ft == F::Q2_K) t = gqa4 ? DType::Q4_K : DType::Q3_K;
    else if (ft == F::Q3_K_M) t = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft == F::Q3_K_L) t = DType::Q5_K;
    else if ((ft == F::IQ4_NL || ft == F::IQ4_XS) && gqa4) t = DType::Q5_K;
    else if ((ft == F::Q4_K_M || ft == F::Q5_K_M) && use_more_bits(i, n)) t = DType::Q6_K;
    else if (ft == F::Q4_K_S && i < 4) t = DType::Q5_K;
    // llama.cpp's LLM_TYPE_70B: 80 layers of llama with grouped KV heads (Llama 2/3 70B,
    // CodeLlama 70B) or of qwen2 (Qwen2(.5) 72B).
    const bool type70b = n == 80 && ((c.arch == ModelArch::Llama && c.n_heads != c.n_kv_heads) ||
                                      c.arch == ModelArch::Qwen2);
    if (type70b && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    if (eight_experts) t = DType::Q8_0;
  } else if (role == "k") {
    if (eight_experts) t = DType::Q8_0;
  } else if (role == "down" || role == "proj") {  // ffn_down (also of the experts)
    if (ft == F::Q2_K) t = DType::Q3_K;
    else if (ft == F::Q3_K_M) t = i < n / 16 ? DType::Q5_K : DType::Q4_K;
    else if (ft == F::Q3_K_L) t = DType::Q5_K;
    else if (ft == F::Q4_K_M) t = use_more_bits(i, n) ? DType::Q6_K : t;
    else if (i < n / 8 && (ft == F::IQ4_NL || ft == F::IQ4_XS) && !imatrix) t = DType::Q5_K;
    else if (ft == F::Q5_K_M && use_more_bits(i, n)) t = DType::Q6_K;
    else if (ft == F::Q4_K_S && i < n / 8) t = DType::Q5_K;
    // With an importance matrix llama.cpp guards the first ffn_down layers of Q4_0 / Q5_0 files.
    else if ((ft == F::Q4_0 || ft == F::Q5_0) && imatrix && i < n / 8)
      t = ft == F::Q4_0 ? DType::Q4_1 : DType::Q5_1;
  } else if (role == "o") {  // attn_output
    if (eight_experts) {
      if (ft == F::Q2_K || ft == F::Q3_K_S || ft == F::Q3_K_M || ft == F::IQ4_NL ||
          ft == F::Q4_K_S || ft == F::Q4_K_M || ft == F::IQ4_XS)
        t = DType::Q5_K;
    } else if (ft == F::Q2_K) {
      t = DType::Q3_K;
    } else if (ft == F::Q3_K_M) {
      t = DType::Q4_K;
    } else if (ft == F::Q3_K_L) {
      t = DType::Q5_K;
    }
  }
  return t;
}

// shape: the tensor to write ([rows, cols], [n_experts, rows, cols] or a vector's [n]).
DType choose_dtype(const ConvertOptions& o, const ModelConfig& c, const Job& job,
                   const std::vector<int64_t>& shape) {
  if (shape.size() < 2 || job.keep_f32) return DType::F32;  // norms, biases, the router
  const DType base = o.file_type ? file_type_base(*o.file_type) : o.out_dtype;
  if (!is_quantized(base)) return base;
  DType want = base;
  if (job.output) {  // the output matrix (or the tied embedding) keeps more bits
    if (want != DType::Q8_0) want = DType::Q6_K;
  } else if (o.file_type && job.layer >= 0) {
    want = layer_rule(*o.file_type, c, job, want, o.imatrix != nullptr);
  }
  while (is_quantized(want) && shape.back() % dtype_info(want).block_elems != 0)
    want = fallback(want);
  return want;
}

// general.file_type: the file type, or for a plain dtype the llama_ftype of that type alone
// (llama.h; Q4_K / Q5_K / Q3_K as their _S file types, IQ4 and Q2_K as theirs).
uint32_t ggml_file_type(const ConvertOptions& o) {
  if (o.file_type) return static_cast<uint32_t>(*o.file_type);
  switch (o.out_dtype) {
    case DType::Q3_K:
      return static_cast<uint32_t>(FileType::Q3_K_S);
    case DType::Q4_K:
      return static_cast<uint32_t>(FileType::Q4_K_S);
    case DType::Q5_K:
      return static_cast<uint32_t>(FileType::Q5_K_S);
    default:
      for (const FileTypeRow& r : kFileTypes)
        if (r.base == o.out_dtype) return static_cast<uint32_t>(r.type);
      fail("convert: cannot write dtype ", dtype_name(o.out_dtype));
  }
}

// f32 [shape] in dtype dt, weighted by o.imatrix's entry for the tensor when there is one (a
// quantized type that uses it; the stacked experts each by their own row of the entry).
std::vector<uint8_t> quantize_with_importance(const ConvertOptions& o, ConvertResult& res,
                                              const std::string& name,
                                              const std::vector<int64_t>& shape,
                                              const std::vector<float>& f32, DType dt) {
  const auto n = static_cast<int64_t>(f32.size());
  if (!o.imatrix || shape.size() < 2 || !is_quantized(dt) || dt == DType::Q8_0)
    return quantize(f32.data(), n, dt);
  const ImportanceMatrix::Entry* e = o.imatrix->find(name);
  if (!e) {
    res.imatrix_missing.push_back(name);
    return quantize(f32.data(), n, dt);
  }
  const int64_t mats = shape.size() == 3 ? shape[0] : 1, cols = shape.back();
  EFIM_CHECK(e->n_mat == mats && e->cols() == cols, "convert: the importance matrix's entry ",
             name, " covers ", e->n_mat, " matrices of ", e->cols(), " columns; the tensor has ",
             mats, " of ", cols);
  ++res.imatrix_used;
  std::vector<uint8_t> out;
  const int64_t per = n / mats;
  for (int64_t m = 0; m < mats; ++m) {  // whole rows of whole blocks each
    const std::vector<uint8_t> part = quantize(f32.data() + m * per, per, dt, e->of(m));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// The keys llama-quantize writes for a file quantized with an importance matrix.
void write_imatrix_keys(const ConvertOptions& o, GgufWriter& w) {
  if (!o.imatrix) return;
  w.set_string("quantize.imatrix.file", o.imatrix_label);
  w.set_u32("quantize.imatrix.entries_count", static_cast<uint32_t>(o.imatrix->entries.size()));
  if (!o.imatrix->datasets.empty())
    w.set_string("quantize.imatrix.dataset", o.imatrix->datasets.front());
}

}  // namespace

ConvertResult convert_hf_to_gguf(const ConvertOptions& o) {
  namespace fs = std::filesystem;
  const uint32_t file_type = ggml_file_type(o);  // checks that out_dtype is writable
  ModelConfig c = config_from_hf_file((fs::path(o.input_dir) / "config.json").string());
  auto src = SafetensorsFolder::open(o.input_dir);
  // Checks every shape and dtype up front; the experts are read through it.
  const ModelWeights bound = bind_weights(c, *src, WeightNaming::HF);

  ConvertResult res;
  res.config = c;
  res.config.rope_pairing = arch_traits(c.arch).gguf_rope;
  res.config.norm_weight_offset = 0.0f;  // folded into the written norm weights
  GgufWriter w;
  write_gguf_metadata(c, w);
  w.set_string("general.name", fs::path(o.input_dir).filename().string());
  w.set_u32("general.file_type", file_type);
  if (c.bos_token >= 0)
    w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_token));
  if (!c.eos_tokens.empty())
    w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_tokens[0]));
  if (o.tokenizer_writer) o.tokenizer_writer(w);
  write_imatrix_keys(o, w);

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
    std::vector<int64_t> shape;
    if (!job.experts.empty()) {  // [n_experts, rows, cols]
      const LayerWeights& l = bound.layers[static_cast<size_t>(job.layer)];
      const std::vector<cpu::WeightMatrix>& m = job.experts == "gate" ? l.expert_gate
                                                : job.experts == "up" ? l.expert_up
                                                                      : l.expert_down;
      const int64_t n = m[0].rows * m[0].cols;
      shape = {c.n_experts, m[0].rows, m[0].cols};
      f32.resize(static_cast<size_t>(c.n_experts * n));
      for (int64_t e = 0; e < c.n_experts; ++e)
        dequantize(m[e].data, n, m[e].dtype, f32.data() + e * n);
    } else {
      TensorView t = *src->find(job.hf);  // present: bind_weights checked
      shape = t.shape;
      f32.resize(static_cast<size_t>(t.numel()));
      dequantize(t.data, t.numel(), t.dtype, f32.data());
    }
    const int64_t cols = shape.size() >= 2 ? shape.back() : 1;
    if (job.permute_heads > 0) permute_rope_rows(f32.data(), job.permute_heads, c.head_dim, cols);
    if (job.add != 0.0f)
      for (float& v : f32) v += job.add;
    const DType dt = choose_dtype(o, c, job, shape);
    std::vector<uint8_t> bytes = quantize_with_importance(o, res, job.gguf, shape, f32, dt);
    w.add_tensor(job.gguf, dt, shape, bytes.data(), bytes.size());
    res.tensor_bytes += bytes.size();
    ++res.n_tensors;
    if (o.progress)
      o.progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(jobs.size()), job.gguf);
  }
  w.write(o.output_path);
  return res;
}

ConvertResult quantize_gguf(const ConvertOptions& o) {
  const uint32_t file_type = ggml_file_type(o);
  const GgufFile in = GgufFile::open(o.input_dir);
  const ModelConfig c = config_from_gguf(in);
  (void)bind_weights(c, in, WeightNaming::GGUF);  // every shape checked up front
  ConvertResult res;
  res.config = c;
  GgufWriter w;
  for (const std::string& key : in.metadata_order()) {  // tokenizer.*, general.* and the rest
    if (key == "general.alignment" || key == "general.file_type" || key.starts_with("quantize."))
      continue;
    w.set(key, *in.get(key));
  }
  write_gguf_metadata(c, w);
  w.set_u32("general.file_type", file_type);
  if (o.tokenizer_writer) o.tokenizer_writer(w);
  write_imatrix_keys(o, w);
  // The jobs by their GGUF names: the file's Q/K rows are already permuted, its norms already
  // hold Gemma's 1 (config_from_gguf: no offset), its experts already stacked.
  std::vector<Job> jobs = plan_jobs(c);
  std::set<std::string> planned;
  for (const Job& j : jobs) planned.insert(j.gguf);
  std::vector<float> f32;
  int64_t done = 0;
  const auto total = static_cast<int64_t>(in.tensor_names().size());
  auto add = [&](const std::string& name, DType dt, const std::vector<int64_t>& shape,
                 const std::vector<uint8_t>& bytes) {
    w.add_tensor(name, dt, shape, bytes.data(), bytes.size());
    res.tensor_bytes += bytes.size();
    ++res.n_tensors;
    if (o.progress) o.progress(++done, total, name);
  };
  for (const std::string& name : in.tensor_names()) {  // not the model's (rope_freqs): as they are
    if (planned.contains(name)) continue;
    const TensorView t = *in.find(name);
    add(name, t.dtype, t.shape,
        std::vector<uint8_t>(static_cast<const uint8_t*>(t.data),
                             static_cast<const uint8_t*>(t.data) + t.nbytes));
  }
  for (const Job& job : jobs) {
    const TensorView t = *in.find(job.gguf);  // present: bind_weights checked
    EFIM_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16,
               "convert: ", o.input_dir, ": tensor ", job.gguf, " is ", dtype_name(t.dtype),
               "; quantizing needs f32, f16 or bf16 tensors (requantizing loses precision: "
               "start from the f16/bf16 GGUF or the Hugging Face folder)");
    f32.resize(static_cast<size_t>(t.numel()));
    dequantize(t.data, t.numel(), t.dtype, f32.data());
    const DType dt = choose_dtype(o, c, job, t.shape);
    add(job.gguf, dt, t.shape, quantize_with_importance(o, res, job.gguf, t.shape, f32, dt));
  }
  w.write(o.output_path);
  return res;
}

}  // namespace efim
