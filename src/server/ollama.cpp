// Ollama's API, for the editor plugins that talk to Ollama (Continue, twinny): POST
// /api/generate (with `suffix` an infill request planned like /infill, server-side EFIM
// included; without it the prompt as the client formatted it, special tokens parsed as Ollama
// does), GET /api/tags, POST /api/show, GET /api/ps, GET /api/version; errors as Ollama's
// {"error": "..."}. Streaming is NDJSON (application/x-ndjson), one object per line, each line
// ending in "\n" (Continue drops an unterminated last line).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <random>

#include "base/error.h"
#include "server/server_impl.h"

namespace efim {
namespace {

using http::json;

// Ollama's error body, with its status.
void ollama_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(http::dump(json{{"error", message}}), "application/json; charset=utf-8");
}

void ollama_guarded(httplib::Response& res, const std::function<void()>& body) {
  try {
    body();
  } catch (const HttpError& e) {
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    ollama_error(res, e.status, e.what());
  } catch (const Error& e) {
    ollama_error(res, 400, e.what());
  } catch (const std::exception& e) {
    ollama_error(res, 500, e.what());
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(uint8_t(c)));
  return s;
}

// Ollama's names are model:tag, the tag "latest" when absent; matched case-insensitively.
std::string ollama_name(std::string name) {
  while (!name.empty() && std::isspace(uint8_t(name.back()))) name.pop_back();
  while (!name.empty() && std::isspace(uint8_t(name.front()))) name.erase(0, 1);
  const size_t colon = name.rfind(':'), slash = name.rfind('/');
  if (colon == std::string::npos || (slash != std::string::npos && colon < slash))
    name += ":latest";
  return name;
}

bool names_match(const std::string& asked, const std::string& served) {
  return asked == served || lower(ollama_name(asked)) == lower(ollama_name(served));
}

// RFC 3339 in UTC with microseconds, as Go marshals time.Now().UTC().
std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  const std::time_t secs = std::time_t(us.count() / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06" PRId64 "Z", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                int64_t(us.count() % 1000000));
  return buf;
}

// Ollama's parameter_size: "1.5B", "494.03M".
std::string human_count(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fM", double(n) / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.2fK", double(n) / 1e3);
  return buf;
}

