// efim convert with importance matrices and from GGUFs, and efim imatrix's bookkeeping.
// `efim convert --imatrix`: a Q4_K_M file of a tiny llama (widths multiples of 256) quantized
// with an importance matrix in llama-imatrix's GGUF format. The weighted matrices lower the
// importance-weighted error of every matrix with an entry, those without one are named and
// quantized as without, the keys llama-quantize writes are there, and a mismatched entry is
// refused with the tensor's name and both shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "format/imatrix.h"
#include "model/convert.h"
#include "model/imatrix_collector.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tensor/quant.h"

namespace efim {
namespace {

// sum_j imp_j (a - b)^2 over the rows of two [rows, cols] matrices.
double weighted_error(const std::vector<float>& a, const std::vector<float>& b,
                      std::span<const float> imp) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i)
    e += imp[i % imp.size()] * double(a[i] - b[i]) * double(a[i] - b[i]);
  return e;
}

std::vector<float> f32_of(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize(t.data, t.numel(), t.dtype, v.data());
  return v;
}

TEST(ConvertImatrix, WeightedMatricesLowerTheirImportanceWeightedError) {
  test::require_numpy();
  test::TempDir dir;
  const std::string hf = dir / "llama256";
  test::make_tiny_model(hf, "llama256", "f32");
  ConvertOptions o;
  o.input_dir = hf;
  o.file_type = FileType::Q4_K_M;
  o.output_path = dir / "plain.gguf";
  convert_hf_to_gguf(o);

  // Importance for every matrix of layer 0 and the output head, e^(2 N(0,1)) per column (the
  // mean square of each input column's activations, as llama-imatrix computes it); layer 1 is
  // left out, as a calibration run that never reached it.
  GgufFile plain = GgufFile::open(o.output_path);
  ImportanceMatrix im;
  im.datasets = {"calib.py"};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (const std::string& name : plain.tensor_names()) {
    const TensorView t = *plain.find(name);
    if (t.shape.size() != 2 || name == "token_embd.weight" || name.starts_with("blk.1.")) continue;
    ImportanceMatrix::Entry e;
    e.values.resize(static_cast<size_t>(t.shape[1]));
    for (float& v : e.values) v = std::exp(2.0f * normal(rng));
    im.entries[name] = std::move(e);
  }
  const std::string im_path = dir / "imatrix.gguf";
  write_imatrix_gguf(im, im_path);
  const ImportanceMatrix loaded = read_imatrix(im_path);
  o.imatrix = &loaded;
  o.imatrix_label = "imatrix.gguf";
  o.output_path = dir / "weighted.gguf";
  const ConvertResult r = convert_hf_to_gguf(o);
  EXPECT_EQ(r.imatrix_used, static_cast<int64_t>(im.entries.size()));
  // Layer 1's seven matrices had no entry, nor has the token embedding (a lookup, not a matmul
  // input: llama-imatrix never records it, and llama-quantize names it too).
  EXPECT_EQ(r.imatrix_missing.size(), 8u);
  for (const std::string& n : r.imatrix_missing)
    EXPECT_TRUE(n.starts_with("blk.1.") || n == "token_embd.weight") << n;

  GgufFile weighted = GgufFile::open(o.output_path);
  EXPECT_EQ(weighted.get("quantize.imatrix.file")->as_string(), "imatrix.gguf");
  EXPECT_EQ(weighted.get("quantize.imatrix.entries_count")->as_i64(),
            static_cast<int64_t>(im.entries.size()));
  EXPECT_EQ(weighted.get("quantize.imatrix.dataset")->as_string(), "calib.py");
  auto hf_src = SafetensorsFolder::open(hf);
  const ModelConfig c = config_from_hf_file(hf + "/config.json");
  int lower = 0;
  for (const auto& [name, e] : im.entries) {
    SCOPED_TRACE(name);
    const TensorView a = *plain.find(name), b = *weighted.find(name);
    ASSERT_EQ(a.dtype, b.dtype);  // the same llama.cpp type rules
    const std::vector<float> qa = f32_of(a), qb = f32_of(b);
    // Against the f32 weights the converter started from: the HF tensor, for the matrices it
    // stores unpermuted (llama's attn_q / attn_k rows are permuted in the GGUF).
    if (name.find("attn_q") != std::string::npos || name.find("attn_k") != std::string::npos)
      continue;
    const std::string hf_name = name == "output.weight" ? "lm_head.weight"
                                : name.find("attn_v") != std::string::npos
                                    ? "model.layers.0.self_attn.v_proj.weight"
                                : name.find("attn_output") != std::string::npos
                                    ? "model.layers.0.self_attn.o_proj.weight"
                                : name.find("ffn_gate") != std::string::npos
                                    ? "model.layers.0.mlp.gate_proj.weight"
                                : name.find("ffn_up") != std::string::npos
                                    ? "model.layers.0.mlp.up_proj.weight"
                                    : "model.layers.0.mlp.down_proj.weight";
    const std::vector<float> x = f32_of(*hf_src->find(hf_name));
    const double ea = weighted_error(qa, x, e.values), eb = weighted_error(qb, x, e.values);
    std::printf("  %-24s %s: importance-weighted error %.4g without, %.4g with (%.3f)\n",
                name.c_str(), std::string(dtype_name(a.dtype)).c_str(), ea, eb, eb / ea);
    EXPECT_LT(eb, ea);
    lower += eb < ea;
  }
  EXPECT_GE(lower, 5);
  // The weighted file loads and runs.
  auto m = Model::load(o.output_path);
  EXPECT_EQ(m->config().n_layers, c.n_layers);

  // An entry whose width differs from the tensor's is refused, naming both.
  ImportanceMatrix bad = loaded;
  bad.entries["blk.0.ffn_down.weight"].values.resize(256);
  o.imatrix = &bad;
  try {
    convert_hf_to_gguf(o);
    ADD_FAILURE() << "a mismatched importance entry was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("blk.0.ffn_down.weight covers 1 matrices of 256 "
                                           "columns; the tensor has 1 of 512"),
              std::string::npos)
        << err.what();
  }
}


