#!/usr/bin/python3
"""Users typing along the suggestion, against a running efim serve (or llama-server) /infill.

Each user is one Python file. The cursor sits after the indentation of the line nearest the
file's middle; that line is the hole (its text is removed), the lines after it are the suffix.
Per keystroke: one greedy /infill (n_predict tokens); the user then types the answer's first
character, and (after --think-ms) the next keystroke asks again. A user stops after
--keystrokes requests or when the answer is empty or starts a new line. Up to --concurrency users type at once (all by
default), each one's keystrokes in order.

Prints requests, generated tokens, TPOT (decode time after the first token / tokens after the
first, over all requests) and, from efim's /metrics, the drafts' acceptance. --out writes every
answer as JSON; --compare A.json B.json counts the answers that are the same in two runs.

    scripts/typing_along.py --server http://127.0.0.1:8012 --out run.json
    scripts/typing_along.py --compare off.json ngram.json
"""
import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def metric(server, name):
    try:
        with urllib.request.urlopen(server + "/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(2)) if m else None


def pick_files(docs, count, min_bytes, max_bytes):
    found = []
    for root, dirs, files in os.walk(docs):
        dirs.sort()
        for f in sorted(files):
            path = os.path.join(root, f)
            if f.endswith(".py") and min_bytes <= os.path.getsize(path) <= max_bytes:
                found.append(path)
    found.sort()
    step = max(1, len(found) // count)
    return found[::step][:count]


def hole(text):
    """(prefix, suffix): the cursor after the indentation of the indented line nearest the middle."""
    lines = text.split("\n")
    mid = len(lines) // 2
    for d in range(len(lines)):
        for i in (mid + d, mid - d):
            if 0 <= i < len(lines) and lines[i].startswith("    ") and lines[i].strip():
                indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                prefix = "\n".join(lines[:i]) + "\n" + indent
                suffix = "\n" + "\n".join(lines[i + 1:])
                return prefix, suffix
    return text, ""


def user(server, path, args, out, lock, slots):
    with slots:
        user_keystrokes(server, path, args, out, lock)


def user_keystrokes(server, path, args, out, lock):
    text = open(path, encoding="utf-8", errors="replace").read()
    prefix, suffix = hole(text)
    answers = []
    for _ in range(args.keystrokes):
        r = post(server + "/infill", {"input_prefix": prefix, "input_suffix": suffix,
                                      "n_predict": args.n_predict, "temperature": 0,
                                      "top_k": 1, "cache_prompt": True})
        content = r.get("content", "")
        t = r.get("timings", {})
        answers.append({"content": content, "predicted_n": t.get("predicted_n", 0),
                        "predicted_ms": t.get("predicted_ms", 0.0),
                        "prompt_ms": t.get("prompt_ms", 0.0)})
        if not content or content[0] == "\n":
            break
        prefix += content[0]
        time.sleep(args.think_ms / 1000)  # the user reads the suggestion and types
    with lock:
        out[path] = answers


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    same = total = 0
    for path, answers in a["answers"].items():
        other = b["answers"].get(path, [])
        for i, ans in enumerate(answers):
            total += 1
            same += i < len(other) and other[i]["content"] == ans["content"]
    print(f"same answers: {same} of {total}")
    return 0 if same == total else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="http://127.0.0.1:8012")
    ap.add_argument("--docs", default="/usr/lib/python3.11")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=0, help="users typing at once (0: all)")
    ap.add_argument("--keystrokes", type=int, default=10)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--think-ms", type=float, default=0,
                    help="pause between an answer and the next keystroke (the server idles)")
    ap.add_argument("--min-bytes", type=int, default=4000)
    ap.add_argument("--max-bytes", type=int, default=8000)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    files = pick_files(args.docs, args.users, args.min_bytes, args.max_bytes)
    drafted0 = metric(args.server, "vllm:spec_decode_num_draft_tokens_total")
    accepted0 = metric(args.server, "vllm:spec_decode_num_accepted_tokens_total")
    out, lock = {}, threading.Lock()
    slots = threading.Semaphore(args.concurrency if args.concurrency > 0 else len(files))
    t0 = time.time()
    threads = [threading.Thread(target=user, args=(args.server, f, args, out, lock, slots)) for f in files]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    answers = [a for f in files for a in out.get(f, [])]
    decoded = sum(max(0, a["predicted_n"] - 1) for a in answers)
    decode_ms = sum(a["predicted_ms"] for a in answers if a["predicted_n"] > 1)
    busy_ms = sum(a.get("prompt_ms", 0.0) + a["predicted_ms"] for a in answers)
    print(f"{len(files)} users, {len(answers)} requests, {sum(a['predicted_n'] for a in answers)} tokens, "
          f"{wall:.2f} s; TPOT {decode_ms / max(1, decoded):.3f} ms; "
          f"server time per request {busy_ms / max(1, len(answers)):.1f} ms")
    drafted1 = metric(args.server, "vllm:spec_decode_num_draft_tokens_total")
    accepted1 = metric(args.server, "vllm:spec_decode_num_accepted_tokens_total")
    if None not in (drafted0, drafted1, accepted0, accepted1) and drafted1 > drafted0:
        d, a = drafted1 - drafted0, accepted1 - accepted0
        print(f"draft tokens accepted: {a:.0f} of {d:.0f} ({100 * a / d:.0f}%)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"answers": out, "files": files}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
