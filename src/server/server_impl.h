// Internal to server/: the state the routes share and the generation driver that reads a
// RequestStream through the text filters (suffix-repeat guard, stop strings).
#pragma once

#include <httplib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "infill/layout.h"
#include "infill/planner.h"
#include "infill/stop.h"
#include "server/gate.h"
#include "server/http_json.h"
#include "server/server.h"

namespace efim {

// An error answered with its own status (404, 503, ...) instead of guarded()'s 400.
struct HttpError : std::runtime_error {
  HttpError(int status, const std::string& message, std::string type, std::string code,
            int retry_after_s = 0)
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        code(std::move(code)),
        retry_after_s(retry_after_s) {}
  int status;
  std::string type, code;
  int retry_after_s;  // > 0: sent as Retry-After
};

// One generation request's place under ServerOptions.max_concurrent_requests. The place is
// given back once: by release() when the engine request has ended (before the last bytes go
// out, so a client that saw the end can send the next request at once), or at destruction
// (the request failed, or the client left before streaming began).
// The slot also holds the request's prompt tokens under ServerOptions.max_tokens_in_flight
// (Server::Impl::hold_tokens) and gives them back with the place.
class InFlightSlot {
 public:
  InFlightSlot(std::atomic<int>& count, std::atomic<int64_t>& tokens)
      : count_(count), tokens_(tokens) {}
  ~InFlightSlot() { release(); }
  InFlightSlot(const InFlightSlot&) = delete;
  InFlightSlot& operator=(const InFlightSlot&) = delete;
  void release() {
    if (released_.exchange(true)) return;
    count_.fetch_sub(1);
    tokens_.fetch_sub(held_);
  }
  int64_t held() const { return held_; }

 private:
  friend struct Server::Impl;
  std::atomic<int>& count_;
  std::atomic<int64_t>& tokens_;
  int64_t held_ = 0;  // prompt tokens counted in tokens_ (set once, before release can run)
  std::atomic<bool> released_{false};
};
using SlotPtr = std::shared_ptr<InFlightSlot>;

// Infill plans by layout and reason (efim_infill_requests_total), and the time planning spent
// asking the engine how much of an anchor is cached (each ask waits for the current step).
struct InfillCounts {
  static constexpr size_t kOrders = 3, kReasons = 6;  // FimOrder, InfillReason values
  std::array<std::array<int64_t, kReasons>, kOrders> plans{};
  int64_t cache_probes = 0;
  double cache_probe_seconds = 0;
};

struct Server::Impl {
  Engine& engine;
  const Tokenizer& tok;
  int32_t n_ctx;
  ServerOptions opt;
  // Absent when the vocabulary has no FIM sentinels (infill_error says why).
  std::unique_ptr<FimLayout> layout;
  std::unique_ptr<InfillPlanner> planner;  // not thread-safe: planner_mu
  std::mutex planner_mu;
  InfillCounts infill_counts;  // planner_mu
  std::atomic<int> in_flight{0};  // generation requests holding an InFlightSlot
  std::atomic<int64_t> tokens_in_flight{0};  // prompt tokens those requests hold
  std::atomic<int64_t> rejected_overload{0};
  std::atomic<int64_t> rejected_draining{0};
  std::atomic<bool> draining{false};  // Server::drain()
  std::string infill_error;
  std::vector<int32_t> infill_stops;
  RoutedServer http;           // the routes (httplib's routing, run by the gate's handlers)
  std::unique_ptr<Gate> gate;  // the connections
  int bound_port = -1;

