// What the trainer consumes: batches of token rows with next-token targets and a loss mask,
// from any source (plain text, or fragment-tokenized FIM shards from src/train/data).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace efim::train {

// B independent rows of T tokens; token t of a row sits at position t and attends to tokens
// 0..t of its row only.
struct TokenBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> inputs;     // [B, T] token ids
  std::vector<int32_t> targets;    // [B, T] the token to predict after inputs[b][t]
  std::vector<uint8_t> loss_mask;  // [B, T] 1: this target counts in the loss, 0: ignored

  void resize(int64_t b, int64_t t);
  int64_t n_targets() const;  // number of mask entries that are 1
  // Error naming the first bad entry (sizes, ids outside [0, vocab), mask values not 0/1).
  void validate(int64_t vocab) const;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Fills `batch` with the next B x T batch (the source decides B and T at construction).
  virtual void next(TokenBatch& batch) = 0;
  // Advances as if next() had been called n times (resuming a run); the default calls next().
  virtual void skip(int64_t n);
  // One line for logs: what is read and how much of it.
  virtual std::string describe() const = 0;
};

}  // namespace efim::train
