// AnchorIndex: recent infill prompts ("anchors") that later requests can extend in EFIM order.
//
// An anchor is the token sequence of an earlier prompt, up to and including the middle
// sentinel and any inc after it (never the /infill `prompt` part), together with the texts it
// was built from. A root anchor comes from a PSM prompt `[B] X P p0 S s M`; an extension is a
// root plus inc tokens `... M inc`, recorded after an EFIM request so that the next round can
// append to it token for token. A new request (context, suffix, prefix) can reuse an anchor
// when the context (layout, extra files, current filename) and suffix are equal and the
// anchor's prefix text is a prefix of the request's prefix.
//
// The index is bounded (max_anchors, max_tokens over all anchors) and evicts the least
// recently used anchor first. It is owned by the engine thread: no locks.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "infill/layout.h"

namespace efim {

// What a root anchor and all its extensions share.
struct AnchorRoot {
  std::string key;  // context: layout id, current filename, extra chunks
  std::string suffix;
  uint64_t hash = 0;        // of key and suffix: place_hash
  size_t root_tokens = 0;   // tokens of the root (the PSM prompt without its `prompt` part)
  size_t middle_end = 0;    // index just past the middle sentinel
  size_t suffix_at = 0;     // index of the suffix sentinel
  size_t extra_chunks = 0;  // extra chunks the root kept (FimPrompt::extra_chunks)
};

struct Anchor {
  std::shared_ptr<const AnchorRoot> root;
  std::string prefix;             // prefix text the tokens cover: p0, or p0 + inc so far
  std::vector<int32_t> tokens;    // root tokens ++ inc tokens
  std::vector<PartRange> ranges;  // of tokens, as in FimPrompt
  bool truncated = false;         // the root was trimmed to a budget
  uint64_t serial = 0;            // insertion order (larger = newer)

  size_t inc_tokens() const { return tokens.size() - root->root_tokens; }
};

struct AnchorIndexOptions {
  size_t max_anchors = 1024;
  size_t max_tokens = size_t{1} << 22;  // sum of tokens.size() over all anchors
};

class AnchorIndex {
 public:
  explicit AnchorIndex(AnchorIndexOptions opts = {});
  AnchorIndex(const AnchorIndex&) = delete;
  AnchorIndex& operator=(const AnchorIndex&) = delete;

  // Context key of a request: anchors built under another key never match.
  static std::string context_key(const FimFormat& fmt, std::string_view filename,
                                 std::span<const ExtraChunk> extra);
  // A request's place: its context key and suffix, hashed (never 0). AnchorRoot::hash.
  static uint64_t place_hash(std::string_view key, std::string_view suffix);

  // Anchors with this key and suffix whose prefix starts `prefix`, longest prefix first, then
  // most recent first. Pointers stay valid until the next insert or clear.
  std::vector<const Anchor*> matches(std::string_view key, std::string_view suffix,
                                     std::string_view prefix) const;

  // Records a PSM prompt (or an EFIM one with no inc) as a new root anchor (tokens up to
  // middle_end; the `prompt` part after it is not kept). Returns the new anchor, or nullptr when it
  // alone exceeds max_tokens.
  const Anchor* insert_root(std::string key, std::string suffix, std::string prefix,
                            const FimPrompt& prompt);
  // Records `base` ++ inc_tokens covering `prefix` (= base.prefix + inc text); nullptr as above.
  const Anchor* extend(const Anchor& base, std::string prefix, std::span<const int32_t> inc_tokens);
  // Marks an anchor as just used (LRU).
  void touch(const Anchor& a);
  void clear();

  size_t size() const { return lru_.size(); }
  size_t total_tokens() const { return total_tokens_; }

 private:
  using List = std::list<Anchor>;
  const Anchor* insert(Anchor a);
  void evict();

  AnchorIndexOptions opts_;
  List lru_;  // front = most recently used
  std::unordered_multimap<uint64_t, List::iterator> by_hash_;
  std::unordered_map<const Anchor*, List::iterator> where_;
  size_t total_tokens_ = 0;
  uint64_t next_serial_ = 1;
};

}  // namespace efim