// efim imatrix's bookkeeping on a mixture of experts with dense layers (qwen3_moe_dense: layers
// 0 and 2 dense, 1 and 3 eight experts): every matrix the forward pass multiplies by gets an
// entry under its GGUF name, q/k/v (and gate/up) share theirs, the experts' entries hold one row
// per expert, and the means do not change when the same text is seen twice.
TEST(ImatrixCollector, EveryMatrixByItsGgufName) {
  test::require_numpy();
  test::TempDir dir;
  const std::string hf = dir / "moe";
  test::make_tiny_model(hf, "qwen3_moe_dense", "f32");
  auto m = Model::load(hf);
  ImatrixCollector stats(m->config());
  m->set_matmul_observer([&](Model::MatmulSite site, int64_t layer, int64_t expert,
                             const float* x, int64_t rows, int64_t cols) {
    stats.add(site, layer, expert, x, rows, cols);
  });
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 37 + 11) % 300);
  {
    ContiguousSession s(*m, 40);
    s.eval(ids, true);
  }
  const ImportanceMatrix once = stats.result();
  EXPECT_EQ(stats.tokens_seen(), 40);
  // 4 layers x (q, k, v, o) + dense layers 0, 2 x (gate, up, down) + expert layers 1, 3 x
  // (router, gate_exps, up_exps, down_exps) + output.
  EXPECT_EQ(once.entries.size(), 16u + 6u + 8u + 1u);
  for (const char* name : {"blk.0.ffn_gate.weight", "blk.2.ffn_down.weight", "blk.1.ffn_gate_inp.weight",
                           "blk.3.ffn_up_exps.weight", "output.weight", "blk.3.attn_output.weight"})
    EXPECT_NE(once.find(name), nullptr) << name;
  EXPECT_EQ(once.find("blk.1.ffn_gate.weight"), nullptr);  // an expert layer: no dense MLP
  EXPECT_EQ(once.find("blk.0.attn_q.weight")->values, once.find("blk.0.attn_v.weight")->values);
  EXPECT_EQ(once.find("blk.0.ffn_gate.weight")->cols(), 64);
  EXPECT_EQ(once.find("blk.0.ffn_down.weight")->cols(), 96);  // the dense intermediate
  const ImportanceMatrix::Entry* down = once.find("blk.1.ffn_down_exps.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->n_mat, 8);
  EXPECT_EQ(down->cols(), 32);  // the experts' width
  for (float v : once.find("blk.2.attn_q.weight")->values) EXPECT_GT(v, 0.0f);
  {
    ContiguousSession s(*m, 40);
    s.eval(ids, true);
  }
  const ImportanceMatrix twice = stats.result();
  EXPECT_EQ(stats.tokens_seen(), 80);
  for (const auto& [name, e] : once.entries) {
    const std::vector<float>& v = twice.find(name)->values;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], e.values[i], 1e-5f * (1 + e.values[i])) << name;
  }
}


