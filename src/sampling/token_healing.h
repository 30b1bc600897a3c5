// Token healing's decode-time constraint (a logit processor; architecture: sampling/ runs the
// constraint, infill/ decides where to back off).
//
// The infill layer removed the last tokens of the prompt, whose bytes R the answer must still
// start with. While bytes of R remain (`rest`), a step may only pick a token t whose bytes are
// a non-empty prefix of rest (rest loses them) or start with rest (R is covered; t may run past
// the cursor, which is the point: "comp" -> "completion"). Every other logit is set to -inf
// before temperature, top-k, top-p and min-p, so sampling draws from the model's own
// distribution restricted to the tokens consistent with R. A step that covers R ends the
// constraint; generation then runs free.
//
// Byte-level throughout: rest may start or end inside a UTF-8 character.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/vocab_index.h"

namespace efim {

class HealConstraint {
 public:
  // `index` is borrowed and must outlive the constraint.
  HealConstraint(const VocabIndex& index, std::string required);

  bool active() const { return !rest_.empty(); }
  std::string_view rest() const { return rest_; }

  // logits: [n] with n <= vocab (ids >= n do not exist for the model). Sets the logit of every
  // token that may not come next to -inf. No-op when inactive. Throws Error when no token
  // below n is allowed (the model cannot reproduce R).
  void mask(std::span<float> logits);
  // The token chosen for this step (one that mask() allowed) consumes rest.
  // Throws Error for a token inconsistent with rest.
  void accept(int32_t token);

 private:
  const VocabIndex* index_;
  std::string rest_;
  std::vector<int32_t> allowed_;  // scratch
  std::vector<float> kept_;       // scratch
};

}  // namespace efim
