// Checkpoints resume bit for bit: 6 steps straight == 3 steps, save, load into fresh objects,
// 3 more steps (parameters, moments and data position), on a tiny model and on FIM shards.
#include "train/nn/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"
#include "nn_test_util.h"
#include "train/data/shards.h"
#include "train/nn/shard_source.h"
#include "train/nn/trainer.h"

namespace efim::test {
namespace {

// Shards of 40 random "samples" (5..60 ids in [5, 40), each ending with eos = 0).
std::string write_shards(const TempDir& tmp) {
  const std::string dir = tmp / "shards";
  train::ShardWriter w(dir, train::ShardVocab{40, 0, 1, 3, 2}, {});
  std::mt19937_64 rng(11);
  for (int s = 0; s < 40; ++s) {
    std::vector<int32_t> ids(5 + rng() % 56);
    for (auto& t : ids) t = int32_t(5 + rng() % 35);
    ids.back() = 0;
    w.add(ids);
  }
  w.finish();
  return dir;
}

train::TrainOptions options() {
  train::TrainOptions o;
  o.accum = 2;
  o.lr = train::LrSchedule{3e-3, 2, 6, 0.1};
  return o;
}

train::ShardSourceOptions source_options(const std::string& dir) {
  return {dir, 2, 12, 5, train::LossMask::all};
}

TEST(Checkpoint, ResumeIsBitExact) {
  TempDir tmp;
  const std::string shards = write_shards(tmp);
  // Different thread counts on purpose: every reduction in a step has a fixed order (fixed
  // chunks, GEMM tiles owned by one thread), so the result does not depend on them.
  ThreadPool pool(2), pool1(1);
  const train::Params init = train::random_params(tiny_config(false), 3);

  train::Params straight = init;
  {
    train::Trainer tr(straight, pool, options());
    train::ShardBatchSource src(source_options(shards));
    for (int s = 0; s < 6; ++s) tr.step(src);
  }

  train::Params first = init;
  const std::string ckpt = tmp / "ckpt";
  {
    train::Trainer tr(first, pool1, options());
    train::ShardBatchSource src(source_options(shards));
    for (int s = 0; s < 3; ++s) tr.step(src);
    train::CheckpointState st;
    st.step = tr.steps_taken();
    st.batches = st.step * 2;
    st.run = {{"note", "test"}};
    train::save_checkpoint({ckpt, "", DType::F32}, first, tr, st);
  }
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".old"));

  train::Params resumed = train::load_checkpoint_params(ckpt);
  ASSERT_EQ(resumed.w.size(), first.w.size());
  EXPECT_EQ(std::memcmp(resumed.w.data(), first.w.data(), first.w.size() * sizeof(float)), 0);
  train::Trainer tr(resumed, pool, options());
  const train::CheckpointState st = train::load_checkpoint_optimizer(ckpt, tr);
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(st.run["note"], "test");
  EXPECT_EQ(tr.steps_taken(), 3);
  EXPECT_EQ(tr.optimizer().steps_taken(), 3);
  train::ShardBatchSource src(source_options(shards));
  src.skip(st.batches);
  for (int s = 0; s < 3; ++s) tr.step(src);

  ASSERT_EQ(resumed.w.size(), straight.w.size());
  int64_t differ = 0;
  for (size_t i = 0; i < straight.w.size(); ++i)
    differ += std::memcmp(&straight.w[i], &resumed.w[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0) << "of " << straight.w.size() << " parameters";
  // The run moved: a resume that silently restarted from the initial weights would differ.
  EXPECT_NE(std::memcmp(init.w.data(), resumed.w.data(), init.w.size() * sizeof(float)), 0);
}

TEST(Checkpoint, SavingAgainReplacesTheFolder) {
  TempDir tmp;
  ThreadPool pool(1);
  train::Params p = train::random_params(tiny_config(true), 4);
  train::Trainer tr(p, pool, options());
  const std::string ckpt = tmp / "ckpt";
  train::CheckpointState st;
  train::save_checkpoint({ckpt, "", DType::BF16}, p, tr, st);
  p.w[0] += 1.0f;
  st.step = 7;
  train::save_checkpoint({ckpt, "", DType::BF16}, p, tr, st);
  EXPECT_EQ(train::read_checkpoint_state(ckpt).step, 7);
  EXPECT_EQ(train::load_checkpoint_params(ckpt).w[0], p.w[0]);
  for (const auto& e : std::filesystem::directory_iterator(tmp.path()))
    EXPECT_EQ(e.path().filename(), "ckpt") << "left behind: " << e.path();
}

TEST(Checkpoint, TruncatedMomentsAreAnError) {
  TempDir tmp;
  ThreadPool pool(1);
  train::Params p = train::random_params(tiny_config(true), 4);
  train::Trainer tr(p, pool, options());
  const std::string ckpt = tmp / "ckpt";
  train::save_checkpoint({ckpt, "", DType::F32}, p, tr, {});
  write_file(ckpt + "/adam_v.f32", std::string(12, '\0'));
  try {
    train::load_checkpoint_optimizer(ckpt, tr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_v.f32: 12 bytes"), std::string::npos) << e.what();
  }
}

TEST(ShardSource, RowsSplitIntoInputsAndTargets) {
  TempDir tmp;
  const std::string shards = write_shards(tmp);
  train::ShardReader reader(shards);
  train::SequenceSampler sampler(reader,
                                 {.batch = 2, .seq = 12, .seed = 5, .mask = train::LossMask::all});
  train::ShardBatchSource src(source_options(shards));
  for (int i = 0; i < 3; ++i) {
    const train::Batch want = sampler.next();
    train::TokenBatch b;
    src.next(b);
    ASSERT_EQ(b.B, 2);
    ASSERT_EQ(b.T, 12);
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 12; ++t) {
        EXPECT_EQ(b.inputs[r * 12 + t], want.tokens[r * 13 + t]);
        EXPECT_EQ(b.targets[r * 12 + t], want.tokens[r * 13 + t + 1]);
        EXPECT_EQ(b.loss_mask[r * 12 + t], want.mask[r * 12 + t]);
      }
  }
  src.rewind();
  train::TokenBatch a, b;
  src.next(a);
  train::ShardBatchSource fresh(source_options(shards));
  fresh.next(b);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_THROW(train::parse_loss_mask("middles"), Error);
}

}  // namespace
}  // namespace efim::test
