// Server lifecycle, authentication and the small routes (/, the playground page; /health;
// /v1/models).
#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <ctime>

#include <sys/socket.h>

#include "base/error.h"
#include "server/playground_html.h"
#include "server/server_impl.h"

namespace efim {

Server::Impl::Impl(Engine& e, const Tokenizer& t, int32_t ctx, const ServerOptions& o)
    : engine(e), tok(t), n_ctx(ctx), opt(o) {
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
InfillPlan Server::Impl::plan_infill(InfillRequest req) {
  EFIM_CHECK(planner, infill_error);
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
  const int limit = opt.max_concurrent_requests;
  const int before = in_flight.fetch_add(1);
  if (before < limit) return std::make_shared<InFlightSlot>(in_flight);
  in_flight.fetch_sub(1);
  ++rejected_overload;
  throw HttpError(503,
                  str("server overloaded: ", before, " generation requests in flight, the limit is ",
                      limit, " (efim serve --max-requests); retry later"),
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
    res.set_content(http::error_body("invalid or missing API key (Authorization: Bearer KEY)",
                                     "authentication_error"),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kPlaygroundHtml, "text/html; charset=utf-8");
  });
  s.http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
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
  // One handler thread per request in flight (a streamed response holds its thread), plus a
  // few for /health and /metrics; httplib's default pool (8 threads) would queue the rest.
  const size_t n_threads = size_t(opts.max_concurrent_requests) + 8;
  s.http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  // Remember the socket to raise its backlog after bind (Debian's compiled httplib listens
  // with a backlog of 5: a burst of editors connecting at once got resets). Replacing the
  // default options means setting SO_REUSEADDR here, as httplib's default does.
  s.http.set_socket_options([&s](socket_t fd) {
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    s.listen_fd = fd;
  });
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
  if (s.opt.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.opt.host);
    EFIM_CHECK(s.bound_port > 0, "cannot bind ", s.opt.host, " to any port");
  } else {
    EFIM_CHECK(s.http.bind_to_port(s.opt.host, s.opt.port), "cannot bind ", s.opt.host, ":",
               s.opt.port);
    s.bound_port = s.opt.port;
  }
  EFIM_CHECK(::listen(s.listen_fd, SOMAXCONN) == 0, "cannot set the listen backlog of ",
             s.opt.host, ":", s.bound_port);
  return s.bound_port;
}

void Server::listen() {
  EFIM_CHECK(impl_->bound_port > 0, "Server::listen() before bind()");
  if (impl_->stopping) return;  // a stop() before listen(): httplib alone would miss it
  impl_->http.listen_after_bind();
}

// httplib's stop() does nothing before listen_after_bind() runs; `stopping` covers that window
// up to listen()'s check (callers that must not lose a stop repeat it, see efim serve).
void Server::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

}  // namespace efim
