// SequenceSampler: shuffled, packed [B, T + 1] rows over a ShardReader (see shards.h).
#include <algorithm>

#include "base/error.h"
#include "train/data/rng.h"
#include "train/data/shards.h"

namespace efim::train {

std::vector<uint8_t> target_flags(std::span<const int32_t> ids, const ShardVocab& vocab,
                                  LossMask mask) {
  std::vector<uint8_t> flags(ids.size(), 1);
  if (mask == LossMask::all || ids.empty()) return flags;
  // The first id of a sample follows the previous sample's <eos>: not a target in "middle".
  flags[0] = 0;
  if (ids[0] != vocab.fim_prefix) return flags;  // plain sample
  auto mid = std::find(ids.begin(), ids.end(), vocab.fim_middle);
  const size_t m = static_cast<size_t>(mid - ids.begin());  // ids.size() if absent
  for (size_t i = 0; i < ids.size() && i <= m; ++i) flags[i] = 0;  // up to <fim_middle>
  return flags;
}

SequenceSampler::SequenceSampler(const ShardReader& reader, SamplerOptions opts)
    : reader_(&reader), opts_(opts) {
  EFIM_CHECK(opts_.batch > 0 && opts_.seq > 0, "sampler: batch ", opts_.batch, " and seq ",
             opts_.seq, " must be > 0");
  EFIM_CHECK(reader.num_samples() > 0, "sampler: '", reader.dir(), "' has no samples");
  start_epoch();
}

void SequenceSampler::start_epoch() {
  // Fisher-Yates with our own PRNG: the same permutation on every platform.
  const uint64_t n = reader_->num_samples();
  order_.resize(n);
  for (uint64_t i = 0; i < n; ++i) order_[i] = i;
  Rng rng(stream_seed(opts_.seed, epoch_));
  for (uint64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[rng.uniform(i + 1)]);
  pos_ = 0;
  load_current();
}

void SequenceSampler::load_current() {
  cur_.clear();
  reader_->append_sample(order_[pos_], cur_);
  cur_flag_ = target_flags(cur_, reader_->vocab(), opts_.mask);
  cur_off_ = 0;
}

void SequenceSampler::fill_row(int32_t* ids, uint8_t* flags, int64_t want) {
  int64_t done = 0;
  while (done < want) {
    if (cur_off_ == cur_.size()) {  // next sample, or the next epoch
      if (++pos_ == order_.size()) {
        ++epoch_;
        start_epoch();
      } else {
        load_current();
      }
    }
    int64_t take = std::min<int64_t>(want - done, static_cast<int64_t>(cur_.size() - cur_off_));
    std::copy_n(cur_.begin() + static_cast<int64_t>(cur_off_), take, ids + done);
    if (flags) std::copy_n(cur_flag_.begin() + static_cast<int64_t>(cur_off_), take, flags + done);
    cur_off_ += static_cast<uint64_t>(take);
    done += take;
  }
}

Batch SequenceSampler::next() {
  const int64_t B = opts_.batch, T = opts_.seq;
  Batch b;
  b.batch = B;
  b.seq = T;
  b.tokens.resize(static_cast<size_t>(B * (T + 1)));  // [B, T + 1]
  b.mask.resize(static_cast<size_t>(B * T));         // [B, T]
  std::vector<uint8_t> flags(static_cast<size_t>(T + 1));
  for (int64_t r = 0; r < B; ++r) {
    fill_row(b.tokens.data() + r * (T + 1), flags.data(), T + 1);
    // mask[r, t] belongs to the target tokens[r, t + 1].
    std::copy(flags.begin() + 1, flags.end(), b.mask.begin() + r * T);
  }
  b.epoch = epoch_;
  return b;
}

void SequenceSampler::skip(uint64_t n) {
  // Consumes the same ids next() would, without building batches.
  std::vector<int32_t> row(static_cast<size_t>(opts_.seq + 1));
  for (uint64_t i = 0; i < n * static_cast<uint64_t>(opts_.batch); ++i)
    fill_row(row.data(), nullptr, opts_.seq + 1);
}

double SequenceSampler::batches_per_epoch() const {
  return static_cast<double>(reader_->num_tokens()) /
         static_cast<double>(opts_.batch * (opts_.seq + 1));
}

}  // namespace efim::train
