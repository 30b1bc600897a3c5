#include "bench/infill/client.h"

#include <httplib.h>

#include <chrono>
#include <optional>

#include "base/error.h"

namespace efim::bench {
namespace {

using Clock = std::chrono::steady_clock;

httplib::Client make_client(const ClientOptions& o) {
  httplib::Client c(o.url);
  EFIM_CHECK(c.is_valid(), "bad server URL '", o.url, "' (expected http://host:port)");
  const auto secs = time_t(o.timeout_s);
  c.set_connection_timeout(10, 0);
  c.set_read_timeout(secs, 0);
  c.set_write_timeout(secs, 0);
  if (!o.api_key.empty()) c.set_bearer_token_auth(o.api_key);
  return c;
}

// Folds one parsed chunk into the timing.
void fold_chunk(const nlohmann::json& j, double t, RequestTiming& rt, bool& have_usage) {
  if (auto e = j.find("error"); e != j.end() && !e->is_null())
    fail("server reported an error mid-stream: ", e->dump());
  if (auto ch = j.find("choices"); ch != j.end() && ch->is_array() && !ch->empty()) {
    const auto& c0 = (*ch)[0];
    if (auto tx = c0.find("text");
        tx != c0.end() && tx->is_string() && !tx->get_ref<const std::string&>().empty()) {
      if (rt.chunk_s.empty()) rt.ttft_s = t;
      rt.chunk_s.push_back(t);
      rt.text += tx->get<std::string>();
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    have_usage = true;
    rt.prompt_tokens = u->value("prompt_tokens", int64_t(0));
    rt.completion_tokens = u->value("completion_tokens", int64_t(0));
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      rt.cached_tokens = d->value("cached_tokens", int64_t(0));
  }
}

// Folds one SSE payload into the timing; true at [DONE]. Malformed chunks (not JSON, fields
// of the wrong type) are an Error quoting the chunk.
bool on_event(const std::string& payload, double t, RequestTiming& rt, bool& have_usage) {
  if (payload == "[DONE]") return true;
  try {
    fold_chunk(nlohmann::json::parse(payload), t, rt, have_usage);
  } catch (const nlohmann::json::exception& e) {
    fail("server sent a malformed chunk (", e.what(), "): '", payload.substr(0, 200), "'");
  }
  return false;
}

}  // namespace

std::optional<double> RequestTiming::tpot_s() const {
  if (completion_tokens < 2) return std::nullopt;
  return (latency_s - ttft_s) / double(completion_tokens - 1);
}

std::vector<std::string> SseParser::push(std::string_view bytes) {
  std::vector<std::string> out;
  pending_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = pending_.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(pending_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.substr(0, 5) != "data:") continue;
    line.remove_prefix(5);
    if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    out.emplace_back(line);
  }
  pending_.erase(0, start);
  return out;
}

RequestTiming run_request(const ClientOptions& opts, const nlohmann::json& body) {
  httplib::Client c = make_client(opts);
  RequestTiming rt;
  SseParser sse;
  bool done = false, have_usage = false;
  std::string error_body;
  const auto t0 = Clock::now();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::optional<Error> bad_chunk;  // thrown after send(): no exception crosses httplib
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    if (error_body.size() < 4096) error_body.append(data, std::min<size_t>(n, 4096));
    try {
      for (const auto& payload : sse.push(std::string_view(data, n)))
        if (!done) done = on_event(payload, t, rt, have_usage);
    } catch (const Error& e) {
      bad_chunk = e;
      return false;  // abort the transfer
    }
    return true;
  };
  auto res = c.send(req);
  rt.latency_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (bad_chunk) throw *bad_chunk;
  EFIM_CHECK(res, "request to ", opts.url,
             "/v1/completions failed: ", httplib::to_string(res.error()));
  EFIM_CHECK(res->status == 200, "server answered HTTP ", res->status, ": ", error_body);
  EFIM_CHECK(done, "the stream ended without [DONE]");
  EFIM_CHECK(have_usage, "the stream carried no usage (prompt/completion token counts)");
  if (rt.chunk_s.empty()) rt.ttft_s = rt.latency_s;  // no text at all: first byte = the end
  return rt;
}

std::optional<std::string> fetch_metrics(const ClientOptions& opts) {
  httplib::Client c = make_client(opts);
  auto res = c.Get("/metrics");
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

}  // namespace efim::bench
