#!/usr/bin/python3
"""Checks llama_ref's logits / greedy / bench on a GGUF written by make_test_gguf.py, against the
numpy forward pass of the same file (an independent implementation of the llama architecture).

Usage: check_model.py LLAMA_REF MODEL.gguf TMPDIR --tol REL [--prompt "ids"] [--n 12]
  --tol: allowed max |llama - numpy| relative to max |numpy logit| (F32 weights: 1e-5 level;
         F16 weights: llama.cpp rounds activations to F16 inside matmuls, so ~1e-3).
Exit 1 (with the reason printed) when any check fails.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_test_gguf as gg  # noqa: E402

FAILURES = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        FAILURES.append(msg)


def run(*args):
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"FAIL {' '.join(map(str, args))}: exit {res.returncode}\n{res.stderr}")
    return res.stdout


def llama_logits(ref, model, tokens, out, all_rows):
    meta = json.loads(run(ref, "logits", model, "--tokens", " ".join(map(str, tokens)), "--out", out,
                          *(["--all"] if all_rows else [])))
    rows = len(tokens) if all_rows else 1
    check(meta["rows"] == rows and meta["n_tokens"] == len(tokens),
          f"logits header {meta} has rows {rows}")
    check(meta["nonfinite"] == 0, f"logits of {len(tokens)} tokens are finite")
    data = np.fromfile(out, dtype=np.float32)
    check(data.size == rows * meta["n_vocab"], f"logits file holds {rows} x {meta['n_vocab']} floats")
    return data.reshape(rows, meta["n_vocab"])


def check_logits(a, kv, w, prompt, tmp):
    got = llama_logits(a.llama_ref, a.model, prompt, tmp / "all.f32", True)
    want = gg.forward(kv, w, np.array(prompt))
    err = np.abs(got - want).max() / np.abs(want).max()
    check(err <= a.tol, f"llama.cpp vs numpy logits [{len(prompt)} x {want.shape[1]}]: "
                        f"max rel err {err:.2e} <= {a.tol:.0e}")
    agree = (got.argmax(1) == want.argmax(1)).mean()
    check(agree == 1.0, f"argmax agrees at every position ({agree:.0%})")
    last = llama_logits(a.llama_ref, a.model, prompt, tmp / "last.f32", False)
    check(np.abs(last[0] - got[-1]).max() <= 1e-4 * np.abs(got[-1]).max(),
          "last-token logits equal the last row of --all")
    return got


def check_greedy(a, kv, w, prompt, all_logits):
    args = [a.llama_ref, "greedy", a.model, "--tokens", " ".join(map(str, prompt)), "--n", a.n]
    first, second = run(*args), run(*args)
    gen = [int(t) for t in first.split()]
    check(first == second, f"greedy is deterministic: {first.strip()}")
    check(len(gen) == a.n, f"greedy gave {len(gen)} tokens, asked {a.n}")
    check(len(gen) > 0 and gen[0] == int(all_logits[-1].argmax()), "first greedy token = argmax of prompt logits")
    # Teacher forcing in numpy: each generated token must be the argmax after its prefix.
    seq = prompt + gen
    want = gg.forward(kv, w, np.array(seq[:-1]))[len(prompt) - 1:].argmax(1)
    check(list(want) == gen, f"numpy greedy continuation matches ({list(want)})")
    # --stop-eos: the continuation ends right after the first EOS (kept), or runs to --n.
    eos = kv["tokenizer.ggml.eos_token_id"].value
    stopped = [int(t) for t in run(*args, "--stop-eos").split()]
    expect = gen[:gen.index(eos) + 1] if eos in gen else gen
    check(stopped == expect, f"--stop-eos (eos {eos}) gives {stopped}, expected {expect}")


def check_bench(a):
    out = run(a.llama_ref, "bench", a.model, "--prompt-len", 32, "--gen", 8, "--threads", 2, "--reps", 2)
    r = json.loads(out)
    check(r["prefill_tps"] > 0 and r["decode_tps"] > 0, f"bench: prefill {r['prefill_tps']} tok/s, "
                                                        f"decode {r['decode_tps']} tok/s")
    check(len(r["prefill_tps_samples"]) == 2 and len(r["decode_tps_samples"]) == 2, "bench: one sample per rep")


def check_errors(a, n_vocab):
    res = subprocess.run([a.llama_ref, "greedy", a.model, "--tokens", f"1 {n_vocab}", "--n", "2"],
                         capture_output=True, text=True)
    check(res.returncode != 0 and "outside the vocabulary" in res.stderr,
          f"out-of-vocab id rejected: {res.stderr.strip()}")
    res = subprocess.run([a.llama_ref, "logits", a.model, "--tokens", "1 x", "--out", "/dev/null"],
                         capture_output=True, text=True)
    check(res.returncode != 0 and "bad token id" in res.stderr, f"malformed id list rejected: {res.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("llama_ref")
    ap.add_argument("model")
    ap.add_argument("tmp", type=Path)
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--prompt", default="1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16")
    ap.add_argument("--n", type=int, default=12)
    a = ap.parse_args()
    kv, w = gg.read_gguf(a.model)
    prompt = [int(t) for t in a.prompt.split()]
    all_logits = check_logits(a, kv, w, prompt, a.tmp)
    check_greedy(a, kv, w, prompt, all_logits)
    check_bench(a)
    check_errors(a, all_logits.shape[1])
    print(f"{a.model}: {len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
