#include "bench/infill/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string log_tail(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error&) {
    return "(no log)";
  }
  return text.size() > 2000 ? "..." + text.substr(text.size() - 2000) : text;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return str("exit status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str("signal ", WTERMSIG(status));
  return str("status ", status);
}

// Child side of fork(): only async-signal-safe calls until execv.
[[noreturn]] void exec_child(const char* log, const std::vector<char*>& argv) {
  int fd = ::open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, STDERR_FILENO);
    ::dup2(fd, STDOUT_FILENO);
  }
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the benchmark died: do not leave servers behind
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

}  // namespace

// A TCP port nothing listens on now (bound to port 0, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EFIM_CHECK(fd >= 0, "socket() failed while picking a port for the peer server");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  EFIM_CHECK(ok, "could not bind a free port for the peer server");
  return ntohs(addr.sin_port);
}

std::vector<std::string> peer_argv(const ServeSpec& s) {
  EFIM_CHECK(s.peer == "llama-server", "unknown peer server '", s.peer, "' (llama-server)");
  std::vector<std::string> a = {s.exe, "-m", s.model, "--host", "127.0.0.1", "--port",
                                std::to_string(s.port), "-np", std::to_string(s.peer_slots),
                                "-c", std::to_string(s.peer_slots * s.peer_slot_ctx)};
  if (s.threads > 0) {
    a.insert(a.end(), {"-t", std::to_string(s.threads), "-tb", std::to_string(s.threads)});
  }
  return a;
}

std::vector<std::string> serve_argv(const ServeSpec& s) {
  if (!s.peer.empty()) return peer_argv(s);
  std::vector<std::string> a = {s.exe,
                                "serve",
                                s.model,
                                "--host",
                                "127.0.0.1",
                                "--port",
                                "0",
                                "--infill-mode",
                                s.infill_mode,
                                "--token-healing",
                                s.token_healing,
                                "--kv-cache-mb",
                                std::to_string(s.kv_cache_mb),
                                "-t",
                                std::to_string(s.threads)};
  if (!s.prefix_cache) a.push_back("--no-prefix-cache");
  if (!s.token_healing_variant.empty()) {
    a.push_back("--token-healing-variant");
    a.push_back(s.token_healing_variant);
  }
  if (!s.speculative.empty()) {
    a.push_back("--speculative");
    a.push_back(s.speculative);
  }
  if (!s.draft_model.empty()) {
    a.push_back("--draft-model");
    a.push_back(s.draft_model);
  }
  if (s.max_requests > 0) {
    a.push_back("--max-requests");
    a.push_back(std::to_string(s.max_requests));
  }
  return a;
}

bool wait_healthy(const std::string& url, double timeout_s) {
  const auto t0 = Clock::now();
  httplib::Client c(url);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(5, 0);
  while (seconds_since(t0) < timeout_s) {
    auto r = c.Get("/health");
    if (r && r->status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

ServerProcess::ServerProcess(const ServeSpec& given) : spec_(given) {
  ServeSpec& spec = spec_;
  EFIM_CHECK(!spec.log_path.empty(), "ServeSpec.log_path is empty");
  if (!spec.peer.empty()) {
    spec.port = free_port();
    url_ = str("http://127.0.0.1:", spec.port);
  }
  const std::vector<std::string> args = serve_argv(spec);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // Empty the log before the child exists: a log left by an earlier run (same --out) would
  // otherwise be read for the port before the child truncates it.
  const int fd = ::open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EFIM_CHECK(fd >= 0, "cannot create the server log ", spec.log_path);
  ::close(fd);
  pid_ = ::fork();
  EFIM_CHECK(pid_ >= 0, "fork failed for '", spec.exe, " serve'");
  if (pid_ == 0) exec_child(spec.log_path.c_str(), argv);
  if (!spec.peer.empty()) {  // its port is ours; it answers /health 200 once the model loaded
    const auto t0 = Clock::now();
    while (!wait_healthy(url_, 0.5)) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        fail(spec.peer, " exited before serving (", exit_text(status), "); log ", spec.log_path,
             ":\n", log_tail(spec.log_path));
      }
      if (seconds_since(t0) > spec.start_timeout_s) {
        stop();
        fail(spec.peer, " at ", url_, " did not answer /health within ", spec.start_timeout_s,
             " s; log:\n", log_tail(spec.log_path));
      }
    }
    return;
  }

  // "efim: serving MODEL on http://HOST:PORT (infill mode M)"
  static const std::regex line(R"(efim: serving .* on (http://[^ :/]+:[0-9]+))");
  const auto t0 = Clock::now();
  while (url_.empty()) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      fail("efim serve exited before serving (", exit_text(status), "); log ", spec.log_path, ":\n",
           log_tail(spec.log_path));
    }
    std::smatch m;
    std::string text;
    try {
      text = read_file(spec.log_path);
    } catch (const Error&) {
    }
    if (std::regex_search(text, m, line)) {
      url_ = m[1].str();
      break;
    }
    if (seconds_since(t0) > spec.start_timeout_s) {
      stop();
      fail("efim serve did not report its port within ", spec.start_timeout_s, " s; log:\n",
           log_tail(spec.log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!wait_healthy(url_, spec.start_timeout_s)) {
    stop();
    fail("efim serve at ", url_, " did not answer /health; log:\n", log_tail(spec.log_path));
  }
}

std::string ServerProcess::stop() {
  if (pid_ < 0) return "not running";
  ::kill(pid_, SIGTERM);
  int status = 0;
  const auto t0 = Clock::now();
  while (::waitpid(pid_, &status, WNOHANG) != pid_) {
    if (seconds_since(t0) > 10) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  return exit_text(status);
}

ServerProcess::~ServerProcess() {
  stop();
}

}  // namespace efim::bench
