// Engine: one thread owns the model, the KV cache and the scheduler (architecture rule 1) and
// runs the loop  tasks -> schedule -> run -> sample -> stream. Other threads submit requests
// and cancel them by posting tasks; results come back through each request's RequestStream.
// A cancel takes effect between steps: the sequence is released and its computed prefix stays
// in the prefix cache.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/draft_model.h"
#include "engine/metrics.h"
#include "engine/request.h"
#include "engine/runner.h"
#include "engine/scheduler.h"
#include "engine/stream.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sampling/covering.h"
#include "sampling/ngram_draft.h"
#include "sampling/token_healing.h"
#include "sampling/vocab_index.h"
#include "tokenizer/tokenizer.h"

namespace efim {

// Speculative decoding: before a step, a decoding sequence gets a draft copied from where its
// last tokens occurred before (sampling/ngram_draft.h: its prompt, its output,
// Request.draft_documents) or the greedy continuation of a draft model (engine/draft_model.h);
// the step computes the token and the draft together, and the runner accepts drafts while they
// equal the tokens drawn, so the output is unchanged.
struct SpeculativeOptions {
  bool enabled = false;
  bool ngram = true;  // n-gram drafts (with a draft model: first, the model where none is found)
  // Borrowed, optional: a model with the target's tokenizer that drafts (must outlive the
  // engine; the engine thread runs it on its pool). Its sessions' K/V type is the engine's
  // kv_type; tokens past the target's vocabulary end a draft.
  Model* draft_model = nullptr;
  DraftModelOptions draft;
  NgramDraftOptions ngram_index;
  DraftMemoryOptions memory;  // the previous completions per Request.draft_place (0 docs: none)
  int32_t min_draft = 1, max_draft = 8, start_draft = 4;  // DraftLength's adaptive range
};

struct EngineOptions {
  SchedulerOptions scheduler;
  KvOptions kv;                            // kv.n_blocks 0: from kv_cache_bytes
  int64_t kv_cache_bytes = 256ll << 20;    // K/V memory budget when kv.n_blocks is 0
  // K/V element type: F32, F16 (half the bytes: twice the tokens per MiB) or Q8_0 (about a
  // quarter). The library default is exact f32; `efim serve` defaults to f16, as llama.cpp.
  DType kv_type = DType::F32;
  std::optional<std::vector<int32_t>> eos_tokens;  // unset: the model config's
  // Borrowed, optional: when set, streams and results carry the decoded text as well (the
  // engine thread decodes incrementally, whole UTF-8 characters per chunk), and requests may
  // ask for token healing (the engine builds the VocabIndex once).
  const Tokenizer* tokenizer = nullptr;
  // Called on the engine thread after each step's tokens went out (metrics, tests); must not
  // call back into the engine. Tasks posted while it runs take effect before the next step.
  std::function<void(const StepPlan&)> on_step;
  // Called on the engine thread before a non-empty step runs (tests: a slow prompt).
  std::function<void(const StepPlan&)> before_step;
  CoveringOptions covering;  // budget of the exact healing variant (Request.heal_exact)
  SpeculativeOptions speculative;
};

class Engine {
 public:
  // `model` is borrowed and must outlive the engine; only the engine thread uses it.
  Engine(Model& model, const EngineOptions& options);
  ~Engine();  // stops the loop; unfinished requests end as cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread. Throws Error when the request is invalid (empty prompt, token outside the
  // vocabulary, max_tokens <= 0, prompt + max_tokens beyond the model's context, bad sampling,
  // heal_bytes without a tokenizer).
  std::shared_ptr<RequestStream> submit(Request request);
  // Any thread. Ends the request (if it still runs) before the next step, with `reason` as its
  // finish: cancelled by default; a caller that ended it for a rule of its own (a stop string,
  // a time limit) says stop or length, so the metrics count it as such.
  void cancel(RequestId id, FinishReason reason = FinishReason::cancelled);
  // Any thread: ends every request in flight as cancelled (a shutdown past its deadline).
  void cancel_all();

  // Tokens the KV cache holds in all (blocks x block size): no sequence is longer. Any thread.
  int64_t kv_slots() const { return kv_slots_; }
  // The K/V cache's fixed shape (what vllm:cache_config_info reports). Any thread.
  struct CacheConfig {
    int32_t block_size = 0, n_blocks = 0;
    DType kv_type = DType::F32;
    bool prefix_cache = true;
  };
  CacheConfig cache_config() const {
    return {opt_.kv.block_size, int32_t(kv_slots_ / opt_.kv.block_size), opt_.kv_type,
            opt_.kv.prefix_cache};
  }
  // KV cache bytes per token of `c` (K and V of every layer in kv_type).
  static int64_t kv_bytes_per_token(const ModelConfig& c, DType kv_type);

