// Equivalence of batched, chunked and incremental evaluation on the tiny models, and batch
// invariance (a row's logits, bit for bit, whatever else the step holds) on efim-tiny and on
// weights without an interleaved copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/matmul.h"
#include "base/error.h"
#include "model/batch.h"
#include "model/model.h"
#include "model_test_util.h"
#include "tiny_models.h"

namespace efim {
namespace {

using namespace tiny;  // NOLINT: the shared fixture and helpers

class Batching : public TinyModels {};

// Two sequences of different lengths in one step, slots interleaved (A: 2p, B: 2p + 1), tokens
// shuffled in the batch, equal the sequences run separately.
TEST_F(Batching, TwoSequencesInOneStepEqualSeparateRuns) {
  for (const char* kind : kKinds) {
    auto m = Model::load(folder(kind, "f32"), two_threads());
    std::vector<int32_t> a = prompt(13, 300, 1), b = prompt(7, 300, 2);
    std::vector<float> want_a = all_logits(*m, a), want_b = all_logits(*m, b);

    Batch batch;
    std::vector<int32_t> sa(a.size()), sb(b.size());
    for (size_t p = 0; p < sa.size(); ++p) sa[p] = static_cast<int32_t>(2 * p);
    for (size_t p = 0; p < sb.size(); ++p) sb[p] = static_cast<int32_t>(2 * p + 1);
    int32_t ia = batch.add_sequence(sa), ib = batch.add_sequence(sb);
    std::vector<std::pair<int32_t, int32_t>> order;  // (seq, position)
    for (size_t p = 0; p < a.size(); ++p) order.push_back({ia, static_cast<int32_t>(p)});
    for (size_t p = 0; p < b.size(); ++p) order.push_back({ib, static_cast<int32_t>(p)});
    std::shuffle(order.begin(), order.end(), std::mt19937(3));
    for (auto [s, p] : order) batch.add_token(s == ia ? a[p] : b[p], p, s, true);

    KvCache kv = KvCache::for_model(m->config(), 2 * 13);
    std::vector<float> got = m->forward(batch, kv);
    const int64_t V = m->config().vocab;
    float worst = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      auto [s, p] = order[i];
      const float* want = (s == ia ? want_a.data() : want_b.data()) + p * V;
      for (int64_t j = 0; j < V; ++j) worst = std::max(worst, std::fabs(got[i * V + j] - want[j]));
    }
    EXPECT_LE(worst, std::max(rounding_tol(want_a), rounding_tol(want_b))) << kind;
  }
}

TEST_F(Batching, ChunkedPrefillEqualsOneShot) {
  auto m = Model::load(folder("llama", "f32"), two_threads());
  std::vector<float> want = all_logits(*m, tokens_);
  ContiguousSession s(*m, 64);
  std::vector<float> got;
  for (auto [b, e] : {std::pair{0, 11}, {11, 12}, {12, 40}}) {
    std::vector<int32_t> chunk(tokens_.begin() + b, tokens_.begin() + e);
    std::vector<float> l = s.eval(chunk, true);
    got.insert(got.end(), l.begin(), l.end());
  }
  EXPECT_EQ(s.n_past(), 40);
  EXPECT_LE(max_abs_diff(got, want), rounding_tol(want));
}

// Batch invariance of the whole forward pass of the bundled efim-tiny (Q8_0 weights, rows
// interleaved at load): the interleaved Q8_0 GEMV/GEMM (AVX2 and AVX-512 VNNI) give each row
// the same bits at any number of rows, and the flash-attention kernels make a row independent
// of the batch (ops_internal.h, FlashKernel::invariant). A prompt evaluated in one step, in
// chunks (of more and fewer than 16 tokens) and beside another sequence gives logits equal
// bit for bit, with an f16 cache as `efim serve` uses. ctest runs this test a second time with
// EFIM_KERNEL=avx2 (tests/model/CMakeLists.txt), so both instruction sets are covered.
TEST(BatchInvariance, ChunksAndNeighboursDoNotChangeABit) {
  auto m = Model::load(std::string(EFIM_SOURCE_DIR) + "/models/efim-tiny-q8_0.gguf",
                       two_threads());
  const int64_t V = m->config().vocab;
  const std::vector<int32_t> a = prompt(1100, int(V), 11), b = prompt(600, int(V), 12);
  ContiguousSession one(*m, 1100, DType::F16);
  const std::vector<float> want = one.eval(a, true);
  // Chunks of 500, 7, 16 and 577 tokens (across the 512-position cells).
  ContiguousSession chunked(*m, 1100, DType::F16);
  std::vector<float> got;
  for (auto [lo, hi] : {std::pair{0, 500}, {500, 507}, {507, 523}, {523, 1100}}) {
    const std::vector<float> l =
        chunked.eval(std::vector<int32_t>(a.begin() + lo, a.begin() + hi), true);
    got.insert(got.end(), l.begin(), l.end());
  }
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "chunked prefill changed the logits (max |diff| "
                           << max_abs_diff(got, want) << ")";
  // Beside another sequence: a's last 40 tokens in one step with b's whole prompt.
  Batch batch;
  std::vector<int32_t> sa(a.size()), sb(b.size());
  std::iota(sa.begin(), sa.end(), 0);
  std::iota(sb.begin(), sb.end(), int32_t(a.size()));
  KvCache kv = KvCache::for_model(m->config(), int64_t(a.size() + b.size()), DType::F16);
  {
    Batch first;
    const int32_t s = first.add_sequence(sa);
    for (int32_t p = 0; p < 1060; ++p) first.add_token(a[size_t(p)], p, s, false);
    m->forward(first, kv);
  }
  const int32_t ia = batch.add_sequence(sa), ib = batch.add_sequence(sb);
  for (int32_t p = 0; p < int32_t(b.size()); ++p) batch.add_token(b[size_t(p)], p, ib, false);
  for (int32_t p = 1060; p < 1100; ++p) batch.add_token(a[size_t(p)], p, ia, true);
  const std::vector<float> mixed = m->forward(batch, kv);
  ASSERT_EQ(mixed.size(), size_t(40 * V));
  EXPECT_TRUE(std::equal(mixed.begin(), mixed.end(), want.end() - 40 * V))
      << "a neighbour in the step changed the logits";
}

// Weights without an interleaved copy, where speculation verifies a token and its draft in one
// step: an HF folder in f32 or bf16, a GGUF in f16, and Q8_0 / Q4_K / Q2_K GGUFs mapped from the
// file (huge_pages off: the file layout, as `bench-model --mmap`). Steps of 2-9 tokens give
// every token the logits, bit for bit, that one-token steps give it (the float GEMV and the
// file-layout kernels sum each row in the one-row order below 10 rows, and attention treats a
// sequence with <= 16 tokens in the step as decode units), f16 K/V as `efim serve` keeps it.
// ctest runs it with the widest kernels, with EFIM_KERNEL=avx2 and with EFIM_KERNEL=scalar.
TEST_F(Batching, VerifyStepsEqualOneTokenStepsWithoutInterleavedWeights) {
  const std::vector<int32_t> all = prompt(64, 300, 5);
  struct Case {
    const char* kind;
    const char* dt;  // "f32", "bf16": the folder; otherwise the GGUF `efim convert` writes
    DType gguf;
  };
  for (Case c : {Case{"qwen2", "bf16", DType::F32}, Case{"llama", "f32", DType::F32},
                 Case{"qwen3_moe_dense", "f16", DType::F16}, Case{"llama", "q8_0", DType::Q8_0},
                 Case{"llama256", "q4_k", DType::Q4_K}, Case{"llama256", "q2_k", DType::Q2_K}}) {
    SCOPED_TRACE(std::string(c.kind) + " " + c.dt);
    const bool folder_weights = std::string(c.dt) == "f32" || std::string(c.dt) == "bf16";
    const std::string path =
        folder_weights ? folder(c.kind, c.dt) : convert(folder(c.kind, "f32"), c.gguf);
    LoadOptions opts = two_threads();
    opts.huge_pages = false;  // GGUFs: mapped from the file, rows not interleaved
    auto m = Model::load(path, opts);
    ContiguousSession one(*m, 64, DType::F16), chunked(*m, 64, DType::F16);
    const std::vector<int32_t> head(all.begin(), all.begin() + 20);
    one.eval(head);
    chunked.eval(head);
    std::vector<float> want, got;
    for (size_t p = 20; p < all.size(); ++p) {
      const std::vector<float> l = one.eval({all[p]});
      want.insert(want.end(), l.begin(), l.end());
    }
    size_t at = 20;
    for (size_t len : {9, 2, 7, 1, 5, 8, 3, 9}) {
      const std::vector<int32_t> chunk(all.begin() + at, all.begin() + at + len);
      const std::vector<float> l = chunked.eval(chunk, true);
      got.insert(got.end(), l.begin(), l.end());
      at += len;
    }
    ASSERT_EQ(at, all.size());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(got == want) << "max |diff| " << max_abs_diff(got, want);
  }
}

// qwen3_moe: decode steps take the one-token expert path (moe_one_token), prefill the path
// grouped by expert; qwen3_moe_dense alternates that with dense layers.
TEST_F(Batching, DecodeAfterPrefillEqualsFullPrefixLastRow) {
  for (const char* kind : {"qwen2", "qwen3_moe", "qwen3_moe_dense"}) {
  SCOPED_TRACE(kind);
  auto m = Model::load(folder(kind, "bf16"), two_threads());
  std::vector<float> full = all_logits(*m, tokens_);
  const int64_t V = m->config().vocab, n = static_cast<int64_t>(tokens_.size());
  ContiguousSession s(*m, n);
  s.eval(std::vector<int32_t>(tokens_.begin(), tokens_.end() - 2));
  std::vector<float> d1 = s.eval({tokens_[n - 2]});
  std::vector<float> d2 = s.eval({tokens_[n - 1]});
  ASSERT_EQ(d2.size(), static_cast<size_t>(V));
  EXPECT_LE(max_abs_diff(d1, std::vector<float>(full.end() - 2 * V, full.end() - V)),
            rounding_tol(full));
  EXPECT_LE(max_abs_diff(d2, std::vector<float>(full.end() - V, full.end())), rounding_tol(full));
  // truncate + re-eval reuses the prefix
  s.truncate(n - 1);
  EXPECT_LE(max_abs_diff(s.eval({tokens_[n - 1]}), d2), 1e-6f);
  }
}

// One step mixing a decode token of sequence A with a prefill chunk of sequence B (paged-style
// slots: blocks of 4 taken alternately), after A's prompt was prefilled in an earlier step.
TEST_F(Batching, MixedDecodeAndPrefillStep) {
  auto m = Model::load(folder("llama", "bf16"), two_threads());
  std::vector<int32_t> a = prompt(10, 300, 8), b = prompt(9, 300, 9);
  std::vector<float> want_a = all_logits(*m, a), want_b = all_logits(*m, b);
  const int64_t V = m->config().vocab;
  auto slot = [](int seq, int p) { return (p / 4) * 8 + seq * 4 + p % 4; };
  std::vector<int32_t> sa, sb;
  for (int p = 0; p < 10; ++p) sa.push_back(slot(0, p));
  for (int p = 0; p < 9; ++p) sb.push_back(slot(1, p));
  KvCache kv = KvCache::for_model(m->config(), 24);
  Batch first;
  int32_t ia = first.add_sequence(std::vector<int32_t>(sa.begin(), sa.end() - 1));
  for (int p = 0; p < 9; ++p) first.add_token(a[p], p, ia, false);
  EXPECT_TRUE(m->forward(first, kv).empty());
  Batch step;
  int32_t jb = step.add_sequence(sb);
  int32_t ja = step.add_sequence(sa);
  for (int p = 0; p < 9; ++p) step.add_token(b[p], p, jb, p == 8);
  step.add_token(a[9], 9, ja, true);
  std::vector<float> got = m->forward(step, kv);
  ASSERT_EQ(got.size(), static_cast<size_t>(2 * V));
  EXPECT_LE(max_abs_diff(std::vector<float>(got.begin(), got.begin() + V),
                         std::vector<float>(want_b.end() - V, want_b.end())),
            rounding_tol(want_b));
  EXPECT_LE(max_abs_diff(std::vector<float>(got.begin() + V, got.end()),
                         std::vector<float>(want_a.end() - V, want_a.end())),
            rounding_tol(want_a));
}

}  // namespace
}  // namespace efim
