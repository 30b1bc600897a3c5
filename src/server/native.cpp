// llama.cpp's native generation answer, shared by POST /completion and POST /infill: the
// common request fields, the final object (content, tokens, stop_type, tokens_cached, timings,
// ...) with response_fields selection, SSE streaming, and n_cmpl choices of one prompt.
#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

std::vector<std::string> parse_response_fields(const json& body) {
  auto it = body.find("response_fields");
  if (it == body.end() || it->is_null()) return {};
  EFIM_CHECK(it->is_array(), "field 'response_fields' must be a list, got ", http::describe(*it));
  std::vector<std::string> out;
  for (const json& f : *it) {
    EFIM_CHECK(f.is_string(), "field 'response_fields' must hold strings, got ", http::describe(f));
    out.push_back(f.get<std::string>());
  }
  return out;
}

// llama.cpp's response_fields: the answer holds only the listed paths ("timings/prompt_n"
// reads body["timings"]["prompt_n"]), each under its path as a flat key; absent paths are left
// out.
json select_fields(const json& body, const std::vector<std::string>& paths) {
  if (paths.empty()) return body;
  json out = json::object();
  for (const std::string& path : paths) {
    const json* cur = &body;
    for (size_t begin = 0; cur != nullptr && begin <= path.size();) {
      size_t end = path.find('/', begin);
      if (end == std::string::npos) end = path.size();
      const std::string key = path.substr(begin, end - begin);
      cur = cur->is_object() && cur->contains(key) ? &(*cur)[key] : nullptr;
      begin = end + 1;
    }
    if (cur != nullptr) out[path] = *cur;
  }
  return out;
}

// llama.cpp's timings object. n_predict 0 samples one token that is never sent: not counted.
json timings(const RequestResult& r, size_t n_prompt, bool fill_only) {
  const double prompt_ms = r.timings.first_token_ms;
  const double predicted_ms = std::max(0.0, r.timings.total_ms - r.timings.first_token_ms);
  const size_t prompt_n = n_prompt - size_t(r.n_cached);
  const size_t n = fill_only ? 0 : r.tokens.size();
  auto per_token = [](double ms, size_t k) { return k > 0 ? ms / double(k) : 0.0; };
  auto per_second = [](double ms, size_t k) { return ms > 0 ? 1000.0 * double(k) / ms : 0.0; };
  return {{"cache_n", r.n_cached},
          {"prompt_n", prompt_n},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(prompt_ms, prompt_n)},
          {"predicted_n", n},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", per_token(predicted_ms, n)},
          {"predicted_per_second", per_second(predicted_ms, n)}};
}

// Tokens in the sequence's KV cache when it ended (llama.cpp's tokens_cached, the slot's n_past):
// the prompt and every generated token that was fed back, i.e. all but the last when it ended
// on length or time (the last sampled token is never fed); none is fed after a stop token.
size_t tokens_in_cache(const DriveOutcome& o, const NativeJob& job) {
  const size_t n_prompt = job.request.prompt.size();
  if (job.fill_only) return n_prompt;
  const size_t n = o.result.tokens.size();
  const bool last_unfed = o.result.finish != FinishReason::stop && n > 0;
  return n_prompt + n - (last_unfed ? 1 : 0);
}

// llama.cpp's stop_type: eos (an end token, or efim's suffix-repeat cut, which ends an infill
// as one), word (a stop string), limit (n_predict, the context, n_indent, t_max_predict_ms),
// none (cancelled, error).
const char* stop_type(const DriveOutcome& o) {
  switch (o.cut) {
    case TextCut::stop_string: return "word";
    case TextCut::suffix_repeat: return "eos";
    case TextCut::indent: return "limit";
    case TextCut::none: break;
  }
  if (o.time_stop) return "limit";
  switch (o.result.finish) {
    case FinishReason::stop: return "eos";
    case FinishReason::length: return "limit";
    default: return "none";
  }
}

json final_body(const Server::Impl& s, const std::string& content, const DriveOutcome& o,
                const NativeJob& job) {
  const size_t n_prompt = job.request.prompt.size();
  const size_t n_predicted = job.fill_only ? 0 : o.result.tokens.size();
  json j = {{"index", 0},
            {"content", content},
            {"tokens", job.return_tokens && !job.fill_only ? o.result.tokens : std::vector<int32_t>{}},
            {"id_slot", 0},
            {"stop", true},
            {"model", s.opt.model_id},
            {"tokens_predicted", n_predicted},
            {"tokens_evaluated", n_prompt},
            {"prompt", job.prompt_text},
            {"has_new_line", content.find('\n') != std::string::npos},
            {"truncated", job.truncated},
            {"stop_type", stop_type(o)},
            {"stopping_word", o.stopping_word},
            {"tokens_cached", tokens_in_cache(o, job)},
            {"timings", timings(o.result, n_prompt, job.fill_only)},
            {"token_healing", healing_json(job.healing)}};
  if (!job.plan.is_null()) j["infill"] = job.plan;
  if (o.result.finish == FinishReason::error) j["error"] = {{"message", o.result.error}};
  return j;
}

