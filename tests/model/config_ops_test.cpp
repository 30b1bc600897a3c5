// ModelConfig parsing (HF and GGUF), RoPE frequencies and pairings, and the attention kernel
// against a direct double-precision implementation.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numbers>
#include <random>

#include "base/error.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/convert.h"
#include "model/ops.h"

namespace efim {
namespace {

nlohmann::json llama_json() {
  return nlohmann::json::parse(R"({
    "model_type": "llama", "vocab_size": 300, "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": [2, 3],
    "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 32}})");
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelConfig, ParsesHfLlama) {
  ModelConfig c = config_from_hf_json(llama_json(), "cfg");
  EXPECT_EQ(c.arch, ModelArch::Llama);
  EXPECT_EQ(c.vocab, 300);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.n_layers, 2);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.intermediate, 96);
  EXPECT_EQ(c.max_position, 128);
  EXPECT_DOUBLE_EQ(c.rms_eps, 1e-5);
  EXPECT_EQ(c.rope_pairing, RopePairing::RotateHalf);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::Llama3);
  EXPECT_EQ(c.rope_scaling.original_max_position, 32);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_token, 1);
  EXPECT_EQ(c.eos_tokens, (std::vector<int64_t>{2, 3}));
}

TEST(ModelConfig, ParsesHfQwen2WithExplicitHeadDim) {
  nlohmann::json j = llama_json();
  j["model_type"] = "qwen2";
  j["head_dim"] = 32;
  j["tie_word_embeddings"] = true;
  j.erase("rope_scaling");
  j["eos_token_id"] = 7;
  ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_EQ(c.arch, ModelArch::Qwen2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::None);
  EXPECT_EQ(c.eos_tokens, (std::vector<int64_t>{7}));
}

TEST(ModelConfig, ParsesHfQwen3FromTheArchitectureTable) {
  nlohmann::json j = llama_json();
  j["model_type"] = "qwen3";
  j["head_dim"] = 32;  // independent of hidden / heads = 16
  j["use_sliding_window"] = false;
  ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_EQ(c.arch, ModelArch::Qwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_dim(), 128);
  EXPECT_FALSE(c.qkv_bias);  // attention_bias absent
  EXPECT_EQ(arch_traits(ModelArch::Qwen3).gguf_rope, RopePairing::RotateHalf);
  EXPECT_EQ(arch_name(ModelArch::Qwen3), "qwen3");
  EXPECT_NE(c.summary().find("q/k norm"), std::string::npos) << c.summary();
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("use_sliding_window"),
            std::string::npos);
  j = llama_json();
  j["model_type"] = "gpt2";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("(llama, qwen2, qwen3, starcoder2, gemma, qwen3_moe)"),
            std::string::npos);
}

