// KvManager::check_invariants: a full audit of the bookkeeping, used by the tests after every
// operation. It recomputes everything from the sequences and the tree and compares with the
// pool's counters, so a drift in any incremental update shows up at once.
#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kv/kv_manager.h"

namespace efim {

void KvManager::check_invariants() const {
  tree_.audit();
  EFIM_CHECK(prefix_cache_ || tree_.n_nodes() == 0, "kv: the prefix cache is off but holds ",
             tree_.n_nodes(), " rows");
  audit_blocks();
  audit_lru();
  audit_sequences();
}

// Reference counts equal table + copy-source occurrences; each block is in exactly one state.
void KvManager::audit_blocks() const {
  const int32_t n = pool_.n_blocks();
  std::vector<int32_t> refs(n, 0);
  for (const auto& [id, s] : seqs_) {
    for (int32_t b : s.table) ++refs[b];
    if (s.cow_src >= 0) ++refs[s.cow_src];
  }
  int32_t n_free = 0, n_cached = 0, n_used = 0;
  for (int32_t b = 0; b < n; ++b) {
    EFIM_CHECK(pool_.ref(b) == refs[b], "kv: block ", b, " ref ", pool_.ref(b), ", expected ",
               refs[b]);
    const bool in_tree = tree_.contains(b);
    const bool should_be_free = refs[b] == 0 && !in_tree;
    EFIM_CHECK(pool_.is_free(b) == should_be_free, "kv: block ", b, " free flag ", pool_.is_free(b),
               " with ref ", refs[b], ", cached ", in_tree);
    n_free += should_be_free;
    n_cached += refs[b] == 0 && in_tree;
    n_used += refs[b] > 0;
    const int32_t parent = in_tree ? tree_.parent(b) : tree_.root();
    EFIM_CHECK(refs[b] == 0 || parent == tree_.root() || refs[parent] > 0, "kv: block ", b,
               " is referenced but its parent row ", parent, " is not");
  }
  const KvStats st = stats();
  EFIM_CHECK(st.free_blocks == n_free && st.cached_blocks == n_cached && st.used_blocks == n_used &&
                 n_free + n_cached + n_used == n,
             "kv: stats free/cached/used ", st.free_blocks, "/", st.cached_blocks, "/",
             st.used_blocks, ", recount ", n_free, "/", n_cached, "/", n_used, " of ", n);
  std::vector<char> seen(n, 0);
  for (int32_t b : pool_.free_order()) {
    EFIM_CHECK(pool_.is_free(b) && !seen[b], "kv: free list entry ", b, " is not free or repeated");
    seen[b] = 1;
  }
}

// The LRU list holds exactly the unreferenced cached leaves, oldest tick first.
void KvManager::audit_lru() const {
  int32_t count = 0;
  uint64_t last_tick = 0;
  for (int32_t b = pool_.lru_front(); b >= 0; b = pool_.lru_next(b)) {
    EFIM_CHECK(pool_.in_lru(b) && tree_.contains(b) && tree_.is_leaf(b) && pool_.ref(b) == 0,
               "kv: LRU entry ", b, " is not an unreferenced cached leaf");
    EFIM_CHECK(pool_.tick(b) >= last_tick, "kv: LRU out of order at block ", b);
    last_tick = pool_.tick(b);
    ++count;
  }
  EFIM_CHECK(count == pool_.lru_size(), "kv: LRU walk ", count, " != size ", pool_.lru_size());
  for (int32_t b = 0; b < pool_.n_blocks(); ++b) {
    const bool evictable = tree_.contains(b) && tree_.is_leaf(b) && pool_.ref(b) == 0;
    EFIM_CHECK(evictable == pool_.in_lru(b), "kv: block ", b, " evictable ", evictable,
               " but in_lru ", pool_.in_lru(b));
  }
}

// Every computed row of a sequence is a node on one root path holding exactly its tokens;
// rows it will still write belong to no other table and are not cached yet.
void KvManager::audit_sequences() const {
  const int32_t B = block_size_;
  std::vector<int32_t> in_tables(pool_.n_blocks(), 0);
  for (const auto& [id, s] : seqs_) {
    for (int32_t b : s.table) ++in_tables[b];
  }
  for (const auto& [id, s] : seqs_) {
    const int32_t n_tok = static_cast<int32_t>(s.tokens.size());
    EFIM_CHECK(static_cast<int32_t>(s.table.size()) == rows_for(s.tokens.size()) &&
                   s.n_cached <= s.n_computed && s.n_computed <= n_tok && s.n_cached < n_tok,
               "kv: sequence ", id, " has ", s.table.size(), " rows for ", n_tok,
               " tokens, cached ", s.n_cached, ", computed ", s.n_computed);
    for (int32_t row = 0; row < static_cast<int32_t>(s.table.size()); ++row) {
      const int32_t b = s.table[row];
      const int32_t lo = row * B;
      const int32_t n_done = std::clamp(s.n_computed - lo, 0, B);
      if (n_done < B) {
        EFIM_CHECK(in_tables[b] == 1, "kv: sequence ", id, " writes row ", row, " in block ", b,
                   " that is in ", in_tables[b], " tables");
      }
      if (!tree_.contains(b)) {  // only a copy-on-write row waits for the first commit
        const bool pending_copy = s.cow_src >= 0 && row == s.n_computed / B;
        EFIM_CHECK(n_done == 0 || pending_copy || !prefix_cache_, "kv: sequence ", id,
                   " computed row ", row,
                   " (block ", b, ") is not cached");
        continue;
      }
      const int32_t parent = row == 0 ? tree_.root() : s.table[row - 1];
      const auto want = std::span(s.tokens).subspan(lo, n_done);
      EFIM_CHECK(
          n_done > 0 && tree_.parent(b) == parent && std::ranges::equal(tree_.tokens(b), want),
          "kv: sequence ", id, " row ", row, " block ", b, " (parent ", tree_.parent(b), ", ",
          tree_.len(b), " tokens) disagrees with its ", n_done, " computed tokens");
    }
  }
}

}  // namespace efim