std::shared_ptr<TextFilter> make_filter(const NativeJob& job) {
  return std::make_shared<TextFilter>(job.suffix, job.stops, job.n_indent);
}

void respond_stream(Server::Impl& s, NativeJob job, SlotPtr slot, httplib::Response& res) {
  auto stream = s.engine.submit(job.request);
  auto filter = make_filter(job);
  auto shared = std::make_shared<NativeJob>(std::move(job));
  auto provider = [&s, stream, filter, shared, slot](size_t, httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      std::string ev = "data: " + http::dump(j) + "\n\n";
      return sink.write(ev.data(), ev.size());
    };
    DriveOptions d;
    d.time_limit_ms = shared->time_limit_ms;
    d.emit = [&](const std::string& text) {
      return shared->fill_only || send(json{{"index", 0}, {"content", text}, {"stop", false}});
    };
    DriveOutcome o = drive(s.engine, *stream, *filter, d);
    slot->release();
    if (o.client_gone) return false;
    send(select_fields(final_body(s, "", o, *shared), shared->response_fields));
    sink.done();
    return true;
  };
  Engine& engine = s.engine;
  res.set_chunked_content_provider("text/event-stream", provider, [&engine, stream, slot](bool) {
    engine.cancel(stream->id());
    slot->release();
  });
}

struct Choice {
  std::string content;
  DriveOutcome outcome;
};

Choice run_choice(Server::Impl& s, const NativeJob& job, std::shared_ptr<RequestStream> stream) {
  auto filter = make_filter(job);
  Choice c;
  DriveOptions d;
  d.time_limit_ms = job.time_limit_ms;
  d.emit = [&](const std::string& piece) {
    if (!job.fill_only) c.content += piece;
    return true;
  };
  c.outcome = drive(s.engine, *stream, *filter, d);
  return c;
}

// n_cmpl > 1 (run_choices): the answer is a list, as llama.cpp's.
void respond_once(Server::Impl& s, const NativeJob& job, httplib::Response& res) {
  const int n = job.fill_only ? 1 : job.n_choices;
  const std::vector<Choice> choices = run_choices<Choice>(
      s.engine, job.request, n,
      [&](std::shared_ptr<RequestStream> stream) { return run_choice(s, job, std::move(stream)); });
  json bodies = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const Choice& c = choices[i];
    if (c.outcome.result.finish == FinishReason::error) res.status = 500;
    json b = final_body(s, c.content, c.outcome, job);
    b["index"] = i;
    bodies.push_back(select_fields(b, job.response_fields));
  }
  res.set_content(http::dump(n == 1 ? bodies[0] : bodies), "application/json");
}

}  // namespace

void parse_native_fields(const Server::Impl& s, const json& body, NativeJob& job) {
  job.time_limit_ms = http::get_int(body, "t_max_predict_ms", 0, INT64_MAX).value_or(0);
  job.n_indent = http::get_int(body, "n_indent", 0, INT64_MAX).value_or(0);
  job.stops = parse_stops(body);
  job.return_tokens = http::get_bool(body, "return_tokens").value_or(false);
  job.n_choices = parse_n_choices(body, {"n_cmpl", "n"});
  job.stream = http::get_bool(body, "stream").value_or(false);
  EFIM_CHECK(!job.stream || job.n_choices == 1, "n_cmpl = ", job.n_choices,
             " needs stream false (efim streams one completion per request)");
  job.response_fields = parse_response_fields(body);
  // Type-checked only: the prefix cache is a server setting (efim serve --no-prefix-cache).
  http::get_bool(body, "cache_prompt");
  job.request.sampling = parse_sampling(body, s.tok.vocab_size());
  parse_speculative(body, job.request);
  job.request.ignore_eos = http::get_bool(body, "ignore_eos").value_or(false);
}

void respond_native(Server::Impl& s, NativeJob job, SlotPtr slot, httplib::Response& res) {
  if (job.stream)
    respond_stream(s, std::move(job), std::move(slot), res);
  else
    respond_once(s, job, res);
}

}  // namespace efim
