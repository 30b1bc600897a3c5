# Sourced by the e2e shell tests: starts real `efim serve` processes on free ports and makes
# sure none outlives the test.
#   e2e_init EFIM_BINARY       checks the binary and the bundled model, sets EFIM, MODEL, E2E_DIR
#   e2e_start NAME ARGS...     `efim serve MODEL --port 0 ARGS...`; sets NAME_PORT, NAME_PID
#   e2e_start_cmd NAME CMD...  the same for a command that execs `efim serve ... --port 0`
#   e2e_fail MESSAGE           prints the message and every server log, exits 1
# Ports: --port 0 lets the kernel pick a free one; the server prints it in its log line
# "efim: serving ... on http://H:P (...)", which e2e_start parses. Cleanup: an EXIT trap stops
# every started server (SIGTERM, then SIGKILL); each server also runs under `timeout`, so even a
# test runner that SIGKILLs the script cannot leave one behind for more than E2E_SERVER_LIFE_S.

E2E_PIDS=()
E2E_DIR=""
E2E_SERVER_LIFE_S=${E2E_SERVER_LIFE_S:-300}

# Each entry of E2E_PIDS is a `timeout` process that leads its own process group (timeout
# calls setpgid) with the server in it: SIGTERM to it is forwarded to the server; SIGKILL to
# the group reaches the server too (a SIGKILL to `timeout` alone would orphan it).
e2e_cleanup() {
  local pid
  for pid in "${E2E_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${E2E_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  E2E_PIDS=()
  [ -n "$E2E_DIR" ] && rm -rf "$E2E_DIR"
  return 0
}
trap e2e_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

e2e_fail() {
  echo "FAIL: $*" >&2
  local log
  for log in "$E2E_DIR"/*.log; do
    [ -f "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
  done
  exit 1
}

e2e_init() {
  EFIM="$1"
  local src
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  E2E_SRC="$src"
  MODEL="$src/models/efim-tiny-q8_0.gguf"
  E2E_DIR="$(mktemp -d "${TMPDIR:-/tmp}/efim-e2e-XXXXXX")"
  [ -x "$EFIM" ] || e2e_fail "efim binary '$EFIM' is missing or not executable"
  [ -f "$MODEL" ] || e2e_fail "bundled model '$MODEL' is missing"
  command -v curl >/dev/null || e2e_fail "curl is required"
}

# The port from a server log, or nothing yet.
e2e_log_port() {
  sed -n 's/^efim: serving .* on http:\/\/[^:]*:\([0-9][0-9]*\) .*/\1/p' "$1" | head -n 1
}

e2e_start() {
  local name="$1"; shift
  e2e_start_cmd "$name" "$EFIM" serve "$MODEL" --host 127.0.0.1 --port 0 --threads 1 "$@"
}

# Like e2e_start, for any command that ends up running `efim serve --port 0` (e.g. the script
# behind `make serve`): its stderr is the log the port is read from.
e2e_start_cmd() {
  local name="$1"; shift
  local log="$E2E_DIR/$name.log"
  timeout --kill-after=5 "$E2E_SERVER_LIFE_S" "$@" 2>"$log" >/dev/null &
  local pid=$!
  E2E_PIDS+=("$pid")
  local port=""
  for _ in $(seq 600); do  # the model loads in well under a second; allow 60 s on a busy box
    port="$(e2e_log_port "$log")"
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || e2e_fail "server '$name' exited before serving"
    sleep 0.1
  done
  [ -n "$port" ] || e2e_fail "server '$name' printed no 'serving ... on http://H:P' line"
  local ok=""
  for _ in $(seq 100); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null; then ok=1; break; fi
    sleep 0.1
  done
  [ -n "$ok" ] || e2e_fail "server '$name' on port $port does not answer /health"
  printf -v "${name}_PORT" '%s' "$port"
  printf -v "${name}_PID" '%s' "$pid"
}

# Stops one server with SIGTERM and checks it exits cleanly (status 0, "server stopped" logged).
e2e_stop() {
  local name="$1"
  local pid_var="${name}_PID"
  local pid="${!pid_var}"
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  local keep=() p
  for p in "${E2E_PIDS[@]}"; do [ "$p" != "$pid" ] && keep+=("$p"); done
  E2E_PIDS=("${keep[@]}")
  [ "$rc" -eq 0 ] || e2e_fail "server '$name' exited with status $rc after SIGTERM"
  grep -q 'server stopped' "$E2E_DIR/$name.log" || e2e_fail "server '$name' did not stop cleanly"
}
