#include "train/nn/shard_source.h"

#include <filesystem>

#include "base/error.h"

namespace efim::train {

bool is_shard_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::path(path) / "index.json", ec);
}

LossMask parse_loss_mask(const std::string& name) {
  if (name == "all") return LossMask::all;
  if (name == "middle") return LossMask::middle;
  fail("train: loss mask '", name, "' (expected all or middle)");
}

ShardBatchSource::ShardBatchSource(const ShardSourceOptions& opts) : o_(opts), reader_(opts.dir) {
  EFIM_CHECK(o_.B > 0 && o_.T > 0, "train: shard batches of ", o_.B, " x ", o_.T,
             " must have a positive shape");
  rewind();
}

void ShardBatchSource::rewind() {
  sampler_ = std::make_unique<SequenceSampler>(
      reader_, SamplerOptions{.batch = o_.B, .seq = o_.T, .seed = o_.seed, .mask = o_.mask});
}

void ShardBatchSource::next(TokenBatch& b) {
  const Batch s = sampler_->next();
  b.resize(o_.B, o_.T);
  // s.tokens [B, T + 1]: the row's first T ids are inputs, its last T ids the targets.
  for (int64_t r = 0; r < o_.B; ++r) {
    const int32_t* row = s.tokens.data() + r * (o_.T + 1);
    int32_t* in = b.inputs.data() + r * o_.T;
    int32_t* tg = b.targets.data() + r * o_.T;
    for (int64_t t = 0; t < o_.T; ++t) {
      in[t] = row[t];
      tg[t] = row[t + 1];
    }
  }
  b.loss_mask.assign(s.mask.begin(), s.mask.end());
}

void ShardBatchSource::skip(int64_t n) {
  EFIM_CHECK(n >= 0, "train: cannot skip ", n, " batches");
  sampler_->skip(static_cast<uint64_t>(n));
}

std::string ShardBatchSource::describe() const {
  return str(o_.dir, ": ", reader_.num_samples(), " samples, ", reader_.num_tokens(), " tokens (",
             sampler_->batches_per_epoch(), " batches of ", o_.B, " x ", o_.T,
             " per epoch), loss on ", o_.mask == LossMask::all ? "all targets" : "FIM middles");
}

}  // namespace efim::train
