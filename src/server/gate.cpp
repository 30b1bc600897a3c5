// The connection gate (gate.h): an epoll loop that buffers each request whole before a handler
// thread sees it.
#include "server/gate.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "base/error.h"

namespace efim {
namespace {

using Clock = std::chrono::steady_clock;

// A request already buffered whole: reads come from the buffer, writes go to the socket, each
// waiting at most write_timeout for the client to take bytes.
class BufferedStream final : public httplib::Stream {
 public:
  BufferedStream(int fd, std::string data, int write_timeout_s)
      : fd_(fd), data_(std::move(data)), write_timeout_ms_(write_timeout_s * 1000) {}
  bool is_readable() const override { return pos_ < data_.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return ::poll(&p, 1, write_timeout_ms_) > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, data_.size() - pos_);
    std::memcpy(ptr, data_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::send(fd_, ptr + done, size - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += size_t(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && is_writable()) continue;
      return -1;  // the client is gone, or read nothing for write_timeout
    }
    return ssize_t(done);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(::getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(::getsockname, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  void address(int (*get)(int, sockaddr*, socklen_t*), std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ip.clear();
    port = 0;
    if (get(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return;
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
      port = ntohs(v4->sin_port);
    } else if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
      port = ntohs(v6->sin6_port);
    }
    ip = buf;
  }
  int fd_;
  std::string data_;
  size_t pos_ = 0;
  int write_timeout_ms_;
};

// Where a buffered request ends, once its header has arrived.
struct Framing {
  enum class State { incomplete, whole, refused } state = State::incomplete;
  size_t end = 0;  // bytes of the whole request
  int status = 0;  // refused: the status to answer
  std::string path, message;
};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(uint8_t(x)) == std::tolower(uint8_t(y));
         });
}

Framing frame(const std::string& buf, const GateOptions& o) {
  Framing f;
  const size_t head_end = buf.find("\r\n\r\n");
  if (head_end == std::string::npos) {
    if (buf.size() > o.max_header_bytes) {
      f.state = Framing::State::refused;
      f.status = 431;
      f.message = str("request header over ", o.max_header_bytes, " bytes");
    }
    return f;
  }
  const size_t line_end = buf.find("\r\n");
  const std::string_view line(buf.data(), line_end);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 != std::string_view::npos && sp2 > sp1) f.path = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
  size_t length = 0;
  for (size_t at = line_end + 2; at < head_end;) {
    const size_t eol = buf.find("\r\n", at);
    const std::string_view h(buf.data() + at, eol - at);
    at = eol + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = h.substr(0, colon);
    std::string_view value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    if (iequals(name, "Content-Length")) {
      char* end = nullptr;
      const std::string v(value);
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (end == v.c_str() || n > o.max_body_bytes) {
        f.state = Framing::State::refused;
        f.status = end == v.c_str() ? 400 : 413;
        f.message = end == v.c_str()
                        ? str("Content-Length '", v, "' is not a number")
                        : str("request body of ", n, " bytes is over the limit of ",
                              o.max_body_bytes, " bytes");
        return f;
      }
      length = size_t(n);
    } else if (iequals(name, "Transfer-Encoding") && !iequals(value, "identity")) {
      f.state = Framing::State::refused;
      f.status = 411;
      f.message = "request bodies must carry a Content-Length (chunked uploads are not accepted)";
      return f;
    }
  }
  f.end = head_end + 4 + length;
  if (buf.size() >= f.end) f.state = Framing::State::whole;
  return f;
}

}  // namespace

bool RoutedServer::serve(httplib::Stream& strm, bool close_after) {
  bool closed = false;
  const bool ok = process_request(strm, close_after, closed, [](httplib::Request&) {});
  return ok && !closed && !close_after;
}

struct Gate::Impl {
  // A refused connection's remaining bytes are read and dropped for up to this long / this much
  // (a lingering close), so that a client still sending its body reads the refusal.
  static constexpr int kDrainSeconds = 5;
  static constexpr size_t kMaxDrain = size_t(64) << 20;
  RoutedServer& routes;
  GateOptions opt;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  std::atomic<bool> stopping{false};
  struct Conn {
    std::string buf;
    Clock::time_point deadline;
    bool busy = false;  // a handler thread has it
    bool reading = false;  // bytes of a request arrived (request deadline), else idle
    bool draining = false;  // refused: the rest of its bytes are read and dropped, then closed
    size_t drained = 0;
    size_t in_handler = 0;  // bytes of its request a handler thread holds
    int served = 0;
  };
  std::unordered_map<int, Conn> conns;  // the epoll thread only
  std::mutex back_mu;
  std::deque<std::pair<int, bool>> back;  // (fd, keep) from handler threads
  int64_t n_open = 0;  // open connections (the epoll thread)
  size_t buffered = 0;  // request bytes held: arriving, and in handler threads (epoll thread)
  std::unique_ptr<httplib::ThreadPool> pool;