// Qwen3-Coder-30B-A3B's config.json fields (its shape: 128 experts, 8 used, width 768).
TEST(ModelConfig, ParsesHfQwen3MoeAndRoundTripsGguf) {
  nlohmann::json j = llama_json();
  j["model_type"] = "qwen3_moe";
  j["head_dim"] = 32;
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = 8;
  j["moe_intermediate_size"] = 768;
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
  ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_EQ(c.arch, ModelArch::Qwen3Moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.moe());
  EXPECT_EQ(c.n_experts, 128);
  EXPECT_EQ(c.n_experts_used, 8);
  EXPECT_EQ(c.expert_intermediate, 768);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_EQ(arch_name(ModelArch::Qwen3Moe), "qwen3moe");  // GGUF's name; HF's is qwen3_moe
  EXPECT_NE(c.summary().find("8 of 128 experts of width 768 (renormalised)"), std::string::npos)
      << c.summary();

  // GGUF keys as llama.cpp's converter writes them, and back.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("efim-moe-" + std::to_string(getpid()) + ".gguf"))
          .string();
  auto gguf_of = [&](const ModelConfig& m) {  // the metadata efim writes, opened again
    GgufWriter w;
    write_gguf_metadata(m, w);
    w.write(path);
    GgufFile f = GgufFile::open(path);
    std::filesystem::remove(path);  // the file stays mapped until f goes
    return f;
  };
  GgufFile f = gguf_of(c);
  EXPECT_EQ(f.get("qwen3moe.expert_count")->as_i64(), 128);
  EXPECT_EQ(f.get("qwen3moe.expert_used_count")->as_i64(), 8);
  EXPECT_EQ(f.get("qwen3moe.expert_feed_forward_length")->as_i64(), 768);
  ModelConfig g = config_from_gguf(f);
  EXPECT_EQ(g.arch, ModelArch::Qwen3Moe);
  EXPECT_EQ(g.n_experts, 128);
  EXPECT_EQ(g.n_experts_used, 8);
  EXPECT_EQ(g.expert_intermediate, 768);
  EXPECT_TRUE(g.expert_weights_norm);

  // A GGUF asking for more experts per token than it has, or for none, is refused.
  for (int64_t used : {200, 0}) {
    ModelConfig bad = c;
    bad.n_experts_used = used;
    GgufFile fb = gguf_of(bad);
    const std::string err = error_of([&] { config_from_gguf(fb); });
    EXPECT_NE(err.find(used ? "200 experts used per token but only 128 experts"
                            : "expert_used_count 0 must be > 0"),
              std::string::npos)
        << err;
  }

  // HF's default is no renormalisation.
  j.erase("norm_topk_prob");
  EXPECT_FALSE(config_from_hf_json(j, "cfg").expert_weights_norm);
  EXPECT_TRUE(c.dense_layers.empty());
  EXPECT_TRUE(c.moe_layer(0));
  EXPECT_FALSE(c.any_dense_mlp());

  // Dense MLPs among the experts (modeling_qwen3_moe): layer l is sparse iff l is not in
  // mlp_only_layers and (l + 1) % decoder_sparse_step == 0. 6 layers, step 2, only [3]:
  // sparse 1 and 5; dense 0, 2, 3, 4.
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  ModelConfig d = config_from_hf_json(j, "cfg");
  EXPECT_EQ(d.dense_layers, (std::vector<int64_t>{0, 2, 3, 4}));
  for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(d.moe_layer(l), l == 1 || l == 5) << l;
  EXPECT_TRUE(d.any_dense_mlp());
  EXPECT_NE(d.summary().find("dense MLP in 4 layers"), std::string::npos) << d.summary();
  j["mlp_only_layers"] = {0, 6};
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); })
                .find("mlp_only_layers entry 6 is not a layer index in [0, 6)"),
            std::string::npos);
  j["decoder_sparse_step"] = 0;
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); })
                .find("decoder_sparse_step 0 must be >= 1"),
            std::string::npos);
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
  j["num_experts_per_tok"] = 200;
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); })
                .find("200 experts used per token but only 128 experts"),
            std::string::npos);
  j.erase("num_experts");
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"num_experts\""),
            std::string::npos);
}

TEST(ModelConfig, ParsesHfStarCoder2) {
  nlohmann::json j = llama_json();
  j["model_type"] = "starcoder2";
  j["hidden_act"] = "gelu_pytorch_tanh";
  j["norm_epsilon"] = 1e-5;
  j.erase("rms_norm_eps");
  j["max_position_embeddings"] = 16384;
  j["sliding_window"] = 4096;
  j["tie_word_embeddings"] = true;
  ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_EQ(c.arch, ModelArch::StarCoder2);
  EXPECT_EQ(c.norm, NormKind::Layer);
  EXPECT_EQ(c.mlp, MlpKind::Gelu);
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.mlp_bias);  // use_bias defaults to true
  EXPECT_DOUBLE_EQ(c.rms_eps, 1e-5);
  EXPECT_EQ(c.max_position, 16384);  // the whole context, attention windowed to 4096
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_NE(c.summary().find("sliding window 4096"), std::string::npos) << c.summary();

  // GGUF: efim writes starcoder2.attention.sliding_window (also 0 for full attention) and reads
  // it back; a file without the key (llama.cpp's converter drops it) gets StarCoder2's 4096.
  auto reread = [](const ModelConfig& m, bool drop_window) {
    GgufWriter w;
    write_gguf_metadata(m, w);
    if (drop_window) {
      EXPECT_TRUE(w.remove("starcoder2.attention.sliding_window"));
    }
    const std::string bytes = w.serialize();
    GgufFile f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
    return config_from_gguf(f);
  };
  ModelConfig small = c;
  small.sliding_window = 16;
  EXPECT_EQ(reread(small, false).sliding_window, 16);
  EXPECT_EQ(reread(small, true).sliding_window, 4096);
  small.sliding_window = 0;
  EXPECT_EQ(reread(small, false).sliding_window, 0);
  EXPECT_EQ(reread(small, false).max_position, 16384);
  // config.json's null window: full attention; llama and the others never window.
  j["sliding_window"] = nullptr;
  EXPECT_EQ(config_from_hf_json(j, "cfg").sliding_window, 0);
  j["sliding_window"] = -3;
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("sliding_window must be >= 0, got -3"),
            std::string::npos);
  j["sliding_window"] = 4096;
  nlohmann::json llama = llama_json();
  llama["sliding_window"] = 4096;
  EXPECT_EQ(config_from_hf_json(llama, "cfg").sliding_window, 0);
  j["use_bias"] = false;
  c = config_from_hf_json(j, "cfg");
  EXPECT_FALSE(c.qkv_bias || c.o_bias || c.mlp_bias);
  j["hidden_act"] = "silu";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("gelu_pytorch_tanh"),
            std::string::npos);
}

