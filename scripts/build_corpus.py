#!/usr/bin/python3
"""Second half of scripts/build_corpus.sh: .deb files -> filtered, de-duplicated corpus.

Reads each package's file system tree with `dpkg-deb --fsys-tarfile` (what `dpkg-deb -x`
would extract) and writes OUT/files/, OUT/manifest.tsv and OUT/summary.txt. See the shell
script's header for the rules; they are applied here in this order:
  1. regular files named *.py, 200 <= bytes <= 400_000, strict UTF-8;
  2. not a standard-library file: not under usr/lib/python3.<minor>/ and sha256 not in the set
     of sha256 of every file in the stdlib packages;
  3. per-package sampling (ansible=35): keep when int(sha256[8:16], 16) % 100 < 35;
  4. de-duplicate by sha256: sorted by path, the first path keeps the content;
  5. split: valid when int(sha256[:8], 16) % 100 == 0, else train.
Only the standard library (this script runs with /usr/bin/python3) is used.
"""
import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

MIN_BYTES, MAX_BYTES = 200, 400_000
STDLIB_DIR = re.compile(r"^usr/lib/python3\.\d+/")


def deb_path(cache, package):
    found = sorted(glob.glob(os.path.join(cache, f"{package}_*.deb")))
    if len(found) != 1:
        sys.exit(f"error: expected one {package}_*.deb in {cache}, found {len(found)}: {found}")
    return found[0]


def deb_files(deb):
    """Yields (path, bytes) for every regular file in the .deb's data archive."""
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for member in tar:
            if member.isreg():
                name = member.name[2:] if member.name.startswith("./") else member.name
                yield name, tar.extractfile(member).read()
    if proc.wait() != 0:
        sys.exit(f"error: dpkg-deb --fsys-tarfile {deb} failed")


def stdlib_hashes(cache, packages):
    hashes = set()
    for p in packages:
        for _, data in deb_files(deb_path(cache, p)):
            hashes.add(hashlib.sha256(data).hexdigest())
    return hashes


def candidates(cache, packages, stdlib, sample, stats):
    """Yields (path, package, data, sha256) passing rules 1-3; counts drops in stats."""
    for p in packages:
        for path, data in deb_files(deb_path(cache, p)):
            if not path.endswith(".py"):
                continue
            stats["py"] += 1
            if not MIN_BYTES <= len(data) <= MAX_BYTES:
                stats["size"] += 1
                continue
            try:
                data.decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                stats["utf8"] += 1
                continue
            digest = hashlib.sha256(data).hexdigest()
            if STDLIB_DIR.match(path) or digest in stdlib:
                stats["stdlib"] += 1
                continue
            if p in sample and int(digest[8:16], 16) % 100 >= sample[p]:
                stats["sampled_out"] += 1
                continue
            yield path, p, data, digest


def write_corpus(out, docs):
    """docs: sorted, de-duplicated [(path, package, data, sha256)]. Rewrites OUT from scratch."""
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "files"))
    with open(os.path.join(out, "manifest.tsv"), "w", encoding="utf-8") as manifest:
        manifest.write("path\tpackage\tbytes\tsha256\tsplit\n")
        for path, package, data, digest in docs:
            target = os.path.join(out, "files", path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
            manifest.write(f"{path}\t{package}\t{len(data)}\t{digest}\t{split_of(digest)}\n")


def split_of(digest):
    return "valid" if int(digest[:8], 16) % 100 == 0 else "train"


def summary_text(args, docs, stats, seconds):
    lines = [f"corpus built by scripts/build_corpus.sh in {seconds:.0f} s (download + extract + write)",
             f"files {len(docs)}  bytes {sum(len(d[2]) for d in docs)}"]
    for split in ("train", "valid"):
        part = [d for d in docs if split_of(d[3]) == split]
        lines.append(f"split {split}: files {len(part)}  bytes {sum(len(d[2]) for d in part)}")
    lines.append("dropped: " + "  ".join(f"{k} {v}" for k, v in stats.items() if k != "py")
                 + f"  (of {stats['py']} *.py files)")
    lines.append("")
    lines.append(f"{'package':<22} {'files':>7} {'bytes':>11}  deb")
    for p in args.packages:
        part = [d for d in docs if d[1] == p]
        deb = os.path.basename(deb_path(args.cache, p))
        lines.append(f"{p:<22} {len(part):>7} {sum(len(d[2]) for d in part):>11}  {deb}")
    lines.append("stdlib excluded via: " + ", ".join(os.path.basename(deb_path(args.cache, p))
                                                    for p in args.stdlib))
    lines.append("sampling: " + ", ".join(f"{k} {v}%" for k, v in args.sample_map.items()))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--packages", nargs="+", required=True)
    ap.add_argument("--stdlib", nargs="+", required=True)
    ap.add_argument("--sample", nargs="*", default=[], help="PACKAGE=PERCENT")
    ap.add_argument("--start-time", type=float, default=time.time())
    args = ap.parse_args()
    args.sample_map = {k: int(v) for k, v in (s.split("=") for s in args.sample)}

    stdlib = stdlib_hashes(args.cache, args.stdlib)
    stats = {"py": 0, "size": 0, "utf8": 0, "stdlib": 0, "sampled_out": 0, "duplicate": 0}
    docs, seen = [], set()
    for doc in sorted(candidates(args.cache, args.packages, stdlib, args.sample_map, stats)):
        if doc[3] in seen:
            stats["duplicate"] += 1
            continue
        seen.add(doc[3])
        docs.append(doc)
    write_corpus(args.out, docs)
    text = summary_text(args, docs, stats, time.time() - args.start_time)
    with open(os.path.join(args.out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
