#!/usr/bin/python3
"""Compare two builds on a machine whose speed swings: runs command A and command B in pairs,
the order alternating (AB, BA, AB, ...) so that neither always runs first, takes one number
from each run's output (the first match of --pattern's group 1) and prints each pair, the
medians and the median of the per-pair ratios B / A (the pairs share the machine's state, the
medians across pairs do not).

  scripts/ab_pairs.py --pairs 8 --pattern 'decode 32 @ 4096 \\(f16 K/V\\) \\| ([0-9.]+)' \\
      --a 'old/efim bench-model out/bench100m-q8_0.gguf --depth 4096 --no-peer' \\
      --b 'build/bin/efim bench-model out/bench100m-q8_0.gguf --depth 4096 --no-peer'

Higher is better unless --lower-is-better (then the ratio printed is A / B, still "B's
speedup"). Exits 1 when a run fails or prints no match.
"""
import argparse
import re
import shlex
import statistics
import subprocess
import sys


def measure(cmd, pattern):
    out = subprocess.run(shlex.split(cmd), capture_output=True, text=True)
    text = out.stdout + out.stderr
    m = re.search(pattern, text)
    if out.returncode != 0 or not m:
        sys.exit(f"ab_pairs: '{cmd}' exited {out.returncode}"
                 f"{'' if m else ' and printed no match for ' + repr(pattern)}:\n{text[-2000:]}")
    return float(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a", required=True, help="the baseline command")
    p.add_argument("--b", required=True, help="the candidate command")
    p.add_argument("--pattern", required=True, help="regex; group 1 is the number")
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--lower-is-better", action="store_true")
    args = p.parse_args()
    a_vals, b_vals, speedups = [], [], []
    for i in range(args.pairs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        got = {k: measure(args.a if k == "a" else args.b, args.pattern) for k in order}
        a_vals.append(got["a"])
        b_vals.append(got["b"])
        s = got["a"] / got["b"] if args.lower_is_better else got["b"] / got["a"]
        speedups.append(s)
        print(f"pair {i + 1} ({''.join(order).upper()}): A {got['a']:g}  B {got['b']:g}  "
              f"B's speedup {s:.3f}", flush=True)
    wins = sum(s > 1 for s in speedups)
    print(f"A median {statistics.median(a_vals):g} (range {min(a_vals):g}-{max(a_vals):g}); "
          f"B median {statistics.median(b_vals):g} (range {min(b_vals):g}-{max(b_vals):g})")
    print(f"B's speedup: median of pair ratios {statistics.median(speedups):.3f} "
          f"(range {min(speedups):.3f}-{max(speedups):.3f}), B faster in {wins} of {args.pairs}")


if __name__ == "__main__":
    main()
