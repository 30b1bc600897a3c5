"""`efim serve` under SIGTERM and against a client that stops reading.

usage: shutdown.py EFIM MODEL
  1. A client that stops reading a long stream is dropped after --write-timeout and its
     sequence cancelled (the server keeps serving; /metrics counts an abort).
  2. SIGTERM with such a client and a long request in flight: the server stops accepting and
     exits within --shutdown-timeout (+ the write timeout and a margin), not when the client
     would have read everything.
  3. A second SIGTERM exits at once.
  4. Graceful drain: after SIGTERM /health answers 503 "draining", a new completion answers 503
     (code draining, Retry-After), the request in flight completes whole, and the process
     exits (status 0) once it has, well within the deadline; with --drain-grace it stays up
     answering 503 that long even with nothing in flight.
"""
import json
import os
import threading
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

EFIM, MODEL = sys.argv[1], sys.argv[2]
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def start(*extra):
    p = subprocess.Popen([EFIM, "serve", MODEL, "--port", "0", "--threads", "1", *extra],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    line = p.stderr.readline()
    m = re.search(r"http://[^:]+:(\d+)", line)
    assert m, line
    return p, int(m.group(1))


def stalled_stream(port):
    """Starts a long streamed completion and never reads it (a tiny receive buffer)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    s.connect(("127.0.0.1", port))
    body = json.dumps({"prompt": "def f():", "max_tokens": 1900, "ignore_eos": True,
                       "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return s


def metric(port, pattern):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(pattern + r" (\S+)\n", text)
    return float(m.group(1)) if m else None


def wait_exit(p, limit):
    t0 = time.monotonic()
    try:
        p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None
    return time.monotonic() - t0


# 1. The write timeout drops a client that stopped reading.
p, port = start("--write-timeout", "2")
clients = [stalled_stream(port) for _ in range(2)]
deadline = time.monotonic() + 20
aborted = 0
while time.monotonic() < deadline:
    aborted = metric(port, r'vllm:request_success_total\{model_name="[^"]*",finished_reason="abort"\}') or 0
    if aborted >= 2:
        break
    time.sleep(0.5)
check(aborted >= 2, f"write timeout: both stalled streams were dropped and cancelled (aborts {aborted})")
running = metric(port, r'vllm:num_requests_running\{model_name="[^"]*"\}')
check(running == 0, f"write timeout: no request left running ({running})")
ok = json.loads(urllib.request.urlopen(urllib.request.Request(
    f"http://127.0.0.1:{port}/v1/completions",
    data=json.dumps({"prompt": "def", "max_tokens": 3}).encode()), timeout=30).read())
check(len(ok["choices"]) == 1, "write timeout: the server keeps serving")
p.send_signal(signal.SIGTERM)
wait_exit(p, 20)
for c in clients:
    c.close()

# 2. SIGTERM with a stalled client and work in flight: out within the deadline.
p, port = start("--shutdown-timeout", "2", "--write-timeout", "3")
c = stalled_stream(port)
time.sleep(1.0)
p.send_signal(signal.SIGTERM)
took = wait_exit(p, 30)
log = p.stderr.read()
check(took is not None and took < 2 + 3 + 3, f"SIGTERM: exited in {took} s (deadline 2 s, write timeout 3 s)")
check("stopping" in log, "SIGTERM: the log says it is stopping")
c.close()

# 3. A second SIGTERM exits at once.
p, port = start("--shutdown-timeout", "60", "--write-timeout", "60")
c = stalled_stream(port)
time.sleep(1.0)
p.send_signal(signal.SIGTERM)
time.sleep(0.5)
check(p.poll() is None, "a first SIGTERM waits for the request in flight (deadline 60 s)")
p.send_signal(signal.SIGTERM)
took = wait_exit(p, 10)
log = p.stderr.read()
check(took is not None and took < 2, f"second SIGTERM: exited in {took} s")
check("second signal" in log, "second SIGTERM: the log says so")
c.close()

# 4. Graceful drain.
def get(port, path, body=None):
    """(status, parsed JSON body, headers) of one request; HTTP errors included."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


p, port = start("--shutdown-timeout", "60")
long_answer = {}
n_long = 1500
t = threading.Thread(target=lambda: long_answer.update(
    r=get(port, "/v1/completions", {"prompt": "def f():", "max_tokens": n_long, "ignore_eos": True})))
t.start()
deadline = time.monotonic() + 20
while time.monotonic() < deadline and not (metric(port, r'vllm:num_requests_running\{model_name="[^"]*"\}') or 0):
    time.sleep(0.05)
t_term = time.monotonic()
p.send_signal(signal.SIGTERM)
time.sleep(0.3)
status, body, _ = get(port, "/health")
check(status == 503 and body.get("status") == "draining", f"drain: /health answers {status} {body}")
status, body, headers = get(port, "/v1/completions", {"prompt": "def", "max_tokens": 3})
check(status == 503 and body.get("error", {}).get("code") == "draining" and "Retry-After" in headers,
      f"drain: a new completion answers {status} {body}")
t.join(timeout=60)
status, body, _ = long_answer.get("r", (None, {}, {}))
check(status == 200 and body.get("usage", {}).get("completion_tokens") == n_long,
      f"drain: the request in flight completed whole ({status}, {body.get('usage')})")
took = wait_exit(p, 20)
total = time.monotonic() - t_term
log = p.stderr.read()
check(took is not None and p.returncode == 0 and total < 30,
      f"drain: exited with status {p.returncode} {total:.1f} s after SIGTERM (deadline 60 s)")
check("drained after" in log, "drain: the log says when it drained")

p, port = start("--drain-grace", "2")
t0 = time.monotonic()
p.send_signal(signal.SIGTERM)
time.sleep(1.0)
status, _, _ = get(port, "/health")
check(status == 503, f"drain grace: /health answers {status} 1 s after SIGTERM with nothing in flight")
took = wait_exit(p, 20)
total = time.monotonic() - t0
check(took is not None and 1.9 < total < 6, f"drain grace: exited {total:.1f} s after SIGTERM (grace 2 s)")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("shutdown e2e: ok")
