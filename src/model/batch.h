// The inputs of one forward step (Batch) and the K/V storage it reads and writes (KvCache).
#pragma once

#include <cstdint>
#include <vector>

namespace efim {

struct ModelConfig;

// K/V storage as plain per-layer arrays: K[layer][slot][kv_dim] and V[layer][slot][kv_dim],
// f32. Slots are chosen by the caller, so a paged cache (blocks of B slots, per-sequence block
// tables) uses this storage with slot = block * B + offset and no copies.
// (An f16 variant would change the element type here and the loads in ops::attention.)
class KvCache {
 public:
  KvCache(int64_t n_layers, int64_t n_slots, int64_t kv_dim);
  static KvCache for_model(const ModelConfig& c, int64_t n_slots);

  int64_t n_layers() const { return n_layers_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t kv_dim() const { return kv_dim_; }
  float* k(int64_t layer) { return k_.data() + layer * n_slots_ * kv_dim_; }  // [n_slots, kv_dim]
  float* v(int64_t layer) { return v_.data() + layer * n_slots_ * kv_dim_; }  // [n_slots, kv_dim]
  const float* k(int64_t layer) const { return k_.data() + layer * n_slots_ * kv_dim_; }
  const float* v(int64_t layer) const { return v_.data() + layer * n_slots_ * kv_dim_; }
  // Copies every layer's K/V of slot `from` to slot `to` (copy-on-write of a shared block).
  void copy_slot(int64_t from, int64_t to);

 private:
  int64_t n_layers_, n_slots_, kv_dim_;
  std::vector<float> k_, v_;  // [n_layers, n_slots, kv_dim]
};

// One sequence's context in a step: slots[p] = the KV slot of position p, for every position
// 0..P, where P is the highest position of this sequence's tokens in the step.
struct BatchSequence {
  std::vector<int32_t> slots;
};

// A step over tokens of one or more sequences (prefill chunks and decode tokens alike).
// Token i has id tokens[i], sits at positions[i] of sequence seq[i], and its K/V is written to
// sequences[seq[i]].slots[positions[i]]; it attends to that sequence's slots[0..positions[i]]
// (entries below the step's own tokens must have been written by earlier steps).
struct Batch {
  std::vector<int32_t> tokens;     // [n]
  std::vector<int32_t> positions;  // [n]
  std::vector<int32_t> seq;        // [n] index into sequences
  std::vector<BatchSequence> sequences;
  std::vector<int32_t> logits_rows;  // token indices whose logits are returned, in this order

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Adds a sequence with its slot list; returns its index.
  int32_t add_sequence(std::vector<int32_t> slots);
  // Adds a token; when want_logits its logits row is appended to the output.
  void add_token(int32_t token, int32_t position, int32_t seq_index, bool want_logits);
};

}  // namespace efim
