// Server lifecycle, authentication and the small routes (/, the playground page; /health;
// /v1/models).
#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <ctime>


#include "base/error.h"
#include "server/playground_html.h"
#include "server/server_impl.h"

namespace efim {

Server::Impl::Impl(Engine& e, const Tokenizer& t, int32_t ctx, const ServerOptions& o)
    : engine(e), tok(t), n_ctx(ctx), opt(o) {
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    max_token_bytes = std::max(max_token_bytes, tok.token_bytes(id).size());
  try {
    layout = std::make_unique<FimLayout>(tok, make_format(tok));
    planner = std::make_unique<InfillPlanner>(*layout, opt.planner);
    infill_stops = infill_stop_tokens(tok, layout->format());
  } catch (const Error& err) {
    infill_error = str("this model cannot infill: ", err.what());
  }
}

// The planner asks the engine how much of an anchor is cached (auto mode re-anchors when its
// suffix left the cache); the one ask per plan waits for the engine's current step to end.
void Server::Impl::check_prompt_bytes(size_t bytes, const char* field) const {
  if (bytes <= max_text_bytes()) return;
  throw HttpError(413,
                  str("field '", field, "' of ", bytes, " bytes cannot fit the context of ", n_ctx,
                      " tokens (at most ", max_token_bytes, " bytes per token: ",
                      max_text_bytes(), " bytes)"),
                  "invalid_request_error", "prompt_too_long");
}

namespace {

// The prefix's last `limit` bytes or more, starting at a line (an editor's whole file before the
// cursor is cut before tokenizing). The cut moves in steps of limit / 2 as the prefix grows, so a
// user typing at the end keeps the same cut for a while (and EFIM can extend the last prompt).
std::string_view cut_prefix(std::string_view p, size_t limit) {
  if (p.size() <= limit) return p;
  const size_t step = std::max<size_t>(1, limit / 2);
  size_t at = (p.size() - limit) / step * step;
  const size_t nl = p.find('\n', at);
  at = nl == std::string_view::npos ? at : nl + 1;
  while (at < p.size() && (uint8_t(p[at]) & 0xC0) == 0x80) ++at;  // not inside a character
  return p.substr(at);
}

// The suffix's first `limit` bytes, ending after a line.
std::string_view cut_suffix(std::string_view s, size_t limit) {
  if (s.size() <= limit) return s;
  size_t end = s.rfind('\n', limit);
  end = end == std::string_view::npos ? limit : end + 1;
  while (end > 0 && end < s.size() && (uint8_t(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace

InfillPlan Server::Impl::plan_infill(InfillRequest req, const char* reserved_by,
                                     int64_t reserved) {
  EFIM_CHECK(planner, infill_error);
  req.prefix = cut_prefix(req.prefix, max_text_bytes());
  req.suffix = cut_suffix(req.suffix, max_text_bytes());
  if (req.prompt.size() > max_text_bytes()) check_prompt_bytes(req.prompt.size(), "prompt");
  try {
    return plan_infill_locked(req);
  } catch (const Error& e) {
    if (*reserved_by == '\0') throw;
    throw Error(str(reserved_by, " = ", reserved, " leaves ", req.max_prompt_tokens, " of the ",
                    n_ctx, "-token context for the prompt: ", e.what()));
  }
}

InfillPlan Server::Impl::plan_infill_locked(InfillRequest req) {
  req.mode = opt.infill_mode;
  std::lock_guard<std::mutex> lock(planner_mu);
  req.cached = [this](TokenSeqs seqs) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<size_t> n = engine.cached_prefixes(seqs);
    infill_counts.cache_probe_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++infill_counts.cache_probes;
    return n;
  };
  InfillPlan p = planner->plan(req);
  ++infill_counts.plans.at(size_t(p.prompt.order)).at(size_t(p.reason));
  return p;
}

InfillCounts Server::Impl::infill_snapshot() {
  std::lock_guard<std::mutex> lock(planner_mu);
  return infill_counts;
}

SlotPtr Server::Impl::admit() {
  if (draining) {
    ++rejected_draining;
    throw HttpError(503,
                    "server draining: this replica is shutting down and takes no new requests; "
                    "retry on another",
                    "server_overloaded", "draining", 1);
  }
  const int limit = opt.max_concurrent_requests;
  const int before = in_flight.fetch_add(1);
  if (before < limit) return std::make_shared<InFlightSlot>(in_flight, tokens_in_flight);
  in_flight.fetch_sub(1);
  ++rejected_overload;
  throw HttpError(503,
                  str("server overloaded: ", before, " generation requests in flight, the limit is ",
                      limit, " (efim serve --max-requests); retry later"),
                  "server_overloaded", "overloaded", 1);
}

void Server::Impl::hold_tokens(InFlightSlot& slot, int64_t n_tokens, const char* field) {
  EFIM_CHECK(slot.held_ == 0, "hold_tokens: the slot already holds ", slot.held_, " tokens");
  const int64_t cap = opt.max_tokens_in_flight;
  if (cap <= 0 || n_tokens <= 0) return;
  if (n_tokens > cap)
    throw HttpError(413,
                    str(field, " is ", n_tokens, " tokens, more than the server holds in flight "
                        "at once (", cap, ", efim serve --max-tokens-in-flight)"),
                    "invalid_request_error", "prompt_too_large");
  const int64_t before = tokens_in_flight.fetch_add(n_tokens);
  if (before + n_tokens <= cap) {
    slot.held_ = n_tokens;
    return;
  }
  tokens_in_flight.fetch_sub(n_tokens);
  ++rejected_overload;
  throw HttpError(503,
                  str("server overloaded: ", before, " prompt tokens in flight and ", field,
                      " needs ", n_tokens, ", the cap is ", cap,
                      " (efim serve --max-tokens-in-flight); retry later"),
                  "server_overloaded", "overloaded", 1);
}

void guarded(httplib::Response& res, const std::function<void()>& body) {
  try {
    body();
  } catch (const HttpError& e) {
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(http::error_body(e.what(), e.type, e.code), "application/json");
  } catch (const Error& e) {
    res.status = 400;
    res.set_content(http::error_body(e.what(), "invalid_request_error"), "application/json");
  } catch (const std::exception& e) {
    res.status = 500;
    res.set_content(http::error_body(e.what(), "server_error"), "application/json");
  }
}

namespace {

bool authorized(const Server::Impl& s, const httplib::Request& req) {
  // The playground page is static; the requests it makes carry the key.
  if (s.opt.api_key.empty() || req.path == "/health" || req.path == "/") return true;
  return req.get_header_value("Authorization") == "Bearer " + s.opt.api_key;
}

void add_basic_routes(Server::Impl& s) {
  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (authorized(s, req)) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 401;
    // Names what the client sent wrong without echoing the key it tried.
    const std::string got = req.get_header_value("Authorization");
    const std::string why =
        got.empty() ? "no Authorization header"
        : got.rfind("Bearer ", 0) != 0
            ? str("the Authorization header is not 'Bearer KEY' (", got.size(), " bytes)")
            : "the Authorization header's bearer key is not this server's API key";
    res.set_content(http::error_body(str("invalid or missing API key: ", why,
                                         "; send Authorization: Bearer KEY"),
                                     "authentication_error"),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kPlaygroundHtml, "text/html; charset=utf-8");
  });
  s.http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    if (s.draining) {
      res.status = 503;
      res.set_content(R"({"status":"draining"})", "application/json");
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    http::json m = {{"id", s.opt.model_id}, {"object", "model"},
                    {"created", int64_t(std::time(nullptr))}, {"owned_by", "efim"}};
    http::json list = {{"object", "list"}, {"data", http::json::array({m})}};
    res.set_content(http::dump(list), "application/json");
  });
}

}  // namespace

Server::Server(Engine& engine, const Tokenizer& tokenizer, int32_t n_ctx,
               const ServerOptions& opts)
    : impl_(std::make_unique<Impl>(engine, tokenizer, n_ctx, opts)) {
  EFIM_CHECK(opts.max_concurrent_requests > 0,
             "ServerOptions.max_concurrent_requests must be positive, got ",
             opts.max_concurrent_requests);
  Impl& s = *impl_;
  s.http.set_payload_max_length(opts.max_body_bytes);
  // The gate owns the connections and buffers each request whole: a handler thread (one per
  // generation request in flight, plus a few for /health and /metrics) only ever runs a complete
  // request, so slow or idle clients cannot take them.
  GateOptions g;
  g.n_handlers = opts.max_concurrent_requests + 8;
  g.max_connections = opts.max_connections;
  g.request_timeout_s = opts.read_timeout_s;
  g.idle_timeout_s = opts.idle_timeout_s;
  g.write_timeout_s = opts.write_timeout_s;
  g.max_body_bytes = opts.max_body_bytes;
  g.max_buffered_bytes = opts.max_buffered_bytes;
  g.error_body = [](int status, const std::string& path, const std::string& message) {
    if (path.rfind("/api/", 0) == 0) return http::dump(http::json{{"error", message}});
    return http::error_body(message, status == 503 ? "server_overloaded"
                                                   : "invalid_request_error");
  };
  s.gate = std::make_unique<Gate>(s.http, std::move(g));
  // Statuses httplib answers itself (413 over max_body_bytes, 404 no route, 400 unparsable
  // HTTP) get the JSON error body of the API the path belongs to.
  s.http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    if (res.status == 413)
      msg = str("request body of ", req.get_header_value("Content-Length"),
                " bytes is over the limit of ", s.opt.max_body_bytes, " bytes");
    else if (res.status == 404)
      msg = str("no route ", req.method, " ", req.path);
    else
      msg = str("HTTP ", res.status);
    if (req.path.rfind("/api/", 0) == 0)
      res.set_content(http::dump(http::json{{"error", msg}}), "application/json; charset=utf-8");
    else
      res.set_content(http::error_body(msg, res.status == 404 ? "not_found_error"
                                                              : "invalid_request_error"),
                      "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  add_basic_routes(*impl_);
  add_completion_routes(*impl_);
  add_infill_routes(*impl_);
  add_llama_routes(*impl_);
  add_ollama_routes(*impl_);
  add_metrics_routes(*impl_);
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  s.bound_port = s.gate->bind(s.opt.host, s.opt.port);
  return s.bound_port;
}

void Server::listen() {
  EFIM_CHECK(impl_->bound_port > 0, "Server::listen() before bind()");
  impl_->gate->run();
}

// Any thread, any time (a stop() before listen() makes listen() return at once).
void Server::stop() { impl_->gate->stop(); }

void Server::drain() { impl_->draining = true; }
bool Server::draining() const { return impl_->draining; }
int Server::in_flight() const { return impl_->in_flight; }

}  // namespace efim
