#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"

namespace efim {

namespace {

// The most likely token and its probability, softmax(logits)[argmax].
std::pair<int32_t, float> top_token(const std::vector<float>& logits) {
  const auto top = std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (float x : logits) z += std::exp(double(x) - double(*top));
  return {static_cast<int32_t>(top - logits.begin()), static_cast<float>(1.0 / z)};
}

size_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

DraftModel::DraftModel(Model& model, const DraftModelOptions& o, std::vector<int32_t> eos,
                       int32_t vocab)
    : model_(model), opt_(o), eos_(std::move(eos)),
      vocab_(vocab > 0 ? vocab : static_cast<int32_t>(model.config().vocab)) {
  EFIM_CHECK(o.max_sessions >= 1, "draft model: max_sessions must be >= 1, got ", o.max_sessions);
  EFIM_CHECK(o.chunk >= 1, "draft model: chunk must be >= 1, got ", o.chunk);
  EFIM_CHECK(o.idle_chunk >= 1, "draft model: idle_chunk must be >= 1, got ", o.idle_chunk);
  EFIM_CHECK(o.max_catch_up >= 0, "draft model: max_catch_up must be >= 0, got ", o.max_catch_up);
  EFIM_CHECK(o.session_tokens >= 0, "draft model: session_tokens must be >= 0, got ",
             o.session_tokens);
  capacity_ = o.session_tokens > 0 ? o.session_tokens : model.config().max_position;
}

DraftModel::Session* DraftModel::session_for(SeqId id, std::span<const int32_t> tokens) {
  for (Session& s : sessions_)
    if (s.taken && s.owner == id) {
      s.fresh = false;
      return &s;
    }
  // A free session: the one sharing the longest prefix with the tokens, the least recently used
  // among equals; a new one instead of one that shares nothing, while fewer than max_sessions
  // exist (the old one's tokens may serve a later request).
  Session* best = nullptr;
  size_t best_common = 0;
  for (Session& s : sessions_) {
    if (s.taken) continue;
    const size_t c = common_prefix(s.fed, tokens);
    if (!best || c > best_common || (c == best_common && s.last_use < best->last_use)) {
      best = &s;
      best_common = c;
    }
  }
  const bool can_grow = sessions_.size() < size_t(opt_.max_sessions);
  if (can_grow && (!best || best_common == 0)) {
    sessions_.push_back(Session{});
    best = &sessions_.back();
    best->s = std::make_unique<ContiguousSession>(model_, capacity_, opt_.kv_type);
  }
  if (!best) return nullptr;  // every session is taken
  best->taken = true;
  best->fresh = true;
  best->owner = id;
  return best;
}

std::vector<float> DraftModel::catch_up(Session& s, std::span<const int32_t> tokens, size_t end) {
  std::vector<float> logits;
  for (size_t i = s.fed.size(); i < end;) {
    const size_t n = std::min(end - i, static_cast<size_t>(opt_.chunk));
    logits = s.s->eval(std::vector<int32_t>(tokens.begin() + i, tokens.begin() + i + n));
    s.fed.insert(s.fed.end(), tokens.begin() + i, tokens.begin() + i + n);
    stats_.evaluated += static_cast<int64_t>(n);
    i += n;
  }
  return logits;
}

std::vector<int32_t> DraftModel::propose(SeqId id, std::span<const int32_t> tokens, int32_t k,
                                         float p_min) {
  if (p_min < 0) p_min = opt_.p_min;
  EFIM_CHECK(!tokens.empty(), "draft model: a sequence without tokens has nothing to continue");
  // Tokens + k drafts, the last draft never evaluated, must fit the session.
  k = static_cast<int32_t>(std::min<int64_t>(k, capacity_ + 1 - int64_t(tokens.size())));
  if (k <= 0) return {};
  Session* s = session_for(id, tokens);
  if (!s) {
    ++stats_.refused;
    return {};
  }
  s->last_use = ++clock_;
  // Keep the common prefix, but evaluate at least the last token: its logits draft the first.
  const size_t keep = std::min(common_prefix(s->fed, tokens), tokens.size() - 1);
  s->s->truncate(static_cast<int64_t>(keep));
  s->fed.resize(keep);
  if (s->fresh) stats_.reused += static_cast<int64_t>(keep);
  if (opt_.max_catch_up > 0 && int64_t(tokens.size() - keep) > opt_.max_catch_up) {
    s->want.assign(tokens.begin(), tokens.end());  // for idle_work
    ++stats_.deferred;
    return {};
  }
  s->want.clear();
  std::vector<float> logits = catch_up(*s, tokens, tokens.size());
  std::vector<int32_t> draft;
  for (int32_t i = 0; i < k; ++i) {
    const auto [t, p] = top_token(logits);
    if (p < p_min) break;
    if (t >= vocab_) break;  // a padding row of the draft's vocabulary: not a token of the target
    draft.push_back(t);
    if (std::find(eos_.begin(), eos_.end(), t) != eos_.end() || i + 1 == k) break;
    logits = s->s->eval({t});
    s->fed.push_back(t);
    ++stats_.evaluated;
  }
  if (!draft.empty()) ++stats_.proposals;
  return draft;
}

void DraftModel::release(SeqId id) {
  for (Session& s : sessions_)
    if (s.taken && s.owner == id) s.taken = false;
}

bool DraftModel::has_idle_work() const {
  for (const Session& s : sessions_)
    if (s.want.size() > s.fed.size()) return true;
  return false;
}

void DraftModel::idle_work() {
  Session* next = nullptr;
  for (Session& s : sessions_)
    if (s.want.size() > s.fed.size() && (!next || s.last_use > next->last_use)) next = &s;
  if (!next) return;
  const size_t end = std::min(next->want.size(), next->fed.size() + size_t(opt_.idle_chunk));
  const int64_t before = stats_.evaluated;
  catch_up(*next, next->want, end);
  stats_.idle += stats_.evaluated - before;
  if (next->fed.size() == next->want.size()) next->want.clear();
}

}  // namespace efim