// An identifier of the served file (FNV-1a of its path, size and mtime), not the sha256 of its
// bytes that Ollama's manifests hold: hashing gigabytes at every start would cost seconds.
std::string file_digest(const Server::Impl& s) {
  uint64_t h = 1469598103934665603ull;
  const std::string key = str(s.opt.model_path, "|", s.opt.card.file_bytes, "|",
                              s.opt.card.modified_unix);
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

json details(const Server::Impl& s) {
  const ModelCard& c = s.opt.card;
  return {{"parent_model", ""},
          {"format", c.format},
          {"family", c.family},
          {"families", json::array({c.family})},
          {"parameter_size", human_count(c.n_params)},
          {"quantization_level", c.quantization}};
}

json model_entry(const Server::Impl& s) {
  const std::string name = ollama_name(s.opt.model_id);
  return {{"name", name},
          {"model", name},
          {"modified_at", rfc3339(std::chrono::system_clock::from_time_t(
                              std::time_t(s.opt.card.modified_unix)))},
          {"size", s.opt.card.file_bytes},
          {"digest", file_digest(s)},
          {"details", details(s)}};
}

// The Go template that describes how efim lays out a request, for /api/show: Continue sends
// `suffix` only to a model whose template mentions .Suffix. (efim plans the real layout itself:
// PSM, SPM or EFIM with the typed text after the middle sentinel.)
std::string go_template(const Server::Impl& s) {
  if (!s.layout) return "{{ .Prompt }}";
  const FimFormat& f = s.layout->format();
  auto t = [&](int32_t id) { return std::string(s.tok.token_text(id)); };
  return str("{{- if .Suffix }}", t(f.pre), "{{ .Prompt }}", t(f.suf), "{{ .Suffix }}", t(f.mid),
             "{{- else }}{{ .Prompt }}{{- end }}");
}

// The Modelfile PARAMETER lines: the context length and the infill's end tokens.
std::vector<std::pair<std::string, std::string>> parameters(const Server::Impl& s) {
  std::vector<std::pair<std::string, std::string>> out = {{"num_ctx", std::to_string(s.n_ctx)}};
  for (int32_t id : s.infill_stops) out.emplace_back("stop", http::dump(std::string(s.tok.token_text(id))));
  return out;
}

void check_served(const Server::Impl& s, const std::string& asked, bool normalised_in_error) {
  if (names_match(asked, s.opt.model_id)) return;
  throw HttpError(404,
                  str("model '", normalised_in_error ? ollama_name(asked) : asked,
                      "' not found; this server serves '", ollama_name(s.opt.model_id),
                      "' (efim serve --alias NAME answers to another name)"),
                  "", "");
}

// --- /api/generate ---

struct GenerateJob {
  std::string model;  // as asked (echoed, as Ollama does)
  Request request;
  std::optional<std::string> suffix;  // an infill
  std::vector<std::string> stops;
  bool stream = true;
  bool raw = false;
  bool fill_only = false;
  size_t healing_from = std::string::npos;  // token-heal the prompt's tail from here
};

// Ollama's Options (api/types.go), with its defaults for the sampling ones: temperature 0.8,
// top_k 40, top_p 0.9, min_p 0, seed -1 (random). Runtime options (threads, GPUs, batch,
// mmap, ...) do not change the text and are accepted; sampling options efim does not
// implement are refused unless at their off value; unknown keys are ignored, as Ollama does.
struct GenerateOptions {
  SamplingParams sampling{.temperature = 0.8f, .top_k = 40, .top_p = 0.9f};
  int64_t num_predict = -1;
  std::optional<int64_t> num_ctx;
  std::vector<std::string> stop;
};

GenerateOptions parse_options(const json& body, int32_t vocab) {
  GenerateOptions o;
  o.sampling.seed = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  auto it = body.find("options");
  if (it == body.end() || it->is_null()) return o;
  EFIM_CHECK(it->is_object(), "options must be an object, got ", http::describe(*it));
  const json& opt = *it;
  auto number = [&](const char* key) -> std::optional<double> {
    auto v = opt.find(key);
    if (v == opt.end() || v->is_null()) return std::nullopt;
    EFIM_CHECK(v->is_number(), "option \"", key, "\" must be of type float32, got ",
               http::describe(*v));
    return v->get<double>();
  };
  auto integer = [&](const char* key) -> std::optional<int64_t> {
    auto v = opt.find(key);
    if (v == opt.end() || v->is_null()) return std::nullopt;
    EFIM_CHECK(v->is_number(), "option \"", key, "\" must be of type integer, got ",
               http::describe(*v));
    return int64_t(v->get<double>());  // Ollama truncates a float
  };
  if (auto v = number("temperature")) o.sampling.temperature = float(*v);
  if (auto v = integer("top_k")) o.sampling.top_k = int32_t(std::clamp<int64_t>(*v, 0, vocab));
  if (auto v = number("top_p")) o.sampling.top_p = float(*v);
  if (auto v = number("min_p")) o.sampling.min_p = float(*v);
  if (auto v = integer("seed"); v && *v >= 0) o.sampling.seed = uint64_t(*v);
  if (auto v = integer("num_predict")) o.num_predict = *v;
  if (auto v = integer("num_ctx")) {
    EFIM_CHECK(*v > 0, "option \"num_ctx\" must be positive, got ", *v);
    o.num_ctx = *v;
  }
  if (auto v = opt.find("stop"); v != opt.end() && !v->is_null()) {
    EFIM_CHECK(v->is_array(), "option \"stop\" must be of type array, got ", http::describe(*v));
    for (const json& x : *v) {
      EFIM_CHECK(x.is_string(), "option \"stop\" must be of an array of strings, got ",
                 http::describe(x));
      o.stop.push_back(x.get<std::string>());
    }
  }
  const std::pair<const char*, double> refused[] = {
      {"repeat_penalty", 1.0}, {"presence_penalty", 0.0}, {"frequency_penalty", 0.0},
      {"typical_p", 1.0},      {"mirostat", 0.0},        {"tfs_z", 1.0}};
  for (const auto& [key, off] : refused)
    if (auto v = number(key); v && *v != off)
      throw Error(str("option \"", key, "\" = ", *v, " is not supported by efim (only ", off,
                      ", which turns it off)"));
  if (o.sampling.top_p <= 0.0f) o.sampling.top_p = 1.0f;  // Ollama: top_p 0 disables it
  validate(o.sampling);
  return o;
}

// keep_alive: a number of seconds or a Go duration string ("5m", "-1s"). efim keeps its one
// model loaded whatever it says; a malformed value is still an error, as in Ollama.
std::optional<double> parse_keep_alive(const json& body) {
  auto it = body.find("keep_alive");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_number()) return it->get<double>();
  EFIM_CHECK(it->is_string(), "field 'keep_alive': unsupported type: ", http::describe(*it));
  const std::string v = it->get<std::string>();
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  EFIM_CHECK(end != v.c_str() && *end != '\0',
             "field 'keep_alive': time: missing unit in duration \"", v, "\"");
  const std::string unit(end);
  static const std::pair<const char*, double> kUnits[] = {
      {"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}};
  for (const auto& [u, scale] : kUnits)
    if (unit == u) return x * scale;
  throw Error(str("field 'keep_alive': time: unknown unit \"", unit, "\" in duration \"", v, "\""));
}

GenerateJob parse_generate(Server::Impl& s, const json& body, std::optional<double>& keep_alive) {
  GenerateJob job;
  job.model = http::get_string(body, "model").value_or("");
  if (job.model.empty()) throw HttpError(404, "model '' not found", "", "");
  check_served(s, job.model, false);
  const std::string prompt = http::get_string(body, "prompt").value_or("");
  const std::string suffix = http::get_string(body, "suffix").value_or("");
  job.raw = http::get_bool(body, "raw").value_or(false);
  job.stream = http::get_bool(body, "stream").value_or(true);
  keep_alive = parse_keep_alive(body);
  const bool has_template = !http::get_string(body, "template").value_or("").empty();
  const bool has_system = !http::get_string(body, "system").value_or("").empty();
  const auto ctx = body.find("context");
  const bool has_context = ctx != body.end() && !ctx->is_null() && !ctx->empty();
  EFIM_CHECK(!job.raw || !(has_template || has_system || has_context),
             "raw mode does not support template, system, or context");
  EFIM_CHECK(!job.raw || suffix.empty(),
             "raw mode sends the prompt as given; a suffix needs the server's infill layout "
             "(leave raw out)");
  EFIM_CHECK(!has_template, "field 'template' is not supported: efim lays out prompts itself "
             "(see /api/show); send the prompt raw or with a suffix");
  for (const char* f : {"images", "format"}) {
    auto it = body.find(f);
    EFIM_CHECK(it == body.end() || it->is_null() || (it->is_string() && it->empty()) ||
                   (it->is_array() && it->empty()),
               "field '", f, "' is not supported by efim (text completion only)");
  }
  if (auto t = body.find("think"); t != body.end() && !t->is_null() &&
                                   !(t->is_boolean() && !t->get<bool>()))
    throw Error(str("\"", job.model, "\" does not support thinking"));
  if (prompt.empty()) {  // Ollama: an empty prompt loads (or unloads) the model
    job.fill_only = true;
    return job;
  }
  const GenerateOptions o = parse_options(body, s.tok.vocab_size());
  const int64_t n_ctx = o.num_ctx ? std::min<int64_t>(*o.num_ctx, s.n_ctx) : s.n_ctx;
  job.request.sampling = o.sampling;
  job.stops = o.stop;
  if (!suffix.empty()) {
    EFIM_CHECK(s.layout, s.infill_error);
    job.suffix = suffix;
    const int64_t reserve = std::max<int64_t>({1, o.num_predict, n_ctx / 4});
    InfillRequest ir;
    ir.prefix = prompt;
    ir.suffix = suffix;
    ir.max_prompt_tokens = size_t(std::max<int64_t>(1, n_ctx - reserve));
    InfillPlan p = s.plan_infill(ir, "options.num_predict", o.num_predict);
    job.request.prompt = std::move(p.prompt.tokens);
    job.request.draft_place = p.place;
    job.request.draft_typed_from = p.prompt.middle_end;
    job.request.stop_tokens = s.infill_stops;
    if (heal_infill(s.opt.healing, std::nullopt))
      job.healing_from = p.prompt.middle_end;
  } else {
    // The prompt as the client formatted it (twinny writes its own FIM sentinels; Continue's
    // raw mode too): special tokens are parsed, as Ollama's tokenizer does.
    EncodeOptions eo;
    eo.parse_special = true;
    eo.add_bos = s.tok.add_bos_default();
    s.check_prompt_bytes(prompt.size(), "prompt");
    job.request.prompt = s.tok.encode(prompt, eo);
    if (heal_plain(s.opt.healing, std::nullopt, prompt)) job.healing_from = eo.add_bos ? 1 : 0;
  }
  const int64_t room = n_ctx - int64_t(job.request.prompt.size());
  EFIM_CHECK(room >= 1, "prompt of ", job.request.prompt.size(),
             " tokens leaves no room in the context of ", n_ctx, " tokens");
  if (o.num_predict == 0) job.fill_only = true;
  job.request.max_tokens = int32_t(o.num_predict > 0 ? std::min(o.num_predict, room)
                                   : job.fill_only ? 1 : room);
  return job;
}

json final_object(const GenerateJob& job, const DriveOutcome& o, const std::string& text,
                  std::chrono::steady_clock::time_point t0) {
  const RequestResult& r = o.result;
  const auto ns = [](double ms) { return int64_t(ms * 1e6); };
  const size_t n_prompt = job.request.prompt.size();
  const size_t n_gen = job.fill_only ? 0 : r.tokens.size();
  const bool stopped = o.text_stop || o.cut != TextCut::none || r.finish == FinishReason::stop;
  json j = {{"model", job.model},
            {"created_at", rfc3339(std::chrono::system_clock::now())},
            {"response", text},
            {"done", true},
            {"done_reason", stopped ? "stop" : "length"},
            {"total_duration",
             int64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now() - t0).count())},
            {"prompt_eval_count", n_prompt - size_t(r.n_cached)},
            {"prompt_eval_duration", ns(r.timings.first_token_ms)},
            {"eval_count", n_gen},
            {"eval_duration", ns(std::max(0.0, r.timings.total_ms - r.timings.first_token_ms))}};
  if (!job.raw) {  // Ollama's (deprecated) context: the prompt and the answer's tokens
    std::vector<int32_t> ctx = job.request.prompt;
    if (!job.fill_only) ctx.insert(ctx.end(), r.tokens.begin(), r.tokens.end());
    j["context"] = ctx;
  }
  return j;
}

