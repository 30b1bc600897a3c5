// efim-base-py (the bundled small FIM model, /work/shared/models/efim-base-py): logits from the
// HF folder against the numpy reference, and its GGUF conversions against the folder.
// The model files are optional on a machine: their absence is the only allowed skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <nlohmann/json.hpp>

#include "model/convert.h"
#include "model/model.h"
#include "model_test_util.h"

namespace efim {
namespace {

using test::max_abs;
using test::max_abs_diff;

const char* kModelDir = "/work/shared/models/efim-base-py";

// ~64 token ids of a Python snippet: pieces looked up in the model's own vocab (byte-level BPE
// spelling: "Ġ" = space, "Ċ" = newline), so the prompt resembles what the model was trained on.
std::vector<int32_t> python_prompt(const std::string& dir) {
  std::ifstream f(dir + "/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(f);
  const auto& vocab = j.at("model").at("vocab");
  std::vector<int32_t> ids = {1};  // <fim_prefix>
  const char* pieces[] = {
      "def", "Ġparse", "_", "args", "(", "argv", "):", "Ċ", "ĠĠĠ", "Ġparser", "Ġ=", "Ġargparse",
      ".", "Argument", "Parser", "()", "Ċ", "ĠĠĠ", "Ġparser", ".", "add", "_", "argument", "(\"",
      "--", "verbose", "\",", "Ġaction", "=\"", "store", "_", "true", "\")", "Ċ", "ĠĠĠ", "Ġreturn",
      "Ġparser", ".", "parse", "_", "args", "(", "argv", ")", "Ċ", "Ċ", "Ċ", "def", "Ġmain", "():",
      "Ċ", "ĠĠĠ", "Ġargs", "Ġ=", "Ġparse", "_", "args", "(", "sys", ".", "argv", "[", "1", ":])",
      "Ċ", "ĠĠĠ", "Ġif"};
  for (const char* p : pieces)
    if (vocab.contains(p)) ids.push_back(vocab.at(p).get<int32_t>());
  ids.resize(std::min<size_t>(ids.size(), 64));
  return ids;
}

class BaseModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(std::string(kModelDir) + "/config.json")) return;
    test::require_numpy();
    dir_ = std::make_unique<test::TempDir>();
    tokens_ = python_prompt(kModelDir);
  }
  static void TearDownTestSuite() {
    dir_.reset();
    folder_.clear();
  }
  void SetUp() override {
    if (!dir_) GTEST_SKIP() << kModelDir << " is not present";
  }
  // Logits of every prompt position from the HF folder, computed on first use.
  static const std::vector<float>& folder_logits() {
    if (folder_.empty()) {
      LoadOptions o;
      o.n_threads = 2;
      auto m = Model::load(kModelDir, o);
      ContiguousSession s(*m, 128);
      folder_ = s.eval(tokens_, true);
    }
    return folder_;
  }
  static std::vector<float> gguf_logits(DType dt) {
    ConvertOptions c;
    c.input_dir = kModelDir;
    c.output_path = *dir_ / ("base." + std::string(dtype_name(dt)) + ".gguf");
    c.out_dtype = dt;
    convert_hf_to_gguf(c);
    LoadOptions o;
    o.n_threads = 2;
    auto m = Model::load(c.output_path, o);
    ContiguousSession s(*m, 128);
    return s.eval(tokens_, true);
  }
  // Fraction of positions whose argmax agrees.
  static double argmax_agreement(const std::vector<float>& a, const std::vector<float>& b) {
    const size_t V = 16384, n = a.size() / V;
    size_t same = 0;
    for (size_t i = 0; i < n; ++i) {
      auto ra = a.begin() + i * V, rb = b.begin() + i * V;
      same += std::max_element(ra, ra + V) - ra == std::max_element(rb, rb + V) - rb;
    }
    return static_cast<double>(same) / static_cast<double>(n);
  }

  static std::unique_ptr<test::TempDir> dir_;
  static std::vector<int32_t> tokens_;
  static std::vector<float> folder_;
};
std::unique_ptr<test::TempDir> BaseModel::dir_;
std::vector<int32_t> BaseModel::tokens_;
std::vector<float> BaseModel::folder_;

TEST_F(BaseModel, FolderMatchesReference) {
  EXPECT_GE(tokens_.size(), 60u);
  std::vector<float> ref = test::reference_logits(kModelDir, tokens_, *dir_ / "ref.bin");
  ASSERT_EQ(ref.size(), tokens_.size() * 16384);
  const float d = max_abs_diff(folder_logits(), ref);
  std::cout << "  folder vs numpy: max|diff| " << d << " (max|logit| " << max_abs(ref) << ")\n";
  EXPECT_LE(d, 1e-3f);
  EXPECT_EQ(argmax_agreement(folder_logits(), ref), 1.0);
}

