// Running untrusted generated Python: one /usr/bin/python3 process per program, in a fresh
// temporary directory that is removed afterwards, with
//   - a wall-clock timeout (the whole process group is killed with SIGKILL),
//   - RLIMIT_CPU (timeout + 1 s), RLIMIT_AS (memory), RLIMIT_FSIZE (bytes a file may grow to),
//     RLIMIT_NPROC (processes), RLIMIT_CORE 0,
//   - no network: the child enters a new network namespace (only a down loopback device).
//     As root this is unshare(CLONE_NEWNET); otherwise unshare(CLONE_NEWUSER | CLONE_NEWNET).
//     When neither is permitted the program still runs, and SandboxResult::network_isolated is
//     false (the caller reports it),
//   - as root, the child drops to uid/gid 65534 (nobody) before exec: root ignores
//     RLIMIT_NPROC, so without this a fork bomb would not be bounded,
//   - stdin closed (fd 0 is not open: Python's sys.stdin is None, so reading it raises),
//     stdout/stderr captured (the first 4 KiB of each kept), python3 -I (isolated mode: no
//     user site, no PYTHON* variables, no script directory on sys.path), an empty environment.
// A program passes when it exits with status 0 before the timeout.
#pragma once

#include <cstdint>
#include <string>

namespace efim::eval {

struct SandboxOptions {
  std::string python = "/usr/bin/python3";
  double timeout_s = 5.0;             // wall clock
  uint64_t memory_bytes = 1ull << 30;  // RLIMIT_AS
  uint64_t file_bytes = 16ull << 20;   // RLIMIT_FSIZE
  uint64_t max_procs = 32;             // RLIMIT_NPROC (of the sandbox user)
  std::string tmp_root = "";          // where the per-run directory goes ("" = $TMPDIR or /tmp)
};

enum class SandboxStatus { passed, failed, timeout, signaled, error };
const char* to_string(SandboxStatus s);

struct SandboxResult {
  SandboxStatus status = SandboxStatus::error;
  int exit_code = -1;   // when it exited
  int signal = 0;       // when a signal ended it
  double wall_s = 0;
  bool network_isolated = false;
  std::string output;   // stdout then stderr, truncated
  bool passed() const { return status == SandboxStatus::passed; }
};

// Thread-safe: runs may proceed concurrently from several threads.
SandboxResult run_python(const std::string& program, const SandboxOptions& opts = {});

}  // namespace efim::eval
