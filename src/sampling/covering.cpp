#include "sampling/covering.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace efim {

CoveringSearch::CoveringSearch(const VocabIndex& index, std::string required, CoveringOptions o)
    : index_(&index), required_(std::move(required)), opts_(o) {
  EFIM_CHECK(!required_.empty(), "covering search: nothing required");
  EFIM_CHECK(opts_.parallel > 0, "covering search: parallel must be positive");
}

void CoveringSearch::start(std::span<const float> logits) {
  EFIM_CHECK(!started_, "covering search started twice");
  started_ = true;
  root_logits_.assign(logits.begin(), logits.end());
  nodes_.push_back(Node{});
  expand(0, logits);
  nodes_[0].state = Node::State::expanded;
}

// log softmax over the model's logits; every allowed token becomes a leaf (it covers the rest)
// or a frontier node (a proper prefix of the rest).
void CoveringSearch::expand(size_t id, std::span<const float> logits) {
  const Node n = nodes_[id];
  const std::string_view rest = std::string_view(required_).substr(n.rest_begin);
  float max_l = -INFINITY;
  for (float l : logits) max_l = std::max(max_l, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - max_l);
  const double log_z = double(max_l) + std::log(sum);
  index_->allowed(rest, scratch_);
  for (int32_t t : scratch_) {
    if (size_t(t) >= logits.size()) break;  // sorted by id
    const double logp = n.logp + double(logits[size_t(t)]) - log_z;
    const size_t len = index_->bytes(t).size();
    if (len >= rest.size()) {
      leaves_.push_back({id, t, logp});
    } else {
      Node child;
      child.parent = id;
      child.token = t;
      child.rest_begin = n.rest_begin + len;
      child.logp = logp;
      nodes_.push_back(child);
    }
  }
}

std::vector<CoveringSearch::Expansion> CoveringSearch::next() {
  std::vector<Expansion> out;
  if (!started_ || pending_ > 0) return out;
  std::vector<size_t> frontier;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].state == Node::State::frontier) frontier.push_back(i);
  std::sort(frontier.begin(), frontier.end(), [&](size_t a, size_t b) {
    return nodes_[a].logp > nodes_[b].logp || (nodes_[a].logp == nodes_[b].logp && a < b);
  });
  const size_t budget = opts_.max_expansions - std::min(opts_.max_expansions, expanded_);
  const size_t n = std::min({frontier.size(), budget, opts_.parallel});
  for (size_t k = 0; k < n; ++k) {
    nodes_[frontier[k]].state = Node::State::pending;
    out.push_back({frontier[k], path(frontier[k])});
  }
  pending_ = n;
  expanded_ += n;
  return out;
}

void CoveringSearch::feed(size_t node, std::span<const float> logits) {
  EFIM_CHECK(node < nodes_.size() && nodes_[node].state == Node::State::pending,
             "covering search: node ", node, " was not asked for");
  nodes_[node].state = Node::State::expanded;
  --pending_;
  expand(node, logits);
}

void CoveringSearch::drop(size_t node) {
  EFIM_CHECK(node < nodes_.size() && nodes_[node].state == Node::State::pending,
             "covering search: node ", node, " was not asked for");
  nodes_[node].state = Node::State::dropped;
  --pending_;
}

bool CoveringSearch::done() const {
  if (!started_ || pending_ > 0) return false;
  if (expanded_ >= opts_.max_expansions) return true;
  return std::none_of(nodes_.begin(), nodes_.end(),
                      [](const Node& n) { return n.state == Node::State::frontier; });
}

std::vector<int32_t> CoveringSearch::path(size_t node) const {
  std::vector<int32_t> p;
  for (size_t i = node; nodes_[i].parent != SIZE_MAX; i = nodes_[i].parent)
    p.push_back(nodes_[i].token);
  std::reverse(p.begin(), p.end());
  return p;
}

std::vector<int32_t> CoveringSearch::leaf_path(size_t i) const {
  std::vector<int32_t> p = path(leaves_.at(i).node);
  p.push_back(leaves_[i].token);
  return p;
}

std::vector<int32_t> CoveringSearch::choose(Sampler& sampler) const {
  EFIM_CHECK(done(), "covering search: choose() before the search is done");
  EFIM_CHECK(!leaves_.empty(), "token healing: no covering of the ", required_.size(),
             " required bytes was found");
  // Leaves in discovery order; the sampler breaks greedy ties by the lowest index.
  std::vector<float> logp(leaves_.size());
  for (size_t i = 0; i < leaves_.size(); ++i) logp[i] = float(leaves_[i].logp);
  return leaf_path(size_t(sampler.sample(logp)));
}

}  // namespace efim
