#!/usr/bin/python3
"""Scale-out load test: efim replicas behind HAProxy, editor users typing (make check-scaleout).

usage: scaleout.py EFIM MODEL [--variants recipe,roundrobin] [--replicas 3] [--users 12]
                   [--keystrokes 48] [--kill | --no-kill] [--check] ...

Starts --replicas `efim serve` processes and HAProxy with deploy/haproxy/haproxy.cfg (its server
lines and bind address replaced, its balance line replaced for variants that test another
key), then --users users type as llama.vim does: each user re-types --keystrokes characters of a
real file (the Python standard library) at a line of its own, one /infill request per keystroke
with the body llama.vim sends (input_prefix = the 256 lines above the cursor, prompt = the
current line up to the cursor, input_suffix = the rest of the line + the 64 lines below,
input_extra = two 64-line ring-buffer chunks of other files), waiting for each answer and
--think-ms before the next keystroke. Half of the users type near the top of their file, half
deeper than llama.vim's 256-line prefix window (there input_prefix's first line moves with
every new line). Each user opens a new connection per request, as llama.vim's curl does.

With --kill, one replica is SIGKILLed when half of all keystrokes have been answered; HAProxy's
health check and retries must move its users (requests that still fail count as failed).

Variants (how requests are keyed; users get their own 127.0.0.x address unless said; a suffix
:N sets hash-balance-factor N, :0 removes it):
  recipe        the recipe as it is: X-Efim-User, else the first 256 bytes of the body's
                input_prefix (or prompt), else the client address; users send no header
  recipe-nat    the recipe, every user behind one address (so: the body key)
  recipe-header the recipe, one shared address, each user sending X-Efim-User
  address       hash of the client address only
  address-nat   the same, every user behind one address (a team behind NAT)
  roundrobin    balance roundrobin (no affinity)

Per variant: reuse = prefix-cache hits / prompt tokens over every request but each user's first
(from each answer's timings: cache_n and prompt_n, the quantities of the replicas'
vllm:prefix_cache_hits_total / queries_total, which are checked against them for the replicas
still alive), request latency (median, p90), requests per replica and failed requests.
The last line: `affinity reuse A, round-robin reuse B, failed F` (A from the first variant,
B from roundrobin, F summed over all variants). --check makes the targets (A >= 0.85,
A >= 2B, F = 0) the exit status.
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from efim_server import http_get, start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ["argparse.py", "difflib.py", "statistics.py", "calendar.py", "fractions.py",
         "pprint.py", "heapq.py", "textwrap.py", "csv.py", "shlex.py", "string.py",
         "configparser.py", "tarfile.py", "zipfile.py", "inspect.py", "typing.py"]
N_PREFIX, N_SUFFIX, CHUNK_LINES = 256, 64, 64  # llama.vim's n_prefix, n_suffix, ring_chunk_size
RESPONSE_FIELDS = ["content", "timings/prompt_n", "timings/cache_n", "timings/predicted_n"]

ap = argparse.ArgumentParser()
ap.add_argument("efim")
ap.add_argument("model")
ap.add_argument("--variants", default="recipe,roundrobin")
ap.add_argument("--replicas", type=int, default=3)
ap.add_argument("--users", type=int, default=12)
ap.add_argument("--keystrokes", type=int, default=48)
ap.add_argument("--n-predict", type=int, default=32)
ap.add_argument("--think-ms", type=float, default=100)
ap.add_argument("--threads", type=int, default=1, help="threads per replica")
# 48 MiB of f16 K/V of efim-tiny hold ~9,800 tokens: the prompts of ~6 of these users (about
# 1,600 tokens each), a replica's share once one of the 3 is gone (12 users on 2).
ap.add_argument("--kv-cache-mb", type=int, default=48, help="K/V cache per replica")
ap.add_argument("--kill", action=argparse.BooleanOptionalAction, default=True)
ap.add_argument("--check", action="store_true")
ap.add_argument("--recipe", default=os.path.join(ROOT, "deploy/haproxy/haproxy.cfg"))
ap.add_argument("--stdlib", default="/usr/lib/python3.11")
ap.add_argument("--lb-log", help="keep HAProxy's request log in LB_LOG.VARIANT")
args = ap.parse_args() if __name__ == "__main__" else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# Users: what llama.vim sends while someone types in a file.

class User:
    def __init__(self, index, files):
        self.index = index
        path = os.path.join(args.stdlib, files[index % len(files)])
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        # Even users type near the top, odd ones deeper than the 256-line window.
        target = 40 + 7 * index if index % 2 == 0 else 300 + 11 * index
        row = min(target, len(lines) - 80)
        while row < len(lines) - 80 and len(lines[row].strip()) < 12:
            row += 1  # start on a line of code
        typed, n = [], 0
        while n < args.keystrokes:  # the lines the user (re)types
            typed.append(lines[row + len(typed)])
            n += len(typed[-1]) + 1
        self.file = os.path.basename(path)
        self.row = row
        self.before, self.after = lines[:row], lines[row + len(typed):]
        self.text = "\n".join(typed) + "\n"
        self.addr = f"127.0.0.{20 + index}"
        self.extra = []
        for k in (1, 2):  # ring-buffer chunks from two other files
            other = os.path.join(args.stdlib, files[(index + k) % len(files)])
            with open(other, encoding="utf-8") as f:
                olines = f.read().split("\n")
            at = (97 * (index + k)) % max(1, len(olines) - CHUNK_LINES)
            self.extra.append({"text": "\n".join(olines[at:at + CHUNK_LINES]) + "\n",
                               "time": [1764460800 + k, 0],
                               "filename": os.path.basename(other)})

    def body(self, k):
        """llama.vim's /infill body after keystroke k (0-based)."""
        done = self.text[:k + 1]
        *full, current = done.split("\n")
        above = self.before + full
        prefix = "".join(line + "\n" for line in above[-N_PREFIX:])
        suffix = "\n" + "\n".join(self.after[:N_SUFFIX]) + "\n"
        indent = len(current) - len(current.lstrip(" \t"))
        return {"input_prefix": prefix, "input_suffix": suffix, "input_extra": self.extra,
                "prompt": current, "n_predict": args.n_predict, "n_indent": indent,
                "top_k": 40, "top_p": 0.99, "stream": False,
                "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
                "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
                "response_fields": RESPONSE_FIELDS}