TEST(ModelConfig, ParsesHfGemma) {
  nlohmann::json j = llama_json();
  j["model_type"] = "gemma";
  j["hidden_act"] = "gelu";
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["head_dim"] = 32;
  j.erase("tie_word_embeddings");  // Gemma ties by default
  j.erase("rope_scaling");
  ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_EQ(c.arch, ModelArch::Gemma);
  EXPECT_EQ(c.mlp, MlpKind::GeGlu);
  EXPECT_TRUE(c.embed_scale);
  EXPECT_FLOAT_EQ(c.norm_weight_offset, 1.0f);  // HF stores w for x^ (1 + w)
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.q_dim(), 128);
  j["hidden_activation"] = "relu";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"relu\""),
            std::string::npos);
}

TEST(ModelConfig, HfErrorsNameFieldAndValue) {
  nlohmann::json j = llama_json();
  j.erase("hidden_size");
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"hidden_size\""),
            std::string::npos);
  j = llama_json();
  j["num_key_value_heads"] = 3;
  std::string e = error_of([&] { config_from_hf_json(j, "cfg.json"); });
  EXPECT_NE(e.find("num_key_value_heads 3"), std::string::npos) << e;
  EXPECT_NE(e.find("num_attention_heads 4"), std::string::npos) << e;
  j = llama_json();
  j["model_type"] = "gpt2";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"gpt2\""),
            std::string::npos);
  j = llama_json();
  j["vocab_size"] = "big";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"big\""),
            std::string::npos);
  j = llama_json();
  j["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("\"yarn\""),
            std::string::npos);
  j = llama_json();
  j["hidden_size"] = -64;
  EXPECT_NE(error_of([&] { config_from_hf_json(j, "cfg.json"); }).find("-64"), std::string::npos);
}

TEST(ModelConfig, RopeFrequencies) {
  ModelConfig c = config_from_hf_json(llama_json(), "cfg");
  ModelConfig plain = c;
  plain.rope_scaling = {};
  std::vector<double> base = plain.rope_inv_freq(), f = c.rope_inv_freq();
  ASSERT_EQ(base.size(), 8u);
  for (size_t i = 0; i < base.size(); ++i)
    EXPECT_NEAR(base[i], std::pow(10000.0, -2.0 * static_cast<double>(i) / 16), 1e-15);
  // wavelengths 6.3 (< 32/4: kept), 19.9 (between: smoothed), >= 62.8 (> 32/1: divided by 4)
  EXPECT_DOUBLE_EQ(f[0], base[0]);
  EXPECT_LT(f[1], base[1]);
  EXPECT_GT(f[1], base[1] / 4);
  const double smooth = (32 / (2 * std::numbers::pi / base[1]) - 1.0) / 3.0;
  EXPECT_NEAR(f[1], (1 - smooth) * base[1] / 4 + smooth * base[1], 1e-15);
  for (size_t i = 2; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], base[i] / 4);
  c.rope_scaling = {RopeScalingType::Linear, 2.0};
  f = c.rope_inv_freq();
  for (size_t i = 0; i < f.size(); ++i) EXPECT_DOUBLE_EQ(f[i], base[i] / 2);
}

