// Parity of efim's forward pass with the numpy reference (scripts/ref_forward.py) on tiny random
// checkpoints (scripts/make_tiny_model.py), from the HF folder and from converted GGUFs (batched,
// chunked and incremental evaluation: batching_test.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>

#include "backend/cpu/matmul.h"
#include "base/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/convert.h"
#include "model/batch.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tiny_models.h"
#include "tensor/quant.h"

namespace efim {
namespace {

using namespace tiny;  // NOLINT: the shared fixture and helpers

TEST_F(TinyModels, ReferenceIsNonTrivial) {
  for (const char* kind : kKinds) {
    const std::vector<float>& r = ref(folder(kind, "f32"));
    ASSERT_EQ(r.size(), tokens_.size() * 300) << kind;
    EXPECT_GT(max_abs(r), 1.0f) << kind;
  }
}

TEST_F(TinyModels, FolderMatchesReference) {
  for (const char* kind : kKinds)
    for (const char* dt : {"f32", "bf16"})
      EXPECT_LE(diff_to_ref(folder(kind, dt), folder(kind, dt)), 1e-4f) << kind << " " << dt;
}

TEST_F(TinyModels, GgufF32MatchesReference) {
  for (const char* kind : kKinds) {
    std::string gguf = convert(folder(kind, "f32"), DType::F32);
    EXPECT_LE(diff_to_ref(gguf, folder(kind, "f32")), 1e-4f) << kind;
  }
}

TEST_F(TinyModels, GgufBf16FromBf16WeightsMatchesReference) {
  for (const char* kind : kKinds) {
    std::string gguf = convert(folder(kind, "bf16"), DType::BF16);
    EXPECT_LE(diff_to_ref(gguf, folder(kind, "bf16")), 1e-4f) << kind;
  }
}

// Quantized weights: the error scales with the logits. F16 keeps 11 significant bits; Q8_0
// about 8 per block of 32, and the Q8_0 kernels also round activations to int8 blocks (as
// llama.cpp does), which dominates on these tiny models (sharp attention, rows of 64).
TEST_F(TinyModels, GgufF16AndQ8_0WithinQuantizationError) {
  for (const char* kind : kKinds) {
    const float scale = max_abs(ref(folder(kind, "f32")));
    std::string f16 = convert(folder(kind, "f32"), DType::F16);
    EXPECT_LE(diff_to_ref(f16, folder(kind, "f32")), 5e-3f * scale) << kind;
    std::string q8 = convert(folder(kind, "f32"), DType::Q8_0);
    expect_within(kind, q8, folder(kind, "f32"), 6e-2f * scale);
  }
}

// StarCoder2's sliding window (8 here, 4096 in the real checkpoints): the windowed model equals
// the full-attention one with the same weights up to position 7 and differs after; fed in
// chunks and single decode steps it still equals the numpy reference, and the GGUF carries
// the window.
TEST_F(TinyModels, SlidingWindowAttention) {
  const std::vector<float>& full = ref(folder("starcoder2", "f32"));
  const std::vector<float>& windowed = ref(folder("starcoder2_swa", "f32"));
  const size_t V = 300;
  EXPECT_LE(max_abs_diff(std::vector<float>(full.begin(), full.begin() + 8 * V),
                         std::vector<float>(windowed.begin(), windowed.begin() + 8 * V)),
            1e-5f);
  EXPECT_GT(max_abs_diff(std::vector<float>(full.begin() + 8 * V, full.end()),
                         std::vector<float>(windowed.begin() + 8 * V, windowed.end())),
            0.1f);
  for (const std::string& path :
       {folder("starcoder2_swa", "f32"), convert(folder("starcoder2_swa", "f32"), DType::F32)}) {
    auto m = Model::load(path, two_threads());
    EXPECT_EQ(m->config().sliding_window, 8);
    ContiguousSession s(*m, static_cast<int64_t>(tokens_.size()));
    std::vector<float> got;
    size_t at = 0;
    for (size_t piece : {5, 1, 1, 9, 1, 13, 1, 1, 8}) {  // 40 tokens
      std::vector<float> l = s.eval({tokens_.begin() + at, tokens_.begin() + at + piece}, true);
      got.insert(got.end(), l.begin(), l.end());
      at += piece;
    }
    ASSERT_EQ(at, tokens_.size());
    EXPECT_LE(max_abs_diff(got, windowed), 1e-4f) << path;
  }
}

TEST_F(TinyModels, GgufLayoutFollowsLlamaCpp) {
  std::string gguf = convert(folder("llama", "f32"), DType::Q8_0);
  GgufFile f = GgufFile::open(gguf);
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.rope_pairing, RopePairing::Interleaved);
  EXPECT_EQ(c.rope_freq_factors.size(), 8u);  // llama3 scaling as rope_freqs.weight
  EXPECT_FALSE(c.tied_embeddings);
  ASSERT_TRUE(f.find("blk.1.attn_q.weight"));
  EXPECT_EQ(f.find("blk.1.attn_q.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find("token_embd.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find("blk.0.attn_norm.weight")->dtype, DType::F32);
  EXPECT_EQ(f.get("tokenizer.ggml.bos_token_id")->as_u64(), 1u);

  std::string qwen = convert(folder("qwen2", "f32"), DType::BF16);
  GgufFile g = GgufFile::open(qwen);
  ModelConfig q = config_from_gguf(g);
  EXPECT_EQ(q.arch, ModelArch::Qwen2);
  EXPECT_EQ(q.rope_pairing, RopePairing::RotateHalf);
  EXPECT_TRUE(q.tied_embeddings);
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_EQ(g.find("blk.0.attn_q.bias")->dtype, DType::F32);
  EXPECT_FALSE(g.find("output.weight"));
}

// Qwen3-MoE as llama.cpp's converter writes it: each layer's experts stacked into one
// [n_experts, rows, cols] tensor per role, the router kept f32; the binder checks the stack.
TEST_F(TinyModels, GgufMoeStacksExpertsAndKeepsRouterF32) {
  std::string gguf = convert(folder("qwen3_moe", "f32"), DType::Q8_0);
  GgufFile f = GgufFile::open(gguf);
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.arch, ModelArch::Qwen3Moe);
  EXPECT_EQ(c.n_experts, 8);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.expert_intermediate, 32);
  EXPECT_FALSE(c.tied_embeddings);
  ASSERT_TRUE(f.find("blk.1.ffn_gate_inp.weight"));
  EXPECT_EQ(f.find("blk.1.ffn_gate_inp.weight")->dtype, DType::F32);
  EXPECT_EQ(f.find("blk.1.ffn_gate_inp.weight")->shape, (std::vector<int64_t>{8, 64}));
  ASSERT_TRUE(f.find("blk.1.ffn_up_exps.weight"));
  EXPECT_EQ(f.find("blk.1.ffn_up_exps.weight")->dtype, DType::Q8_0);
  EXPECT_EQ(f.find("blk.1.ffn_up_exps.weight")->shape, (std::vector<int64_t>{8, 32, 64}));
  EXPECT_EQ(f.find("blk.0.ffn_down_exps.weight")->shape, (std::vector<int64_t>{8, 64, 32}));
  EXPECT_FALSE(f.find("blk.0.ffn_up.weight"));