void respond_generate(Server::Impl& s, GenerateJob job, SlotPtr slot, httplib::Response& res) {
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = s.engine.submit(job.request);
  auto filter = std::make_shared<TextFilter>(
      job.suffix ? std::optional<std::string_view>(*job.suffix) : std::nullopt, job.stops);
  auto shared = std::make_shared<GenerateJob>(std::move(job));
  if (!shared->stream) {
    std::string text;
    DriveOptions d;
    d.emit = [&](const std::string& piece) {
      if (!shared->fill_only) text += piece;
      return true;
    };
    DriveOutcome o = drive(s.engine, *stream, *filter, d);
    if (o.result.finish == FinishReason::error) return ollama_error(res, 500, o.result.error);
    res.set_content(http::dump(final_object(*shared, o, text, t0)), "application/json; charset=utf-8");
    return;
  }
  auto provider = [&s, stream, filter, shared, slot, t0](size_t, httplib::DataSink& sink) {
    auto send = [&](const json& j) {
      const std::string line = http::dump(j) + "\n";
      return sink.write(line.data(), line.size());
    };
    DriveOptions d;
    d.emit = [&](const std::string& text) {
      return shared->fill_only ||
             send({{"model", shared->model},
                   {"created_at", rfc3339(std::chrono::system_clock::now())},
                   {"response", text},
                   {"done", false}});
    };
    DriveOutcome o = drive(s.engine, *stream, *filter, d);
    slot->release();
    if (o.client_gone) return false;
    if (o.result.finish == FinishReason::error)
      send({{"error", o.result.error}});  // mid-stream: one more line, as Ollama does
    else
      send(final_object(*shared, o, "", t0));
    sink.done();
    return true;
  };
  Engine& engine = s.engine;
  res.set_chunked_content_provider("application/x-ndjson", provider,
                                   [&engine, stream, slot](bool) {
                                     engine.cancel(stream->id());
                                     slot->release();
                                   });
}

