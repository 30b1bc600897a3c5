#include "engine/engine.h"

#include <algorithm>
#include <future>

#include "base/error.h"

namespace efim {
namespace {

// Bytes of K/V one block holds: K and V of every layer in the cache's element type.
int64_t bytes_per_block(const ModelConfig& c, DType kv_type, int32_t block_size) {
  return Engine::kv_bytes_per_token(c, kv_type) * block_size;
}

KvOptions resolve_kv(const ModelConfig& c, const EngineOptions& o) {
  KvOptions kv = o.kv;
  EFIM_CHECK(kv.block_size > 0, "EngineOptions.kv.block_size must be positive, got ",
             kv.block_size);
  if (kv.n_blocks == 0) {
    kv.n_blocks = kv_blocks_for_budget(o.kv_cache_bytes, bytes_per_block(c, o.kv_type, kv.block_size));
  }
  return kv;
}

std::vector<int32_t> resolve_eos(const ModelConfig& c, const EngineOptions& o) {
  if (o.eos_tokens) return *o.eos_tokens;
  return std::vector<int32_t>(c.eos_tokens.begin(), c.eos_tokens.end());
}

// The infill sampler's view of the vocabulary: token text from the tokenizer (special tokens
// have none), end-of-generation = the request's stop tokens and, unless it ignores them, the
// model's EOS tokens; the end-of-text token is the first of those.
class RequestVocab final : public InfillVocab {
 public:
  RequestVocab(const Tokenizer& tok, std::vector<int32_t> eog) : tok_(tok), eot_(-1) {
    if (!eog.empty()) eot_ = eog.front();
    std::sort(eog.begin(), eog.end());
    eog_ = std::move(eog);
  }
  std::string_view piece(int32_t id) const override {
    return tok_.is_special(id) ? std::string_view() : tok_.token_bytes(id);
  }
  bool is_eog(int32_t id) const override {
    return std::binary_search(eog_.begin(), eog_.end(), id);
  }
  int32_t eot() const override { return eot_; }

 private:
  const Tokenizer& tok_;
  std::vector<int32_t> eog_;
  int32_t eot_;
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The draft model of options.speculative, if any, after checking it suits the target.
std::unique_ptr<DraftModel> make_draft_model(const ModelConfig& target, const EngineOptions& o,
                                             const std::vector<int32_t>& eos) {
  Model* m = o.speculative.draft_model;
  if (!m) return nullptr;
  // Vocabulary sizes may differ by padding rows (Qwen2.5-Coder 0.5B: 151936, 7B: 152064);
  // whether the tokens are the same is the caller's to check (app::load_draft_model).
  DraftModelOptions d = o.speculative.draft;
  d.kv_type = o.kv_type;
  return std::make_unique<DraftModel>(*m, d, eos, static_cast<int32_t>(target.vocab));
}

}  // namespace

Engine::Engine(Model& model, const EngineOptions& options)
    : model_(model),
      opt_(options),
      eos_(resolve_eos(model.config(), options)),
      vocab_index_(options.tokenizer ? std::make_unique<VocabIndex>(*options.tokenizer) : nullptr),
      kv_(resolve_kv(model.config(), options)),
      kv_slots_(int64_t(kv_.stats().total_blocks) * kv_.block_size()),
      cache_(KvCache::for_model(model.config(),
                                int64_t(kv_.stats().total_blocks) * kv_.block_size(),
                                options.kv_type)),
      sched_(options.scheduler, kv_),
      runner_(model, cache_),
      draft_memory_(options.speculative.memory),
      draft_model_(make_draft_model(model.config(), options, eos_)),
      thread_([this] { loop(); }) {}

int64_t Engine::kv_bytes_per_token(const ModelConfig& c, DType kv_type) {
  return KvCache::bytes_per_token(kv_type, c.n_layers, c.kv_dim());
}

Engine::~Engine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestStream> Engine::submit(Request r) {
  const ModelConfig& c = model_.config();
  EFIM_CHECK(!r.prompt.empty(), "request: prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    EFIM_CHECK(r.prompt[i] >= 0 && r.prompt[i] < c.vocab, "request: prompt token ", i, " = ",
               r.prompt[i], " outside the vocabulary [0, ", c.vocab, ")");
  }
  EFIM_CHECK(r.max_tokens > 0, "request: max_tokens must be positive, got ", r.max_tokens);
  EFIM_CHECK(r.max_draft >= 0, "request: max_draft must be >= 0, got ", r.max_draft);
  for (size_t d = 0; d < r.draft_documents.size(); ++d) {
    for (size_t i = 0; i < r.draft_documents[d].size(); ++i) {
      const int32_t t = r.draft_documents[d][i];
      EFIM_CHECK(t >= 0 && t < c.vocab, "request: draft document ", d, " token ", i, " = ", t,
                 " outside the vocabulary [0, ", c.vocab, ")");
    }
  }
  EFIM_CHECK(int64_t(r.prompt.size()) + r.max_tokens <= kv_slots_, "request: prompt of ",
             r.prompt.size(), " tokens + max_tokens ", r.max_tokens, " need ",
             int64_t(r.prompt.size()) + r.max_tokens, " KV cache slots, but the cache holds ",
             kv_slots_, " (efim serve --kv-cache-mb)");
  EFIM_CHECK(int64_t(r.prompt.size()) + r.max_tokens <= c.max_position, "request: prompt of ",
             r.prompt.size(), " tokens + max_tokens ", r.max_tokens,
             " exceed the model context of ", c.max_position);
  validate(r.sampling);
  EFIM_CHECK(r.heal_bytes.empty() || vocab_index_, "request: token healing needs the engine's ",
             "tokenizer (EngineOptions.tokenizer)");
  EFIM_CHECK(std::find(r.sampling.chain.begin(), r.sampling.chain.end(), SamplerStage::infill) ==
                     r.sampling.chain.end() ||
                 opt_.tokenizer,
             "request: the infill sampler needs the engine's tokenizer (EngineOptions.tokenizer)");

