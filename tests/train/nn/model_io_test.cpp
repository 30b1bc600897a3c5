// The trainer's forward against efim's inference model (src/model) on a random HF folder written
// by scripts/make_tiny_model.py, and safetensors save -> load round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "model/model.h"
#include "nn_test_util.h"
#include "tokenizer/tokenizer.h"
#include "train/nn/network.h"
#include "train/nn/params.h"
#include "train/nn/text_source.h"

namespace efim::train {
namespace {

// logits [B * T, V] of every row from src/model (exact f32 reference matmul), one session per row.
std::vector<float> inference_logits(const std::string& dir, const TokenBatch& b) {
  LoadOptions lo;
  lo.reference_matmul = true;
  lo.n_threads = 1;
  std::unique_ptr<Model> m = Model::load(dir, lo);
  std::vector<float> out;
  for (int64_t r = 0; r < b.B; ++r) {
    ContiguousSession s(*m, b.T);
    std::vector<int32_t> row(b.inputs.begin() + r * b.T, b.inputs.begin() + (r + 1) * b.T);
    std::vector<float> l = s.eval(row, /*all_logits=*/true);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// max |a - b| / max(1, max |b|)
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0, scale = 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, double(std::abs(a[i] - b[i])));
    scale = std::max(scale, double(std::abs(b[i])));
  }
  return d / scale;
}

// Mean cross-entropy of logits [N, V] over the batch's masked targets, in double.
double xent(const std::vector<float>& logits, const TokenBatch& b, int64_t V) {
  double sum = 0;
  for (int64_t i = 0; i < b.B * b.T; ++i) {
    if (!b.loss_mask[i]) continue;
    const float* z = logits.data() + i * V;
    double m = z[0], s = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, double(z[v]));
    for (int64_t v = 0; v < V; ++v) s += std::exp(double(z[v]) - m);
    sum += m + std::log(s) - z[b.targets[i]];
  }
  return sum / double(b.n_targets());
}

TEST(TrainModelIo, ForwardMatchesInferenceModel) {
  test::TempDir tmp;
  test::make_tiny_model(tmp / "m", "f32", /*shards=*/3);  // llama: GQA, llama3 RoPE, untied
  Params p = load_hf_params(tmp / "m");
  const int64_t V = p.layout.config.vocab;
  const TokenBatch b = test::random_batch(2, 40, V, 5);
  ThreadPool pool(2);
  NetworkOptions no;
  no.head_rows = 7;
  no.attention_row_block = 16;
  Network net(p.layout, pool, no);
  std::vector<float> mine(static_cast<size_t>(b.B * b.T * V));
  net.logits(p.w.data(), b, mine.data());
  const std::vector<float> ref = inference_logits(tmp / "m", b);
  const double d = max_rel_diff(mine, ref);
  std::printf("trainer vs inference logits: max relative difference %.2e\n", d);
  EXPECT_LT(d, 1e-4);
  // The fused head + loss gives the cross-entropy of those logits.
  const LossSum loss = net.forward_backward(p.w.data(), b, nullptr, 1.0f);
  EXPECT_NEAR(loss.mean(), xent(ref, b, V), 1e-5 * xent(ref, b, V));
}

TEST(TrainModelIo, SaveF32LoadsBackBitExact) {
  test::TempDir tmp;
  const Params p = random_params(test::tiny_config(false), 9);
  save_hf_params(p, SaveOptions{tmp / "out", DType::F32, "", 0});
  const Params q = load_hf_params(tmp / "out");
  EXPECT_EQ(q.layout.total, p.layout.total);
  EXPECT_EQ(q.layout.config.summary(), p.layout.config.summary());
  EXPECT_EQ(q.w, p.w);
}

