#include "tokenizer/spm.h"

#include <queue>

#include "base/error.h"

namespace efim {

SpmScoreModel::SpmScoreModel(std::unordered_map<std::string, int32_t> pieces,
                             std::vector<float> scores, const std::array<int32_t, 256>& byte_tokens)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), byte_tokens_(byte_tokens) {
  for (const auto& [text, id] : pieces_) {
    EFIM_CHECK(id >= 0 && static_cast<size_t>(id) < scores_.size(), "tokenizer: piece \"", text,
               "\" id ", id, " has no score (", scores_.size(), " scores)");
    max_piece_bytes_ = std::max(max_piece_bytes_, text.size());
  }
  for (int b = 0; b < 256; ++b) {
    EFIM_CHECK(byte_tokens_[b] >= 0 && static_cast<size_t>(byte_tokens_[b]) < scores_.size(),
               "tokenizer: SentencePiece vocabulary has no <0x", std::hex, b, "> byte token");
  }
}

int32_t SpmScoreModel::find(std::string_view text) const {
  if (text.size() > max_piece_bytes_) return -1;
  auto it = pieces_.find(std::string(text));
  return it == pieces_.end() ? -1 : it->second;
}

// Symbols are byte ranges [begin, begin + len) of `escaped` in a doubly linked list; candidate
// pairs wait in a max-heap by (score, leftmost). A candidate is stale when either symbol has
// changed length since it was pushed (llama.cpp's check: the pair's byte size no longer matches).
void SpmScoreModel::encode(std::string_view escaped, std::vector<int32_t>& out) const {
  struct Sym {
    uint32_t begin, len;
    int32_t prev, next;
  };
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t bytes;
    bool operator<(const Pair& o) const {  // top of the heap: highest score, then leftmost
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::vector<Sym> sym;  // [characters]
  sym.reserve(escaped.size());
  for (uint32_t i = 0; i < escaped.size();) {
    const auto lead = static_cast<uint8_t>(escaped[i]);
    const uint32_t want = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    const uint32_t len = std::min<uint32_t>(want, static_cast<uint32_t>(escaped.size()) - i);
    const auto k = static_cast<int32_t>(sym.size());
    sym.push_back(Sym{i, len, k - 1, -1});
    if (k > 0) sym[k - 1].next = k;
    i += len;
  }
  std::priority_queue<Pair> heap;
  auto push = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t bytes = sym[left].len + sym[right].len;
    const int32_t id = find(escaped.substr(sym[left].begin, bytes));
    if (id >= 0) heap.push(Pair{scores_[id], left, right, bytes});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(sym.size()); ++i) push(i - 1, i);
  while (!heap.empty()) {
    const Pair p = heap.top();
    heap.pop();
    Sym& left = sym[p.left];
    Sym& right = sym[p.right];
    if (left.len == 0 || right.len == 0 || left.len + right.len != p.bytes) continue;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (right.next >= 0) sym[right.next].prev = p.left;
    push(left.prev, p.left);
    push(p.left, left.next);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view text = escaped.substr(sym[i].begin, sym[i].len);
    const int32_t id = find(text);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Only a single character can fail to be a token: every merge formed one.
    for (char c : text) out.push_back(byte_tokens_[static_cast<uint8_t>(c)]);
  }
}

}  // namespace efim