TEST_F(BaseModel, GgufBf16MatchesFolder) {
  std::vector<float> g = gguf_logits(DType::BF16);
  const float d = max_abs_diff(g, folder_logits());
  std::cout << "  bf16 gguf vs folder: max|diff| " << d << "\n";
  EXPECT_LE(d, 1e-3f);
}

// Measured once: 0.43 of max|logit| 19.3 with the fast kernels, 0.24 of it from the weights alone
// (reference matmul); every argmax agrees.
TEST_F(BaseModel, GgufQ8_0CloseToFolder) {
  std::vector<float> g = gguf_logits(DType::Q8_0);
  const std::vector<float>& f = folder_logits();
  const float d = max_abs_diff(g, f);
  const double agree = argmax_agreement(g, f);
  std::cout << "  q8_0 gguf vs folder: max|diff| " << d << " (max|logit| " << max_abs(f)
            << "), argmax agreement " << agree << "\n";
  EXPECT_LE(d, 3e-2f * max_abs(f));
  EXPECT_GE(agree, 0.9);
}

TEST_F(BaseModel, DecodeAfterPrefillMatches) {
  LoadOptions o;
  o.n_threads = 2;
  auto m = Model::load(kModelDir, o);
  ContiguousSession s(*m, 128);
  s.eval(std::vector<int32_t>(tokens_.begin(), tokens_.end() - 1));
  std::vector<float> last = s.eval({tokens_.back()});
  const std::vector<float>& f = folder_logits();
  EXPECT_LE(max_abs_diff(last, std::vector<float>(f.end() - 16384, f.end())), 1e-4f);
}

// The kernel's THPeligible flag (0 or 1) of the mapping holding p, from /proc/self/smaps; -1
// when no mapping holds it.
int thp_eligible(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::atoi(line.c_str() + 12);
    }
  }
  return -1;
}

// Fusing Q|K|V and gate|up copies their rows: the parts' whole huge pages in the private copy
// of the file go back to the system, and nothing still reads the parts: the
// logits equal those of the same file mapped shared (where nothing is given back; wo and
// w_down stay in the file's layout there, hence a rounding tolerance, far below what a page of
// zeros in a weight would do).
TEST(FusedWeights, PartsGoBackAndNothingReadsThem) {
  const std::string path = std::string(EFIM_SOURCE_DIR) + "/models/efim-tiny-q8_0.gguf";
  LoadOptions copy, shared;
  copy.n_threads = shared.n_threads = 2;
  shared.huge_pages = false;
  auto a = Model::load(path, copy), b = Model::load(path, shared);
  size_t parts = 0, n_parts = 0;
  for (const LayerWeights& w : a->weights().layers)
    for (const cpu::WeightMatrix* p : {&w.wq, &w.wk, &w.wv, &w.w_gate, &w.w_up}) {
      if (p->rows == 0) continue;
      EXPECT_EQ(p->data, nullptr) << "a fused part still points at the file's bytes";
      parts += static_cast<size_t>(p->rows) * dtype_row_bytes(p->dtype, static_cast<uint64_t>(p->cols));
      ++n_parts;
    }
  ASSERT_GT(parts, 0u);
  // Whole 2 MB pages only (MappedFile.DiscardGivesBackWholeHugePagesOnly): at most two partial
  // pages per part stay.
  EXPECT_GE(a->discarded_bytes() + n_parts * (size_t{4} << 20), parts);
  EXPECT_LE(a->discarded_bytes(), parts);
  EXPECT_EQ(b->discarded_bytes(), 0u);
  // The copies: one region from a 2 MB boundary, each fused run 64-byte rounded, huge-page
  // eligible (the kernel's THPeligible for the mapping) unless THP is off on this machine.
  ASSERT_NE(a->fused_data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->fused_data()) % (uintptr_t{2} << 20), 0u);
  EXPECT_GE(a->fused_bytes(), parts);
  EXPECT_LE(a->fused_bytes(), parts + 64 * n_parts);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (!mode.empty() && mode.find("[never]") == std::string::npos) {
    EXPECT_EQ(thp_eligible(a->fused_data()), 1)
        << "the fused weights are not in memory advised for huge pages";
  }
  std::vector<int32_t> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back((i * 7919 + 13) % static_cast<int>(a->config().vocab));
  ContiguousSession sa(*a, 200), sb(*b, 200);
  const std::vector<float> want = sb.eval(tokens, true), got = sa.eval(tokens, true);
  EXPECT_LE(max_abs_diff(got, want), 1e-3f * max_abs(want) + 1e-4f);
}

}  // namespace
}  // namespace efim
