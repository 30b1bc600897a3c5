import os
import sys


def read_lines(path):
    """Return the stripped lines of a text file."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def main(argv):
    for name in argv[1:]:
        if not os.path.exists(name):
            print(f"missing: {name}", file=sys.stderr)
            continue
        lines = read_lines(name)
        print(name, len(lines))