  // Expert 5's up matrix is rows [5 * 32, 6 * 32) of the stack: its first row dequantizes to
  // the HF tensor's first row (up to Q8_0 rounding).
  auto m = Model::load(gguf, two_threads());
  const cpu::WeightMatrix& up5 = m->weights().layers[1].expert_up[5];
  std::vector<float> row(64);
  cpu::dequantize_row(up5, 0, row.data());
  auto hf = SafetensorsFolder::open(folder("qwen3_moe", "f32"));
  TensorView t = *hf->find("model.layers.1.mlp.experts.5.up_proj.weight");
  const auto* want = static_cast<const float*>(t.data);
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(row[j], want[j], 0.02f) << j;

  // A stack with the wrong expert count names the tensor and both shapes.
  ModelConfig wrong = c;
  wrong.n_experts = 4;
  wrong.n_experts_used = 2;
  auto src = std::make_unique<GgufFile>(GgufFile::open(gguf));
  std::string err;
  try {
    Model::from_source(wrong, std::move(src), WeightNaming::GGUF);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("blk.0.ffn_gate_inp.weight has shape [8, 64], expected [4, 64]"),
            std::string::npos)
      << err;
}

// Dense MLPs among the experts (mlp_only_layers [0, 2] of 4 layers): `efim convert` writes the
// dense layers' ffn_gate / ffn_up / ffn_down and no router, the expert layers their stacks,
// and the GGUF's layers without a router are read back as the dense ones. (llama.cpp's qwen3moe
// requires experts in every layer and loads none of these.)
TEST_F(TinyModels, GgufMoeWithDenseLayers) {
  GgufFile f = GgufFile::open(convert(folder("qwen3_moe_dense", "f32"), DType::Q8_0));
  for (int64_t l = 0; l < 4; ++l) {
    SCOPED_TRACE(l);
    const bool dense = l == 0 || l == 2;
    EXPECT_EQ(f.find(str("blk.", l, ".ffn_gate_inp.weight")).has_value(), !dense);
    EXPECT_EQ(f.find(str("blk.", l, ".ffn_up_exps.weight")).has_value(), !dense);
    ASSERT_EQ(f.find(str("blk.", l, ".ffn_up.weight")).has_value(), dense);
    if (dense) {  // intermediate_size, not the experts' 32
      EXPECT_EQ(f.find(str("blk.", l, ".ffn_up.weight"))->shape, (std::vector<int64_t>{96, 64}));
    }
  }
  ModelConfig c = config_from_gguf(f);
  EXPECT_EQ(c.dense_layers, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(c.intermediate, 96);
  EXPECT_EQ(c.expert_intermediate, 32);
  // A layer with neither a router nor a dense MLP is an error that names the router.
  ModelConfig wrong = c;
  wrong.dense_layers = {0};
  std::string err;
  try {
    Model::from_source(wrong, std::make_unique<GgufFile>(std::move(f)), WeightNaming::GGUF);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("blk.2.ffn_gate_inp.weight"), std::string::npos) << err;
}

// transformers 5 may save a Qwen3-MoE's experts fused (mlp.experts.gate_up_proj [8, 2 x 32, 64],
// mlp.experts.down_proj [8, 64, 32]): bound in place, the same logits as the same weights saved
// one tensor per expert, and `efim convert` writes the same GGUF tensors from either.
TEST_F(TinyModels, TransformersFiveFusedExperts) {
  const std::string fused = folder("qwen3_moe_fused", "f32"), split = folder("qwen3_moe", "f32");
  auto hf = SafetensorsFolder::open(fused);
  ASSERT_TRUE(hf->find("model.layers.1.mlp.experts.gate_up_proj"));
  EXPECT_EQ(hf->find("model.layers.1.mlp.experts.gate_up_proj")->shape,
            (std::vector<int64_t>{8, 64, 64}));
  EXPECT_FALSE(hf->find("model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_EQ(max_abs_diff(ref(fused), ref(split)), 0.0f);  // the oracle unfuses: same weights
  EXPECT_LE(diff_to_ref(fused, split), 1e-4f);
  auto a = Model::load(fused, two_threads()), b = Model::load(split, two_threads());
  EXPECT_EQ(all_logits(*a, tokens_), all_logits(*b, tokens_));
  for (DType dt : {DType::F32, DType::Q8_0}) {
    GgufFile fa = GgufFile::open(convert(fused, dt)), fb = GgufFile::open(convert(split, dt));
    ASSERT_EQ(fa.tensors().size(), fb.tensors().size());
    for (const auto& info : fb.tensors()) {
      auto t = fb.find(info.name), u = fa.find(info.name);
      ASSERT_TRUE(t && u) << info.name;
      EXPECT_EQ(u->shape, t->shape) << info.name;
      EXPECT_EQ(u->dtype, t->dtype) << info.name;
      ASSERT_EQ(u->nbytes, t->nbytes) << info.name;
      EXPECT_EQ(std::memcmp(u->data, t->data, t->nbytes), 0) << info.name;
    }
  }
  // A fused tensor of the wrong shape names itself and both shapes.
  std::string err;
  try {
    ModelConfig wrong = config_from_hf_file(fused + "/config.json");
    wrong.expert_intermediate = 16;
    bind_weights(wrong, *hf, WeightNaming::HF);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("model.layers.0.mlp.experts.gate_up_proj has shape [8, 64, 64], expected "
                     "[8, 32, 64]"),
            std::string::npos)
      << err;
}

TEST_F(TinyModels, ConverterCallsTokenizerHookAndProgress) {
  ConvertOptions o;
  o.input_dir = folder("qwen2", "bf16");
  o.output_path = *dir_ / "hooked.gguf";
  o.out_dtype = DType::BF16;
  o.tokenizer_writer = [](GgufWriter& w) {
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_u32("tokenizer.ggml.eos_token_id", 9);
  };
  int64_t calls = 0, last_total = 0;
  o.progress = [&](int64_t done, int64_t total, const std::string&) {
    EXPECT_EQ(done, ++calls);
    last_total = total;
  };
  ConvertResult r = convert_hf_to_gguf(o);
  EXPECT_EQ(calls, last_total);
  EXPECT_EQ(r.n_tensors, 2 + 2 * 12);  // embed, final norm, 12 per layer (with 3 biases)
  GgufFile f = GgufFile::open(o.output_path);
  EXPECT_EQ(f.get("tokenizer.ggml.model")->as_string(), "gpt2");
  EXPECT_EQ(f.get("tokenizer.ggml.eos_token_id")->as_u64(), 9u);  // hook overrides config.json
  EXPECT_EQ(f.tensors().size(), static_cast<size_t>(r.n_tensors));
}

// An HF folder holding the GGUF's weights dequantized to f32, with Q/K rows put back in HF
// (rotate-half) order: the reference run on it sees exactly the quantized weights.
void write_dequantized_folder(const std::string& gguf_path, const std::string& hf_dir,
                              const std::string& out_dir) {
  GgufFile g = GgufFile::open(gguf_path);
  ModelConfig c = config_from_hf_file(hf_dir + "/config.json");
  std::vector<std::pair<std::string, std::string>> names = {
      {TensorNames::embed(WeightNaming::GGUF), TensorNames::embed(WeightNaming::HF)},
      {TensorNames::output_norm(WeightNaming::GGUF), TensorNames::output_norm(WeightNaming::HF)}};
  if (!c.tied_embeddings)
    names.push_back(
        {TensorNames::output(WeightNaming::GGUF), TensorNames::output(WeightNaming::HF)});
  if (c.norm == NormKind::Layer)
    names.push_back({TensorNames::output_norm(WeightNaming::GGUF, "bias"),
                     TensorNames::output_norm(WeightNaming::HF, "bias")});
  std::vector<std::pair<int64_t, std::string>> experts;  // (layer, role) of each stacked tensor
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const bool gelu = c.mlp == MlpKind::Gelu;
    for (const char* role : {"attn_norm", "ffn_norm", "q", "k", "v", "o"})
      names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role),
                       TensorNames::layer(WeightNaming::HF, l, role)});
    if (c.moe_layer(l)) {  // the router; the stacked experts are split below
      names.push_back({TensorNames::layer(WeightNaming::GGUF, l, "router"),
                       TensorNames::layer(WeightNaming::HF, l, "router")});
      for (const char* role : {"gate", "up", "down"}) experts.push_back({l, role});
    } else {
      for (const char* role : gelu ? std::vector<const char*>{"fc", "proj"}
                                   : std::vector<const char*>{"gate", "up", "down"})
        names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role),
                         TensorNames::layer(WeightNaming::HF, l, role)});
    }
    if (c.norm == NormKind::Layer)
      for (const char* role : {"attn_norm", "ffn_norm"})
        names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role, "bias"),
                         TensorNames::layer(WeightNaming::HF, l, role, "bias")});
    if (c.o_bias)
      names.push_back({TensorNames::layer(WeightNaming::GGUF, l, "o", "bias"),
                       TensorNames::layer(WeightNaming::HF, l, "o", "bias")});
    if (c.mlp_bias)
      for (const char* role : {"fc", "proj"})
        names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role, "bias"),
                         TensorNames::layer(WeightNaming::HF, l, role, "bias")});
    if (c.qkv_bias)
      for (const char* role : {"q", "k", "v"})
        names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role, "bias"),
                         TensorNames::layer(WeightNaming::HF, l, role, "bias")});
    if (c.qk_norm)
      for (const char* role : {"q_norm", "k_norm"})
        names.push_back({TensorNames::layer(WeightNaming::GGUF, l, role),
                         TensorNames::layer(WeightNaming::HF, l, role)});
  }
  std::vector<SafetensorsTensor> out;
  for (auto& [gname, hname] : names) {
    TensorView t = *g.find(gname);
    std::vector<float> f(static_cast<size_t>(t.numel()));
    dequantize(t.data, t.numel(), t.dtype, f.data());
    const bool q = hname.find("q_proj") != std::string::npos;
    const bool k = hname.find("k_proj") != std::string::npos;
    if (c.arch == ModelArch::Llama && (q || k)) {  // inverse of permute_rope_rows
      const int64_t heads = q ? c.n_heads : c.n_kv_heads, hd = c.head_dim, half = hd / 2;
      const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
      std::vector<float> orig(f.size());
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::copy_n(&f[(h * hd + 2 * i + j) * cols], cols,
                        &orig[(h * hd + j * half + i) * cols]);
      f = orig;
    }
    // Gemma: the GGUF holds 1 + w for the norms whose HF weight is w.
    const bool rms_weight = hname.ends_with("layernorm.weight") || hname == "model.norm.weight";
    if (rms_weight && c.norm == NormKind::Rms)
      for (float& v : f) v -= c.norm_weight_offset;
    out.push_back({hname, DType::F32, t.shape,
                   std::string(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float))});
  }
  for (const auto& [layer, role] : experts) {  // [n_experts, rows, cols] -> one tensor per expert
    TensorView t = *g.find(TensorNames::expert(WeightNaming::GGUF, layer, 0, role));
    std::vector<float> f(static_cast<size_t>(t.numel()));
    dequantize(t.data, t.numel(), t.dtype, f.data());
    const int64_t per = t.shape[1] * t.shape[2];
    for (int64_t e = 0; e < t.shape[0]; ++e)
      out.push_back({TensorNames::expert(WeightNaming::HF, layer, e, role), DType::F32,
                     {t.shape[1], t.shape[2]},
                     std::string(reinterpret_cast<const char*>(f.data() + e * per),
                                 static_cast<size_t>(per) * sizeof(float))});
  }
  std::filesystem::create_directories(out_dir);
  write_safetensors(out_dir + "/model.safetensors", out);
  std::filesystem::copy_file(hf_dir + "/config.json", out_dir + "/config.json");
}

