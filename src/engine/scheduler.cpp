#include "engine/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace efim {

Scheduler::Scheduler(const SchedulerOptions& options, KvManager& kv) : opt_(options), kv_(kv) {
  EFIM_CHECK(opt_.max_step_tokens > 0, "SchedulerOptions.max_step_tokens must be positive, got ",
             opt_.max_step_tokens);
  EFIM_CHECK(opt_.max_running > 0, "SchedulerOptions.max_running must be positive, got ",
             opt_.max_running);
}

const Scheduler::Seq& Scheduler::get(SeqId id) const {
  auto it = seqs_.find(id);
  EFIM_CHECK(it != seqs_.end(), "Scheduler: unknown sequence ", id);
  return it->second;
}

Scheduler::Seq& Scheduler::get(SeqId id) {
  return const_cast<Seq&>(static_cast<const Scheduler*>(this)->get(id));
}

void Scheduler::add(SeqId id, std::vector<int32_t> prompt, bool urgent) {
  EFIM_CHECK(!seqs_.contains(id), "Scheduler: sequence ", id, " already exists");
  EFIM_CHECK(!prompt.empty(), "Scheduler: sequence ", id, " has an empty prompt");
  Seq s;
  s.tokens = std::move(prompt);
  s.urgent = urgent;
  seqs_.emplace(id, std::move(s));
  if (urgent)
    waiting_.push_front(id);
  else
    waiting_.push_back(id);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  fit_drafts();
  grow_running(plan);
  int32_t budget = opt_.max_step_tokens;
  // Decode tokens first: one each (with its draft), so a long prompt never stalls generating
  // sequences.
  for (SeqId id : running_) {
    const Seq& s = get(id);
    const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.n_computed;
    if (left - s.n_draft == 1) plan_tokens(id, left, plan, budget);
  }
  // Then prompt chunks (chunked prefill) with what is left of the budget.
  for (SeqId id : running_) {
    const Seq& s = get(id);
    const int32_t left = static_cast<int32_t>(s.tokens.size()) - s.n_computed;
    if (left - s.n_draft > 1) plan_tokens(id, left, plan, budget);
  }
  admit_waiting(plan, budget);
  return plan;
}

// Plans min(n, budget) tokens of `id` starting at its first uncomputed token.
void Scheduler::plan_tokens(SeqId id, int32_t n, StepPlan& plan, int32_t& budget) {
  const int32_t take = std::min(n, budget);
  if (take <= 0) return;
  const Seq& s = get(id);
  PlannedSeq p{id, s.n_computed, take, false, 0};
  p.sample = p.start + take == static_cast<int32_t>(s.tokens.size());
  if (s.n_draft > 0) {
    EFIM_CHECK(p.sample, "Scheduler: the draft of sequence ", id, " was not fitted to the budget");
    p.n_draft = s.n_draft;
  }
  plan.seqs.push_back(p);
  plan.n_tokens += take;
  budget -= take;
}

void Scheduler::drop_draft(Seq& s, int32_t n) {
  s.tokens.resize(s.tokens.size() - static_cast<size_t>(n));
  s.n_draft -= n;
}

// Cuts drafts so that every decoding sequence's token and its draft fit the step's budget
// together (earlier admitted sequences keep theirs first).
void Scheduler::fit_drafts() {
  int32_t spare = opt_.max_step_tokens;
  for (SeqId id : running_) {
    const Seq& s = get(id);
    spare -= static_cast<int32_t>(s.tokens.size()) - s.n_computed - s.n_draft == 1;
  }
  for (SeqId id : running_) {
    Seq& s = get(id);
    if (s.n_draft == 0) continue;
    const int32_t keep = std::clamp(spare, 0, s.n_draft);
    drop_draft(s, s.n_draft - keep);
    spare -= keep;
  }
}

