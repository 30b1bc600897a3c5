#include "kv/kv_manager.h"

#include <algorithm>
#include <limits>

#include "base/error.h"

namespace efim {
namespace {

KvOptions validated(const KvOptions& o) {
  EFIM_CHECK(o.block_size > 0, "KvOptions.block_size must be positive, got ", o.block_size);
  EFIM_CHECK(o.n_blocks > 0, "KvOptions.n_blocks must be positive, got ", o.n_blocks);
  EFIM_CHECK(int64_t(o.n_blocks) * o.block_size <= std::numeric_limits<int32_t>::max(),
             "KvOptions: n_blocks ", o.n_blocks, " x block_size ", o.block_size,
             " slots exceed the int32 slot range");
  return o;
}

}  // namespace

int32_t kv_blocks_for_budget(int64_t kv_cache_bytes, int64_t bytes_per_block) {
  EFIM_CHECK(bytes_per_block > 0, "kv cache: bytes_per_block must be positive, got ",
             bytes_per_block);
  int64_t n = kv_cache_bytes / bytes_per_block;
  EFIM_CHECK(n >= 1, "kv cache budget of ", kv_cache_bytes, " bytes holds no block of ",
             bytes_per_block, " bytes");
  return static_cast<int32_t>(std::min<int64_t>(n, std::numeric_limits<int32_t>::max()));
}

KvManager::KvManager(const KvOptions& options)
    : block_size_(validated(options).block_size),
      prefix_cache_(options.prefix_cache),
      pool_(options.n_blocks),
      tree_(options.n_blocks, options.block_size) {}

const KvManager::Sequence& KvManager::seq(SeqId id) const {
  auto it = seqs_.find(id);
  EFIM_CHECK(it != seqs_.end(), "KvManager: unknown sequence ", id);
  return it->second;
}

KvManager::Sequence& KvManager::seq(SeqId id) {
  return const_cast<Sequence&>(std::as_const(*this).seq(id));
}

int32_t KvManager::rows_for(size_t n_tokens) const {
  return static_cast<int32_t>((n_tokens + block_size_ - 1) / block_size_);
}

std::optional<SeqAllocation> KvManager::match_and_allocate(SeqId id,
                                                           std::span<const int32_t> prompt) {
  EFIM_CHECK(!seqs_.contains(id), "KvManager: sequence ", id, " already exists");
  EFIM_CHECK(!prompt.empty(), "KvManager: sequence ", id, " has an empty prompt");
  const int32_t B = block_size_;
  const int32_t n = static_cast<int32_t>(prompt.size());
  // Cap at n - 1: the last prompt token is always computed, its logits pick the next token.
  const PrefixTree::Match m = tree_.match(prompt, n - 1);
  const int32_t n_shared = static_cast<int32_t>(m.rows.size());
  const int32_t n_cached = B * n_shared + m.partial_len;
  const bool adopt =
      m.partial >= 0 && tree_.len(m.partial) == m.partial_len && pool_.ref(m.partial) == 0;

  // Feasibility before any change: referencing the matched rows takes them out of reach of
  // eviction, so they do not count towards what can be reclaimed.
  int32_t n_pinned = m.partial >= 0 && pool_.ref(m.partial) == 0;
  for (int32_t b : m.rows) n_pinned += pool_.ref(b) == 0;
  const int32_t n_fresh = rows_for(prompt.size()) - n_shared - (adopt ? 1 : 0);
  if (n_fresh > reclaimable() - n_pinned) return std::nullopt;

  ++clock_;
  Sequence s;
  s.tokens.assign(prompt.begin(), prompt.end());
  s.n_cached = s.n_computed = n_cached;
  for (int32_t b : m.rows) {
    pool_.add_ref(b);
    s.table.push_back(b);
  }
  SeqAllocation out;
  out.n_cached = n_cached;
  if (m.partial >= 0) {
    pool_.add_ref(m.partial);
    if (adopt) {
      s.table.push_back(m.partial);  // extend the unreferenced partial row in place
    } else {
      s.cow_src = m.partial;  // referenced until the first commit, when the copies have run
      const int32_t b = take_block();
      for (int32_t i = 0; i < m.partial_len; ++i)
        out.copies.push_back({m.partial * B + i, b * B + i});
      s.table.push_back(b);
    }
  }
  while (static_cast<int32_t>(s.table.size()) < rows_for(prompt.size()))
    s.table.push_back(take_block());
  query_tokens_ += n;
  hit_tokens_ += n_cached;
  seqs_.emplace(id, std::move(s));
  out.slots = slots(id);
  return out;
}

bool KvManager::append_tokens(SeqId id, std::span<const int32_t> tokens) {
  Sequence& s = seq(id);
  const int32_t need =
      rows_for(s.tokens.size() + tokens.size()) - static_cast<int32_t>(s.table.size());
  if (need > reclaimable()) return false;
  ++clock_;
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  for (int32_t i = 0; i < need; ++i) s.table.push_back(take_block());
  return true;
}

void KvManager::commit(SeqId id, int32_t n_computed) {
  Sequence& s = seq(id);
  EFIM_CHECK(n_computed >= s.n_computed && n_computed <= static_cast<int32_t>(s.tokens.size()),
             "KvManager::commit: sequence ", id, " n_computed ", n_computed, " outside [",
             s.n_computed, ", ", s.tokens.size(), "]");
  ++clock_;
  if (s.cow_src >= 0) {  // a step has run, so have the copies
    unref(s.cow_src);
    s.cow_src = -1;
  }
  // From the row holding position s.n_computed on; a copy-on-write row enters the tree at the
  // first commit even when no token was added (its copied part is computed K/V as well).
  // Without the prefix cache nothing enters the tree (so nothing is ever matched).
  const int32_t B = block_size_;
  for (int32_t row = s.n_computed / B; prefix_cache_ && row * B < n_computed; ++row) {
    commit_row(s, row, std::min(n_computed - row * B, B));
  }
  s.n_computed = n_computed;
}

// Row `row` of s now holds n_in_row computed tokens: cache them. A partial row is inserted even
// when a sibling already holds the same tokens, so a running sequence's computed tokens stay
// findable whatever happens to that sibling; a dominated leaf is dropped when released.
void KvManager::commit_row(Sequence& s, int32_t row, int32_t n_in_row) {
  const int32_t B = block_size_;
  const std::span<const int32_t> toks = std::span(s.tokens).subspan(row * B, n_in_row);
  const int32_t own = s.table[row];
  const int32_t parent = row == 0 ? tree_.root() : s.table[row - 1];
  const int32_t twin = n_in_row == B ? tree_.find_full(parent, toks) : -1;
  if (tree_.contains(own)) {  // our node (created by an earlier commit, or adopted): grow it
    if (twin >= 0) {          // someone cached the identical full row meanwhile
      tree_.remove(own);
      return share_full_row(s, row, twin);
    }
    return tree_.extend(own, toks.subspan(tree_.len(own)));
  }
  if (twin >= 0) return share_full_row(s, row, twin);
  tree_.add(parent, own, toks);
}

// Switches row `row` of s to the cached identical full row `twin` and frees its own copy.
void KvManager::share_full_row(Sequence& s, int32_t row, int32_t twin) {
  pool_.add_ref(twin);
  const int32_t own = s.table[row];
  s.table[row] = twin;
  unref(own);
}

void KvManager::truncate(SeqId id, int32_t n_tokens) {
  Sequence& s = seq(id);
  EFIM_CHECK(n_tokens >= s.n_computed && n_tokens <= static_cast<int32_t>(s.tokens.size()),
             "KvManager::truncate: sequence ", id, " to ", n_tokens, " tokens, outside [",
             s.n_computed, ", ", s.tokens.size(), "]");
  ++clock_;
  s.tokens.resize(static_cast<size_t>(n_tokens));
  // Rows wholly past the computed tokens were never committed, so they are in no tree node:
  // unref frees them.
  while (static_cast<int32_t>(s.table.size()) > rows_for(s.tokens.size())) {
    unref(s.table.back());
    s.table.pop_back();
  }
}

void KvManager::release(SeqId id) {
  Sequence& s = seq(id);
  ++clock_;
  if (s.cow_src >= 0) unref(s.cow_src);
  for (int32_t b : s.table) unref(b);
  seqs_.erase(id);
}

void KvManager::clear() {
  ++clock_;
  while (pool_.lru_front() >= 0) evict(pool_.lru_front());
}

int32_t KvManager::peek(std::span<const int32_t> tokens) const {
  const PrefixTree::Match m = tree_.match(tokens, static_cast<int32_t>(tokens.size()));
  return block_size_ * static_cast<int32_t>(m.rows.size()) + m.partial_len;
}

int32_t KvManager::take_block() {
  std::optional<int32_t> b = pool_.pop_free();
  if (!b) {
    const int32_t victim = pool_.lru_front();
    EFIM_CHECK(victim >= 0, "KvManager: no free or evictable block (accounting bug)");
    evict(victim);
    b = pool_.pop_free();
  }
  pool_.add_ref(*b);
  return *b;
}

void KvManager::evict(int32_t node) {
  const int32_t parent = tree_.parent(node);
  pool_.lru_erase(node);
  tree_.remove(node);
  pool_.push_free(node);
  if (parent != tree_.root() && tree_.is_leaf(parent) && pool_.ref(parent) == 0) {
    pool_.lru_insert(parent);
  }
}

void KvManager::unref(int32_t block) {
  if (pool_.drop_ref(block) > 0) return;
  if (tree_.contains(block) && tree_.dominated(block)) tree_.remove(block);  // a sibling has it all
  if (!tree_.contains(block)) return pool_.push_free(block);
  pool_.set_tick(block, clock_);
  if (tree_.is_leaf(block)) pool_.lru_insert(block);
}

int32_t KvManager::slot(SeqId id, int32_t position) const {
  const Sequence& s = seq(id);
  EFIM_CHECK(position >= 0 && position < static_cast<int32_t>(s.tokens.size()),
             "KvManager::slot: position ", position, " outside sequence ", id, " of ",
             s.tokens.size(), " tokens");
  return s.table[position / block_size_] * block_size_ + position % block_size_;
}

std::vector<int32_t> KvManager::slots(SeqId id) const {
  const Sequence& s = seq(id);
  std::vector<int32_t> out(s.tokens.size());
  for (size_t p = 0; p < out.size(); ++p) {
    out[p] = s.table[p / block_size_] * block_size_ + static_cast<int32_t>(p % block_size_);
  }
  return out;
}

KvStats KvManager::stats() const {
  KvStats st;
  st.total_blocks = pool_.n_blocks();
  st.free_blocks = pool_.n_free();
  st.used_blocks = pool_.n_used();
  st.cached_blocks = cached_blocks();
  st.prefix_query_tokens = query_tokens_;
  st.prefix_hit_tokens = hit_tokens_;
  return st;
}

}  // namespace efim
