// A BatchSource over plain text: every regular file under a path (or the file itself), in
// sorted path order, tokenized canonically (the whole file in one encode call), each followed
// by the end-of-text token, concatenated into one stream cut into windows of T + 1 tokens
// (inputs = window[0, T), targets = window[1, T]; every target counts). Windows are visited in
// a seeded random order, reshuffled at each pass. This is the stand-in until the FIM shard
// source of src/train/data is plugged in.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "train/nn/batch.h"

namespace efim {
class Tokenizer;
}

namespace efim::train {

struct TextSourceOptions {
  std::string path;  // a text file or a folder (searched recursively)
  int64_t B = 1, T = 0;
  int32_t eot = -1;  // appended after each file; -1: none
  uint64_t seed = 1;
  uint64_t max_file_bytes = 4u << 20;  // larger files are skipped (likely not source text)
};

class TextBatchSource : public BatchSource {
 public:
  TextBatchSource(const Tokenizer& tok, const TextSourceOptions& opts);
  void next(TokenBatch& batch) override;
  std::string describe() const override;
  int64_t n_tokens() const { return static_cast<int64_t>(stream_.size()); }
  int64_t n_windows() const { return static_cast<int64_t>(order_.size()); }

 private:
  TextSourceOptions o_;
  std::vector<int32_t> stream_;
  std::vector<int64_t> order_;  // window start offsets, shuffled
  size_t next_ = 0;
  int64_t files_ = 0, passes_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace efim::train
