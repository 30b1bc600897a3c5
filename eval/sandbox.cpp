#include "eval/sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"

namespace efim::eval {
namespace {

constexpr size_t kKeepOutput = 4096;
constexpr uid_t kNobody = 65534;

const char* tmp_base(const SandboxOptions& o) {
  if (!o.tmp_root.empty()) return o.tmp_root.c_str();
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

void set_limit(int resource, uint64_t value) {
  rlimit r{static_cast<rlim_t>(value), static_cast<rlim_t>(value)};
  setrlimit(resource, &r);
}

// In the child, between fork and exec: only async-signal-safe calls. Reports through
// `status_fd` whether the network namespace was entered (one byte), then execs.
[[noreturn]] void child(const SandboxOptions& o, const char* dir, const char* script, int out_fd,
                        int status_fd) {
  setpgid(0, 0);
  const bool root = geteuid() == 0;
  bool isolated = unshare(root ? CLONE_NEWNET : (CLONE_NEWUSER | CLONE_NEWNET)) == 0;
  if (!isolated && root) isolated = unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0;
  char flag = isolated ? '1' : '0';
  if (write(status_fd, &flag, 1) != 1) _exit(126);
  close(status_fd);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  if (out_fd > 2) close(out_fd);
  close(0);  // stdin closed
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  set_limit(RLIMIT_CPU, static_cast<uint64_t>(o.timeout_s) + 1);
  set_limit(RLIMIT_AS, o.memory_bytes);
  set_limit(RLIMIT_FSIZE, o.file_bytes);
  set_limit(RLIMIT_NPROC, o.max_procs);
  set_limit(RLIMIT_CORE, 0);
  if (root) {
    if (setgroups(0, nullptr) != 0 || setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(125);
  }
  if (chdir(dir) != 0) _exit(124);
  const char* argv[] = {o.python.c_str(), "-I", "-B", script, nullptr};
  const char* envp[] = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", nullptr};
  execve(argv[0], const_cast<char* const*>(argv), const_cast<char* const*>(envp));
  _exit(127);
}

// SIGKILL to the group until it is empty: members forked while the first signal went out
// would otherwise survive.
void kill_group(pid_t pgid) {
  for (int i = 0; i < 100 && kill(-pgid, SIGKILL) == 0; ++i) usleep(1000);
}

// Reads what the child writes until it exits or the deadline passes; returns true on timeout.
bool collect(pid_t pid, int out_fd, double timeout_s, std::string& out, int& wstatus) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  bool open = true;
  while (true) {
    if (waitpid(pid, &wstatus, WNOHANG) == pid) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                            Clock::now());
    if (left.count() <= 0) {
      kill_group(pid);
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      return true;
    }
    if (open) {
      pollfd p{out_fd, POLLIN, 0};
      poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 20)));
      if (p.revents & (POLLIN | POLLHUP)) {
        char buf[4096];
        const ssize_t n = read(out_fd, buf, sizeof buf);
        if (n <= 0) open = false;
        else if (out.size() < 2 * kKeepOutput) out.append(buf, static_cast<size_t>(n));
      }
    } else {
      usleep(2000);
    }
  }
  kill_group(pid);  // children it left behind (a fork bomb's survivors)
  return false;
}

}  // namespace

const char* to_string(SandboxStatus s) {
  switch (s) {
    case SandboxStatus::passed: return "passed";
    case SandboxStatus::failed: return "failed";
    case SandboxStatus::timeout: return "timeout";
    case SandboxStatus::signaled: return "signaled";
    case SandboxStatus::error: return "error";
  }
  return "?";
}

SandboxResult run_python(const std::string& program, const SandboxOptions& o) {
  namespace fs = std::filesystem;
  EFIM_CHECK(o.timeout_s > 0, "sandbox timeout must be > 0, got ", o.timeout_s);
  std::string tmpl = std::string(tmp_base(o)) + "/efim-eval-XXXXXX";
  EFIM_CHECK(mkdtemp(tmpl.data()) != nullptr, "cannot create a sandbox directory under ",
             tmp_base(o), ": ", std::strerror(errno));
  const std::string dir = tmpl, script = dir + "/program.py";
  SandboxResult res;
  try {
    write_file(script, program);
    if (geteuid() == 0) {  // the child runs as nobody: it must be able to enter and write
      EFIM_CHECK(chown(dir.c_str(), kNobody, kNobody) == 0 && chmod(script.c_str(), 0644) == 0,
                 "cannot hand ", dir, " to the sandbox user: ", std::strerror(errno));
    }
    int out[2], st[2];
    EFIM_CHECK(pipe2(out, O_CLOEXEC) == 0 && pipe2(st, O_CLOEXEC) == 0, "pipe: ",
               std::strerror(errno));
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    EFIM_CHECK(pid >= 0, "fork: ", std::strerror(errno));
    if (pid == 0) {
      close(out[0]);
      close(st[0]);
      child(o, dir.c_str(), script.c_str(), out[1], st[1]);
    }
    setpgid(pid, pid);  // also here: kill_group must work even before the child ran
    close(out[1]);
    close(st[1]);
    char flag = '0';
    res.network_isolated = read(st[0], &flag, 1) == 1 && flag == '1';
    close(st[0]);
    int wstatus = 0;
    const bool timed_out = collect(pid, out[0], o.timeout_s, res.output, wstatus);
    close(out[0]);
    res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (res.output.size() > kKeepOutput) res.output.resize(kKeepOutput);
    if (timed_out) {
      res.status = SandboxStatus::timeout;
    } else if (WIFEXITED(wstatus)) {
      res.exit_code = WEXITSTATUS(wstatus);
      res.status = res.exit_code == 0 ? SandboxStatus::passed : SandboxStatus::failed;
    } else {
      res.signal = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
      res.status = SandboxStatus::signaled;
    }
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    throw;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return res;
}

}  // namespace efim::eval