  Impl(RoutedServer& r, GateOptions o) : routes(r), opt(std::move(o)) {}

  void refuse(int fd, int status, const std::string& path, const std::string& message) {
    const std::string body = opt.error_body ? opt.error_body(status, path, message)
                                            : "{\"error\":\"" + message + "\"}";
    const std::string reason = status == 503   ? "Service Unavailable"
                               : status == 413 ? "Payload Too Large"
                               : status == 431 ? "Request Header Fields Too Large"
                               : status == 411 ? "Length Required"
                               : status == 408 ? "Request Timeout"
                                               : "Bad Request";
    const std::string head = str("HTTP/1.1 ", status, " ", reason,
                                 "\r\nContent-Type: application/json\r\nContent-Length: ",
                                 body.size(), "\r\nConnection: close\r\n\r\n");
    const std::string all = head + body;
    ::send(fd, all.data(), all.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  void close_conn(int fd) {
    if (auto it = conns.find(fd); it != conns.end()) buffered -= it->second.buf.size();
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    conns.erase(fd);
    --n_open;
  }

  void watch(int fd) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: all taken (or a transient error)
      if (n_open >= opt.max_connections) {
        refuse(fd, 503, "",
               str("too many open connections (", opt.max_connections, "); retry later"));
        ::close(fd);
        continue;
      }
      ++n_open;
      Conn& c = conns[fd];
      c.deadline = Clock::now() + std::chrono::seconds(opt.idle_timeout_s);
      watch(fd);
    }
  }

  // Reads what arrived; dispatches a whole request to a handler thread.
  void on_readable(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end() || it->second.busy) return;
    Conn& c = it->second;
    char tmp[16 << 10];
    if (c.draining) {  // lingering close: the client sees the refusal once it stops sending
      for (;;) {
        const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
        if (n > 0 && (c.drained += size_t(n)) < kMaxDrain) continue;
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || (n < 0 && errno != EAGAIN) || c.drained >= kMaxDrain) close_conn(fd);
        return;
      }
    }
    bool eof = false;
    for (;;) {
      const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n > 0) {
        if (!c.reading) {
          c.reading = true;
          c.deadline = Clock::now() + std::chrono::seconds(opt.request_timeout_s);
        }
        if (buffered + size_t(n) > opt.max_buffered_bytes) {
          refuse(fd, 503, "", str("the server holds ", buffered, " bytes of requests in flight, "
                                  "the cap is ", opt.max_buffered_bytes, "; retry later"));
          buffered -= c.buf.size();
          c.buf.clear();
          ::shutdown(fd, SHUT_WR);
          c.draining = true;
          c.deadline = Clock::now() + std::chrono::seconds(kDrainSeconds);
          return;
        }
        c.buf.append(tmp, size_t(n));
        buffered += size_t(n);
        if (c.buf.size() > opt.max_header_bytes + opt.max_body_bytes + 4) break;
        continue;
      }
      if (n == 0) eof = true;
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    dispatch(fd, c, eof);
  }

  void dispatch(int fd, Conn& c, bool eof) {
    if (c.buf.empty()) {
      if (eof) close_conn(fd);
      return;
    }
    Framing f = frame(c.buf, opt);
    if (f.state == Framing::State::refused) {
      refuse(fd, f.status, f.path, f.message);
      ::shutdown(fd, SHUT_WR);
      c.draining = true;
      buffered -= c.buf.size();
      c.buf.clear();
      c.buf.shrink_to_fit();
      c.deadline = Clock::now() + std::chrono::seconds(kDrainSeconds);
      return;
    }
    if (f.state == Framing::State::incomplete) {
      if (eof) close_conn(fd);
      return;
    }
    std::string request = c.buf.substr(0, f.end);
    c.buf.erase(0, f.end);
    c.in_handler = f.end;  // still counted in `buffered` until the handler is done
    c.busy = true;
    ++c.served;
    const bool last = c.served >= opt.keep_alive_max || stopping;
    ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
    pool->enqueue([this, fd, request = std::move(request), last]() mutable {
      BufferedStream strm(fd, std::move(request), opt.write_timeout_s);
      bool keep = false;
      try {
        keep = routes.serve(strm, last);
      } catch (...) {
        keep = false;
      }
      {
        std::lock_guard lk(back_mu);
        back.emplace_back(fd, keep);
      }
      const uint64_t one = 1;
      (void)!::write(wake_fd, &one, sizeof one);
    });
  }

  // Connections handed back by handler threads: idle again (or closed).
  void take_back() {
    uint64_t n = 0;
    (void)!::read(wake_fd, &n, sizeof n);
    std::deque<std::pair<int, bool>> done;
    {
      std::lock_guard lk(back_mu);
      done.swap(back);
    }
    for (auto [fd, keep] : done) {
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      c.busy = false;
      buffered -= c.in_handler;
      c.in_handler = 0;
      if (!keep || stopping) {
        close_conn(fd);
        continue;
      }
      c.reading = !c.buf.empty();
      c.deadline = Clock::now() + std::chrono::seconds(c.reading ? opt.request_timeout_s
                                                                 : opt.idle_timeout_s);
      watch(fd);
      if (c.reading) dispatch(fd, c, false);  // a pipelined request already buffered
    }
  }

  void expire() {
    const auto now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : conns)
      if (!c.busy && now >= c.deadline) late.push_back(fd);
    for (int fd : late) {
      if (conns[fd].draining) {
        close_conn(fd);
        continue;
      }
      if (conns[fd].reading) {
        refuse(fd, 408, "", str("the request did not arrive whole within ",
                                opt.request_timeout_s, " s"));
      }
      close_conn(fd);
    }
  }
};

