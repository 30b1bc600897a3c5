#include "sampling/token_healing.h"

#include <limits>

#include "base/error.h"

namespace efim {

HealConstraint::HealConstraint(const VocabIndex& index, std::string required)
    : index_(&index), rest_(std::move(required)) {}

void HealConstraint::mask(std::span<float> logits) {
  if (!active()) return;
  index_->allowed(rest_, allowed_);
  kept_.clear();
  size_t n = 0;
  for (int32_t id : allowed_) {
    if (size_t(id) >= logits.size()) break;  // sorted by id
    kept_.push_back(logits[size_t(id)]);
    ++n;
  }
  EFIM_CHECK(n > 0, "token healing: no token of the model's ", logits.size(),
             " can start the required bytes (", rest_.size(), " bytes left)");
  std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; ++i) logits[size_t(allowed_[i])] = kept_[i];
}

void HealConstraint::accept(int32_t token) {
  if (!active()) return;
  EFIM_CHECK(token >= 0 && token < index_->vocab_size(), "token healing: token ", token,
             " outside the vocabulary");
  const std::string_view b = index_->bytes(token);
  if (b.size() >= rest_.size() && b.starts_with(rest_)) {
    rest_.clear();
  } else if (!b.empty() && b.size() < rest_.size() && std::string_view(rest_).starts_with(b)) {
    rest_.erase(0, b.size());
  } else {
    fail("token healing: token ", token, " (", b.size(), " bytes) does not continue the ",
         rest_.size(), " required bytes");
  }
}

}  // namespace efim
