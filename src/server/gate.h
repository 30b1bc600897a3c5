// The connection gate in front of the HTTP routes: one epoll thread owns every connection
// while it is idle or still sending its request, and a request reaches a handler thread only
// once it has arrived whole. Slow or idle clients therefore hold a file descriptor and a buffer,
// never a handler thread: 500 idle connections and 200 clients sending a byte every 2 s leave
// /health answering at once.
//
//   accept -> [reading: bytes buffered, deadline = request_timeout from its first byte]
//          -> whole (headers + Content-Length body) -> a handler thread runs httplib's routing on
//             the buffered bytes, writing the answer to the socket (write_timeout per write)
//          -> keep-alive: back to the epoll thread, idle (deadline = idle_timeout), up to
//             keep_alive_max requests per connection; else closed.
// Refused early, with the JSON error and a close: a connection over max_connections (503), a
// header over max_header_bytes (431), a Content-Length over max_body_bytes (413), a chunked
// request body (411), bytes past max_buffered_bytes over all connections (503). A request or idle
// connection past its deadline is closed.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace efim {

struct GateOptions {
  int max_connections = 1024;        // open connections at most; one more gets 503 and a close
  int request_timeout_s = 10;        // a request must arrive whole within this of its first byte
  int idle_timeout_s = 5;            // a keep-alive connection may idle this long between requests
  int write_timeout_s = 10;          // a client that reads nothing this long is dropped
  size_t max_header_bytes = 64 << 10;
  size_t max_body_bytes = 16u << 20;
  // Request bytes held at once, arriving and in handler threads, over all connections: a
  // connection whose bytes would pass it gets 503 (a flood of large bodies cannot exhaust memory).
  size_t max_buffered_bytes = size_t(256) << 20;
  int keep_alive_max = 100;          // requests per connection
  int n_handlers = 72;               // handler threads (routing and generation)
  // The error body for a refusal (status, message) in the route's API format (path "" when the
  // request line was not read).
  std::function<std::string(int status, const std::string& path, const std::string& message)>
      error_body;
};

// httplib's routing on a request that is already buffered (httplib::Server::process_request is
// protected: this subclass opens it to the gate).
class RoutedServer : public httplib::Server {
 public:
  // Runs the routes on one request; false when the connection must close afterwards.
  bool serve(httplib::Stream& strm, bool close_after);
  // httplib ends chunked responses early when its own listening socket is invalid (it never
  // listens here): the gate gives it its socket.
  void set_listening(socket_t fd) { svr_sock_ = fd; }
};

class Gate {
 public:
  Gate(RoutedServer& routes, GateOptions opts);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Binds host:port (0: any free port) with SO_REUSEADDR and the bounded send buffer; returns
  // the port. Throws Error when it cannot.
  int bind(const std::string& host, int port);
  // Serves until stop(): returns after the requests in handler threads have finished.
  void run();
  // Any thread (also before run()).
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace efim