  const RequestId id = next_id_++;
  auto stream = std::make_shared<RequestStream>(id);
  const Clock::time_point now = Clock::now();
  post([this, id, stream, now, r = std::move(r)]() mutable {
    sched_.add(id, r.prompt);
    std::unique_ptr<InfillVocab> vocab = infill_vocab(r);
    Sampler sampler(r.sampling, vocab.get());
    Live live{std::move(r), stream, std::move(vocab), std::move(sampler), {}, {}, now, {}, 0, {}, {}};
    if (opt_.tokenizer) live.decoder.emplace(*opt_.tokenizer);
    if (!live.request.heal_bytes.empty()) {
      if (live.request.heal_exact)
        live.covering.emplace(*vocab_index_, live.request.heal_bytes, opt_.covering);
      else
        live.heal.emplace(*vocab_index_, live.request.heal_bytes);
      live.strip = live.request.heal_bytes.size();
    }
    if (opt_.speculative.enabled && live.request.speculative) {
      const SpeculativeOptions& so = opt_.speculative;
      const int32_t max = live.request.max_draft > 0
                              ? std::clamp(live.request.max_draft, so.min_draft, so.max_draft)
                              : so.max_draft;
      live.drafting.reset(new Live::Drafting{NgramIndex(so.ngram_index),
                                             DraftLength(so.min_draft, max, so.start_draft)});
      // Later documents win a lookup: the output (appended to the prompt's document, kOwn) over
      // the caller's documents over the prompt.
      live.drafting->index.add_document(live.request.prompt);
      if (live.request.draft_place != 0)
        for (const auto& d : draft_memory_.recall(live.request.draft_place))
          live.drafting->index.add_document(d);
      for (const auto& d : live.request.draft_documents) live.drafting->index.add_document(d);
      live.request.draft_documents.clear();
    }
    live.result.id = id;
    live_.emplace(id, std::move(live));
  });
  return stream;
}

std::unique_ptr<InfillVocab> Engine::infill_vocab(const Request& r) const {
  const auto& chain = r.sampling.chain;
  if (std::find(chain.begin(), chain.end(), SamplerStage::infill) == chain.end()) return nullptr;
  std::vector<int32_t> eog = r.stop_tokens;
  if (!r.ignore_eos) eog.insert(eog.end(), eos_.begin(), eos_.end());
  return std::make_unique<RequestVocab>(*opt_.tokenizer, std::move(eog));
}

void Engine::cancel(RequestId id, FinishReason reason) {
  EFIM_CHECK(reason == FinishReason::cancelled || reason == FinishReason::stop ||
                 reason == FinishReason::length,
             "Engine::cancel: reason must be cancelled, stop or length, got ", to_string(reason));
  post([this, id, reason] {
    if (live_.contains(id)) finish(id, reason);
  });
}

void Engine::cancel_all() {
  post([this] {
    std::vector<SeqId> ids;
    for (const auto& [id, live] : live_) ids.push_back(id);
    for (SeqId id : ids)
      if (live_.contains(id)) finish(id, FinishReason::cancelled);
  });
}

void Engine::post(std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    inbox_.push_back(std::move(task));
  }
  cv_.notify_all();
}

