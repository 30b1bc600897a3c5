// KvManager: paged KV-cache bookkeeping with a token-granular prefix cache. It owns no K/V
// memory and does no maths: it hands out blocks, counts references, keeps the prefix cache, and
// tells the caller which KV slot each position uses (slot = block * B + position % B, B =
// block_size) and which slot copies to run (KvCache::copy_slot(from, to)) before a step.
//
// Design (why a trie of block rows with copy-on-write):
// The editor workload sends request k+1 whose tokens extend request k's prompt (EFIM: `<PRE>p0
// <SUF>s<MID>inc`, inc growing), or share a long prefix and then diverge (PSM: the prefix
// grows, so the suffix moves). Request k's cached sequence also holds its generated tokens, so
// request k+1 almost always diverges from it in the middle of a block. Hashing full blocks only
// (vLLM) loses up to B-1 tokens per round there; we reuse every token:
//  * The cache is a trie whose nodes are blocks (see prefix_tree.h): node = (row, 1..B tokens),
//    children = the possible next rows. Partial blocks are cached too (a sequence's last row).
//  * A prompt walks the trie row by row (a full row is one hash lookup), then takes the child
//    with the longest common prefix in the row where it diverges: n_cached = B * full rows + that
//    run. Full rows are shared read-only (ref + 1). The partly matched block cannot be written
//    in place (its later offsets belong to another branch, or a running sequence still writes
//    there), so the sequence gets a fresh block and the copy ops for the matched offsets
//    (copy-on-write: at most B-1 slot copies instead of recomputing up to B-1 tokens). Only
//    when the matched run is the whole of an unreferenced partial node is that block adopted
//    and extended in place, with no copy.
//  * A branch that diverged inside a row thus owns a full copy of the row's shared part, so a
//    node never depends on a sibling's block and eviction works per block: the evictable units
//    are leaves with ref 0, in LRU order of last use (intrusive list in BlockPool). A block in
//    a running sequence's table (ref > 0) is never evicted; a sequence references every row of
//    its path, so ref > 0 implies ref > 0 for the parent row and every cached ref-0 block can
//    be reclaimed leaf-first (the cached count is exactly what eviction can free).
//  * Computed tokens enter the trie at commit(), row by row (chunked prefill and decode tokens
//    alike), so a running sequence's computed tokens are always findable. A full row that another
//    sequence already cached identically is deduplicated (the table entry switches to the cached
//    block, the copy is freed); a partial leaf whose tokens a sibling also holds is dropped when
//    its last reference goes.
// Rule: n_cached <= n_prompt - 1. The last prompt token is always computed, because its logits
// are needed to sample the first new token (a fully cached prompt recomputes only that one).
//
// Lifecycle (engine thread only; no locks, deterministic):
//   match_and_allocate(id, prompt) -> n_cached, slots[0, n_prompt), copies; or nullopt when the
//       pool cannot supply the blocks (then nothing changed, not even the counters);
//   append_tokens(id, tokens)      -> blocks for decode growth (false: nothing changed);
//   commit(id, n_computed)         -> positions [0, n_computed) hold K/V: cache them. The copies
//       returned by match_and_allocate must have run before the first commit (the copy source
//       stays referenced until then);
//   truncate(id, n)                -> drops tokens [n, n_tokens) that were never computed (a
//       speculative draft the model rejected): their blocks return to the free list, nothing
//       of them was ever cached;
//   release(id)                    -> finished/cancelled: blocks return, computed rows stay
//       cached;
//   clear()                        -> drop every unreferenced cached block.
// With KvOptions.prefix_cache off the trie stays empty: commit() caches nothing, so match finds
// nothing and unref() frees every block whose last reference goes.
// Block tables can change at commit (dedup of full computed rows): rebuild slots every step.
// Cost: match O(n_prompt + children of the divergence node); append/commit O(tokens in the
// step); release O(rows + siblings of its last row); eviction O(1) per block (an exposed
// parent is placed by tick, walking from the LRU head, normally zero steps).
// append_tokens takes token ids, not just a count: the trie needs the ids of decode tokens to
// cache them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/prefix_tree.h"

