// POST /v1/completions (OpenAI): plain completion of `prompt`, or an infill when `suffix` is
// given (planned with the server's infill mode), streamed as SSE or answered at once.
#include <atomic>
#include <ctime>

#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

struct CompletionJob {
  Request request;
  std::optional<std::string> suffix;
  std::vector<std::string> stops;
  int n_choices = 1;  // OpenAI's n
  bool stream = false;
  HealBackoff healing;

  // The suffix the repeat rule watches: none for plain completions and under ignore_eos.
  std::optional<std::string_view> repeat_suffix() const {
    if (!suffix || request.ignore_eos) return std::nullopt;
    return *suffix;
  }
};

// `prompt` is a string (tokenized here, with BOS when the model wants it) or a list of token ids
// (OpenAI allows it) sent to the engine exactly as given: a client can build its own FIM
// layout with sentinels. An infill (`suffix`) needs the string: the server plans its layout.
struct PromptField {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

PromptField parse_prompt(const json& body, int32_t vocab, bool infill) {
  auto it = body.find("prompt");
  EFIM_CHECK(it != body.end() && !it->is_null(),
             "field 'prompt' (a string or a list of token ids) is required");
  PromptField p;
  if (it->is_string()) {
    p.text = it->get<std::string>();
    EFIM_CHECK(!p.text->empty(), "field 'prompt' is empty");
    return p;
  }
  EFIM_CHECK(it->is_array(), "field 'prompt' must be a string or a list of token ids, got ",
             http::describe(*it));
  EFIM_CHECK(!infill, "field 'prompt' must be a string when 'suffix' is given (the server "
             "builds the infill layout), got a list");
  EFIM_CHECK(!it->empty(), "field 'prompt' is an empty list of token ids");
  p.ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    EFIM_CHECK(t.is_number_integer(), "field 'prompt': element ", i,
               " must be an integer token id, got ", http::describe(t));
    const bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(vocab)
                                                 : t.get<int64_t>() >= 0 &&
                                                       t.get<int64_t>() < vocab;
    EFIM_CHECK(in_range, "field 'prompt': token id ", t.dump(), " at ", i,
               " is outside the vocabulary [0, ", vocab, ")");
    p.ids.push_back(t.get<int32_t>());
  }
  return p;
}

// The prompt tokens, and where token healing may start backing off (npos: never; a token-id
// prompt is the client's own layout and is sent as given).
struct CompletionPrompt {
  std::vector<int32_t> tokens;
  size_t heal_from = std::string::npos;
  uint64_t place = 0;     // infill: the planner's place (the engine's draft memory key)
  size_t typed_from = 0;  // infill: just past the middle sentinel
};

CompletionPrompt completion_prompt(Server::Impl& s, PromptField prompt,
                                   const std::optional<std::string>& suffix, int32_t max_tokens,
                                   std::optional<bool> token_healing) {
  CompletionPrompt out;
  if (!prompt.text) {
    out.tokens = std::move(prompt.ids);
    return out;
  }
  if (!suffix) {
    EncodeOptions eo;
    eo.add_bos = s.tok.add_bos_default();
    s.check_prompt_bytes(prompt.text->size(), "prompt");
    out.tokens = s.tok.encode(*prompt.text, eo);
    if (heal_plain(s.opt.healing, token_healing, *prompt.text)) out.heal_from = eo.add_bos ? 1 : 0;
    return out;
  }
  InfillRequest ir;
  ir.prefix = *prompt.text;
  ir.suffix = *suffix;
  ir.max_prompt_tokens = size_t(s.n_ctx - max_tokens);
  InfillPlan plan = s.plan_infill(ir, "max_tokens", max_tokens);
  out.tokens = std::move(plan.prompt.tokens);
  out.place = plan.place;
  out.typed_from = plan.prompt.middle_end;
  if (heal_infill(s.opt.healing, token_healing)) out.heal_from = plan.prompt.middle_end;
  return out;
}

