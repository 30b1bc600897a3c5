#include "kv/block_pool.h"

#include "base/error.h"

namespace efim {

BlockPool::BlockPool(int32_t n_blocks) {
  EFIM_CHECK(n_blocks > 0, "BlockPool: n_blocks must be positive, got ", n_blocks);
  blocks_.resize(n_blocks);
  for (int32_t b = 0; b < n_blocks; ++b) {
    blocks_[b].free = true;
    free_.push_back(b);
  }
}

std::optional<int32_t> BlockPool::pop_free() {
  if (free_.empty()) return std::nullopt;
  int32_t b = free_.front();
  free_.pop_front();
  blocks_[b].free = false;
  return b;
}

void BlockPool::push_free(int32_t b) {
  Block& k = blocks_[b];
  EFIM_CHECK(k.ref == 0 && !k.free && !k.in_lru, "BlockPool::push_free: block ", b, " has ref ",
             k.ref, ", free ", k.free, ", in_lru ", k.in_lru);
  k.free = true;
  free_.push_back(b);
}

void BlockPool::add_ref(int32_t b) {
  Block& k = blocks_[b];
  EFIM_CHECK(!k.free, "BlockPool::add_ref: block ", b, " is on the free list");
  if (k.ref++ == 0) {
    ++n_used_;
    if (k.in_lru) lru_erase(b);
  }
}

int32_t BlockPool::drop_ref(int32_t b) {
  Block& k = blocks_[b];
  EFIM_CHECK(k.ref > 0, "BlockPool::drop_ref: block ", b, " has no reference");
  if (--k.ref == 0) --n_used_;
  return k.ref;
}

void BlockPool::link_before(int32_t b, int32_t at) {
  Block& k = blocks_[b];
  k.next = at;
  k.prev = at < 0 ? tail_ : blocks_[at].prev;
  if (k.prev >= 0)
    blocks_[k.prev].next = b;
  else
    head_ = b;
  if (at >= 0)
    blocks_[at].prev = b;
  else
    tail_ = b;
  k.in_lru = true;
  ++lru_size_;
}

void BlockPool::lru_insert(int32_t b) {
  Block& k = blocks_[b];
  EFIM_CHECK(k.ref == 0 && !k.free && !k.in_lru, "BlockPool::lru_insert: block ", b, " has ref ",
             k.ref, ", free ", k.free, ", in_lru ", k.in_lru);
  if (tail_ < 0 || blocks_[tail_].tick <= k.tick) return link_before(b, -1);
  int32_t at = head_;
  while (blocks_[at].tick <= k.tick) at = blocks_[at].next;  // stops before the tail
  link_before(b, at);
}

void BlockPool::lru_erase(int32_t b) {
  Block& k = blocks_[b];
  EFIM_CHECK(k.in_lru, "BlockPool::lru_erase: block ", b, " is not in the LRU list");
  if (k.prev >= 0)
    blocks_[k.prev].next = k.next;
  else
    head_ = k.next;
  if (k.next >= 0)
    blocks_[k.next].prev = k.prev;
  else
    tail_ = k.prev;
  k.prev = k.next = -1;
  k.in_lru = false;
  --lru_size_;
}

std::vector<int32_t> BlockPool::lru_order() const {
  std::vector<int32_t> out;
  for (int32_t b = head_; b >= 0; b = blocks_[b].next) out.push_back(b);
  return out;
}

}  // namespace efim