// Q8_0 against the reference on the same (dequantized) weights. With the scalar reference
// matmul the result must be exact up to f32 rounding: conversion, Q/K permutation and binding
// lose nothing beyond the weight quantization. With the fast kernels what remains is their
// int8 rounding of activations.
TEST_F(TinyModels, GgufQ8_0MatchesReferenceOnDequantizedWeights) {
  for (const char* kind : kKinds) {
    std::string q8 = convert(folder(kind, "f32"), DType::Q8_0);
    std::string deq = *dir_ / (std::string(kind) + "-deq-q8_0");
    write_dequantized_folder(q8, folder(kind, "f32"), deq);
    LoadOptions exact = two_threads();
    exact.reference_matmul = true;
    EXPECT_LE(diff_to_ref(q8, deq, exact), 1e-4f) << kind;
    expect_within(kind, q8, deq, 4e-2f * max_abs(ref(deq)));
  }
}

// ---------------------------------------------------------------- K/V element types

// An f16 or q8_0 K/V cache moves the logits of a 40-token prompt only by the rounding of K and
// V: within a small share of the logits' spread of the exact f32 cache, with the same argmax
// at nearly every position; q8_0 needs whole 32-value blocks per head (llama's tiny head_dim
// of 16 is refused with the reason). Decode after prefill and two sequences batched in one
// step read the typed cache as a single prefill does.
TEST_F(TinyModels, F16AndQ8_0KvCachesStayCloseToF32) {
  for (const char* kind : kKinds) {
    SCOPED_TRACE(kind);
    auto m = Model::load(folder(kind, "f32"), two_threads());
    const int64_t V = m->config().vocab, n = static_cast<int64_t>(tokens_.size());
    const std::vector<float> exact = all_logits(*m, tokens_);
    const float spread = max_abs(exact);
    for (DType kv : {DType::F16, DType::Q8_0}) {
      SCOPED_TRACE(std::string(dtype_name(kv)));
      if (m->config().head_dim % dtype_info(kv).block_elems != 0) {
        EXPECT_THROW(ContiguousSession(*m, n, kv), Error);
        continue;
      }
      ContiguousSession s(*m, n, kv);
      const std::vector<float> got = s.eval(tokens_, true);
      const float tol = (kv == DType::F16 ? 2e-3f : 3e-2f) * spread;
      // A mixture of experts may route a token to another expert on q8_0's larger rounding
      // (as with q8_0 weights): a jump no tolerance bounds; its argmax is still checked.
      if (!(m->config().moe() && kv == DType::Q8_0)) {
        EXPECT_LE(max_abs_diff(got, exact), tol);
      }
      int argmax_diff = 0;
      for (int64_t t = 0; t < n; ++t) {
        auto row = [&](const std::vector<float>& l) {
          return std::max_element(l.begin() + t * V, l.begin() + (t + 1) * V) - l.begin();
        };
        argmax_diff += row(got) != row(exact);
      }
      EXPECT_LE(argmax_diff, kv == DType::F16 ? 1 : 3);
      // Decode steps on the same typed cache equal the prefill's last rows.
      ContiguousSession d(*m, n, kv);
      d.eval(std::vector<int32_t>(tokens_.begin(), tokens_.end() - 1));
      const std::vector<float> last = d.eval({tokens_.back()});
      // The decode step's GEMVs sum in another order than the prefill's GEMMs (and a mixture
      // of experts hands each expert a different number of rows): rounding that grows with
      // depth, so the tolerance scales with the layers beyond the usual 2 (qwen3_moe_dense: 4).
      const float depth = std::max(1.0f, static_cast<float>(m->config().n_layers) / 2.0f);
      EXPECT_LE(max_abs_diff(last, std::vector<float>(got.end() - V, got.end())),
                depth * rounding_tol(got));
    }
  }
}