# ---------------------------------------------------------------------------------------------
# Processes: replicas and the balancer.

def start_replica():
    return start(args.efim, args.model, ["--threads", str(args.threads), "--kv-cache-mb",
                                         str(args.kv_cache_mb)], "a replica")


BALANCE = {
    "address": "balance hash src",
    "address-nat": "balance hash src",
    "roundrobin": "balance roundrobin",
}


def haproxy_config(recipe, lb_port, ports, balance=None, log=False, factor=None):
    """The recipe's text with its bind port, its server lines (efim1.. on 127.0.0.1:ports) and
    optionally its balance line and hash-balance-factor (0: none) replaced; its request log
    dropped unless log."""
    cfg = re.sub(r"^(\s*)bind \S+", rf"\g<1>bind 127.0.0.1:{lb_port}", recipe, count=1, flags=re.M)
    if not log:
        cfg = re.sub(r"^\s*(option httplog|log stdout.*)\n", "", cfg, flags=re.M)
    servers = "".join(f"    server efim{i + 1} 127.0.0.1:{p}\n" for i, p in enumerate(ports))
    cfg = re.sub(r"(^\s*server .*\n)+", servers, cfg, count=1, flags=re.M)
    if balance:
        cfg = re.sub(r"^(\s*)balance .*$", rf"\g<1>{balance}", cfg, count=1, flags=re.M)
    if factor is not None:
        line = f"hash-balance-factor {factor}" if factor else "# no hash-balance-factor"
        cfg = re.sub(r"^(\s*)hash-balance-factor .*$", rf"\g<1>{line}", cfg, count=1, flags=re.M)
    return cfg


def metrics(port):
    status, text = http_get(f"http://127.0.0.1:{port}/metrics")
    out = {}
    for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
        m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else None
    return out