  Impl(Engine& e, const Tokenizer& t, int32_t ctx, const ServerOptions& o);
  // Plans an infill prompt (thread-safe); throws Error without FIM support. `reserved_by`
  // names the client's field that decided how much of the context the completion keeps (its
  // value `reserved`): an error for a prompt that cannot fit names it.
  InfillPlan plan_infill(InfillRequest req, const char* reserved_by = "", int64_t reserved = 0);
  InfillPlan plan_infill_locked(InfillRequest req);  // plan_infill without the error context
  InfillCounts infill_snapshot();
  // A text this long can never fit the context: more bytes than n_ctx tokens of the longest
  // token hold. Plain prompts over it get 413 before they are tokenized (check_prompt_bytes);
  // infill prefixes and suffixes are cut to it at a line boundary first (the layout then trims
  // by tokens), so no request tokenizes more than a context's worth of text.
  size_t max_text_bytes() const { return size_t(n_ctx) * max_token_bytes; }
  void check_prompt_bytes(size_t bytes, const char* field) const;
  size_t max_token_bytes = 1;
  // A place for one more generation request; throws HttpError 503 when all are taken.
  SlotPtr admit();
  // Counts n_tokens prompt tokens against ServerOptions.max_tokens_in_flight until the slot is
  // released: a prompt longer than the cap itself gets 413, one that does not fit beside the
  // requests in flight 503 (retry later). Call once per slot, before submitting to the engine.
  void hold_tokens(InFlightSlot& slot, int64_t n_tokens, const char* field);
};

// What ended a text early, if a TextFilter did.
enum class TextCut : uint8_t { none, stop_string, suffix_repeat, indent };

// Text between the engine's chunks and the client: the suffix-repeat rule (infill), the
// indentation limit (/infill n_indent) and stop strings; each may end generation early.
class TextFilter {
 public:
  // n_indent > 0: /infill's indentation limit (IndentLimit).
  TextFilter(std::optional<std::string_view> infill_suffix, std::vector<std::string> stops,
             int64_t n_indent = 0);
  struct Step {
    std::string text;   // safe to send now
    bool stop = false;  // a stop string or a suffix repeat ended the text
  };
  Step push(std::string_view piece);
  std::string finish();  // the held-back text at the end of generation
  TextCut cut() const { return cut_; }
  const std::string& stopping_word() const { return stopping_word_; }  // the stop string found

 private:
  Step cut_stops(std::string piece);
  // Applied in this order, each to what the previous one let through.
  std::optional<SuffixRepeatGuard> guard_;
  std::optional<IndentLimit> indent_;
  std::vector<std::string> stops_;
  size_t hold_ = 0;  // bytes a stop string could still need: longest stop - 1
  std::string held_;
  bool stopped_ = false;
  TextCut cut_ = TextCut::none;
  std::string stopping_word_;
};

struct DriveOptions {
  // Sends text to the client; false: the client is gone (the request is cancelled).
  std::function<bool(const std::string&)> emit;
  // > 0: llama.cpp's t_max_predict_ms: once this much time has passed since the first token,
  // the next text that carries a newline ends generation (after that text).
  int64_t time_limit_ms = 0;
};

struct DriveOutcome {
  RequestResult result;
  bool text_stop = false;   // ended by the filter (stop string / suffix repeat / indent)
  TextCut cut = TextCut::none;
  std::string stopping_word;
  bool time_stop = false;   // ended by time_limit_ms
  bool client_gone = false;
};

// Reads the stream to its end through `filter`; cancels the engine request when the filter
// stops, the time runs out or emit fails.
DriveOutcome drive(Engine& engine, RequestStream& stream, TextFilter& filter,
                   const DriveOptions& opts);

// n completions of one request (OpenAI's n, llama.cpp's n_cmpl): the prompt n times, which the
// prefix cache shares, choice i seeded seed + i; each stream is read by `read` on its own thread
// (the first on this one) so that time limits and stop strings act while it runs.
template <class T>
std::vector<T> run_choices(Engine& engine, const Request& r, int n,
                           const std::function<T(std::shared_ptr<RequestStream>)>& read) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) {
    Request ri = r;
    ri.sampling.seed += uint64_t(i);
    streams.push_back(engine.submit(std::move(ri)));
  }
  std::vector<std::future<T>> rest;
  for (int i = 1; i < n; ++i) rest.push_back(std::async(std::launch::async, read, streams[size_t(i)]));
  std::vector<T> out;
  out.push_back(read(streams[0]));
  for (auto& f : rest) out.push_back(f.get());
  return out;
}

// "stop" / "length" for OpenAI's finish_reason.
const char* finish_reason(const DriveOutcome& o);