// Gives every running sequence the blocks for all its wanted tokens, preempting the most
// recently admitted sequences while the pool is short.
void Scheduler::grow_running(StepPlan& plan) {
  for (size_t i = 0; i < running_.size(); ++i) {
    const SeqId id = running_[i];
    Seq& s = get(id);
    const int32_t have = kv_.n_tokens(id);
    if (static_cast<int32_t>(s.tokens.size()) == have) continue;
    // A draft preempts nobody: when its blocks are short, it is dropped.
    if (s.n_draft > 0 && kv_.append_tokens(id, std::span(s.tokens).subspan(have))) continue;
    if (s.n_draft > 0) drop_draft(s, s.n_draft);
    if (static_cast<int32_t>(s.tokens.size()) == have) continue;
    bool self_preempted = false;
    while (!kv_.append_tokens(id, std::span(s.tokens).subspan(have))) {
      const SeqId victim = running_.back();
      preempt(victim, plan);
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // id was the last running sequence
  }
}

// Preemption by recompute: release the blocks (computed rows stay cached, so readmission
// often recovers them), keep the tokens, requeue at the front.
void Scheduler::preempt(SeqId id, StepPlan& plan) {
  Seq& s = get(id);
  drop_draft(s, s.n_draft);  // unverified: not part of the sequence
  kv_.release(id);
  s.running = false;
  s.n_computed = 0;
  ++s.n_preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
}

void Scheduler::admit_waiting(StepPlan& plan, int32_t& budget) {
  const KvStats st = kv_.stats();
  const int64_t capacity = int64_t(st.total_blocks) * kv_.block_size();
  while (!waiting_.empty() && budget > 0) {
    const SeqId id = waiting_.front();
    Seq& s = get(id);
    if (!s.urgent && static_cast<int32_t>(running_.size()) >= opt_.max_running) break;
    if (static_cast<int64_t>(s.tokens.size()) > capacity) {  // would wait forever
      waiting_.pop_front();
      plan.rejected.push_back(id);
      continue;
    }
    // A sequence preempted in this step waits for the next one (its blocks were just taken).
    if (std::find(plan.preempted.begin(), plan.preempted.end(), id) != plan.preempted.end()) break;
    std::optional<SeqAllocation> a = kv_.match_and_allocate(id, s.tokens);
    if (!a) break;  // allocation failure: the head of the queue waits (FIFO)
    waiting_.pop_front();
    s.running = true;
    s.n_computed = a->n_cached;
    if (s.admissions++ == 0) s.n_cached = a->n_cached;
    running_.push_back(id);
    plan.admitted.push_back(id);
    plan.copies.insert(plan.copies.end(), a->copies.begin(), a->copies.end());
    plan_tokens(id, static_cast<int32_t>(s.tokens.size()) - s.n_computed, plan, budget);
  }
}

void Scheduler::on_computed(const PlannedSeq& p) {
  Seq& s = get(p.id);
  EFIM_CHECK(s.running && p.n_draft == 0 && p.start == s.n_computed &&
                 p.start + p.n_tokens <= static_cast<int32_t>(s.tokens.size()),
             "Scheduler::on_computed: sequence ", p.id, " chunk [", p.start, ", ",
             p.start + p.n_tokens, ") does not follow its ", s.n_computed, " computed of ",
             s.tokens.size(), " tokens");
  s.n_computed += p.n_tokens;
  kv_.commit(p.id, s.n_computed);
}

void Scheduler::set_draft(SeqId id, std::span<const int32_t> draft) {
  Seq& s = get(id);
  EFIM_CHECK(s.running && s.n_draft == 0 &&
                 static_cast<int32_t>(s.tokens.size()) - s.n_computed == 1,
             "Scheduler::set_draft: sequence ", id, " is not decoding (running ", s.running,
             ", ", s.tokens.size() - s.n_computed, " uncomputed tokens, draft of ", s.n_draft, ")");
  s.tokens.insert(s.tokens.end(), draft.begin(), draft.end());
  s.n_draft = static_cast<int32_t>(draft.size());
}

void Scheduler::on_verified(const PlannedSeq& p, int32_t n_accepted) {
  Seq& s = get(p.id);
  const int32_t end = p.start + p.n_tokens;
  EFIM_CHECK(s.running && p.n_draft > 0 && s.n_draft == p.n_draft && p.start == s.n_computed &&
                 end == static_cast<int32_t>(s.tokens.size()) && n_accepted >= 0 &&
                 n_accepted <= p.n_draft,
             "Scheduler::on_verified: sequence ", p.id, " chunk [", p.start, ", ", end,
             ") with a draft of ", p.n_draft, " (", n_accepted, " accepted) does not match its ",
             s.n_computed, " computed of ", s.tokens.size(), " tokens with a draft of ", s.n_draft);
  drop_draft(s, p.n_draft - n_accepted);
  s.n_draft = 0;  // the accepted ones are ordinary computed tokens now
  s.n_computed = static_cast<int32_t>(s.tokens.size());
  kv_.truncate(p.id, s.n_computed);
  kv_.commit(p.id, s.n_computed);
}

void Scheduler::append_token(SeqId id, int32_t token) {
  Seq& s = get(id);
  EFIM_CHECK(s.n_draft == 0, "Scheduler::append_token: sequence ", id, " has a draft of ",
             s.n_draft, " tokens");
  s.tokens.push_back(token);
}

void Scheduler::remove(SeqId id) {
  Seq& s = get(id);
  if (s.running) {
    kv_.release(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    auto it = std::find(waiting_.begin(), waiting_.end(), id);
    if (it != waiting_.end()) waiting_.erase(it);
  }
  seqs_.erase(id);
}

}  // namespace efim