Gate::Gate(RoutedServer& routes, GateOptions opts)
    : impl_(std::make_unique<Impl>(routes, std::move(opts))) {}

Gate::~Gate() {
  stop();
  Impl& g = *impl_;
  for (auto& [fd, c] : g.conns) ::close(fd);
  if (g.listen_fd >= 0) ::close(g.listen_fd);
  if (g.epoll_fd >= 0) ::close(g.epoll_fd);
  if (g.wake_fd >= 0) ::close(g.wake_fd);
}

int Gate::bind(const std::string& host, int port) {
  Impl& g = *impl_;
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  EFIM_CHECK(rc == 0, "cannot resolve ", host, ": ", ::gai_strerror(rc));
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    // Accepted connections inherit a bounded send buffer (64 KiB, doubled by the kernel): a
    // client that stops reading holds that much, and blocks the writes that then time out.
    int sndbuf = 64 << 10;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  EFIM_CHECK(fd >= 0, "cannot bind ", host, ":", port, ": ", std::strerror(errno));
  g.listen_fd = fd;
  g.routes.set_listening(fd);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                 : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

void Gate::run() {
  Impl& g = *impl_;
  EFIM_CHECK(g.listen_fd >= 0, "Gate::run() before bind()");
  g.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  g.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  EFIM_CHECK(g.epoll_fd >= 0 && g.wake_fd >= 0, "epoll/eventfd: ", std::strerror(errno));
  g.pool = std::make_unique<httplib::ThreadPool>(size_t(std::max(1, g.opt.n_handlers)));
  for (int fd : {g.listen_fd, g.wake_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(g.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
  epoll_event events[256];
  while (!g.stopping) {
    const int n = ::epoll_wait(g.epoll_fd, events, 256, 200);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == g.listen_fd)
        g.accept_all();
      else if (fd == g.wake_fd)
        g.take_back();
      else
        g.on_readable(fd);
    }
    g.expire();
  }
  // Stopping: no new connections; idle ones close; requests in handler threads finish (their
  // connections close when handed back).
  ::epoll_ctl(g.epoll_fd, EPOLL_CTL_DEL, g.listen_fd, nullptr);
  ::close(g.listen_fd);
  g.listen_fd = -1;
  g.pool->shutdown();  // waits for the handlers
  g.take_back();
  std::vector<int> rest;
  for (const auto& [fd, c] : g.conns) rest.push_back(fd);
  for (int fd : rest) g.close_conn(fd);
}

void Gate::stop() {
  impl_->stopping = true;
  if (impl_->wake_fd >= 0) {
    const uint64_t one = 1;
    (void)!::write(impl_->wake_fd, &one, sizeof one);
  }
}


}  // namespace efim