// fields.cpp. Sampling fields (temperature, top_k, top_p, min_p, seed, samplers); refuses the
// llama.cpp options efim does not implement (check_unimplemented).
SamplingParams parse_sampling(const http::json& body, int32_t vocab);
// `speculative` (efim: false turns speculative decoding off for the request; it never changes
// the text) and llama.cpp's `speculative.n_max` (0: off, else the longest draft); its
// `speculative.n_min` and `speculative.p_min` are checked and have no effect.
void parse_speculative(const http::json& body, Request& r);
// llama.cpp's `samplers`: names (or a string of letters) in order; empty when absent.
std::vector<SamplerStage> parse_samplers(const http::json& body);
// Throws Error for repeat_penalty, frequency/presence_penalty, dry_multiplier, typical_p,
// xtc_probability, mirostat, dynatemp_range, top_n_sigma set to anything but their off value,
// and for a non-empty grammar, json_schema, response_format, logit_bias or lora.
void check_unimplemented(const http::json& body);
// A stop-string field: a string or a list of strings.
std::vector<std::string> parse_stops(const http::json& body, const char* field = "stop");
// Completions per request (OpenAI `n`, llama.cpp `n_cmpl`): the first of `fields` present, in
// [1, kMaxChoices]; 1 when none is.
inline constexpr int kMaxChoices = 8;
int parse_n_choices(const http::json& body, std::initializer_list<const char*> fields);

// Token healing of r.prompt's tail at or after `from` (infill/healing.h; the first token always
// stays): removes the backed-off tokens, has the engine reproduce their bytes before the answer
// (which starts at the cursor) and gives max_tokens the removed tokens back.
HealBackoff heal_prompt(const Server::Impl& s, Request& r, size_t from);
// A request's `token_healing` field (absent: the server's mode decides).
std::optional<bool> parse_token_healing(const http::json& body);
// The "token_healing" object of a response: what was backed off (zeros when nothing was).
http::json healing_json(const HealBackoff& h);

// native.cpp: llama.cpp's native generation request and answer (/completion, /infill).
struct NativeJob {
  Request request;  // prompt, sampling, max_tokens, stop tokens, ignore_eos
  std::optional<std::string> suffix;  // infill: the suffix the repeat rule watches
  std::vector<std::string> stops;
  int64_t n_indent = 0;       // > 0: a later line indented less ends the text
  int64_t time_limit_ms = 0;  // t_max_predict_ms
  int n_choices = 1;          // n_cmpl
  bool stream = false;
  bool return_tokens = false;  // the answer lists the generated token ids
  bool fill_only = false;      // n_predict 0: compute the prompt into the cache, send no text
  bool truncated = false;      // the prompt was cut to fit the context
  std::vector<std::string> response_fields;  // non-empty: answer only these "a/b" paths
  HealBackoff healing;
  std::string prompt_text;  // echoed as "prompt"
  http::json plan;          // infill: {"layout", "reason"} of the plan, answered as "infill"
};
// Reads the fields /completion and /infill share: t_max_predict_ms, n_indent, stop,
// return_tokens, n_cmpl (or n), stream, response_fields, cache_prompt, sampling, ignore_eos.
void parse_native_fields(const Server::Impl& s, const http::json& body, NativeJob& job);
// Runs the job and answers llama.cpp's final object (a list for n_cmpl > 1), or SSE events
// {"content", "stop": false} then the final object.
void respond_native(Server::Impl& s, NativeJob job, SlotPtr slot, httplib::Response& res);

void add_completion_routes(Server::Impl& s);
void add_infill_routes(Server::Impl& s);
void add_llama_routes(Server::Impl& s);
void add_ollama_routes(Server::Impl& s);  // /api/generate, /api/tags, /api/show, ...  // /completion, /props, /tokenize, /detokenize
void add_metrics_routes(Server::Impl& s);

// Runs a route body, mapping HttpError to its status, Error to 400 and anything else to 500,
// with the error body.
void guarded(httplib::Response& res, const std::function<void()>& body);

}  // namespace efim