// `efim convert F32.gguf --dtype q4_k_m` (quantize_gguf), as llama-quantize takes a GGUF: the
// same tensors byte for byte as from the Hugging Face folder, with an importance matrix too; the
// input's metadata kept; a quantized input tensor refused with its name and type.
TEST(ConvertGguf, QuantizesAsFromTheFolder) {
  test::require_numpy();
  test::TempDir dir;
  const std::string hf = dir / "llama256";
  test::make_tiny_model(hf, "llama256", "f32");
  ConvertOptions o;
  o.input_dir = hf;
  o.out_dtype = DType::F32;
  o.output_path = dir / "f32.gguf";
  o.tokenizer_writer = [](GgufWriter& w) { w.set_string("efim.test.kept", "yes"); };
  convert_hf_to_gguf(o);
  o.tokenizer_writer = nullptr;
  ImportanceMatrix im;
  {
    GgufFile f32 = GgufFile::open(o.output_path);
    for (const std::string& name : f32.tensor_names())
      if (f32.find(name)->shape.size() == 2 && name != "token_embd.weight") {
        ImportanceMatrix::Entry e;
        e.values.assign(static_cast<size_t>(f32.find(name)->shape[1]), 1.0f);
        for (size_t j = 0; j < e.values.size(); ++j) e.values[j] = 1.0f + float(j % 7);
        im.entries[name] = e;
      }
  }
  for (const ImportanceMatrix* imatrix : std::vector<const ImportanceMatrix*>{nullptr, &im}) {
    SCOPED_TRACE(imatrix ? "with an importance matrix" : "without");
    ConvertOptions from_hf;
    from_hf.input_dir = hf;
    from_hf.file_type = FileType::Q4_K_M;
    from_hf.imatrix = imatrix;
    from_hf.output_path = dir / "from_hf.gguf";
    convert_hf_to_gguf(from_hf);
    ConvertOptions from_gguf = from_hf;
    from_gguf.input_dir = dir / "f32.gguf";
    from_gguf.output_path = dir / "from_gguf.gguf";
    const ConvertResult r = quantize_gguf(from_gguf);
    GgufFile a = GgufFile::open(from_hf.output_path), b = GgufFile::open(from_gguf.output_path);
    EXPECT_EQ(b.get("efim.test.kept")->as_string(), "yes");
    EXPECT_EQ(b.get("general.file_type")->as_i64(), a.get("general.file_type")->as_i64());
    ASSERT_EQ(a.tensor_names().size(), b.tensor_names().size());
    EXPECT_EQ(r.n_tensors, static_cast<int64_t>(a.tensor_names().size()));
    for (const std::string& name : a.tensor_names()) {
      const TensorView x = *a.find(name), y = *b.find(name);
      EXPECT_EQ(x.dtype, y.dtype) << name;
      EXPECT_TRUE(x.nbytes == y.nbytes && std::memcmp(x.data, y.data, x.nbytes) == 0) << name;
    }
  }
  // A quantized model tensor is not requantized.
  ConvertOptions again;
  again.input_dir = dir / "from_gguf.gguf";
  again.output_path = dir / "twice.gguf";
  again.file_type = FileType::Q4_0;
  try {
    quantize_gguf(again);
    ADD_FAILURE() << "a Q4_K_M file was requantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("; quantizing needs f32, f16 or bf16 tensors"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace efim
