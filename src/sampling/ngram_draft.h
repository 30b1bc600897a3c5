// Draft tokens for speculative decoding without a draft model: code repeats itself, so the
// tokens that followed the latest earlier occurrence of the sequence's last n tokens (in its own
// prompt and output, or in other documents such as the previous completions under the same
// anchor) are a cheap guess of what comes next. The guesses are verified by the model in one
// step; sampling each verified position as without speculation and accepting a draft token
// while it equals the token drawn leaves the output distribution unchanged (a draft is a single
// token, not a distribution).
//
// Pure bookkeeping: no model, no threads.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace efim {

struct NgramDraftOptions {
  int32_t min_n = 2;  // shortest suffix looked up (a 1-token match guesses too wildly)
  int32_t max_n = 4;  // longest suffix looked up; longer matches are tried first
};

// An index of n-grams (min_n..max_n) over documents, each n-gram mapped to the position after its
// latest occurrence. The sequence being decoded is itself a document that grows by append().
class NgramIndex {
 public:
  explicit NgramIndex(const NgramDraftOptions& options = {});

  // Starts a new document (n-grams never span two) and returns its id.
  int32_t add_document(std::span<const int32_t> tokens);
  // Appends tokens to document `doc` (the sequence's accepted tokens as they come).
  void append(int32_t doc, std::span<const int32_t> tokens);

  // Up to max_tokens tokens that followed the latest earlier occurrence of the last n tokens of
  // document `doc`, for the largest n in [min_n, max_n] that has one (the occurrence at the
  // document's own end does not count); empty when none does. The guess stops at the end of
  // the document it is read from.
  std::vector<int32_t> propose(int32_t doc, int32_t max_tokens) const;

  int64_t n_tokens() const;  // over all documents

 private:
  struct Where {
    int32_t doc = 0;
    int32_t pos = 0;  // the continuation: the n-gram is docs_[doc][pos - n, pos)
  };
  // Indexes the n-grams of document `doc` that end just before `pos` (pos is then their
  // continuation).
  void index_before(int32_t doc, int32_t pos);
  uint64_t hash(const int32_t* t, int32_t n) const;

  NgramDraftOptions opt_;
  std::vector<std::vector<int32_t>> docs_;
  // Per n (index n - min_n): hash of an n-gram -> its latest occurrence with a continuation.
  std::vector<std::unordered_map<uint64_t, Where>> latest_;
};

// Draft length per verification step, adapted to how many drafts the model accepts: doubles
// (up to max) after a fully accepted draft, falls to one more than the accepted count after a
// partial one (at least min), so a run of misses costs little and a run of hits grows.
class DraftLength {
 public:
  DraftLength(int32_t min, int32_t max, int32_t start);
  int32_t next() const { return k_; }
  // After verifying a draft of `proposed` tokens of which the first `accepted` were accepted.
  void update(int32_t proposed, int32_t accepted);

 private:
  int32_t min_, max_, k_;
};

// What earlier requests at the same place generated, kept as draft documents for the next ones:
// an editor asks again and again at one place while the user types, and the text the model
// suggested a keystroke ago is often what it suggests now. A place is a caller's key (the
// server's: the prompt's context and suffix, infill/planner.h); each remembered document is the
// text a request typed after the middle sentinel (its last `keep_typed` tokens) followed by
// what it generated, so that a lookup of the newly typed tokens finds their continuation.
// Bounded (least recently used place first, newest documents per place kept); pure
// bookkeeping, owned by one thread.
struct DraftMemoryOptions {
  size_t max_places = 256;
  size_t docs_per_place = 4;  // 0: nothing is remembered
  size_t keep_typed = 32;    // tokens of the typed text kept before each completion
  size_t max_doc_tokens = 512;
};

class DraftMemory {
 public:
  explicit DraftMemory(const DraftMemoryOptions& options = {});

  // Records `typed` (its last keep_typed tokens) ++ `generated` (at most max_doc_tokens in
  // all) under `place`; nothing when generated is empty, place is 0 or docs_per_place is 0.
  void remember(uint64_t place, std::span<const int32_t> typed,
                std::span<const int32_t> generated);
  // The documents of `place`, oldest first (the newest wins a lookup: NgramIndex prefers later
  // documents); marks the place as just used.
  std::vector<std::vector<int32_t>> recall(uint64_t place);

  size_t n_places() const { return places_.size(); }

 private:
  struct Place {
    std::vector<std::vector<int32_t>> docs;  // oldest first
    std::list<uint64_t>::iterator lru;
  };
  void touch(Place& p, uint64_t place);

  DraftMemoryOptions opt_;
  std::unordered_map<uint64_t, Place> places_;
  std::list<uint64_t> lru_;  // front: most recent
};

}  // namespace efim