void Engine::call(const std::function<void()>& fn) {
  std::promise<void> done;
  post([&] {
    try {
      fn();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  done.get_future().get();
}

KvStats Engine::kv_stats() {
  KvStats st;
  call([&] { st = kv_.stats(); });
  return st;
}

EngineMetrics Engine::metrics() {
  EngineMetrics m;
  call([&] {
    m = metrics_;
    m.n_running = static_cast<int32_t>(sched_.running().size());
    m.n_waiting = static_cast<int32_t>(sched_.waiting().size());
    m.kv = kv_.stats();
    if (draft_model_) {
      m.draft_model_evaluated = draft_model_->stats().evaluated;
      m.draft_model_reused = draft_model_->stats().reused;
      m.draft_model_idle = draft_model_->stats().idle;
    }
  });
  return m;
}

size_t Engine::cached_prefix(std::span<const int32_t> tokens) {
  size_t n = 0;
  call([&] { n = size_t(kv_.peek(tokens)); });
  return n;
}

std::vector<size_t> Engine::cached_prefixes(std::span<const std::span<const int32_t>> seqs) {
  std::vector<size_t> n;
  call([&] {
    for (const auto& s : seqs) n.push_back(size_t(kv_.peek(s)));
  });
  return n;
}

void Engine::clear_cache() {
  call([&] { kv_.clear(); });
}

void Engine::check_invariants() {
  call([&] { kv_.check_invariants(); });
}

int64_t Engine::steps() {
  int64_t n = 0;
  call([&] { n = steps_; });
  return n;
}

void Engine::loop() {
  for (;;) {
    std::vector<std::function<void()>> tasks;
    bool stopping = false;
    {
      std::unique_lock lk(mu_);
      const auto ready = [&] { return stop_ || !inbox_.empty() || sched_.has_work(); };
      if (!ready() && draft_model_ && draft_model_->has_idle_work()) {
        // Nothing to run: the draft model catches up where a request put it off, a chunk at a
        // time, so that a task posted meanwhile waits for one chunk at most.
        lk.unlock();
        draft_model_->idle_work();
        continue;
      }
      cv_.wait(lk, ready);
      stopping = stop_;
      tasks.swap(inbox_);
    }
    for (auto& t : tasks) t();
    if (stopping) break;
    if (sched_.has_work()) step();
  }
  // Shutdown: whatever is left (including requests posted just before) ends as cancelled.
  std::vector<SeqId> ids;
  for (const auto& [id, live] : live_) ids.push_back(id);
  for (SeqId id : ids) finish(id, FinishReason::cancelled);
}

void Engine::step() {
  draft();
  StepPlan plan = sched_.schedule();
  for (SeqId id : plan.rejected) {
    if (probes_.contains(id)) {
      drop_probe(id);
      continue;
    }
    finish(id, FinishReason::error,
           str("sequence of ", sched_.tokens(id).size(),
               " tokens (prompt + generated) exceeds the KV cache of ",
               int64_t(kv_.stats().total_blocks) * kv_.block_size(), " slots"));
  }
  for (SeqId id : plan.admitted) {
    if (!probes_.contains(id) && sched_.n_preemptions(id) == 0) count_admission(id);
  }
  if (plan.empty()) {
    // Nothing can run: probes waiting for KV blocks would wait on their own owners. Drop them
    // (their nodes' coverings are left out) so that the searches finish.
    std::vector<SeqId> stuck;
    for (const auto& [probe, p] : probes_)
      if (!sched_.is_running(probe)) stuck.push_back(probe);
    for (SeqId probe : stuck) drop_probe(probe);
  }
  advance_coverings();  // dropped probes
  if (plan.empty()) return;
  if (opt_.before_step) opt_.before_step(plan);
  std::vector<SampledToken> sampled;
  try {
    sampled = runner_.run(plan, sched_,
                          [this](SeqId id, std::span<float> logits) { return choose(id, logits); });
  } catch (const std::exception& e) {
    // The step's sequences cannot continue consistently: end them, keep serving the others.
    fed_probes_.clear();
    searching_.clear();
    for (const PlannedSeq& p : plan.seqs) {
      const auto probe = probes_.find(p.id);
      const SeqId id = probe != probes_.end() ? probe->second.owner : p.id;
      if (live_.contains(id)) finish(id, FinishReason::error, e.what());
    }
    return;
  }
  ++steps_;
  count_drafts(plan, sampled);
  for (const SampledToken& t : sampled)  // a request can finish before its last accepted draft
    if (t.token >= 0 && live_.contains(t.id)) on_token(t.id, t.token, t.in_sequence);
  advance_coverings();
  if (opt_.on_step) opt_.on_step(plan);
}

void Engine::draft() {
  if (!opt_.speculative.enabled) return;
  for (auto& [id, l] : live_) {
    if (!l.drafting || l.covering || (l.heal && l.heal->active())) continue;
    if (!sched_.contains(id) || !sched_.is_running(id)) continue;
    // Decoding: only the last sampled token is uncomputed (so there is no draft either).
    if (int64_t(sched_.tokens(id).size()) - sched_.n_computed(id) != 1) continue;
    // The token after the draft is drawn too, so a draft may take all but one of what is left.
    const int32_t room = l.request.max_tokens - static_cast<int32_t>(l.result.tokens.size()) - 1;
    const int32_t k = std::min(l.drafting->length.next(), room);
    if (k <= 0) continue;
    std::vector<int32_t> d;
    if (opt_.speculative.ngram) d = l.drafting->index.propose(Live::Drafting::kOwn, k);
    if (d.empty() && draft_model_)
      d = draft_model_->propose(id, sched_.tokens(id), k, l.request.draft_p_min);
    if (!d.empty()) sched_.set_draft(id, d);
  }
}

// Per request: steps, drafts verified and accepted (before on_token may finish the request).
void Engine::count_drafts(const StepPlan& plan, const std::vector<SampledToken>& sampled) {
  size_t at = 0;  // sampled is in plan order
  for (const PlannedSeq& p : plan.seqs) {
    if (!p.sample) continue;
    int32_t accepted = 0;
    for (; at < sampled.size() && sampled[at].id == p.id; ++at) accepted += sampled[at].in_sequence;
    auto it = live_.find(p.id);
    if (it == live_.end()) continue;  // a probe
    Live& l = it->second;
    ++l.result.n_steps;
    if (p.n_draft == 0) continue;
    l.result.n_draft_tokens += p.n_draft;
    l.result.n_accepted += accepted;
    ++metrics_.spec_drafts;
    metrics_.spec_draft_tokens += p.n_draft;
    metrics_.spec_accepted_tokens += accepted;
    if (l.drafting) l.drafting->length.update(p.n_draft, accepted);
  }
}

// A request's first admission: its prompt was looked up in the prefix cache.
void Engine::count_admission(SeqId id) {
  Live& l = live_.at(id);
  l.result.timings.queue_ms = ms_since(l.submitted);
  l.result.n_cached = sched_.n_cached_at_admission(id);
  const auto n_prompt = static_cast<int64_t>(l.request.prompt.size());
  metrics_.prompt_tokens += n_prompt;
  metrics_.prefix_query_tokens += n_prompt;
  metrics_.prefix_hit_tokens += l.result.n_cached;
  if (!l.request.heal_bytes.empty()) {
    ++metrics_.token_healing;
    metrics_.heal_bytes.observe(double(l.request.heal_bytes.size()));
  }
}

// While healing, only tokens consistent with the bytes still required may be drawn.
int32_t Engine::choose(SeqId id, std::span<float> logits) {
  if (id < 0) return feed_covering(id, logits);  // a probe (negative ids)
  Live& l = live_.at(id);
  if (l.covering) return feed_covering(id, logits);
  const bool healing = l.heal && l.heal->active();
  if (healing) l.heal->mask(logits);
  const int32_t token = l.sampler.sample(logits);
  if (healing) {
    l.heal->accept(token);
    ++l.result.n_heal_tokens;
  }
  return token;
}

// The text a generated token adds, less the healed bytes the prompt already had.
std::string Engine::text_of(Live& l, int32_t token) {
  if (!l.decoder) return {};
  if (l.strip == 0) return l.decoder->push(token);
  std::string_view b = opt_.tokenizer->token_bytes(token);
  const size_t n = std::min(l.strip, b.size());
  l.strip -= n;
  return l.decoder->push_bytes(b.substr(n));
}

void Engine::on_token(SeqId id, int32_t token, bool in_sequence) {
  Live& l = live_.at(id);
  ++metrics_.generation_tokens;
  if (l.result.tokens.empty() && l.result.stop_token < 0) {
    l.result.timings.first_token_ms = ms_since(l.submitted);
    metrics_.ttft_seconds.observe(l.result.timings.first_token_ms / 1000.0);
  }
  const bool stop = std::find(l.request.stop_tokens.begin(), l.request.stop_tokens.end(),
                              token) != l.request.stop_tokens.end() ||
                    (!l.request.ignore_eos && is_eos(token));
  if (stop) {
    l.result.stop_token = token;
    return finish(id, FinishReason::stop);
  }
  l.result.tokens.push_back(token);
  const std::string piece = text_of(l, token);
  l.result.text += piece;
  l.stream->push(token, piece);
  if (static_cast<int32_t>(l.result.tokens.size()) >= l.request.max_tokens) {
    return finish(id, FinishReason::length);
  }
  if (l.drafting) l.drafting->index.append(Live::Drafting::kOwn, std::span(&token, 1));
  if (!in_sequence) sched_.append_token(id, token);
}

bool Engine::is_eos(int32_t token) const {
  return std::find(eos_.begin(), eos_.end(), token) != eos_.end();
}

// Ends a live request: frees its sequence (computed rows stay cached) and closes its stream.
void Engine::finish(SeqId id, FinishReason reason, std::string error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = it->second;
  if (draft_model_) draft_model_->release(id);
  if (sched_.contains(id)) {
    l.result.n_preemptions = sched_.n_preemptions(id);
    sched_.remove(id);
  }
  if (l.decoder) {  // an incomplete trailing character becomes U+FFFD
    const std::string tail = l.decoder->flush();
    l.result.text += tail;
    l.stream->push_text(tail);
  }
  remove_probes(id);
  // What it generated (also when cancelled: an editor cancels as the user types on) drafts the
  // next requests at the same place.
  if (opt_.speculative.enabled && l.request.draft_place != 0 && reason != FinishReason::error) {
    const auto& p = l.request.prompt;
    const size_t from = std::min(l.request.draft_typed_from, p.size());
    draft_memory_.remember(l.request.draft_place,
                           std::span<const int32_t>(p).subspan(from), l.result.tokens);
  }
  l.result.finish = reason;
  l.result.error = std::move(error);
  l.result.timings.total_ms = ms_since(l.submitted);
  metrics_.e2e_seconds.observe(l.result.timings.total_ms / 1000.0);
  switch (reason) {
    case FinishReason::stop: ++metrics_.finished_stop; break;
    case FinishReason::length: ++metrics_.finished_length; break;
    case FinishReason::error: ++metrics_.finished_error; break;
    default: ++metrics_.finished_abort; break;  // cancelled
  }
  l.stream->finish(std::move(l.result));
  live_.erase(it);
}

}  // namespace efim
