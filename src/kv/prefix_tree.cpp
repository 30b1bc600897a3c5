#include "kv/prefix_tree.h"

#include <algorithm>

#include "base/error.h"

namespace efim {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int32_t>(i);
}

}  // namespace

PrefixTree::PrefixTree(int32_t n_blocks, int32_t block_size)
    : block_size_(block_size), root_(n_blocks), nodes_(n_blocks + 1) {
  nodes_[root_].present = true;
  nodes_[root_].row = -1;
}

uint64_t PrefixTree::row_key(int32_t parent, std::span<const int32_t> row) const {
  uint64_t h = mix(0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(parent));
  for (int32_t t : row) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

int32_t PrefixTree::find_full(int32_t parent, std::span<const int32_t> row) const {
  auto [lo, hi] = full_.equal_range(row_key(parent, row));
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[it->second];
    if (n.parent == parent && std::ranges::equal(n.tokens, row)) return it->second;
  }
  return -1;
}

PrefixTree::Best PrefixTree::best_child(int32_t parent, std::span<const int32_t> row) const {
  Best best;
  for (int32_t c : nodes_[parent].children) {
    int32_t l = common_prefix(nodes_[c].tokens, row);
    bool ends_here = l == len(c);
    bool better = l > best.len || (l == best.len && l > 0 && ends_here && len(best.node) != l);
    if (better) best = {c, l};
  }
  return best;
}

bool PrefixTree::dominated(int32_t node) const {
  const Node& n = nodes_[node];
  if (!n.children.empty() || len(node) == block_size_) return false;
  for (int32_t c : nodes_[n.parent].children) {
    if (c != node && common_prefix(nodes_[c].tokens, n.tokens) == len(node)) return true;
  }
  return false;
}

PrefixTree::Match PrefixTree::match(std::span<const int32_t> tokens, int32_t limit) const {
  Match m;
  int32_t node = root_;
  for (int32_t lo = 0; lo < limit; lo += block_size_) {
    auto row = tokens.subspan(lo, std::min(block_size_, limit - lo));
    if (static_cast<int32_t>(row.size()) == block_size_) {
      int32_t c = find_full(node, row);
      if (c >= 0) {
        m.rows.push_back(c);
        node = c;
        continue;
      }
    }
    Best b = best_child(node, row);  // b.len < B here: a full match was found above
    if (b.len > 0) m.partial = b.node, m.partial_len = b.len;
    break;
  }
  return m;
}

void PrefixTree::index_full(int32_t node) {
  full_.emplace(row_key(nodes_[node].parent, nodes_[node].tokens), node);
}

void PrefixTree::add(int32_t parent, int32_t node, std::span<const int32_t> tokens) {
  Node& p = nodes_[parent];
  Node& n = nodes_[node];
  EFIM_CHECK(!n.present && node != root_, "PrefixTree::add: block ", node, " already in the tree");
  EFIM_CHECK(p.present && (parent == root_ || len(parent) == block_size_),
             "PrefixTree::add: parent ", parent, " is absent or not a full row");
  EFIM_CHECK(!tokens.empty() && static_cast<int32_t>(tokens.size()) <= block_size_,
             "PrefixTree::add: ", tokens.size(), " tokens for a block of ", block_size_);
  n.present = true;
  n.parent = parent;
  n.row = p.row + 1;
  n.tokens.assign(tokens.begin(), tokens.end());
  n.index_in_parent = static_cast<int32_t>(p.children.size());
  p.children.push_back(node);
  ++n_nodes_;
  if (len(node) == block_size_) index_full(node);
}

void PrefixTree::extend(int32_t node, std::span<const int32_t> more) {
  Node& n = nodes_[node];
  EFIM_CHECK(n.present && node != root_ && n.tokens.size() + more.size() <= size_t(block_size_),
             "PrefixTree::extend: node ", node, " with ", n.tokens.size(), " + ", more.size(),
             " tokens exceeds block size ", block_size_);
  if (more.empty()) return;
  n.tokens.insert(n.tokens.end(), more.begin(), more.end());
  if (len(node) == block_size_) index_full(node);
}

void PrefixTree::remove(int32_t node) {
  Node& n = nodes_[node];
  EFIM_CHECK(n.present && node != root_ && n.children.empty(), "PrefixTree::remove: node ", node,
             " is absent, the root, or has ", n.children.size(), " children");
  if (len(node) == block_size_) {
    auto [lo, hi] = full_.equal_range(row_key(n.parent, n.tokens));
    for (auto it = lo; it != hi; ++it) {
      if (it->second == node) {
        full_.erase(it);
        break;
      }
    }
  }
  std::vector<int32_t>& sib = nodes_[n.parent].children;  // swap-remove in O(1)
  int32_t last = sib.back();
  sib[n.index_in_parent] = last;
  nodes_[last].index_in_parent = n.index_in_parent;
  sib.pop_back();
  n = Node{};
  --n_nodes_;
}

void PrefixTree::audit() const {
  int32_t n_present = 0, n_full = 0;
  for (int32_t id = 0; id < root_; ++id) {
    const Node& n = nodes_[id];
    if (!n.present) continue;
    ++n_present;
    const Node& p = nodes_[n.parent];
    EFIM_CHECK(p.present && n.parent != id, "tree: node ", id, " has absent parent ", n.parent);
    EFIM_CHECK(n.parent == root_ || len(n.parent) == block_size_, "tree: node ", id,
               " hangs under partial node ", n.parent);
    EFIM_CHECK(n.row == p.row + 1, "tree: node ", id, " row ", n.row, " parent row ", p.row);
    EFIM_CHECK(!n.tokens.empty() && len(id) <= block_size_, "tree: node ", id, " len ", len(id));
    EFIM_CHECK(n.index_in_parent >= 0 && size_t(n.index_in_parent) < p.children.size() &&
                   p.children[n.index_in_parent] == id,
               "tree: node ", id, " child index ", n.index_in_parent, " is stale");
    if (len(id) == block_size_) {
      ++n_full;
      EFIM_CHECK(find_full(n.parent, n.tokens) == id, "tree: full node ", id,
                 " not indexed or duplicated");
    }
  }
  EFIM_CHECK(n_present == n_nodes_, "tree: ", n_present, " nodes present, count says ", n_nodes_);
  EFIM_CHECK(static_cast<int32_t>(full_.size()) == n_full, "tree: full index has ", full_.size(),
             " entries for ", n_full, " full nodes");
}

}  // namespace efim
