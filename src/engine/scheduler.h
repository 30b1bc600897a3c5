// Scheduler: decides one step. Pure bookkeeping over a KvManager: no model, no threads, no
// clock, so a test drives it step by step and checks exact plans and block ids.
//
// Every sequence has tokens wanted (prompt + tokens sampled so far) and tokens computed (their
// K/V is in the cache). There is no prefill or decode phase (architecture rule 4): a step gives
// each sequence a number of its uncomputed tokens under one token budget:
//   1. growth: a running sequence whose wanted tokens outgrew its KV blocks gets blocks
//      (KvManager::append_tokens); when the pool is short, the most recently admitted running
//      sequence is preempted by recompute (its blocks are released, its computed rows stay in
//      the prefix cache, its tokens are kept and it goes back to the front of the queue);
//   2. running sequences with exactly one uncomputed token (decode) get 1 token each, in
//      admission order;
//   3. running sequences with more (prompt chunks) share what is left, in admission order;
//   4. waiting sequences are admitted in FIFO order while the budget, the running limit and the
//      KV pool allow (KvManager::match_and_allocate: the cached prefix counts as computed); an
//      allocation failure makes the head of the queue (and everything behind it) wait.
// A sequence that cannot fit in the whole pool is rejected rather than waiting forever.
//
// Speculative decoding: a decoding sequence (one uncomputed token) may carry a draft of k
// provisional tokens after it (set_draft). It is planned as one chunk of 1 + k tokens with
// logits at each of them; drafts are cut to fit the token budget (decode tokens keep theirs
// first), and a draft that needs KV blocks the pool cannot give is dropped before anything is
// preempted for it. After the step, on_verified keeps the accepted drafts as computed tokens
// and drops the rest, so rejected rows never reach the prefix cache; a preempted sequence
// loses its draft.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_manager.h"

namespace efim {

struct SchedulerOptions {
  int32_t max_step_tokens = 512;  // token budget of one step (> 0)
  int32_t max_running = 64;       // sequences in the running set at most (> 0)
};

// One sequence's share of a step: tokens [start, start + n_tokens) of its wanted tokens.
struct PlannedSeq {
  SeqId id = 0;
  int32_t start = 0;     // = tokens computed before the step
  int32_t n_tokens = 0;  // > 0
  bool sample = false;   // the chunk ends at the last wanted token: sample the next one
  // The chunk's last n_draft tokens are a draft (then sample is true): logits at each of its
  // last 1 + n_draft positions, committed through Scheduler::on_verified.
  int32_t n_draft = 0;
  bool operator==(const PlannedSeq&) const = default;
};

struct StepPlan {
  std::vector<PlannedSeq> seqs;     // decode tokens first, then prompt chunks
  std::vector<SlotCopy> copies;     // KvCache::copy_slot(from, to) to run before the step
  std::vector<SeqId> admitted;      // newly admitted this step (in order)
  std::vector<SeqId> preempted;     // released and requeued this step (in order)
  std::vector<SeqId> rejected;      // can never fit the KV pool: finish them with an error
  int32_t n_tokens = 0;             // sum of seqs[i].n_tokens
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& options, KvManager& kv);

  // Queues a new sequence (appended to the waiting queue). An `urgent` one (a token-healing
  // probe, whose owner waits for it) goes to the front of the queue and is admitted even when
  // max_running sequences already run.
  void add(SeqId id, std::vector<int32_t> prompt, bool urgent = false);
  // Plans the next step; changes the KV manager (admission, growth, preemption).
  StepPlan schedule();
  // After the step ran: the planned tokens of `p` are computed (commits them to the KV manager).
  // Not for a chunk with a draft.
  void on_computed(const PlannedSeq& p);
  // Appends a draft to a running sequence with exactly one uncomputed token and no draft.
  void set_draft(SeqId id, std::span<const int32_t> draft);
  // After the step ran a chunk with a draft: its first n_accepted draft tokens matched the
  // tokens drawn, so they and the token before them are computed (and committed); the other
  // drafts are dropped from the sequence and its KV blocks.
  void on_verified(const PlannedSeq& p, int32_t n_accepted);
  // A token was sampled for `id`: it becomes wanted (computed by a later step).
  void append_token(SeqId id, int32_t token);
  // Removes a sequence (finished, cancelled or rejected); a running one's blocks are released,
  // its computed rows stay in the prefix cache.
  void remove(SeqId id);

  bool contains(SeqId id) const { return seqs_.contains(id); }
  bool has_work() const { return !seqs_.empty(); }
  std::span<const int32_t> tokens(SeqId id) const { return get(id).tokens; }
  int32_t n_computed(SeqId id) const { return get(id).n_computed; }
  int32_t n_draft(SeqId id) const { return get(id).n_draft; }
  bool is_running(SeqId id) const { return get(id).running; }
  int32_t n_cached_at_admission(SeqId id) const { return get(id).n_cached; }
  int32_t n_preemptions(SeqId id) const { return get(id).n_preemptions; }
  bool was_admitted(SeqId id) const { return get(id).admissions > 0; }
  const std::vector<SeqId>& running() const { return running_; }  // in admission order
  const std::deque<SeqId>& waiting() const { return waiting_; }
  const KvManager& kv() const { return kv_; }

 private:
  struct Seq {
    std::vector<int32_t> tokens;  // wanted: prompt, then sampled tokens
    int32_t n_computed = 0;
    bool running = false;
    int32_t n_cached = 0;      // prefix reused at the first admission
    int32_t admissions = 0;
    int32_t n_preemptions = 0;
    bool urgent = false;
    int32_t n_draft = 0;       // the last n_draft tokens are a draft (not yet verified)
  };
  const Seq& get(SeqId id) const;
  Seq& get(SeqId id);
  void fit_drafts();
  void drop_draft(Seq& s, int32_t n);
  void grow_running(StepPlan& plan);
  void preempt(SeqId id, StepPlan& plan);
  void admit_waiting(StepPlan& plan, int32_t& budget);
  void plan_tokens(SeqId id, int32_t n, StepPlan& plan, int32_t& budget);

  SchedulerOptions opt_;
  KvManager& kv_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<SeqId> running_;  // admission order (last = most recently admitted)
  std::deque<SeqId> waiting_;
};

}  // namespace efim