// One model is served; llama.cpp clients leave `model` out, which is fine.
void check_model(const Server::Impl& s, const json& body) {
  const auto model = http::get_string(body, "model");
  if (!model || model->empty() || *model == s.opt.model_id) return;
  throw HttpError(404, str("model '", *model, "' not found; this server serves '",
                           s.opt.model_id, "'"),
                  "invalid_request_error", "model_not_found");
}

// OpenAI fields efim does not implement: a 400 naming the field unless at its no-op value
// (presence/frequency_penalty are refused by parse_sampling).
void refuse_openai_unimplemented(const json& body) {
  if (auto it = body.find("logprobs"); it != body.end() && !it->is_null()) {
    const bool off = (it->is_boolean() && !it->get<bool>()) ||
                     (it->is_number_integer() && it->get<int64_t>() == 0);
    EFIM_CHECK(off, "field 'logprobs' = ", it->dump(), " is not supported by efim (no token "
               "log-probabilities); leave it out");
  }
  EFIM_CHECK(!http::get_bool(body, "echo").value_or(false),
             "field 'echo' = true is not supported by efim; leave it out");
  if (auto v = http::get_int(body, "best_of", 1, INT64_MAX); v && *v != 1)
    throw Error(str("field 'best_of' = ", *v, " is not supported by efim (only 1); use 'n' for "
                    "several completions"));
}

CompletionJob parse_completion(Server::Impl& s, const json& body) {
  CompletionJob job;
  check_model(s, body);
  refuse_openai_unimplemented(body);
  job.suffix = http::get_string(body, "suffix");
  PromptField prompt = parse_prompt(body, s.tok.vocab_size(), job.suffix.has_value());
  job.request.max_tokens =
      int32_t(http::get_int(body, "max_tokens", 1, s.n_ctx - 1).value_or(16));
  job.request.sampling = parse_sampling(body, s.tok.vocab_size());
  parse_speculative(body, job.request);
  job.request.ignore_eos = http::get_bool(body, "ignore_eos").value_or(false);
  job.stream = http::get_bool(body, "stream").value_or(false);
  job.stops = parse_stops(body);
  job.n_choices = parse_n_choices(body, {"n"});
  EFIM_CHECK(!job.stream || job.n_choices == 1, "n = ", job.n_choices,
             " needs stream false (efim streams one choice per request)");
  CompletionPrompt cp = completion_prompt(s, std::move(prompt), job.suffix,
                                          job.request.max_tokens, parse_token_healing(body));
  job.request.prompt = std::move(cp.tokens);
  job.request.draft_place = cp.place;
  job.request.draft_typed_from = cp.typed_from;
  if (cp.heal_from != std::string::npos) job.healing = heal_prompt(s, job.request, cp.heal_from);
  const int64_t n = int64_t(job.request.prompt.size());
  EFIM_CHECK(n + job.request.max_tokens <= s.n_ctx, "prompt of ", n, " tokens + max_tokens ",
             job.request.max_tokens, " exceed the model context of ", s.n_ctx, " tokens");
  // ignore_eos asks for max_tokens tokens (benchmarks): the infill's end tokens and its
  // suffix-repeat cut are ends of text as well, so they are off too; `stop` strings still apply.
  if (job.suffix && !job.request.ignore_eos) job.request.stop_tokens = s.infill_stops;
  return job;
}

std::string new_id() {
  static std::atomic<int64_t> next{1};
  return str("cmpl-", std::time(nullptr), "-", next++);
}

json base_response(const Server::Impl& s, const std::string& id) {
  return {{"id", id}, {"object", "text_completion"}, {"created", int64_t(std::time(nullptr))},
          {"model", s.opt.model_id}};
}

json usage(const RequestResult& r, size_t prompt_tokens) {
  const size_t n = r.tokens.size();
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", n},
          {"total_tokens", prompt_tokens + n},
          {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}}};
}

json choice_item(const std::string& text, const json& finish, int index) {
  return {{"text", text}, {"index", index}, {"logprobs", nullptr}, {"finish_reason", finish}};
}

json choice(const std::string& text, const json& finish) {
  return json::array({choice_item(text, finish, 0)});
}

