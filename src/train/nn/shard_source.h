// The trainer's BatchSource over fragment-tokenized FIM shards (src/train/data): a
// SequenceSampler's [B, T + 1] rows become inputs = row[0, T), targets = row[1, T], and its
// [B, T] loss mask (all targets, or the FIM middles only) is the batch's loss_mask.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "train/data/shards.h"
#include "train/nn/batch.h"

namespace efim::train {

// True when `path` is a shard folder (holds index.json), as opposed to plain text.
bool is_shard_dir(const std::string& path);

// "all" or "middle"; anything else is an Error naming the value.
LossMask parse_loss_mask(const std::string& name);

struct ShardSourceOptions {
  std::string dir;  // a shard folder written by `efim data build`
  int64_t B = 1, T = 0;
  uint64_t seed = 1;  // sample order (a new shuffle per epoch)
  LossMask mask = LossMask::all;
};

class ShardBatchSource : public BatchSource {
 public:
  explicit ShardBatchSource(const ShardSourceOptions& opts);
  void next(TokenBatch& batch) override;
  // Cheap: the sampler skips whole batches without copying rows.
  void skip(int64_t n) override;
  std::string describe() const override;
  // Back to the first batch (validation reads the same batches at every evaluation).
  void rewind();
  const ShardVocab& vocab() const { return reader_.vocab(); }

 private:
  ShardSourceOptions o_;
  ShardReader reader_;
  std::unique_ptr<SequenceSampler> sampler_;
};

}  // namespace efim::train