json show(const Server::Impl& s) {
  std::string params, modelfile = str("# Modelfile generated by efim\nFROM ", s.opt.model_path,
                                      "\nTEMPLATE \"\"\"", go_template(s), "\"\"\"\n");
  for (const auto& [k, v] : parameters(s)) {
    char key[40];
    std::snprintf(key, sizeof key, "%-30s", k.c_str());
    params += str(params.empty() ? "" : "\n", key, " ", v);
    modelfile += str("PARAMETER ", k, " ", v, "\n");
  }
  const ModelCard& c = s.opt.card;
  json caps = json::array({"completion"});
  if (s.layout) caps.push_back("insert");
  return {{"modelfile", modelfile},
          {"parameters", params},
          {"template", go_template(s)},
          {"details", details(s)},
          {"model_info",
           {{"general.architecture", c.family},
            {"general.parameter_count", c.n_params},
            {"general.file_type", c.quantization},
            {c.family + ".context_length", s.n_ctx}}},
          {"capabilities", caps},
          {"modified_at",
           rfc3339(std::chrono::system_clock::from_time_t(std::time_t(c.modified_unix)))}};
}

}  // namespace

void add_ollama_routes(Server::Impl& s) {
  s.http.Post("/api/generate", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] {
      EFIM_CHECK(!req.body.empty(), "missing request body");
      const json body = http::parse_body(req.body);
      std::optional<double> keep_alive;
      GenerateJob job = parse_generate(s, body, keep_alive);
      if (job.fill_only && job.request.prompt.empty()) {
        const bool unload = keep_alive && *keep_alive == 0;  // efim keeps its model loaded
        res.set_content(http::dump(json{{"model", job.model},
                                        {"created_at", rfc3339(std::chrono::system_clock::now())},
                                        {"response", ""},
                                        {"done", true},
                                        {"done_reason", unload ? "unload" : "load"}}),
                        "application/json; charset=utf-8");
        return;
      }
      SlotPtr slot = s.admit();
      if (job.healing_from != std::string::npos) heal_prompt(s, job.request, job.healing_from);
      s.hold_tokens(*slot, int64_t(job.request.prompt.size()), "prompt");
      respond_generate(s, std::move(job), std::move(slot), res);
    });
  });
  s.http.Get("/api/tags", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(http::dump(json{{"models", json::array({model_entry(s)})}}),
                    "application/json; charset=utf-8");
  });
  s.http.Get("/api/ps", [&s](const httplib::Request&, httplib::Response& res) {
    json m = model_entry(s);
    m.erase("modified_at");
    m["expires_at"] = rfc3339(std::chrono::system_clock::now() + std::chrono::hours(24 * 365));
    m["size_vram"] = 0;
    m["context_length"] = s.n_ctx;
    res.set_content(http::dump(json{{"models", json::array({m})}}),
                    "application/json; charset=utf-8");
  });
  s.http.Post("/api/show", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] {
      EFIM_CHECK(!req.body.empty(), "missing request body");
      const json body = http::parse_body(req.body);
      std::string name = http::get_string(body, "model").value_or("");
      if (name.empty()) name = http::get_string(body, "name").value_or("");
      EFIM_CHECK(!name.empty(), "model is required");
      check_served(s, name, true);
      res.set_content(http::dump(show(s)), "application/json; charset=utf-8");
    });
  });
  s.http.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"version":"0.12.0"})", "application/json; charset=utf-8");
  });
  s.http.Post("/api/chat", [&s](const httplib::Request& req, httplib::Response& res) {
    ollama_guarded(res, [&] {
      const json body = http::parse_body(req.body);
      throw Error(str("\"", http::get_string(body, "model").value_or(s.opt.model_id),
                      "\" does not support chat: efim serves code completion (use "
                      "/api/generate, with a suffix for infill)"));
    });
  });
}

}  // namespace efim