TEST(ModelConfig, GgufRoundTrip) {
  ModelConfig c = config_from_hf_json(llama_json(), "cfg");
  GgufWriter w;
  write_gguf_metadata(c, w);
  std::vector<float> factors(8);
  for (int i = 0; i < 8; ++i) factors[i] = 1.0f + static_cast<float>(i);
  w.add_tensor("rope_freqs.weight", DType::F32, {8}, factors.data(), 32);
  std::string bytes = w.serialize();
  GgufFile f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
  ModelConfig g = config_from_gguf(f);
  EXPECT_EQ(g.arch, ModelArch::Llama);
  EXPECT_EQ(g.rope_pairing, RopePairing::Interleaved);
  EXPECT_EQ(g.vocab, c.vocab);
  EXPECT_EQ(g.hidden, c.hidden);
  EXPECT_EQ(g.n_layers, c.n_layers);
  EXPECT_EQ(g.n_heads, c.n_heads);
  EXPECT_EQ(g.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(g.head_dim, c.head_dim);
  EXPECT_EQ(g.intermediate, c.intermediate);
  EXPECT_EQ(g.max_position, c.max_position);
  EXPECT_NEAR(g.rms_eps, c.rms_eps, 1e-12);
  EXPECT_DOUBLE_EQ(g.rope_theta, c.rope_theta);
  EXPECT_EQ(g.rope_freq_factors, factors);
  EXPECT_TRUE(g.tied_embeddings);  // no output.weight tensor in this file
  std::vector<double> inv = g.rope_inv_freq();
  EXPECT_NEAR(inv[3], std::pow(10000.0, -6.0 / 16) / 4.0, 1e-15);
}

// efim.fragment_tokenization (config.json "efim_fragment_tokenization"): off unless declared,
// and carried from config.json to GGUF and back.
TEST(ModelConfig, FragmentTokenizationDeclaration) {
  nlohmann::json j = llama_json();
  EXPECT_FALSE(config_from_hf_json(j, "cfg").fragment_tokenization);
  j["efim_fragment_tokenization"] = true;
  const ModelConfig c = config_from_hf_json(j, "cfg");
  EXPECT_TRUE(c.fragment_tokenization);
  for (bool declared : {false, true}) {
    ModelConfig d = c;
    d.fragment_tokenization = declared;
    GgufWriter w;
    write_gguf_metadata(d, w);
    const std::string bytes = w.serialize();
    GgufFile f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
    EXPECT_EQ(config_from_gguf(f).fragment_tokenization, declared);
    EXPECT_EQ(f.get(kGgufFragmentKey) != nullptr, declared);
  }
  j["efim_fragment_tokenization"] = "yes";
  EXPECT_THROW(config_from_hf_json(j, "cfg"), Error);
}

TEST(ModelConfig, GgufErrorsNameKey) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 64);
  std::string bytes = w.serialize();
  GgufFile f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
  EXPECT_NE(error_of([&] { config_from_gguf(f); }).find("llama.block_count"), std::string::npos);
  GgufWriter w2;
  w2.set_string("general.architecture", "gpt2");
  bytes = w2.serialize();
  GgufFile f2 = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "m");
  EXPECT_NE(error_of([&] { config_from_gguf(f2); }).find("\"gpt2\""), std::string::npos);
}

// Rotate-half RoPE on W.x equals interleaved RoPE on (P W).x, where P is the converter's row
// permutation: the reason llama GGUFs run with interleaved pairs.
TEST(Ops, LayerNormAndGeluTanh) {
  // x = 1000 + (-1.5, -0.5, 0.5, 1.5): mean 1000, var 1.25; the offset must not cost accuracy.
  std::vector<float> x = {998.5f, 999.5f, 1000.5f, 1001.5f}, y(4);
  const std::vector<float> w = {1, 2, 1, 1}, b = {0, 0, 0.5f, -1};
  ops::layer_norm(x.data(), w.data(), b.data(), 4, 0.0f, y.data());
  const float s = 1.0f / std::sqrt(1.25f);
  EXPECT_NEAR(y[0], -1.5f * s, 1e-5f);
  EXPECT_NEAR(y[1], -0.5f * s * 2, 1e-5f);
  EXPECT_NEAR(y[2], 0.5f * s + 0.5f, 1e-5f);
  EXPECT_NEAR(y[3], 1.5f * s - 1, 1e-5f);
  ops::layer_norm(x.data(), w.data(), b.data(), 4, 0.0f, x.data());  // in place
  EXPECT_EQ(x, y);
  // gelu_tanh(v) = 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))), against double maths.
  std::vector<float> g = {-6.0f, -1.0f, -0.1f, 0.0f, 0.3f, 1.0f, 2.5f, 8.0f};
  std::vector<float> v = g;
  ops::gelu_tanh(g.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const double z = v[i];
    const double want = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    EXPECT_NEAR(g[i], want, 1e-6 * (1 + std::fabs(want))) << v[i];
  }
  EXPECT_NEAR(g[5], 0.841192f, 1e-5f);  // gelu_tanh(1)
}

