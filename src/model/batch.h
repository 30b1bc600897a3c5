// The inputs of one forward step (Batch) and the K/V storage it reads and writes (KvCache).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/huge_buffer.h"
#include "tensor/dtype.h"

namespace efim {

struct ModelConfig;

// K/V storage of every layer, head-major: K[layer][kv_head][slot][head_dim] and the same for V,
// each head's row in the cache's element type: F32, F16 (llama.cpp's default: half the bytes)
// or Q8_0 (ggml's 32-value blocks, f16 scale + 32 int8: 34 bytes per 32 values, about a
// quarter of f32). Head-major, so the attention of one head streams its keys as one run of
// memory (contiguous slots are contiguous bytes) instead of every n_kv_heads-th piece of the
// slot rows. Rows are written from f32 by store() and read in place by ops::attention. Slots
// are chosen by the caller, so a paged cache (blocks of B slots, per-sequence block tables)
// uses this storage with slot = block * B + offset and no copies. The memory is advised for
// huge pages and touched lazily.
class KvCache {
 public:
  // kv_dim = n_kv_heads * head_dim values per slot and layer.
  KvCache(int64_t n_layers, int64_t n_slots, int64_t kv_dim, DType type = DType::F32,
          int64_t n_kv_heads = 1);
  static KvCache for_model(const ModelConfig& c, int64_t n_slots, DType type = DType::F32);
  // Bytes of n values of `type` (whole blocks); throws Error for a type the cache does not
  // store or an n that is not whole blocks.
  static int64_t row_bytes(DType type, int64_t n);
  // Bytes of K and V of one token over every layer.
  static int64_t bytes_per_token(DType type, int64_t n_layers, int64_t kv_dim) {
    return 2 * n_layers * row_bytes(type, kv_dim);
  }

  int64_t n_layers() const { return n_layers_; }
  int64_t n_slots() const { return n_slots_; }
  int64_t kv_dim() const { return kv_dim_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  DType type() const { return type_; }
  // One slot's values of one head, and the distance between two heads' planes, in bytes.
  int64_t head_bytes() const { return head_bytes_; }
  int64_t head_stride() const { return n_slots_ * head_bytes_; }
  // One layer: [n_kv_heads][n_slots] rows of head_bytes().
  const uint8_t* k(int64_t layer) const { return k_.data() + layer * layer_bytes(); }
  const uint8_t* v(int64_t layer) const { return v_.data() + layer * layer_bytes(); }
  // Writes one slot's K and V (kv_dim floats each, heads side by side), converted to the
  // element type. Safe from several threads for different slots. The caller checks layer and
  // slot.
  void store(int64_t layer, int64_t slot, const float* k, const float* v);
  // Reads one slot's K and V back as f32 (tests, debugging).
  void load(int64_t layer, int64_t slot, float* k, float* v) const;
  // Copies every layer's K/V of slot `from` to slot `to` (copy-on-write of a shared block).
  void copy_slot(int64_t from, int64_t to);

 private:
  int64_t layer_bytes() const { return n_kv_heads_ * head_stride(); }
  int64_t offset(int64_t layer, int64_t head, int64_t slot) const {
    return layer * layer_bytes() + head * head_stride() + slot * head_bytes_;
  }
  int64_t n_layers_, n_slots_, kv_dim_, n_kv_heads_;
  DType type_;
  int64_t head_bytes_;
  HugePageBuffer k_, v_;  // [n_layers, n_kv_heads, n_slots, head_bytes]
};

// Parses a --kv-type value: f32, f16 or q8_0; throws Error naming the accepted ones otherwise.
DType parse_kv_type(const std::string& name);

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