  // Any thread; run on the engine thread between steps and wait for it (up to one step).
  KvStats kv_stats();
  EngineMetrics metrics();
  // Leading tokens of `tokens` whose K/V the prefix cache holds (KvManager::peek, no cap).
  size_t cached_prefix(std::span<const int32_t> tokens);
  // The same for several sequences in one visit to the engine thread.
  std::vector<size_t> cached_prefixes(std::span<const std::span<const int32_t>> seqs);
  void clear_cache();       // drops every unreferenced cached block
  void check_invariants();  // KvManager audit; throws Error on a violation
  int64_t steps();          // steps run so far
  // The vocabulary by bytes (with EngineOptions.tokenizer, else null); immutable, any thread.
  const VocabIndex* vocab_index() const { return vocab_index_.get(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Live {  // a request the engine thread is working on
    Request request;
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<InfillVocab> vocab;  // the infill sampler's (a chain with `infill`)
    Sampler sampler;
    std::optional<IncrementalDecoder> decoder;  // with EngineOptions.tokenizer
    RequestResult result;
    Clock::time_point submitted;
    std::optional<HealConstraint> heal;  // with Request.heal_bytes
    size_t strip = 0;  // bytes of heal_bytes not yet left out of the text
    std::optional<CoveringSearch> covering;  // with Request.heal_exact, until it has chosen
    struct Drafting {
      static constexpr int32_t kOwn = 0;  // the first document: the prompt, then the output
      NgramIndex index;
      DraftLength length;
    };
    std::unique_ptr<Drafting> drafting;  // with speculation on for it
  };
  // A probe of the exact healing variant: a sequence of the owner's prompt + a token path,
  // run to get the logits after the path (engine_healing.cpp). Ids are negative.
  struct Probe {
    SeqId owner;
    size_t node;
  };

  void post(std::function<void()> task);
  void call(const std::function<void()>& fn);  // post and wait
  void loop();
  void step();
  void on_token(SeqId id, int32_t token, bool in_sequence);
  void draft();  // speculative drafts for the decoding sequences (before a step)
  void count_drafts(const StepPlan& plan, const std::vector<SampledToken>& sampled);
  int32_t choose(SeqId id, std::span<float> logits);  // the runner's SamplerFor
  std::string text_of(Live& l, int32_t token);
  // Exact healing (engine_healing.cpp): logits for a search; after a step, launch the next
  // probes or emit the chosen covering; a probe that cannot run; an owner's probes at its end.
  int32_t feed_covering(SeqId id, std::span<float> logits);
  void advance_coverings();
  void drop_probe(SeqId probe);
  void remove_probes(SeqId owner);
  void finish(SeqId id, FinishReason reason, std::string error = {});
  void count_admission(SeqId id);
  bool is_eos(int32_t token) const;
  // The infill sampler's vocabulary for r (null when its chain has no infill stage).
  std::unique_ptr<InfillVocab> infill_vocab(const Request& r) const;

  Model& model_;
  EngineOptions opt_;
  std::vector<int32_t> eos_;
  std::unique_ptr<const VocabIndex> vocab_index_;  // with a tokenizer
  KvManager kv_;
  int64_t kv_slots_ = 0;
  KvCache cache_;
  Scheduler sched_;
  Runner runner_;
  std::unordered_map<SeqId, Live> live_;  // engine thread only
  std::unordered_map<SeqId, Probe> probes_;  // engine thread only
  std::vector<SeqId> fed_probes_;            // probes whose logits came this step
  std::vector<SeqId> searching_;             // owners whose search moved this step
  SeqId next_probe_ = -1;
  int64_t steps_ = 0;                     // engine thread only
  DraftMemory draft_memory_;              // engine thread only
  std::unique_ptr<DraftModel> draft_model_;  // with SpeculativeOptions.draft_model
  EngineMetrics metrics_;                 // engine thread only; gauges filled by metrics()

  std::atomic<RequestId> next_id_{1};
  std::mutex mu_;  // guards inbox_ and stop_
  std::condition_variable cv_;
  std::vector<std::function<void()>> inbox_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after everything above is built
};

}  // namespace efim