TEST(Rope, PermutedRowsWithInterleavedPairsMatchRotateHalf) {
  const int64_t heads = 3, hd = 8, cols = 5;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> W(static_cast<size_t>(heads * hd * cols)), x(cols);
  for (float& v : W) v = nd(rng);
  for (float& v : x) v = nd(rng);
  auto apply = [&](const std::vector<float>& M) {
    std::vector<float> y(static_cast<size_t>(heads * hd), 0.0f);
    for (int64_t r = 0; r < heads * hd; ++r)
      for (int64_t k = 0; k < cols; ++k) y[r] += M[r * cols + k] * x[k];
    return y;
  };
  ModelConfig c;
  c.head_dim = hd;
  c.rope_theta = 100.0;
  std::vector<int32_t> pos = {37};
  ops::RopeTable table;
  table.build(c.rope_inv_freq(), pos.data(), 1);
  std::vector<float> y_half = apply(W);
  ops::rope(y_half.data(), 1, heads, hd, RopePairing::RotateHalf, table);
  std::vector<float> Wp = W;
  permute_rope_rows(Wp.data(), heads, hd, cols);
  std::vector<float> y_inter = apply(Wp);
  ops::rope(y_inter.data(), 1, heads, hd, RopePairing::Interleaved, table);
  permute_rope_rows(y_half.data(), heads, hd, 1);  // bring to the interleaved order
  for (size_t i = 0; i < y_half.size(); ++i) EXPECT_NEAR(y_half[i], y_inter[i], 1e-5) << i;
  // and the rotation did something
  std::vector<float> unrotated = apply(Wp);
  float moved = 0;
  for (size_t i = 0; i < unrotated.size(); ++i) moved += std::fabs(unrotated[i] - y_inter[i]);
  EXPECT_GT(moved, 0.1f);
}

// Direct attention in double: for each token and head, softmax over its sequence's slots
// 0..pos of q.k / sqrt(d), weighted sum of v.
std::vector<double> naive_attention(const ops::AttentionArgs& a) {
  const int64_t hd = a.head_dim, qs = a.n_heads * hd, kvs = a.n_kv_heads * hd;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const auto* K = static_cast<const float*>(a.k);  // f32 cache
  const auto* V = static_cast<const float*>(a.v);
  std::vector<double> out;
  size_t n_tok = 0;
  for (const auto& s : *a.seqs) n_tok += s.tokens.size();
  out.assign(n_tok * static_cast<size_t>(qs), 0.0);
  for (const auto& s : *a.seqs) {
    for (int32_t t : s.tokens) {
      for (int64_t h = 0; h < a.n_heads; ++h) {
        const int64_t kvh = h / group, n = a.pos[t] + 1;
        std::vector<double> sc(static_cast<size_t>(n));
        double m = -1e300;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += static_cast<double>(a.q[t * qs + h * hd + i]) * K[s.ctx[j] * kvs + kvh * hd + i];
          sc[j] = d / std::sqrt(static_cast<double>(hd));
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (double& v : sc) sum += (v = std::exp(v - m));
        for (int64_t j = 0; j < n; ++j)
          for (int64_t i = 0; i < hd; ++i)
            out[t * qs + h * hd + i] += sc[j] / sum * V[s.ctx[j] * kvs + kvh * hd + i];
      }
    }
  }
  return out;
}