TEST(TrainModelIo, SaveBf16ShardedIsReadByTheInferenceModel) {
  test::TempDir tmp;
  test::make_tiny_model(tmp / "src", "f32");
  const Params p = load_hf_params(tmp / "src");
  write_file(tmp / "src/tokenizer.json", "{\"marker\": 1}");  // copied verbatim
  save_hf_params(p, SaveOptions{tmp / "out", DType::BF16, tmp / "src", 40000});
  EXPECT_TRUE(std::filesystem::exists(tmp / "out/model.safetensors.index.json"));
  EXPECT_EQ(read_file(tmp / "out/tokenizer.json"), "{\"marker\": 1}");
  const auto cfg = nlohmann::json::parse(read_file(tmp / "out/config.json"));
  EXPECT_EQ(cfg.at("torch_dtype"), "bfloat16");
  EXPECT_EQ(cfg.at("rope_scaling").at("rope_type"), "llama3");  // source keys kept

  const Params q = load_hf_params(tmp / "out");
  ASSERT_EQ(q.w.size(), p.w.size());
  for (size_t i = 0; i < p.w.size(); ++i)
    ASSERT_EQ(q.w[i], bf16_to_f32(f32_to_bf16(p.w[i]))) << "element " << i;
  // efim's inference loader reads the written folder; same logits as the trainer on it.
  const TokenBatch b = test::random_batch(1, 12, q.layout.config.vocab, 6);
  ThreadPool pool(1);
  Network net(q.layout, pool);
  std::vector<float> mine(static_cast<size_t>(b.T * q.layout.config.vocab));
  net.logits(q.w.data(), b, mine.data());
  EXPECT_LT(max_rel_diff(mine, inference_logits(tmp / "out", b)), 1e-4);
}

TEST(TrainModelIo, LoadErrorsNameTheTensor) {
  test::TempDir tmp;
  test::make_tiny_model(tmp / "m", "bf16");
  // Corrupt config: hidden size no longer matches the stored tensors.
  auto cfg = nlohmann::json::parse(read_file(tmp / "m/config.json"));
  cfg["intermediate_size"] = 100;
  write_file(tmp / "m/config.json", cfg.dump());
  try {
    load_hf_params(tmp / "m");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[100, 64]"), std::string::npos) << e.what();
  }
}

TEST(TrainModelIo, BatchValidationNamesTheEntry) {
  const Params p = random_params(test::tiny_config(true), 1);
  ThreadPool pool(1);
  Network net(p.layout, pool);
  TokenBatch b = test::random_batch(1, 4, 40, 2);
  b.inputs[2] = 40;
  try {
    net.forward_backward(p.w.data(), b, nullptr, 1.0f);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 2 is token 40"), std::string::npos) << e.what();
  }
}

// Files in path order, each followed by <eos>, cut into windows of T + 1 (stride T); a pass
// visits every window once, inputs and targets shifted by one.
TEST(TextSource, WindowsOfTheCanonicalTokenStream) {
  test::TempDir tmp;
  const std::string cmd = std::string("/usr/bin/python3 ") + EFIM_SOURCE_DIR +
                          "/scripts/make_tiny_tokenizer.py " + (tmp / "tok.json") + " --vocab 300";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const Tokenizer tok = Tokenizer::from_json_file(tmp / "tok.json");
  std::filesystem::create_directories(tmp / "d/sub");
  const std::string a = "def add(a, b):\n    return a + b\n",
                    b = "x = [i * i for i in range(10)]\n";
  write_file(tmp / "d/a.py", a);
  write_file(tmp / "d/sub/b.py", b);
  std::vector<int32_t> stream = tok.encode(a);
  stream.push_back(0);
  const std::vector<int32_t> tb = tok.encode(b);
  stream.insert(stream.end(), tb.begin(), tb.end());
  stream.push_back(0);

  TextSourceOptions o;
  o.path = tmp / "d";
  o.B = 1;
  o.T = 5;
  o.eot = 0;
  TextBatchSource src(tok, o);
  EXPECT_EQ(src.n_tokens(), int64_t(stream.size()));
  const int64_t windows = (int64_t(stream.size()) - 1) / o.T;
  ASSERT_EQ(src.n_windows(), windows);
  std::vector<int> seen(static_cast<size_t>(windows), 0);
  TokenBatch batch;
  for (int64_t w = 0; w < windows; ++w) {
    src.next(batch);
    ASSERT_EQ(batch.B, 1);
    ASSERT_EQ(batch.T, 5);
    bool found = false;
    for (int64_t s = 0; s < windows && !found; ++s) {
      const auto at = stream.begin() + s * o.T;
      if (std::equal(at, at + o.T, batch.inputs.begin()) &&
          std::equal(at + 1, at + o.T + 1, batch.targets.begin())) {
        ++seen[s];
        found = true;
      }
    }
    EXPECT_TRUE(found) << "batch " << w << " is not a window of the stream";
    EXPECT_EQ(batch.n_targets(), o.T);
  }
  for (int64_t s = 0; s < windows; ++s) EXPECT_EQ(seen[s], 1) << "window " << s;
}

}  // namespace
}  // namespace efim::train
