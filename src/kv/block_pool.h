// BlockPool: the fixed set of KV blocks, their reference counts, the free list and the LRU list
// of evictable prefix-cache leaves. Pure bookkeeping: a block is an id in [0, n_blocks), the
// caller owns the memory (slot = block * block_size + offset).
//
// Every block is in exactly one state:
//   free    ref == 0, holds nothing worth keeping          (in the free FIFO)
//   cached  ref == 0, holds prefix-cache content           (KvManager knows via the tree)
//   used    ref >  0, in a running sequence's block table  (never evicted)
// The pool counts free and used blocks; cached = total - free - used.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace efim {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_used() const { return n_used_; }
  int32_t ref(int32_t b) const { return blocks_[b].ref; }
  bool is_free(int32_t b) const { return blocks_[b].free; }

  // Free blocks leave from the head of a FIFO (initially 0, 1, 2, ...) and come back at its
  // tail, so allocation order is deterministic.
  std::optional<int32_t> pop_free();
  void push_free(int32_t b);  // requires ref 0, not free, not in the LRU list
  std::vector<int32_t> free_order() const { return {free_.begin(), free_.end()}; }

  void add_ref(int32_t b);
  int32_t drop_ref(int32_t b);  // returns the remaining count

  // Last-use tick of a block (a logical clock kept by KvManager).
  void set_tick(int32_t b, uint64_t tick) { blocks_[b].tick = tick; }
  uint64_t tick(int32_t b) const { return blocks_[b].tick; }

  // Intrusive doubly linked list of evictable leaves, sorted by tick (oldest at the head;
  // equal ticks in insertion order). Inserting a block whose tick is the newest is O(1) (the
  // release path); an older one walks from the head to its place (a parent exposed by evicting
  // its last child, which is almost always as old as that child, so the walk is short).
  void lru_insert(int32_t b);
  void lru_erase(int32_t b);
  bool in_lru(int32_t b) const { return blocks_[b].in_lru; }
  int32_t lru_front() const { return head_; }  // -1 when empty
  int32_t lru_next(int32_t b) const { return blocks_[b].next; }
  int32_t lru_size() const { return lru_size_; }
  std::vector<int32_t> lru_order() const;  // next victim first

 private:
  struct Block {
    int32_t ref = 0;
    int32_t prev = -1, next = -1;  // LRU links, valid while in_lru
    uint64_t tick = 0;
    bool in_lru = false;
    bool free = false;
  };
  void link_before(int32_t b, int32_t at);  // at == -1: append at the tail

  std::vector<Block> blocks_;  // [n_blocks]
  std::deque<int32_t> free_;   // FIFO of free block ids
  int32_t head_ = -1, tail_ = -1, lru_size_ = 0;
  int32_t n_used_ = 0;  // blocks with ref > 0
};

}  // namespace efim
