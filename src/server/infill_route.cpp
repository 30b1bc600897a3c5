// POST /infill, llama.cpp-compatible (the request llama.vim sends): the prompt is planned by
// the InfillPlanner (PSM / SPM / EFIM by the server's mode), stops on the infill stop tokens
// and cuts a completion that starts repeating the suffix.
#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

struct InfillJob {
  std::string prefix, suffix, prompt;
  std::vector<ExtraChunk> extra;
  int64_t n_predict = -1;  // -1: until a stop token or the context ends
  int64_t time_limit_ms = 0;
  int64_t n_indent = 0;  // > 0: stop at a later line indented less (IndentLimit)
  bool stream = false;
  std::vector<std::string> response_fields;  // non-empty: answer only these "a/b" paths
  SamplingParams sampling;
  std::optional<bool> token_healing;  // absent: the server's mode
};

std::vector<ExtraChunk> parse_extra(const json& body) {
  auto it = body.find("input_extra");
  if (it == body.end() || it->is_null()) return {};
  EFIM_CHECK(it->is_array(), "field 'input_extra' must be a list, got ", it->type_name());
  std::vector<ExtraChunk> out;
  for (const json& c : *it) {
    EFIM_CHECK(c.is_object(), "field 'input_extra' must hold objects, got ", c.type_name());
    ExtraChunk e;
    e.filename = http::get_string(c, "filename").value_or("");
    e.text = http::get_string(c, "text").value_or("");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::string> parse_response_fields(const json& body) {
  auto it = body.find("response_fields");
  if (it == body.end() || it->is_null()) return {};
  EFIM_CHECK(it->is_array(), "field 'response_fields' must be a list, got ", it->type_name());
  std::vector<std::string> out;
  for (const json& f : *it) {
    EFIM_CHECK(f.is_string(), "field 'response_fields' must hold strings, got ", f.type_name());
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

InfillJob parse_infill(const Server::Impl& s, const json& body) {
  InfillJob job;
  job.prefix = http::get_string(body, "input_prefix").value_or("");
  job.suffix = http::get_string(body, "input_suffix").value_or("");
  job.prompt = http::get_string(body, "prompt").value_or("");
  job.extra = parse_extra(body);
  job.n_predict = http::get_int(body, "n_predict", -1, s.n_ctx - 1).value_or(-1);
  job.time_limit_ms = http::get_int(body, "t_max_predict_ms", 0, INT64_MAX).value_or(0);
  job.n_indent = http::get_int(body, "n_indent", 0, INT64_MAX).value_or(0);
  job.stream = http::get_bool(body, "stream").value_or(false);
  job.response_fields = parse_response_fields(body);
  // Type-checked only: the prefix cache is a server setting (efim serve --no-prefix-cache).
  http::get_bool(body, "cache_prompt");
  job.sampling = parse_sampling(body, s.tok.vocab_size());
  job.token_healing = parse_token_healing(body);
  return job;
}

struct Planned {
  Request request;
  bool truncated = false;
  bool fill_only = false;  // n_predict 0: compute the prompt into the cache, send no text
  HealBackoff healing;     // the text after the middle sentinel, backed off
};

Planned plan(Server::Impl& s, const InfillJob& job) {
  // Without n_predict a quarter of the context stays free for the completion.
  const int64_t reserve = job.n_predict > 0 ? job.n_predict : std::max<int64_t>(1, s.n_ctx / 4);
  InfillRequest ir;
  ir.prefix = job.prefix;
  ir.suffix = job.suffix;
  ir.prompt = job.prompt;
  ir.extra = job.extra;
  ir.max_prompt_tokens = size_t(s.n_ctx - reserve);
  InfillPlan p = s.plan_infill(ir);
  Planned out;
  out.truncated = p.prompt.truncated;
  out.request.prompt = std::move(p.prompt.tokens);
  out.fill_only = job.n_predict == 0;
  const int64_t room = s.n_ctx - int64_t(out.request.prompt.size());
  EFIM_CHECK(room >= 1, "infill prompt of ", out.request.prompt.size(),
             " tokens leaves no room in the context of ", s.n_ctx);
  // n_predict 0 still samples one token (the engine needs max_tokens > 0); it is not sent.
  const int64_t n = job.n_predict > 0 ? std::min(job.n_predict, room) : out.fill_only ? 1 : room;
  out.request.max_tokens = int32_t(n);
  out.request.sampling = job.sampling;
  out.request.stop_tokens = s.infill_stops;
  // A prompt-only request (n_predict 0) caches the prompt as it is: nothing to heal.
  if (!out.fill_only && heal_infill(s.opt.healing, job.token_healing)) {
    out.healing = heal_prompt(s, out.request, p.prompt.middle_end);
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

json final_body(const std::string& content, const DriveOutcome& o, const Planned& p) {
  const size_t n_prompt = p.request.prompt.size();
  const size_t n_predicted = p.fill_only ? 0 : o.result.tokens.size();
  json j = {{"content", content},
            {"tokens_cached", o.result.n_cached},
            {"tokens_evaluated", n_prompt},
            {"tokens_predicted", n_predicted},
            {"truncated", p.truncated},
            {"stop", true},
            {"stop_type", finish_reason(o)},
            {"timings", timings(o.result, n_prompt, p.fill_only)},
            {"token_healing", healing_json(p.healing)}};
  if (o.result.finish == FinishReason::error) j["error"] = {{"message", o.result.error}};
  return j;
}

void respond_stream(Server::Impl& s, const InfillJob& job, Planned p, SlotPtr slot,
                    httplib::Response& res) {
  auto stream = s.engine.submit(p.request);
  auto filter =
      std::make_shared<TextFilter>(job.suffix, std::vector<std::string>{}, job.n_indent);
  auto planned = std::make_shared<Planned>(std::move(p));
  const int64_t limit = job.time_limit_ms;
  auto provider = [&s, stream, filter, planned, limit, slot, fields = job.response_fields](
                      size_t, httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      std::string ev = "data: " + http::dump(j) + "\n\n";
      return sink.write(ev.data(), ev.size());
    };
    DriveOptions d;
    d.time_limit_ms = limit;
    d.emit = [&](const std::string& text) {
      return planned->fill_only || send(json{{"content", text}, {"stop", false}});
    };
    DriveOutcome o = drive(s.engine, *stream, *filter, d);
    slot->release();
    if (o.client_gone) return false;
    send(select_fields(final_body("", o, *planned), fields));
    sink.done();
    return true;
  };
  Engine& engine = s.engine;
  res.set_chunked_content_provider("text/event-stream", provider, [&engine, stream, slot](bool) {
    engine.cancel(stream->id());
    slot->release();
  });
}

void respond_once(Server::Impl& s, const InfillJob& job, const Planned& p,
                  httplib::Response& res) {
  auto stream = s.engine.submit(p.request);
  TextFilter filter(job.suffix, {}, job.n_indent);
  std::string content;
  DriveOptions d;
  d.time_limit_ms = job.time_limit_ms;
  d.emit = [&](const std::string& piece) {
    if (!p.fill_only) content += piece;
    return true;
  };
  DriveOutcome o = drive(s.engine, *stream, filter, d);
  if (o.result.finish == FinishReason::error) res.status = 500;
  res.set_content(http::dump(select_fields(final_body(content, o, p), job.response_fields)),
                  "application/json");
}

}  // namespace

void add_infill_routes(Server::Impl& s) {
  s.http.Post("/infill", [&s](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] {
      SlotPtr slot = s.admit();  // held until the response is complete
      InfillJob job = parse_infill(s, http::parse_body(req.body));
      Planned p = plan(s, job);
      if (job.stream)
        respond_stream(s, job, std::move(p), std::move(slot), res);
      else
        respond_once(s, job, p, res);
    });
  });
}

}  // namespace efim