void respond_stream(Server::Impl& s, CompletionJob job, SlotPtr slot, httplib::Response& res) {
  const size_t n_prompt = job.request.prompt.size();
  auto stream = s.engine.submit(std::move(job.request));
  auto filter = std::make_shared<TextFilter>(job.repeat_suffix(), std::move(job.stops));
  const std::string id = new_id();
  Engine& engine = s.engine;
  const json healing = job.healing.empty() ? json() : healing_json(job.healing);
  auto provider = [&s, stream, filter, id, n_prompt, slot, healing](size_t,
                                                                     httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      std::string ev = "data: " + http::dump(j) + "\n\n";
      return sink.write(ev.data(), ev.size());
    };
    DriveOptions d;
    d.emit = [&](const std::string& text) {
      json j = base_response(s, id);
      j["choices"] = choice(text, nullptr);
      return send(j);
    };
    DriveOutcome o = drive(s.engine, *stream, *filter, d);
    slot->release();
    if (o.client_gone) return false;
    json last = base_response(s, id);
    last["choices"] = choice("", finish_reason(o));
    last["usage"] = usage(o.result, n_prompt);
    if (!healing.is_null()) last["token_healing"] = healing;
    if (o.result.finish == FinishReason::error) last["error"] = {{"message", o.result.error}};
    send(last);
    const std::string done = "data: [DONE]\n\n";
    sink.write(done.data(), done.size());
    sink.done();
    return true;
  };
  // The releaser also runs when the client left before the provider started.
  res.set_chunked_content_provider("text/event-stream", provider, [&engine, stream, slot](bool) {
    engine.cancel(stream->id());
    slot->release();
  });
}

// n > 1 (run_choices): usage sums the completion tokens and counts the prompt once, as OpenAI's.
void respond_once(Server::Impl& s, CompletionJob job, httplib::Response& res) {
  const size_t n_prompt = job.request.prompt.size();
  struct Out {
    std::string text;
    DriveOutcome o;
  };
  const std::vector<Out> outs = run_choices<Out>(
      s.engine, job.request, job.n_choices, [&](std::shared_ptr<RequestStream> stream) {
        TextFilter filter(job.repeat_suffix(), job.stops);
        Out out;
        DriveOptions d;
        d.emit = [&](const std::string& piece) {
          out.text += piece;
          return true;
        };
        out.o = drive(s.engine, *stream, filter, d);
        return out;
      });
  json choices = json::array();
  size_t n_completion = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].o.result.finish == FinishReason::error) {
      res.status = 500;
      res.set_content(http::error_body(outs[i].o.result.error, "server_error"),
                      "application/json");
      return;
    }
    choices.push_back(choice_item(outs[i].text, finish_reason(outs[i].o), int(i)));
    n_completion += outs[i].o.result.tokens.size();
  }
  json j = base_response(s, new_id());
  j["choices"] = std::move(choices);
  j["usage"] = usage(outs[0].o.result, n_prompt);
  j["usage"]["completion_tokens"] = n_completion;
  j["usage"]["total_tokens"] = n_prompt + n_completion;
  if (!job.healing.empty()) j["token_healing"] = healing_json(job.healing);
  res.set_content(http::dump(j), "application/json");
}

}  // namespace

void add_completion_routes(Server::Impl& s) {
  // llama.vscode's chat and edit features call this; efim serves code completion only.
  s.http.Post("/v1/chat/completions", [&s](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      throw Error(str("'", s.opt.model_id, "' has no chat template: efim serves completion "
                      "and infill (/v1/completions, /infill, /completion, /api/generate)"));
    });
  });
  s.http.Post("/v1/completions", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      SlotPtr slot = s.admit();  // held until the response is complete
      CompletionJob job = parse_completion(s, http::parse_body(req.body));
      s.hold_tokens(*slot, int64_t(job.request.prompt.size()), "prompt");
      if (job.stream)
        respond_stream(s, std::move(job), std::move(slot), res);
      else
        respond_once(s, std::move(job), res);
    });
  });
}

}  // namespace efim
