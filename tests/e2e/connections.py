"""Slow and idle clients cannot exhaust the server.

usage: connections.py EFIM MODEL
`efim serve --request-timeout 4 --idle-timeout 3` of the bundled model; 500 idle connections
and 200 slowloris clients (a request header sent one byte every 2 s) stay open while /health
must answer in under 100 ms (every probe) and a valid completion succeeds; the idle ones are
closed after the idle timeout and the slow ones within the request timeout (with a 408).
"""
import json
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request

EFIM, MODEL = sys.argv[1], sys.argv[2]
p = subprocess.Popen([EFIM, "serve", MODEL, "--port", "0", "--threads", "1",
                      "--request-timeout", "4", "--idle-timeout", "3"],
                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
port = int(re.search(r"http://[^:]+:(\d+)", p.stderr.readline()).group(1))
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def closed(s):
    """True when the server closed s (EOF or reset); what it sent before is returned too."""
    s.settimeout(0.0)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True, data
            data += chunk
    except BlockingIOError:
        return False, data
    except OSError:
        return True, data


try:
    t0 = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
    slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
    header = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
    stop = threading.Event()

    def trickle():
        i = 0
        while not stop.is_set() and i < len(header):
            for s in slow:
                try:
                    s.send(header[i:i + 1])
                except OSError:
                    pass
            i += 1
            stop.wait(2.0)

    th = threading.Thread(target=trickle)
    th.start()
    time.sleep(0.5)
    worst = 0.0
    for _ in range(12):
        a = time.monotonic()
        r = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read()
        worst = max(worst, time.monotonic() - a)
        time.sleep(0.2)
    check(worst < 0.1, f"/health answers in {worst * 1000:.1f} ms at worst with 500 idle and "
          "200 slowloris connections open")
    body = json.dumps({"prompt": "def add(a, b):", "max_tokens": 8}).encode()
    a = time.monotonic()
    out = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", data=body), timeout=30).read())
    check(len(out["choices"]) == 1, f"a completion succeeds meanwhile ({(time.monotonic() - a) * 1000:.0f} ms)")
    time.sleep(max(0.0, t0 + 3.0 + 1.5 - time.monotonic()))
    n_idle = sum(closed(s)[0] for s in idle)
    check(n_idle == 500, f"idle connections closed after the 3 s idle timeout: {n_idle} of 500")
    time.sleep(max(0.0, t0 + 4.0 + 2.0 - time.monotonic()))
    results = [closed(s) for s in slow]
    n_slow = sum(r[0] for r in results)
    n_408 = sum(b" 408 " in r[1] for r in results)
    check(n_slow == 200, f"slowloris connections closed within the 4 s request timeout: {n_slow} of 200")
    check(n_408 == 200, f"each told 408: {n_408} of 200")
    stop.set()
    th.join()
finally:
    p.terminate()
    p.wait(timeout=30)
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("connections e2e: ok")
