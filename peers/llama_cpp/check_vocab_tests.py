#!/usr/bin/python3
"""Runs llama.cpp's own tokenizer test vectors through `llama_ref tokenize --list`.

For each models/ggml-vocab-NAME.gguf with .inp/.out files (format of tests/test-tokenizer-0.cpp:
texts separated by "\\n__ggml_vocab_test__\\n", one line of space-separated expected ids per
text, tokenized with add_special=false, parse_special=false) the texts are written to files,
tokenized in one batch call, and compared id by id.
Usage: check_vocab_tests.py LLAMA_REF LLAMA_CPP_SRC NAME [NAME...]. Exit 1 on any mismatch.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

SEP = "\n__ggml_vocab_test__\n"


def load_cases(inp: Path, out: Path):
    raw = inp.read_bytes().decode("utf-8")
    texts = raw.split(SEP)
    if texts and texts[-1] == "":  # the file ends with a separator
        texts.pop()
    expected = [line.strip() for line in out.read_text(encoding="utf-8").split("\n")]
    if expected and expected[-1] == "" and len(expected) == len(texts) + 1:
        expected.pop()  # trailing newline of the .out file
    if len(texts) != len(expected):
        raise SystemExit(f"{inp}: {len(texts)} texts but {out} has {len(expected)} lines")
    return texts, expected


def check(llama_ref: str, src: Path, name: str, tmp: Path) -> int:
    gguf = src / "models" / f"ggml-vocab-{name}.gguf"
    texts, expected = load_cases(Path(f"{gguf}.inp"), Path(f"{gguf}.out"))
    paths = []
    for i, t in enumerate(texts):
        p = tmp / f"{name}-{i}.txt"
        p.write_bytes(t.encode("utf-8"))
        paths.append(str(p))
    lst = tmp / f"{name}.list"
    lst.write_text("\n".join(paths) + "\n")
    res = subprocess.run([llama_ref, "tokenize", str(gguf), str(lst), "--list"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        print(f"{name}: llama_ref failed ({res.returncode}): {res.stderr.strip()}")
        return 1
    got = res.stdout.split("\n")[:-1]
    if len(got) != len(texts):
        print(f"{name}: llama_ref printed {len(got)} lines for {len(texts)} texts")
        return 1
    bad = [i for i in range(len(texts)) if got[i].strip() != expected[i]]
    for i in bad[:3]:
        print(f"{name}: case {i} {texts[i][:40]!r}: got [{got[i]}] expected [{expected[i]}]")
    print(f"{name}: {len(texts) - len(bad)}/{len(texts)} cases match")
    return 1 if bad else 0


def main() -> int:
    llama_ref, src, names = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    if not names:
        raise SystemExit("usage: check_vocab_tests.py LLAMA_REF LLAMA_CPP_SRC NAME [NAME...]")
    with tempfile.TemporaryDirectory() as d:
        failures = sum(check(llama_ref, src, n, Path(d)) for n in names)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
