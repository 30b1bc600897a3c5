"""deploy/haproxy/haproxy.cfg as it is, in front of 3 real `efim serve` replicas.

Usage: haproxy_recipe.py EFIM_BINARY MODEL

Checks, each user opening a new connection per request (as llama.vim's curl does):
  1. affinity: every request of one user typing (keyed by X-Efim-User; else by the start of
     /infill's input_prefix, even when all share one API key; else by the start of an OpenAI
     prompt; else, for llama.vim's empty warm-up, by the client address 127.0.0.x) goes to one
     replica, and 8 users are spread over > 1 replica;
  2. a replica killed (SIGKILL): its users' very next requests succeed on another replica
     (the connection error marks it down at once and the request is retried);
  3. a replica drained (SIGTERM, --drain-grace 3): its users' requests succeed on the last
     replica while it drains (its 503 is retried elsewhere), and it exits 0 within the grace
     plus a second;
  4. the recipe's health check: HAProxy marks the drained replica down (stats socket).
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

EFIM, MODEL = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import efim_server  # noqa: E402
import scaleout  # noqa: E402  (its helpers only: imported, it parses no arguments and runs nothing)

failures = []


def check(cond, message):
    print(("ok   " if cond else "FAIL ") + message, flush=True)
    if not cond:
        failures.append(message)


def start_replica():
    return efim_server.start(EFIM, MODEL, ["--threads", "1", "--kv-cache-mb", "32",
                                           "--drain-grace", "3"], "a replica")


def infill(lb_port, prefix, headers=None, addr=None, stats_sock=None, prompt="    retur",
           path="/infill"):
    """One request on a new connection: llama.vim's /infill body, or with path /v1/completions
    an OpenAI body (prompt = prefix + prompt); (status, replica name)."""
    if stats_sock:
        idle(stats_sock)
    if path == "/infill":
        body = {"input_prefix": prefix, "input_suffix": "\n\nprint(main())\n",
                "input_extra": [], "prompt": prompt, "n_predict": 4,
                "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True,
                "response_fields": ["content", "timings/cache_n"]}
    else:
        body = {"prompt": prefix + prompt, "suffix": "\n", "max_tokens": 4}
    conn = http.client.HTTPConnection("127.0.0.1", lb_port, timeout=60,
                                      source_address=(addr, 0) if addr else None)
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("X-Efim-Replica")
    except (OSError, http.client.HTTPException) as e:
        return 0, repr(e)
    finally:
        conn.close()


def server_states(stats_sock, column="status"):
    """{server name: column} from HAProxy's stats socket (show stat, CSV)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(stats_sock)
        s.sendall(b"show stat\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    lines = data.decode().splitlines()
    cols = lines[0].lstrip("# ").split(",")
    out = {}
    for line in lines[1:]:
        row = dict(zip(cols, line.split(",")))
        if row.get("pxname") == "efim_replicas" and row.get("svname", "").startswith("efim"):
            out[row["svname"]] = row[column]
    return out


def idle(stats_sock):
    """Waits until HAProxy has released every stream of the backend: bounded-load hashing counts
    the requests in flight, and a stream is released a moment after its client read the answer,
    so a request sent at once could see its replica as busy and spill to the next."""
    deadline = time.time() + 2
    while time.time() < deadline:
        if all(v == "0" for v in server_states(stats_sock, "scur").values()):
            return
        time.sleep(0.01)


def main():
    replicas = [start_replica() for _ in range(3)]
    ports = [port for _, port in replicas]
    lb_port = scaleout.free_port()
    tmp = tempfile.mkdtemp()
    stats_sock = os.path.join(tmp, "stats.sock")
    with open(os.path.join(ROOT, "deploy/haproxy/haproxy.cfg")) as f:
        cfg = scaleout.haproxy_config(f.read(), lb_port, ports)
    cfg = cfg.replace("global\n", f"global\n    stats socket {stats_sock} level admin\n", 1)
    cfg_path = os.path.join(tmp, "haproxy.cfg")
    with open(cfg_path, "w") as f:
        f.write(cfg)
    lb = subprocess.Popen(["haproxy", "-db", "-f", cfg_path], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while efim_server.http_get(f"http://127.0.0.1:{lb_port}/health")[0] != 200:
            check(time.time() < deadline and lb.poll() is None, "HAProxy serves /health")
            if failures:
                return
            time.sleep(0.1)
        run_checks(replicas, lb_port, stats_sock)
    finally:
        lb.terminate()
        for p, _ in replicas:
            if p.poll() is None:
                p.kill()
        lb.wait()


def run_checks(replicas, lb_port, stats_sock):
    prefix = "import sys\n\n\ndef main():\n    total = 0\n    for arg in sys.argv[1:]:\n"
    # 1. Affinity by each kind of key. A user types: `prompt` grows by a keystroke per request.
    def files(u):  # the text above the cursor: longer than the 256 bytes the key hashes
        return (f'"""Module {u}: sums the numbers given on the command line."""\nimport sys\n\n'
                + "".join(f"LIMIT_{k} = {k * u}\n" for k in range(20)) + "\n\ndef main():\n")
    typing = ["    r", "    re", "    ret"]
    keys = {  # kind -> [(what, [request kwargs per keystroke])]
        "X-Efim-User": [(f"dev{u}", [dict(prefix=prefix, headers={"X-Efim-User": f"dev{u}"},
                                          prompt=t) for t in typing]) for u in range(8)],
        # One API key for everyone (efim's --api-key): the body still spreads the users.
        "input_prefix": [(f"file {u}", [dict(prefix=files(u), prompt=t, headers={
            "Authorization": "Bearer team-key"}) for t in typing]) for u in range(8)],
        "OpenAI prompt": [(f"file {u}", [dict(prefix=files(u), prompt=t, path="/v1/completions")
                                         for t in typing]) for u in range(8)],
        # llama.vim's warm-up (empty input_prefix and prompt): the client address.
        "client address": [(f"127.0.0.{40 + u}", [dict(prefix="", prompt="",
                                                        addr=f"127.0.0.{40 + u}")] * 3)
                           for u in range(8)],
    }
    home = {}
    for kind, users in keys.items():
        homes = []
        for what, requests in users:
            got = [infill(lb_port, stats_sock=stats_sock, **kw) for kw in requests]
            ok = all(status == 200 for status, _ in got)
            names = {name for _, name in got}
            check(ok and len(names) == 1, f"{kind} {what}: {len(got)} requests, one replica "
                  f"(got {got})")
            homes.append(got[0][1])
        check(len(set(homes)) > 1, f"{kind}: 8 users spread over {sorted(set(homes))}")
        if kind == "X-Efim-User":
            home = {f"dev{u}": h for u, h in enumerate(homes)}

    # 2. Kill the replica of dev0: its next requests succeed elsewhere, at once.
    victim = home["dev0"]
    index = int(victim[len("efim"):]) - 1
    replicas[index][0].send_signal(signal.SIGKILL)
    replicas[index][0].wait()
    got = [infill(lb_port, prefix, {"X-Efim-User": "dev0"}) for _ in range(3)]
    check(all(status == 200 and name != victim for status, name in got),
          f"{victim} killed: dev0's next 3 requests answered by another replica ({got})")
    moved = {name for _, name in got}
    others = [u for u, h in home.items() if h not in (victim,) and h not in moved]
    stay = [infill(lb_port, prefix, {"X-Efim-User": u}, None, stats_sock)[1] for u in others]
    check(stay == [home[u] for u in others],
          f"users of the third replica stayed on it ({list(zip(others, stay))})")

    # 3. Drain the replica that now serves dev0: requests during the drain still succeed.
    target = got[0][1]
    tindex = int(target[len("efim"):]) - 1
    t0 = time.time()
    replicas[tindex][0].send_signal(signal.SIGTERM)
    during = []
    while time.time() - t0 < 2.5:
        during.append(infill(lb_port, prefix, {"X-Efim-User": "dev0"}))
    check(len(during) > 3 and all(status == 200 for status, _ in during),
          f"{target} draining: {len(during)} requests of dev0 in 2.5 s all answered 200 "
          f"(statuses {sorted({s for s, _ in during})}, replicas {sorted({n for _, n in during})})")
    states = server_states(stats_sock)
    check(states.get(target, "").startswith("DOWN") or states.get(target) == "MAINT",
          f"HAProxy's health check marked the draining {target} down ({states})")
    try:
        rc = replicas[tindex][0].wait(timeout=5)
    except subprocess.TimeoutExpired:
        rc = None
    elapsed = time.time() - t0
    check(rc == 0 and elapsed < 3 + 1.5,
          f"the drained replica exited {rc} after {elapsed:.1f} s (grace 3 s)")
    after = [infill(lb_port, prefix, {"X-Efim-User": u}) for u in home]
    check(all(status == 200 for status, _ in after),
          f"with one replica left every user is answered ({after})")


main()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("haproxy recipe e2e: ok")