// Copy-on-write of a slot copies its bytes in every element type.
TEST(KvCacheTypes, StoreLoadAndCopySlotRoundTrip) {
  for (DType kv : {DType::F32, DType::F16, DType::Q8_0}) {
    KvCache c(3, 5, 64, kv, 2);  // two heads of 32 values
    std::vector<float> k(64), v(64), k2(64), v2(64);
    for (int i = 0; i < 64; ++i) {
      k[i] = 0.37f * float(i) - 5.0f;
      v[i] = std::sin(float(i));
    }
    c.store(2, 1, k.data(), v.data());
    c.copy_slot(1, 4);
    c.load(2, 4, k2.data(), v2.data());
    const float tol = kv == DType::F32 ? 0.0f : kv == DType::F16 ? 1e-2f : 0.1f;
    for (int i = 0; i < 64; ++i) {
      EXPECT_NEAR(k2[i], k[i], tol) << dtype_name(kv) << " " << i;
      EXPECT_NEAR(v2[i], v[i], tol) << dtype_name(kv) << " " << i;
    }
    EXPECT_EQ(c.head_bytes(), KvCache::row_bytes(kv, 32));
    EXPECT_EQ(KvCache::bytes_per_token(kv, 3, 64), 2 * 3 * 2 * c.head_bytes());
  }
  EXPECT_EQ(KvCache::row_bytes(DType::F16, 64) * 2, KvCache::row_bytes(DType::F32, 64));
}