# ---------------------------------------------------------------------------------------------
# One variant: fresh replicas and balancer, every user types, one replica killed halfway.

def run_variant(variant, users):
    key, _, factor = variant.partition(":")  # recipe:250 = the recipe with factor 250
    factor = int(factor) if factor else None
    replicas = [start_replica() for _ in range(args.replicas)]
    ports = [port for _, port in replicas]
    lb_port = free_port()
    cfg_file = tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False)
    with open(args.recipe) as f:
        cfg_file.write(haproxy_config(f.read(), lb_port, ports, BALANCE.get(key),
                                      log=bool(args.lb_log), factor=factor))
    cfg_file.close()
    log = open(f"{args.lb_log}.{variant}", "w") if args.lb_log else subprocess.DEVNULL
    lb = subprocess.Popen(["haproxy", "-db", "-f", cfg_file.name], stdout=log, stderr=subprocess.PIPE, text=True)
    threading.Thread(target=lambda: [None for _ in lb.stderr], daemon=True).start()
    deadline = time.time() + 10
    while http_get(f"http://127.0.0.1:{lb_port}/health")[0] != 200:
        if time.time() > deadline or lb.poll() is not None:
            sys.exit(f"{variant}: HAProxy did not come up (exit {lb.poll()})")
        time.sleep(0.1)
    time.sleep(2.5)  # every replica passed its first health checks

    shared_addr = key in ("recipe-nat", "recipe-header", "address-nat")
    total = len(users) * args.keystrokes
    done = [0]
    killed = [None]  # (replica name, time)
    lock = threading.Lock()
    results = {u.index: [] for u in users}
    t_start = time.time()

    def kill_one():
        p, _ = replicas[1]
        p.send_signal(signal.SIGKILL)
        killed[0] = ("efim2", time.time() - t_start)

    def type_file(user):
        for k in range(args.keystrokes):
            body = json.dumps(user.body(k)).encode()
            headers = {"Content-Type": "application/json"}
            if key == "recipe-header":
                headers["X-Efim-User"] = f"user-{user.index}"
            t0 = time.time()
            r = {"k": k, "ok": False, "before_kill": killed[0] is None}
            try:
                conn = http.client.HTTPConnection(
                    "127.0.0.1", lb_port, timeout=120,
                    source_address=None if shared_addr else (user.addr, 0))
                conn.request("POST", "/infill", body, headers)
                resp = conn.getresponse()
                data = resp.read()
                r["status"] = resp.status
                r["replica"] = resp.getheader("X-Efim-Replica")
                if resp.status == 200:
                    j = json.loads(data)
                    r["cache_n"] = j["timings/cache_n"]
                    r["prompt_n"] = j["timings/prompt_n"]
                    r["predicted_n"] = j["timings/predicted_n"]
                    r["ok"] = True
                else:
                    r["error"] = data[:200].decode(errors="replace")
                conn.close()
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                r["status"], r["error"] = 0, repr(e)
            r["latency"] = time.time() - t0
            results[user.index].append(r)
            with lock:
                done[0] += 1
                if args.kill and killed[0] is None and done[0] >= total // 2:
                    kill_one()
            time.sleep(args.think_ms / 1000)

    threads = [threading.Thread(target=type_file, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t_start

    # Counters of the replicas still alive vs the answers they gave.
    consistent = True
    for i, (p, port) in enumerate(replicas):
        if p.poll() is not None:
            continue
        m = metrics(port)
        served = [r for rs in results.values() for r in rs if r["ok"] and r["replica"] == f"efim{i + 1}"]
        hits = sum(r["cache_n"] for r in served)
        queries = sum(r["cache_n"] + r["prompt_n"] for r in served)
        if m["vllm:prefix_cache_hits_total"] != hits or m["vllm:prefix_cache_queries_total"] != queries:
            consistent = False
            print(f"  note: efim{i + 1} /metrics hits/queries {m['vllm:prefix_cache_hits_total']}"
                  f"/{m['vllm:prefix_cache_queries_total']} vs answers {hits}/{queries}")
    lb.terminate()
    lb.wait()
    for p, _ in replicas:
        if p.poll() is None:
            p.terminate()
    for p, _ in replicas:
        p.wait()
    os.unlink(cfg_file.name)

    # Reuse and latency over every request but each user's first.
    later = [r for rs in results.values() for r in rs if r["k"] > 0]
    ok = [r for r in later if r["ok"]]
    hits = sum(r["cache_n"] for r in ok)
    queries = sum(r["cache_n"] + r["prompt_n"] for r in ok)
    failed = [r for rs in results.values() for r in rs if not r["ok"]]
    lat = sorted(r["latency"] * 1000 for r in ok)
    per_replica = {}
    for rs in results.values():
        for r in rs:
            if r["ok"]:
                per_replica[r["replica"]] = per_replica.get(r["replica"], 0) + 1
    # Affinity: the share of each user's requests sent before the kill that its most used
    # replica answered.
    stick = []
    for rs in results.values():
        names = [r["replica"] for r in rs if r["ok"] and r["before_kill"]]
        if names:
            stick.append(max(names.count(n) for n in set(names)) / len(names))
    out = {
        "variant": variant, "reuse": hits / queries if queries else 0.0,
        "failed": len(failed), "requests": total, "wall_s": wall,
        "p50_ms": statistics.median(lat) if lat else 0, "p90_ms": lat[int(0.9 * (len(lat) - 1))] if lat else 0,
        "per_replica": dict(sorted(per_replica.items())), "stick": statistics.mean(stick) if stick else 0,
        "killed": killed[0], "counters_match": consistent,
        "predicted": statistics.mean(r["predicted_n"] for r in ok) if ok else 0,
        "errors": sorted({r.get("error", "")[:80] for r in failed}),
    }
    print(f"{variant:14s} reuse {out['reuse']:.3f}  latency p50 {out['p50_ms']:.0f} ms "
          f"p90 {out['p90_ms']:.0f} ms  failed {out['failed']}/{total}  "
          f"same replica {out['stick']:.2f}  tokens out {out['predicted']:.1f}  per replica {out['per_replica']}  "
          f"killed {killed[0][0] + ' at %.1f s' % killed[0][1] if killed[0] else 'none'}  "
          f"wall {wall:.1f} s  counters {'match' if consistent else 'differ'}", flush=True)
    for e in out["errors"]:
        print(f"  failure: {e}")
    return out


def main():
    if subprocess.run(["haproxy", "-c", "-q", "-f", args.recipe]).returncode != 0:
        sys.exit(f"{args.recipe}: HAProxy rejects the recipe")
    files = [f for f in FILES if os.path.exists(os.path.join(args.stdlib, f))]
    if len(files) < 4:
        sys.exit(f"too few standard-library files under {args.stdlib}")
    users = [User(u, files) for u in range(args.users)]
    print(f"{args.replicas} replicas ({args.threads} thread(s), {args.kv_cache_mb} MiB K/V each), "
          f"{args.users} users x {args.keystrokes} keystrokes, n_predict {args.n_predict}, "
          f"think {args.think_ms:.0f} ms, kill {'on' if args.kill else 'off'}")
    for u in users:
        print(f"  user {u.index:2d}: {u.file} line {u.row + 1}", end="")
        print("" if (u.index + 1) % 3 else "\n", end="")
    print()
    runs = [run_variant(v, users) for v in args.variants.split(",")]
    a = runs[0]["reuse"]
    b = next((r["reuse"] for r in runs if r["variant"].startswith("roundrobin")), float("nan"))
    f = sum(r["failed"] for r in runs)
    print(f"affinity reuse {a:.3f}, round-robin reuse {b:.3f}, failed {f}")
    if args.check and not all(r["counters_match"] for r in runs):
        sys.exit("the replicas' prefix-cache counters differ from the answers' timings")
    if args.check and not (a >= 0.85 and a >= 2 * b and f == 0):
        sys.exit("targets not met: A >= 0.85, A >= 2B, F = 0")


if __name__ == "__main__":
    main()
