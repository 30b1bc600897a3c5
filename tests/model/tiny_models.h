// The tiny random checkpoints of every architecture (scripts/make_tiny_model.py) and their numpy
// reference logits, generated once per test binary: the fixture of parity_test.cpp and
// batching_test.cpp, with their shared helpers.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/convert.h"
#include "model/model.h"
#include "model_test_util.h"

namespace efim::tiny {

using test::max_abs;
using test::max_abs_diff;

// A fixed pseudo-random prompt of n ids below vocab.
inline std::vector<int32_t> prompt(int n, int vocab, unsigned seed = 5) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
  return t;
}

inline std::vector<float> all_logits(Model& m, const std::vector<int32_t>& tokens) {
  ContiguousSession s(m, static_cast<int64_t>(tokens.size()));
  return s.eval(tokens, /*all_logits=*/true);
}

// Tolerance for runs that differ only in float rounding order (GEMV vs GEMM kernels, batch
// shapes): a few ulps of the largest logit.
inline float rounding_tol(const std::vector<float>& want) {
  return 1e-5f + 1e-6f * max_abs(want);
}

inline LoadOptions two_threads() {
  LoadOptions o;
  o.n_threads = 2;
  return o;
}

// Tiny models and their reference logits, generated once for the whole binary.
// Every architecture's tiny model (make_tiny_model.py --kind).
inline constexpr const char* kKinds[] = {"llama",          "qwen2",      "qwen3",
                                   "qwen3_moe",      "qwen3_moe_dense", "starcoder2",
                                   "starcoder2_swa", "gemma"};

class TinyModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<test::TempDir>();
    test::require_numpy();
    tokens_ = prompt(40, 300);
  }
  static void TearDownTestSuite() {
    dir_.reset();
    ref_.clear();
  }

  // The tiny model of a kind (kKinds) and dtype ("f32", "bf16"), generated on first
  // use (ctest runs each test in its own process). The bf16 llama is sharded: it exercises
  // model.safetensors.index.json.
  static std::string folder(const std::string& kind, const std::string& dt) {
    std::string d = *dir_ / (kind + "-" + dt);
    if (!std::filesystem::exists(d))
      test::make_tiny_model(d, kind, dt, kind == "llama" && dt == "bf16" ? 2 : 1);
    return d;
  }
  // Reference logits [tokens_, vocab] of an HF folder, computed on first use.
  static const std::vector<float>& ref(const std::string& hf_folder) {
    auto it = ref_.find(hf_folder);
    if (it == ref_.end())
      it = ref_.emplace(hf_folder,
                        test::reference_logits(hf_folder, tokens_, hf_folder + ".ref.bin"))
               .first;
    return it->second;
  }
  static std::string convert(const std::string& in, DType out) {
    std::string path = in + "." + std::string(dtype_name(out)) + ".gguf";
    ConvertOptions o;
    o.input_dir = in;
    o.output_path = path;
    o.out_dtype = out;
    convert_hf_to_gguf(o);
    return path;
  }
  // max |efim - reference| over all positions for a model file/folder.
  static float diff_to_ref(const std::string& model_path, const std::string& ref_folder,
                           LoadOptions opts = two_threads()) {
    auto m = Model::load(model_path, opts);
    std::vector<float> got = all_logits(*m, tokens_);
    const std::vector<float>& want = ref(ref_folder);
    EXPECT_EQ(got.size(), want.size());
    float d = max_abs_diff(got, want);
    std::cout << "  [" << model_path.substr(dir_->path().size() + 1)
              << (opts.reference_matmul ? ", reference matmul" : "") << "] max|diff| " << d
              << " (max|logit| " << max_abs(want) << ")\n";
    return d;
  }

  // Quantized kernels against the reference: every position within tol, except that in the
  // mixture of experts a router near-tie can pick another expert once activations are rounded
  // (llama.cpp's kernels flip the same positions: tests/cli/llama_cpp_parity.sh); there at most
  // 3 of the 40 positions may exceed tol.
  static void expect_within(const std::string& kind, const std::string& model_path,
                            const std::string& ref_folder, float tol,
                            LoadOptions opts = two_threads()) {
    auto m = Model::load(model_path, opts);
    std::vector<float> got = all_logits(*m, tokens_);
    const std::vector<float>& want = ref(ref_folder);
    ASSERT_EQ(got.size(), want.size());
    const size_t V = got.size() / tokens_.size();
    int over = 0;
    float worst = 0.0f;
    for (size_t p = 0; p < tokens_.size(); ++p) {
      float d = 0.0f;
      for (size_t j = 0; j < V; ++j) d = std::max(d, std::fabs(got[p * V + j] - want[p * V + j]));
      worst = std::max(worst, d);
      over += d > tol;
    }
    std::cout << "  [" << model_path.substr(dir_->path().size() + 1) << "] max|diff| " << worst
              << ", " << over << " positions over " << tol << "\n";
    EXPECT_LE(over, kind.starts_with("qwen3_moe") ? 3 : 0) << kind << ": worst " << worst;
  }

  inline static std::unique_ptr<test::TempDir> dir_;
  inline static std::vector<int32_t> tokens_;
  inline static std::map<std::string, std::vector<float>> ref_;
};

}  // namespace efim::tiny