// ---------------------------------------------------------------- batching equivalences

}  // namespace
}  // namespace efim

namespace efim {
namespace {

// A source that hides or reshapes tensors of another one.
class AlteredSource : public TensorSource {
 public:
  explicit AlteredSource(std::unique_ptr<TensorSource> base) : base_(std::move(base)) {}
  std::vector<std::string> tensor_names() const override { return base_->tensor_names(); }
  std::optional<TensorView> find(const std::string& name) const override {
    if (name == hide) return std::nullopt;
    auto t = base_->find(name);
    if (t && name == reshape) t->shape = new_shape;
    if (t && name == retype) t->dtype = new_dtype;
    return t;
  }
  std::string hide, reshape, retype;
  std::vector<int64_t> new_shape;
  DType new_dtype = DType::F32;

 private:
  std::unique_ptr<TensorSource> base_;
};

class Errors : public TinyModels {
 protected:
  std::string load_error(const std::function<void(AlteredSource&)>& alter) {
    const std::string dir = folder("qwen2", "f32");
    auto src = std::make_unique<AlteredSource>(SafetensorsFolder::open(dir));
    alter(*src);
    try {
      Model::from_source(config_from_hf_file(dir + "/config.json"), std::move(src),
                         WeightNaming::HF);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

TEST_F(Errors, WeightBindingNamesTensorExpectedAndActual) {
  std::string e =
      load_error([](AlteredSource& s) { s.hide = "model.layers.1.mlp.up_proj.weight"; });
  EXPECT_NE(e.find("missing tensor model.layers.1.mlp.up_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[96, 64]"), std::string::npos) << e;
  e = load_error([](AlteredSource& s) {
    s.reshape = "model.layers.0.self_attn.k_proj.weight";
    s.new_shape = {64, 32};
  });
  EXPECT_NE(e.find("model.layers.0.self_attn.k_proj.weight has shape [64, 32], expected [32, 64]"),
            std::string::npos)
      << e;
  e = load_error([](AlteredSource& s) { s.hide = "model.layers.0.self_attn.q_proj.bias"; });
  EXPECT_NE(e.find("q_proj.bias"), std::string::npos) << e;
  e = load_error([](AlteredSource& s) {
    s.retype = "model.norm.weight";
    s.new_dtype = DType::I32;
  });
  EXPECT_NE(e.find("model.norm.weight has dtype i32"), std::string::npos) << e;
}

TEST_F(Errors, BadBatchesAreRejectedBeforeTouchingTheCache) {
  auto m = Model::load(folder("llama", "f32"), two_threads());
  KvCache kv = KvCache::for_model(m->config(), 8);
  auto err = [&](Batch b) {
    try {
      m->forward(b, kv);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  Batch ok;
  int32_t s = ok.add_sequence({0, 1, 2});
  ok.add_token(5, 0, s, true);
  ok.add_token(6, 1, s, true);
  EXPECT_EQ(m->forward(ok, kv).size(), 2u * 300);

  Batch b = ok;
  b.tokens[1] = 300;
  EXPECT_NE(err(b).find("token 300"), std::string::npos);
  b = ok;
  b.positions[1] = 3;
  EXPECT_NE(err(b).find("position 3 has no slot"), std::string::npos);
  b = ok;
  b.sequences[0].slots[2] = 8;
  EXPECT_NE(err(b).find("kv slot 8 outside [0, 8)"), std::string::npos);
  b = ok;
  b.positions[1] = 0;
  EXPECT_NE(err(b).find("write kv slot 0"), std::string::npos);
  b = ok;
  b.seq[0] = 1;
  EXPECT_NE(err(b).find("sequence index 1"), std::string::npos);
  b = ok;
  b.logits_rows.push_back(2);
  EXPECT_NE(err(b).find("logits row 2"), std::string::npos);
  KvCache wrong(1, 8, m->config().kv_dim());
  EXPECT_THROW(m->forward(ok, wrong), Error);
  EXPECT_THROW(Model::load(*dir_ / "no-such-model"), Error);
}

}  // namespace
}  // namespace efim