namespace efim {

struct KvOptions {
  int32_t n_blocks = 0;     // blocks in the pool (engine: kv_cache_bytes / bytes_per_block)
  int32_t block_size = 16;  // tokens (KV slots) per block
  // false: no prefix cache (a baseline for measuring reuse). Nothing is matched and nothing is
  // kept: every prompt is computed in full, a released block goes straight back to the free
  // list. Queried prompt tokens are still counted (hits stay 0).
  bool prefix_cache = true;
};

// Blocks that fit a memory budget; throws Error when not even one fits.
int32_t kv_blocks_for_budget(int64_t kv_cache_bytes, int64_t bytes_per_block);

struct SlotCopy {
  int32_t from = 0;  // KV slot to read
  int32_t to = 0;    // KV slot to write
  bool operator==(const SlotCopy&) const = default;
};

struct SeqAllocation {
  int32_t n_cached = 0;          // positions [0, n_cached) already hold K/V
  std::vector<int32_t> slots;    // [n_prompt] KV slot of every prompt position
  std::vector<SlotCopy> copies;  // run before the sequence's first step
};

struct KvStats {
  int32_t total_blocks = 0;
  int32_t free_blocks = 0;          // hold nothing
  int32_t cached_blocks = 0;        // unreferenced prefix-cache content, evictable
  int32_t used_blocks = 0;          // referenced by running sequences
  // Every match_and_allocate, readmissions after preemption included (the engine's /metrics
  // counters count first admissions only).
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up
  int64_t prefix_hit_tokens = 0;    // of which cached
  // Fraction of blocks in use, as vllm:kv_cache_usage_perc (cached blocks count as free).
  double usage() const { return total_blocks ? double(used_blocks) / total_blocks : 0.0; }
};

using SeqId = int64_t;

class KvManager {
 public:
  explicit KvManager(const KvOptions& options);

  std::optional<SeqAllocation> match_and_allocate(SeqId id, std::span<const int32_t> prompt);
  bool append_tokens(SeqId id, std::span<const int32_t> tokens);
  void commit(SeqId id, int32_t n_computed);
  // Keeps the first n_tokens tokens (n_computed <= n_tokens <= tokens held); rows past the last
  // one kept are freed.
  void truncate(SeqId id, int32_t n_tokens);
  void release(SeqId id);
  void clear();

  // Longest cached prefix of `tokens` (no cap, no side effects): for choosing a prompt layout.
  int32_t peek(std::span<const int32_t> tokens) const;

  // Per sequence. slots(id) covers every position [0, n_tokens).
  bool contains(SeqId id) const { return seqs_.contains(id); }
  std::span<const int32_t> block_table(SeqId id) const { return seq(id).table; }
  std::span<const int32_t> tokens(SeqId id) const { return seq(id).tokens; }
  int32_t n_tokens(SeqId id) const { return static_cast<int32_t>(seq(id).tokens.size()); }
  int32_t n_computed(SeqId id) const { return seq(id).n_computed; }
  int32_t slot(SeqId id, int32_t position) const;
  std::vector<int32_t> slots(SeqId id) const;

  int32_t block_size() const { return block_size_; }
  bool prefix_cache() const { return prefix_cache_; }
  KvStats stats() const;
  int32_t ref_count(int32_t block) const { return pool_.ref(block); }
  bool is_cached(int32_t block) const { return tree_.contains(block); }  // holds cache content
  std::vector<int32_t> eviction_order() const { return pool_.lru_order(); }
  std::vector<int32_t> free_order() const { return pool_.free_order(); }
  // Full consistency audit, O(n_blocks + total tokens), for tests; throws Error on a violation.
  void check_invariants() const;

 private:
  struct Sequence {
    std::vector<int32_t> tokens;  // prompt, then appended tokens
    std::vector<int32_t> table;   // [ceil(n_tokens / B)] block of each row
    int32_t n_cached = 0;         // prefix reused at admission
    int32_t n_computed = 0;       // positions [0, n_computed) hold K/V
    int32_t cow_src = -1;         // copy-on-write source, referenced until the first commit
  };
  const Sequence& seq(SeqId id) const;
  Sequence& seq(SeqId id);
  int32_t rows_for(size_t n_tokens) const;
  int32_t reclaimable() const { return pool_.n_free() + cached_blocks(); }
  int32_t cached_blocks() const { return pool_.n_blocks() - pool_.n_free() - pool_.n_used(); }

  int32_t take_block();       // a free block, evicting the LRU leaf if needed; ref 1
  void evict(int32_t node);   // removes an unreferenced leaf, frees its block
  void unref(int32_t block);  // drops a reference; ref 0 -> cached (leaf: LRU) or free
  void commit_row(Sequence& s, int32_t row, int32_t n_in_row);
  void share_full_row(Sequence& s, int32_t row, int32_t cached);

  void audit_blocks() const;
  void audit_sequences() const;
  void audit_lru() const;

  int32_t block_size_;
  bool prefix_cache_;
  BlockPool pool_;
  PrefixTree tree_;
  std::unordered_map<SeqId, Sequence> seqs_;
  uint64_t clock_ = 0;  // logical time of the last call, for LRU ticks
  int64_t query_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace efim
