// PrefixTree: the prefix cache's token trie, one node per KV block ("block row").
//
// A node stored in block b covers the positions [row * B, row * B + len) of every sequence whose
// token path runs through it (B = block_size, 1 <= len <= B), and block b holds the K/V of those
// positions at offsets 0..len-1. Its parent is the node of row - 1 (or the root); only full
// nodes (len == B) have children. Siblings may share a leading run of tokens: a branch that
// diverged inside a row got its own block holding a copy of the shared part (copy-on-write),
// so every node is self-contained for its row. Node ids are block ids; the root is n_blocks.
//
// Lookups: a full row is found by hashing (parent, B tokens) in O(B); the one row where a match
// ends partially scans that parent's children for the longest common prefix.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace efim {

class PrefixTree {
 public:
  PrefixTree(int32_t n_blocks, int32_t block_size);

  int32_t root() const { return root_; }
  int32_t block_size() const { return block_size_; }
  int32_t n_nodes() const { return n_nodes_; }  // excluding the root
  bool contains(int32_t node) const { return nodes_[node].present; }
  std::span<const int32_t> tokens(int32_t node) const { return nodes_[node].tokens; }
  int32_t len(int32_t node) const { return static_cast<int32_t>(nodes_[node].tokens.size()); }
  int32_t parent(int32_t node) const { return nodes_[node].parent; }
  int32_t row(int32_t node) const { return nodes_[node].row; }
  bool is_leaf(int32_t node) const { return nodes_[node].children.empty(); }
  std::span<const int32_t> children(int32_t node) const { return nodes_[node].children; }

  // The full child of `parent` whose tokens equal `row` (B tokens), or -1.
  int32_t find_full(int32_t parent, std::span<const int32_t> row) const;

  // The child of `parent` sharing the longest leading run with `row` (len = that run, capped at
  // row.size()); ties prefer a child that ends exactly there (it can be extended in place),
  // then the earlier child. {-1, 0} when no child shares a first token.
  struct Best {
    int32_t node = -1;
    int32_t len = 0;
  };
  Best best_child(int32_t parent, std::span<const int32_t> row) const;

  // True for a partial leaf whose tokens a sibling holds too (as its own leading run): the node
  // adds nothing to the cache.
  bool dominated(int32_t node) const;

  // Longest cached prefix of tokens[0, limit): whole rows `rows` (their nodes, in order), then
  // `partial_len` tokens (0 <= partial_len < B) of node `partial` in the next row.
  struct Match {
    std::vector<int32_t> rows;
    int32_t partial = -1;
    int32_t partial_len = 0;
  };
  Match match(std::span<const int32_t> tokens, int32_t limit) const;

  // Inserts block `node` as a child of `parent` (root or a full node) with 1..B tokens.
  void add(int32_t parent, int32_t node, std::span<const int32_t> tokens);
  // Appends tokens to a node (at most up to B); a node that becomes full gets indexed.
  void extend(int32_t node, std::span<const int32_t> more);
  // Removes a leaf node.
  void remove(int32_t node);

  // Structural self-check (parents, children indices, full-row index); throws Error.
  void audit() const;

 private:
  struct Node {
    bool present = false;
    int32_t parent = -1;
    int32_t row = -1;
    int32_t index_in_parent = -1;   // position in parent's children
    std::vector<int32_t> tokens;    // [len <= B] token ids at offsets 0..len-1
    std::vector<int32_t> children;  // block ids, any order
  };
  uint64_t row_key(int32_t parent, std::span<const int32_t> row) const;
  void index_full(int32_t node);

  int32_t block_size_;
  int32_t root_;
  int32_t n_nodes_ = 0;
  std::vector<Node> nodes_;                          // [n_blocks + 1], root last
  std::unordered_multimap<uint64_t, int32_t> full_;  // row_key(parent, tokens) -> full node
};

}  // namespace efim