void check_attention(int64_t n_heads, int64_t n_kv, int64_t hd, const std::vector<int64_t>& ctx_len,
                     const std::vector<int64_t>& new_tokens, int threads) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  const int64_t kvs = n_kv * hd;
  int64_t n_slots = 0;
  for (int64_t l : ctx_len) n_slots += l;
  // Slots scattered: sequence s position p -> a permutation of all slots.
  std::vector<int32_t> perm(static_cast<size_t>(n_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int32_t>> slot_lists;
  std::vector<ops::AttentionSeq> seqs(ctx_len.size());
  std::vector<int32_t> pos;
  int64_t next = 0;
  for (size_t s = 0; s < ctx_len.size(); ++s) {
    slot_lists.emplace_back(perm.begin() + next, perm.begin() + next + ctx_len[s]);
    next += ctx_len[s];
    for (int64_t p = ctx_len[s] - new_tokens[s]; p < ctx_len[s]; ++p) {
      seqs[s].tokens.push_back(static_cast<int32_t>(pos.size()));
      pos.push_back(static_cast<int32_t>(p));
    }
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    seqs[s].ctx = slot_lists[s].data();
    seqs[s].n_ctx = ctx_len[s];
  }
  std::vector<float> q(pos.size() * n_heads * hd), k(n_slots * kvs), v(n_slots * kvs),
      out(q.size(), -7.0f);
  for (float& x : q) x = 2 * nd(rng);
  for (float& x : k) x = nd(rng);
  for (float& x : v) x = nd(rng);
  ops::AttentionArgs a{q.data(), pos.data(), k.data(), v.data(), out.data(),
                       n_heads,  n_kv,       hd,       &seqs};
  ThreadPool pool(threads);
  ops::AttentionScratch scratch;
  ops::attention(pool, a, scratch);
  std::vector<double> want = naive_attention(a);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(out[i] - want[i]));
  EXPECT_LT(worst, 2e-5) << "heads " << n_heads << "/" << n_kv;
}

TEST(Attention, MatchesDirectComputation) {
  check_attention(4, 2, 16, {7, 12}, {7, 3}, 2);       // prefill + partial, GQA
  check_attention(6, 2, 64, {40}, {1}, 2);             // decode: per-head units
  check_attention(8, 8, 32, {5, 9, 3}, {1, 9, 2}, 1);  // MHA, single thread
}

TEST(Attention, LongContextUsesSmallQueryBlocks) {
  check_attention(4, 1, 16, {5000}, {70}, 2);  // scores budget forces query blocks < 70
}

// `efim convert --dtype`: llama-quantize's file type names, its aliases (Q3_K, Q4_K, Q5_K are
// the _M mixes), each type's base type and llama_ftype value, and an error listing the names.
TEST(ConvertFileType, LlamaQuantizeNames) {
  EXPECT_EQ(file_type_from_name("q4_k_m"), FileType::Q4_K_M);
  EXPECT_EQ(file_type_from_name("q4_k"), FileType::Q4_K_M);
  EXPECT_EQ(file_type_from_name("q3_k"), FileType::Q3_K_M);
  EXPECT_EQ(file_type_from_name("q5_k"), FileType::Q5_K_M);
  EXPECT_EQ(file_type_from_name("iq4_xs"), FileType::IQ4_XS);
  EXPECT_EQ(static_cast<uint32_t>(file_type_from_name("iq4_xs")), 30u);  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  EXPECT_EQ(static_cast<uint32_t>(file_type_from_name("q2_k")), 10u);
  EXPECT_EQ(file_type_base(FileType::Q3_K_L), DType::Q3_K);
  EXPECT_EQ(file_type_base(FileType::IQ4_NL), DType::IQ4_NL);
  EXPECT_EQ(file_type_base(FileType::BF16), DType::BF16);
  EXPECT_EQ(file_type_name(FileType::Q5_K_S), "q5_k_s");
  for (const char* name : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k",
                           "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m",
                           "q6_k", "iq4_nl", "iq4_xs"})
    EXPECT_EQ(file_type_name(file_type_from_name(name)), name);
  const std::string err = error_of([] { file_type_from_name("iq2_xs"); });
  EXPECT_NE(err.find("unknown type 'iq2_xs' (expected one of f32, f16"), std::string::npos) << err;
  EXPECT_NE(err.find("iq4_xs"), std::string::npos) << err;
}

}  // namespace
}  // namespace efim
