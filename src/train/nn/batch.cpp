#include "train/nn/batch.h"

#include "base/error.h"

namespace efim::train {

void TokenBatch::resize(int64_t b, int64_t t) {
  EFIM_CHECK(b > 0 && t > 0, "train: batch shape ", b, " x ", t, " must be positive");
  B = b, T = t;
  const auto n = static_cast<size_t>(b * t);
  inputs.assign(n, 0);
  targets.assign(n, 0);
  loss_mask.assign(n, 1);
}

int64_t TokenBatch::n_targets() const {
  int64_t n = 0;
  for (uint8_t m : loss_mask) n += m;
  return n;
}

void TokenBatch::validate(int64_t vocab) const {
  EFIM_CHECK(B > 0 && T > 0, "train: batch shape ", B, " x ", T, " must be positive");
  const auto n = static_cast<size_t>(B * T);
  EFIM_CHECK(inputs.size() == n && targets.size() == n && loss_mask.size() == n, "train: batch ", B,
             " x ", T, " needs ", n, " entries, got inputs ", inputs.size(), ", targets ",
             targets.size(), ", loss_mask ", loss_mask.size());
  for (size_t i = 0; i < n; ++i) {
    EFIM_CHECK(inputs[i] >= 0 && inputs[i] < vocab, "train: batch input ", i, " is token ",
               inputs[i], ", outside [0, ", vocab, ")");
    EFIM_CHECK(loss_mask[i] <= 1, "train: batch loss_mask ", i, " is ", int(loss_mask[i]),
               ", expected 0 or 1");
    EFIM_CHECK(!loss_mask[i] || (targets[i] >= 0 && targets[i] < vocab), "train: batch target ", i,
               " is token ", targets[i], ", outside [0, ", vocab, ")");
  }
}

void BatchSource::skip(int64_t n) {
  TokenBatch scratch;
  for (int64_t i = 0; i < n; ++i) next(scratch);
}

}  // namespace efim::train
