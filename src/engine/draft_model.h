// Speculative drafts from a small model with the target's vocabulary (llama.cpp's
// --model-draft): the greedy continuation of a sequence's tokens, k tokens at a time. The
// engine verifies them like n-gram drafts (Runner: accepted while equal to the token drawn), so
// the output stays what plain decoding gives.
//
// Each drafting sequence evaluates in a session of its own (a contiguous K/V cache of the draft
// model). Before a draft the session is cut back to the longest prefix it shares with the
// sequence's tokens and the rest is evaluated, so drafts the target rejected are dropped by the
// next call. A session outlives its request: the next request takes the free session whose
// tokens share the longest prefix with its own, so an editor asking again at one place has the
// draft model evaluate only what changed, as the prefix cache does for the target.
//
// Catching up with a long prompt costs the draft model a prefill on the request's critical
// path. With max_catch_up, a request that would need more gets no drafts; its tokens are noted
// and idle_work() evaluates them when the engine has nothing else to do (between an editor's
// keystrokes), so the next request at that place finds them.
//
// Engine thread only (the draft model's forward pass runs on the caller's thread and pool).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_manager.h"  // SeqId
#include "model/model.h"

namespace efim {

struct DraftModelOptions {
  int32_t max_sessions = 4;   // draft K/V caches kept (sequences that draft at once, at most)
  int64_t session_tokens = 0; // positions of each; 0: the draft model's context length
  DType kv_type = DType::F16;
  int64_t chunk = 512;        // tokens per forward pass when a session catches up
  // A draft ends before a token the draft model gives less probability than this (llama.cpp's
  // --draft-p-min): an unsure draft model would mostly add rows the target rejects.
  float p_min = 0.75f;
  // > 0: a draft needing more than this many tokens evaluated first is not made, its tokens are
  // left for idle_work; 0: any catch-up runs at once (one request: efim generate).
  int64_t max_catch_up = 0;
  int64_t idle_chunk = 32;  // tokens per idle_work call (what a new request may wait for)
};

class DraftModel {
 public:
  // `model` is borrowed and must outlive this; `eos`: tokens after which nothing is drafted;
  // `vocab`: the target's vocabulary size, a draft ends before a token outside it (the
  // padding rows of a larger draft vocabulary; 0: the draft model's own).
  DraftModel(Model& model, const DraftModelOptions& o, std::vector<int32_t> eos = {},
             int32_t vocab = 0);

  // Up to k greedy tokens of the draft model after `tokens` (sequence id's tokens so far, the
  // last one not yet computed by the target), fewer where the draft model ends its text, is
  // unsure (p_min) or the session's context ends; empty when every session is taken by another
  // sequence.
  // p_min >= 0 replaces the options' for this call.
  std::vector<int32_t> propose(SeqId id, std::span<const int32_t> tokens, int32_t k,
                               float p_min = -1.0f);
  // The sequence ended: its session stays, with its tokens, for the next request to reuse.
  void release(SeqId id);
  // Whether a session has tokens left to evaluate (a catch-up put off by max_catch_up).
  bool has_idle_work() const;
  // Evaluates up to idle_chunk of them, in the most recently used such session.
  void idle_work();

  struct Stats {
    int64_t proposals = 0;  // propose calls that drafted
    int64_t evaluated = 0;  // tokens the draft model computed (catching up and drafting)
    int64_t reused = 0;     // tokens a request found in the session it took (left by another)
    int64_t refused = 0;    // propose calls without a free session
    int64_t deferred = 0;   // propose calls that left a long catch-up to idle_work
    int64_t idle = 0;       // tokens of `evaluated` that idle_work evaluated
  };
  const Stats& stats() const { return stats_; }
  int32_t sessions() const { return static_cast<int32_t>(sessions_.size()); }

 private:
  struct Session {
    std::unique_ptr<ContiguousSession> s;
    std::vector<int32_t> fed;   // the tokens whose K/V the session holds, in order
    std::vector<int32_t> want;  // empty, or tokens to hold, fed a prefix of them (idle_work)
    SeqId owner = 0;
    bool taken = false;
    bool fresh = false;  // just taken by its owner: its tokens are another request's
    uint64_t last_use = 0;
  };
  Session* session_for(SeqId id, std::span<const int32_t> tokens);
  // Evaluates tokens[s.fed.size(), end) in chunks; the logits of the last one.
  std::vector<float> catch_up(Session& s, std::span<const int32_t> tokens, size_t end);

  Model& model_;
  DraftModelOptions opt_;
  std::vector<int32_t> eos_;
  int32_t vocab_ = 0;
  int64_t capacity_ = 0;
  std::vector<Session> sessions_;
  uint64_t clock_ = 0;
  Stats stats_;
};

}  // namespace efim
