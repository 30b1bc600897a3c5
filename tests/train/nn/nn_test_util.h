// Helpers of the trainer tests: a tiny config, random batches, temp dirs, the numpy oracle.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "model/config.h"
#include "train/nn/batch.h"

namespace efim::test {

// hidden 16, 2 layers, 4 heads of 4, 2 KV heads, SwiGLU 24, vocab 40.
inline ModelConfig tiny_config(bool tied) {
  ModelConfig c;
  c.vocab = 40;
  c.hidden = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.intermediate = 24;
  c.rms_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position = 64;
  c.tied_embeddings = tied;
  return c;
}

// Uniform random tokens; targets are the next input (the last one random); every third target
// of row 1 is masked out when `mask_some`.
inline train::TokenBatch random_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed,
                                      bool mask_some = true) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  train::TokenBatch b;
  b.resize(B, T);
  for (auto& t : b.inputs) t = tok(rng);
  for (int64_t r = 0; r < B; ++r)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = r * T + t;
      b.targets[i] = t + 1 < T ? b.inputs[i + 1] : tok(rng);
      b.loss_mask[i] = mask_some && r == 1 && t % 3 == 0 ? 0 : 1;
    }
  return b;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "efim-nn-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// scripts/make_tiny_model.py (numpy) writes a random HF folder; a missing oracle fails the test.
inline void make_tiny_model(const std::string& dir, const std::string& dtype, int shards = 1) {
  const std::string cmd = std::string("/usr/bin/python3 ") + EFIM_SOURCE_DIR +
                          "/scripts/make_tiny_model.py " + dir + " --kind llama --dtype " + dtype +
                          " --shards " + std::to_string(shards);
  ASSERT_EQ(std::system(cmd.c_str()), 0)
      << "oracle failed (needs /usr/bin/python3 + numpy): " << cmd;
}

}  // namespace efim::test
