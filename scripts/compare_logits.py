#!/usr/bin/python3
"""Compares two raw float32 logits files [rows, vocab]; exits 1 when more than --max-rows-over
rows (default 0) differ by more than --atol (absolute) or --std-tol, or when the argmax
disagrees on more than --max-argmax-mismatch rows. With --tie T, a row where the argmax of A
is within T of B's maximum in B's own logits (a near tie in the reference, which rounding noise
of the size of the bound decides either way) does not count as a mismatch; such rows are
reported apart.

usage: compare_logits.py A.f32 B.f32 --vocab V (--atol T | --std-tol F) [--max-rows-over N]
       [--label NAME]
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--atol", type=float, default=0.0, help="bound on max |diff|")
    ap.add_argument("--std-tol", type=float, default=0.0,
                    help="bound on max |diff| as a fraction of the logits' standard deviation")
    ap.add_argument("--max-argmax-mismatch", type=int, default=0)
    ap.add_argument("--tie", type=float, default=0.0,
                    help="argmax disagreements where B's logits of both tokens are within this "
                         "count as near ties, not mismatches")
    ap.add_argument("--max-rows-over", type=int, default=0,
                    help="rows allowed beyond the bound (a mixture of experts' router near-ties)")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    a = np.fromfile(args.a, dtype=np.float32).reshape(-1, args.vocab)
    b = np.fromfile(args.b, dtype=np.float32).reshape(-1, args.vocab)
    if a.shape != b.shape:
        print(f"{args.label}: shapes differ {a.shape} vs {b.shape}")
        return 1
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        print(f"{args.label}: non-finite logits")
        return 1
    diff = np.abs(a.astype(np.float64) - b)
    bound = args.atol if args.atol > 0 else args.std_tol * float(a.std())
    if bound <= 0:
        print("give --atol or --std-tol")
        return 2
    ia = a.argmax(axis=1)
    differ = ia != b.argmax(axis=1)
    # B's gap between its own best token and A's choice.
    gap = b.max(axis=1) - b[np.arange(b.shape[0]), ia]
    ties = int((differ & (gap <= args.tie)).sum()) if args.tie > 0 else 0
    mismatch = int(differ.sum()) - ties
    over = int((diff.max(axis=1) > bound).sum())
    ok = over <= args.max_rows_over and mismatch <= args.max_argmax_mismatch
    rows_over = f", rows over {over} (allowed {args.max_rows_over})" if args.max_rows_over else ""
    print(f"{args.label}: rows {a.shape[0]}, max|diff| {diff.max():.3g} (bound {bound:.3g}){rows_over}, "
          f"mean|diff| {diff.mean():.3g}, logit std {a.std():.3g}, argmax mismatches {mismatch}"
          + (f" (+{ties} near ties within {args.tie:g}, largest {gap[differ].max():.3g})" if ties else "")
          + f" -> {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
