#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "base/error.h"

namespace efim {
namespace {

constexpr size_t kCacheMaxEntries = 1 << 16;  // cleared when full: simple and bounded
constexpr size_t kCacheMaxPieceBytes = 256;   // long pieces (space runs) are rare: not cached

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t mix(uint64_t k) {  // splitmix64 finaliser
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ULL;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebULL;
  return k ^ (k >> 31);
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> piece_ids,
                   const std::vector<BpeMerge>& merges, const BpeOptions& opts)
    : piece_ids_(std::move(piece_ids)),
      ignore_merges_(opts.ignore_merges),
      unk_(opts.unk),
      char_symbols_(opts.char_symbols) {
  for (int b = 0; b < 256; ++b) {
    if (char_symbols_) {
      byte_ids_[b] = opts.byte_tokens[b];
      continue;
    }
    auto it = piece_ids_.find(std::string(1, static_cast<char>(b)));
    byte_ids_[b] = it == piece_ids_.end() ? -1 : it->second;
  }
  size_t cap = 16;
  while (cap < 2 * merges.size()) cap *= 2;
  table_.assign(cap, Slot{});
  for (size_t r = 0; r < merges.size(); ++r) {
    const BpeMerge& m = merges[r];
    const uint64_t key = pair_key(m.left, m.right);
    size_t i = mix(key) & (cap - 1);
    while (table_[i].key != ~uint64_t{0} && table_[i].key != key) i = (i + 1) & (cap - 1);
    // A repeated pair takes its last rank, as Hugging Face's map built from the list does.
    table_[i] = Slot{key, static_cast<int32_t>(r), m.result};
  }
}

BpeModel::BpeModel(BpeModel&& o) noexcept { *this = std::move(o); }

BpeModel& BpeModel::operator=(BpeModel&& o) noexcept {
  piece_ids_ = std::move(o.piece_ids_);
  std::copy(std::begin(o.byte_ids_), std::end(o.byte_ids_), std::begin(byte_ids_));
  table_ = std::move(o.table_);
  ignore_merges_ = o.ignore_merges_;
  char_symbols_ = o.char_symbols_;
  unk_ = o.unk_;
  std::lock_guard<std::mutex> lock(cache_mutex_);
  cache_.clear();
  return *this;
}

const BpeModel::Slot* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (table_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = table_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    if (table_[i].key == key) return &table_[i];
    if (table_[i].key == ~uint64_t{0}) return nullptr;
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_ || (piece.size() == 1 && !char_symbols_)) {
    auto it = piece_ids_.find(std::string(piece));
    if (it != piece_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::move(key), std::vector<int32_t>(out.begin() + start, out.end()));
  }
}

// Symbols form a doubly linked list over the piece's bytes; candidate merges wait in a min-heap
// ordered by (rank, position). A popped candidate is stale when its left symbol was merged away
// or its right neighbour changed; Hugging Face applies exactly this check.
void BpeModel::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
  };
  struct Cand {
    int32_t rank, pos, result;
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<int32_t> ids;
  initial_symbols(piece, ids);
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Sym> sym(n);  // [n]
  for (int32_t i = 0; i < n; ++i) sym[i] = Sym{ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    if (const Slot* m = find_merge(sym[pos].id, sym[sym[pos].next].id)) {
      heap.push(Cand{m->rank, pos, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& left = sym[c.pos];
    if (left.id < 0 || left.next < 0) continue;
    const Slot* m = find_merge(left.id, sym[left.next].id);
    if (m == nullptr || m->result != c.result) continue;
    Sym& right = sym[left.next];
    left.id = c.result;
    right.id = -1;  // merged away
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

// The symbols merging starts from: one per byte, or one per UTF-8 character with byte fallback
// (a truncated character at the end counts as its bytes).
void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  auto byte_id = [&](uint8_t b) {
    EFIM_CHECK(byte_ids_[b] >= 0, "tokenizer: vocabulary has no token for byte 0x", std::hex,
               static_cast<int>(b));
    return byte_ids_[b];
  };
  ids.reserve(piece.size());
  if (!char_symbols_) {
    for (char c : piece) ids.push_back(byte_id(static_cast<uint8_t>(c)));
    return;
  }
  std::string ch;
  bool in_unk = false;  // the last symbol is a fused unknown
  for (size_t i = 0; i < piece.size();) {
    const auto lead = static_cast<uint8_t>(piece[i]);
    const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    ch.assign(piece.substr(i, len));
    i += ch.size();
    auto it = piece_ids_.find(ch);
    if (it != piece_ids_.end()) {
      ids.push_back(it->second);
      in_unk = false;
      continue;
    }
    const bool bytes_ok = std::all_of(ch.begin(), ch.end(), [&](char c) {
      return byte_ids_[static_cast<uint8_t>(c)] >= 0;
    });
    if (bytes_ok) {
      for (char c : ch) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      in_unk = false;
      continue;
    }
    EFIM_CHECK(unk_ >= 0, "tokenizer: no token, no byte tokens and no unknown token for \"", ch,
               "\"");
    if (!in_unk) ids.push_back(unk_);
    in_unk = true;
  }
}

}  // namespace efim
