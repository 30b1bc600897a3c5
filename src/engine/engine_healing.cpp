// The exact token-healing variant on the engine thread (sampling/covering.h): a request's
// CoveringSearch starts from the logits after its backed-off prompt; each node it expands is a
// probe sequence (the owner's tokens + the node's token path, which the prefix cache mostly
// serves) whose logits feed the search; when the search is done the chosen covering is emitted
// as the request's first tokens. The owner computes nothing while its probes run (it has no
// uncomputed token, so the scheduler plans none for it).
#include <algorithm>

#include "engine/engine.h"

namespace efim {

HealBackoff heal_request(const VocabIndex& index, Request& r, size_t from, bool exact) {
  HealBackoff h = heal_backoff(index, r.prompt, from);
  if (h.empty()) return h;
  r.prompt.resize(r.prompt.size() - h.n_tokens);
  r.heal_bytes = h.bytes;
  r.heal_exact = exact;
  r.max_tokens += int32_t(h.n_tokens);
  return h;
}

// The runner's choice for an owner (its prompt's logits: the search starts) or a probe (its
// path's logits: a node is expanded). No token is sampled: -1.
int32_t Engine::feed_covering(SeqId id, std::span<float> logits) {
  if (const auto p = probes_.find(id); p != probes_.end()) {
    live_.at(p->second.owner).covering->feed(p->second.node, logits);
    fed_probes_.push_back(id);
    searching_.push_back(p->second.owner);
    return -1;
  }
  CoveringSearch& s = *live_.at(id).covering;
  // A preempted owner recomputes its prompt and samples again: the search already started.
  if (!s.started()) s.start(logits);
  searching_.push_back(id);
  return -1;
}

void Engine::drop_probe(SeqId probe) {
  const Probe p = probes_.at(probe);
  if (sched_.contains(probe)) sched_.remove(probe);
  probes_.erase(probe);
  live_.at(p.owner).covering->drop(p.node);
  searching_.push_back(p.owner);
}

void Engine::remove_probes(SeqId owner) {
  for (auto it = probes_.begin(); it != probes_.end();) {
    if (it->second.owner != owner) {
      ++it;
      continue;
    }
    if (sched_.contains(it->first)) sched_.remove(it->first);
    it = probes_.erase(it);
  }
}

void Engine::advance_coverings() {
  for (SeqId probe : fed_probes_) {  // their K/V stays in the prefix cache
    if (sched_.contains(probe)) sched_.remove(probe);
    probes_.erase(probe);
  }
  fed_probes_.clear();
  std::vector<SeqId> owners;
  owners.swap(searching_);
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  for (SeqId id : owners) {
    auto it = live_.find(id);
    if (it == live_.end() || !it->second.covering) continue;
    Live& l = it->second;
    if (!l.covering->done()) {
      for (CoveringSearch::Expansion& e : l.covering->next()) {
        const SeqId probe = next_probe_--;
        std::vector<int32_t> tokens(sched_.tokens(id).begin(), sched_.tokens(id).end());
        tokens.insert(tokens.end(), e.path.begin(), e.path.end());
        sched_.add(probe, std::move(tokens), /*urgent=*/true);
        probes_.emplace(probe, Probe{id, e.node});
      }
      continue;
    }
    std::vector<int32_t> path;
    if (l.covering->n_leaves() > 0) {
      path = l.covering->choose(l.sampler);
    } else {
      // No covering found (its probes could not run): the constrained variant from the root.
      std::vector<float> logits = l.covering->root_logits();
      l.heal.emplace(*vocab_index_, l.request.heal_bytes);
      try {
        l.heal->mask(logits);
      } catch (const std::exception& e) {
        finish(id, FinishReason::error, e.what());
        continue;
      }
      path = {l.sampler.sample(logits)};
      l.heal->accept(path[0]);
    }
    l.covering.reset();
    l.result.n_heal_tokens = int32_t(path.size());
    for (int32_t t : path) {
      if (!live_.contains(id)) break;  // ended by a stop token or max_tokens
      on_token(id, t, false);
    }
  }
}

}  // namespace efim
