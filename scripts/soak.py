#!/usr/bin/python3
"""Soak: `efim serve` under a mix of valid and hostile traffic for a while (make check-soak).

usage: soak.py EFIM MODEL [--seconds 600] [--workers 24] [--kv-cache-mb 64]

Each worker loops over the classes below, picking one at random per request:
  completion   /v1/completions, a short greedy completion           (expects 200)
  stream       /v1/completions stream, read to [DONE]                (expects 200)
  disconnect   a streamed completion dropped after its first event   (no status)
  infill       /infill with llama.vim's body and a growing prefix    (expects 200)
  ollama       /api/generate with a suffix, NDJSON                   (expects 200)
  malformed    bad JSON, wrong types, bad numbers                    (expects 4xx)
  garbage      random bytes instead of HTTP                          (closed or 4xx)
  oversize     a prompt no context holds, a body over 16 MiB         (expects 413)
A request that takes over 60 s is a hang. Every second the server's RSS is sampled. The last
line reports requests by class and status, the 5xx count, hangs, the KV blocks still referenced
after the traffic stops (efim_kv_blocks_referenced) and RSS start/peak/end.
"""
import argparse
import json
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from efim_server import start

ap = argparse.ArgumentParser()
ap.add_argument("efim")
ap.add_argument("model")
ap.add_argument("--seconds", type=float, default=600)
ap.add_argument("--workers", type=int, default=24)
ap.add_argument("--kv-cache-mb", type=int, default=64)
args = ap.parse_args()

srv, port = start(args.efim, args.model, ["--threads", "2", "--kv-cache-mb", str(args.kv_cache_mb)])
BASE = f"http://127.0.0.1:{port}"
TIMEOUT = 60


def rss_mb():
    with open(f"/proc/{srv.pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024


def post(path, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


CODE = "def compute(values):\n    total = 0\n    for v in values:\n"
SUFFIX = "\n    return total\n"


def c_completion(rng):
    return post("/v1/completions", {"prompt": CODE, "max_tokens": rng.randint(1, 24)})


def c_stream(rng):
    return post("/v1/completions", {"prompt": CODE, "max_tokens": rng.randint(1, 32), "stream": True})


def c_disconnect(rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    body = json.dumps({"prompt": CODE, "max_tokens": 200, "stream": True, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.recv(256)
    s.close()
    return "dropped"


def c_infill(rng):
    k = rng.randint(0, 30)
    return post("/infill", {"input_prefix": CODE, "prompt": "        total += v" [:k % 19],
                            "input_suffix": SUFFIX, "n_predict": 16, "samplers": ["top_k", "top_p", "infill"],
                            "top_k": 40, "top_p": 0.9, "t_max_predict_ms": 250, "cache_prompt": True,
                            "response_fields": ["content", "timings/prompt_n"]})


def c_ollama(rng):
    return post("/api/generate", {"model": os.path.basename(args.model), "prompt": CODE, "suffix": SUFFIX,
                                  "options": {"num_predict": 16, "temperature": 0.2}})


MALFORMED = [b"{not json", b'{"prompt": {"a": 1}}', b'{"prompt": "x", "max_tokens": -3, "n_predict": -3}', b'{"prompt": "x", "temperature": -1}',
             b'{"prompt": "x", "n": 0}', b'[]', b'{"prompt": "\xff\xfe"}', b'{"input_prefix": 7}']


def c_malformed(rng):
    path = rng.choice(["/v1/completions", "/infill", "/completion", "/api/generate"])
    return post(path, None, raw=rng.choice(MALFORMED))


def c_garbage(rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2000))) + b"\r\n\r\n")
    try:
        head = s.recv(64)
    except OSError:
        head = b""
    s.close()
    m = re.match(rb"HTTP/1\.1 (\d+)", head)
    return int(m.group(1)) if m else "closed"


def c_oversize(rng):
    if rng.random() < 0.5:
        return post("/v1/completions", {"prompt": "x = 1\n" * 400000, "max_tokens": 2})
    return post("/v1/completions", None, raw=b'{"prompt": "' + b"y" * (17 << 20) + b'"}')


CLASSES = {"completion": (c_completion, 6), "stream": (c_stream, 4), "disconnect": (c_disconnect, 2),
           "infill": (c_infill, 6), "ollama": (c_ollama, 3), "malformed": (c_malformed, 3),
           "garbage": (c_garbage, 1), "oversize": (c_oversize, 0.2)}
counts, fivexx, hangs, errors = {}, 0, 0, []
lock = threading.Lock()
stop_at = time.monotonic() + args.seconds


def worker(seed):
    global fivexx, hangs
    rng = random.Random(seed)
    names = list(CLASSES)
    weights = [CLASSES[n][1] for n in names]
    while time.monotonic() < stop_at:
        name = rng.choices(names, weights)[0]
        t0 = time.monotonic()
        try:
            status = CLASSES[name][0](rng)
        except (socket.timeout, TimeoutError):
            status = "timeout"
        except OSError as e:
            status = "oserror"
        took = time.monotonic() - t0
        with lock:
            key = (name, status)
            counts[key] = counts.get(key, 0) + 1
            if isinstance(status, int) and status >= 500:
                fivexx += 1
            if took > TIMEOUT or status == "timeout":
                hangs += 1


rss_start = rss_mb()
rss_peak = rss_start
threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
for t in threads:
    t.start()
while any(t.is_alive() for t in threads):
    rss_peak = max(rss_peak, rss_mb())
    time.sleep(1)
for t in threads:
    t.join()
time.sleep(1)
metrics = urllib.request.urlopen(BASE + "/metrics", timeout=30).read().decode()
m = re.search(r'efim_kv_blocks_referenced\{[^}]*\} (\S+)', metrics)
referenced = int(float(m.group(1))) if m else -1
rss_end = rss_mb()
srv.terminate()
srv.wait(timeout=60)
by_class = {}
for (name, status), n in sorted(counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
    by_class.setdefault(name, {})[str(status)] = n
total = sum(counts.values())
print(json.dumps(by_class, sort_keys=True))
print(f"soak: {args.seconds:.0f} s, {args.workers} workers, {total} requests {json.dumps(by_class, sort_keys=True)}; "
      f"5xx {fivexx}, hangs {hangs}, referenced blocks {referenced}, "
      f"RSS start/peak/end {rss_start:.0f}/{rss_peak:.0f}/{rss_end:.0f} MB")
sys.exit(1 if fivexx or hangs or referenced != 0 or rss_end - rss_start > 100 else 0)
