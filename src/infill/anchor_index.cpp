#include "infill/anchor_index.h"

#include <algorithm>

#include "base/error.h"

namespace efim {

uint64_t AnchorIndex::place_hash(std::string_view key, std::string_view suffix) {
  const uint64_t a = std::hash<std::string_view>{}(key);
  const uint64_t b = std::hash<std::string_view>{}(suffix);
  const uint64_t h = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  return h == 0 ? 1 : h;
}

namespace {

// Length-prefixed so that no two different contexts give the same key.
void put(std::string& out, std::string_view s) {
  out += std::to_string(s.size());
  out += ':';
  out += s;
}

}  // namespace

AnchorIndex::AnchorIndex(AnchorIndexOptions opts) : opts_(opts) {
  EFIM_CHECK(opts_.max_anchors > 0, "infill: AnchorIndex max_anchors must be > 0");
}

std::string AnchorIndex::context_key(const FimFormat& fmt, std::string_view filename,
                                     std::span<const ExtraChunk> extra) {
  std::string key;
  put(key, fmt.id());
  put(key, filename);
  for (const ExtraChunk& c : extra) {
    put(key, c.filename);
    put(key, c.text);
  }
  return key;
}

std::vector<const Anchor*> AnchorIndex::matches(std::string_view key, std::string_view suffix,
                                                std::string_view prefix) const {
  std::vector<const Anchor*> out;
  const auto [lo, hi] = by_hash_.equal_range(place_hash(key, suffix));
  for (auto it = lo; it != hi; ++it) {
    const Anchor& a = *it->second;
    if (a.root->suffix != suffix || a.root->key != key || !prefix.starts_with(a.prefix)) continue;
    // The split must fall between UTF-8 characters of the request's prefix (it always does
    // for valid UTF-8; invalid input must not glue two halves of a character).
    const size_t n = a.prefix.size();
    if (n == prefix.size() || (static_cast<uint8_t>(prefix[n]) & 0xC0) != 0x80) {
      out.push_back(&a);
    }
  }
  std::sort(out.begin(), out.end(), [](const Anchor* x, const Anchor* y) {
    if (x->prefix.size() != y->prefix.size()) return x->prefix.size() > y->prefix.size();
    return x->serial > y->serial;
  });
  return out;
}

const Anchor* AnchorIndex::insert_root(std::string key, std::string suffix, std::string prefix,
                                       const FimPrompt& prompt) {
  auto root = std::make_shared<AnchorRoot>();
  root->hash = place_hash(key, suffix);
  root->key = std::move(key);
  root->suffix = std::move(suffix);
  root->root_tokens = prompt.middle_end;
  root->middle_end = prompt.middle_end;
  root->extra_chunks = prompt.extra_chunks;
  EFIM_CHECK(prompt.order != FimOrder::spm && prompt.count(PromptPart::inc) == 0,
             "infill: an anchor root must be a PSM prompt, not ", order_name(prompt.order));
  EFIM_CHECK(prompt.middle_end > 0 && prompt.middle_end <= prompt.tokens.size(),
             "infill: anchor prompt has middle_end ", prompt.middle_end, " of ",
             prompt.tokens.size(), " tokens");
  root->suffix_at = prompt.middle_end - 2 - prompt.count(PromptPart::suffix);  // [S s M]
  Anchor a;
  a.root = std::move(root);
  a.prefix = std::move(prefix);
  a.tokens.assign(prompt.tokens.begin(),
                  prompt.tokens.begin() + static_cast<ptrdiff_t>(prompt.middle_end));
  for (const PartRange& r : prompt.ranges) {
    if (r.begin < prompt.middle_end)
      a.ranges.push_back(
          {r.part, r.begin, std::min<uint32_t>(r.end, static_cast<uint32_t>(prompt.middle_end))});
  }
  a.truncated = prompt.truncated;
  return insert(std::move(a));
}

const Anchor* AnchorIndex::extend(const Anchor& base, std::string prefix,
                                  std::span<const int32_t> inc_tokens) {
  EFIM_CHECK(prefix.starts_with(base.prefix), "infill: extension prefix (", prefix.size(),
             " bytes) does not start with its anchor's prefix (", base.prefix.size(), " bytes)");
  Anchor a;
  a.root = base.root;
  a.prefix = std::move(prefix);
  a.tokens.reserve(base.tokens.size() + inc_tokens.size());
  a.tokens.assign(base.tokens.begin(), base.tokens.end());
  a.tokens.insert(a.tokens.end(), inc_tokens.begin(), inc_tokens.end());
  a.ranges = base.ranges;
  if (!inc_tokens.empty()) {
    const auto begin = static_cast<uint32_t>(base.tokens.size());
    const auto end = static_cast<uint32_t>(a.tokens.size());
    if (!a.ranges.empty() && a.ranges.back().part == PromptPart::inc) {
      a.ranges.back().end = end;
    } else {
      a.ranges.push_back({PromptPart::inc, begin, end});
    }
  }
  a.truncated = base.truncated;
  return insert(std::move(a));
}

const Anchor* AnchorIndex::insert(Anchor a) {
  if (a.tokens.size() > opts_.max_tokens) return nullptr;
  a.serial = next_serial_++;
  total_tokens_ += a.tokens.size();
  lru_.push_front(std::move(a));
  const auto it = lru_.begin();
  by_hash_.emplace(it->root->hash, it);
  where_.emplace(&*it, it);
  evict();  // never the new anchor: it alone fits both bounds
  return &lru_.front();
}

// Drops least recently used anchors until both bounds hold.
void AnchorIndex::evict() {
  while (!lru_.empty() && (lru_.size() > opts_.max_anchors || total_tokens_ > opts_.max_tokens)) {
    const auto victim = std::prev(lru_.end());
    const auto [lo, hi] = by_hash_.equal_range(victim->root->hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == victim) {
        by_hash_.erase(it);
        break;
      }
    }
    where_.erase(&*victim);
    total_tokens_ -= victim->tokens.size();
    lru_.erase(victim);
  }
}

void AnchorIndex::touch(const Anchor& a) {
  const auto it = where_.find(&a);
  EFIM_CHECK(it != where_.end(), "infill: touch() of an anchor that is not in the index");
  lru_.splice(lru_.begin(), lru_, it->second);
}

void AnchorIndex::clear() {
  lru_.clear();
  by_hash_.clear();
  where_.clear();
  total_tokens_ = 0;
}

}  // namespace efim
