#!/usr/bin/python3
"""Checks that llama.cpp headers match the prebuilt shared libraries before llama_ref links them.

Version: the llama.cpp tag recorded by node-llama-cpp (llama.cpp.info.json), the release the
prebuilt binaries were built from (_nlcBuildMetadata.json), the LLAMA_VERSION in the source tree's
CMakeLists.txt and the libllama.v<version>.so file name must all agree; likewise GGML_VERSION and
the version string inside libggml-base.so.
Symbols: every function the public headers declare (LLAMA_API / GGML_API) must be exported by
the libraries, so a header from another release fails here rather than at run time.
Usage: check_abi.py LLAMA_CPP_SRC NODE_LLAMA_CPP_DIR BINS_DIR. Exit 1 with the reasons on mismatch.
"""
import json
import re
import subprocess
import sys
from pathlib import Path


def cmake_version(cmakelists: Path, prefix: str) -> str:
    text = cmakelists.read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"set\({prefix}_VERSION_{part}\s+(\d+)\)", text)
        if not m:
            raise SystemExit(f"check_abi: {prefix}_VERSION_{part} not found in {cmakelists}")
        parts.append(m.group(1))
    return ".".join(parts)


def declared_functions(header: Path, macro: str) -> set:
    text = header.read_text()
    text = re.sub(r"//[^\n]*", "", text)           # line comments
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # block comments
    text = re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)  # preprocessor lines (the macro's own #define)
    names = set()
    for m in re.finditer(rf"\b{macro}\b([^;{{}}#]*?)\(", text):
        ident = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", m.group(1))
        if ident and ident[-1] not in ("DEPRECATED",):
            names.add(ident[-1])
    # DEPRECATED(LLAMA_API ... name(...), "msg") puts the macro inside a paren: same regex works.
    return names


def exported(libs) -> set:
    names = set()
    for lib in libs:
        out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], check=True,
                             capture_output=True, text=True).stdout
        names.update(line.split()[-1] for line in out.splitlines() if line.strip())
    return names


def main() -> int:
    src, nlc, bins = (Path(p) for p in sys.argv[1:4])
    errors = []
    tag = json.loads((nlc / "llama" / "llama.cpp.info.json").read_text())["tag"]
    built = json.loads((bins / "_nlcBuildMetadata.json").read_text())["buildOptions"]["llamaCpp"]["release"]
    llama_ver = cmake_version(src / "CMakeLists.txt", "LLAMA")
    ggml_ver = cmake_version(src / "ggml" / "CMakeLists.txt", "GGML")
    if tag != built:
        errors.append(f"node-llama-cpp records llama.cpp {tag} but the binaries were built from {built}")
    if tag.lstrip("v") != llama_ver:
        errors.append(f"llama.cpp.info.json tag {tag} != source tree LLAMA_VERSION {llama_ver}")
    libllama = bins / f"libllama.v{llama_ver}.so"
    libggml = bins / f"libggml.v{llama_ver}.so"
    libbase = bins / "libggml-base.so"
    for lib in (libllama, libggml, libbase):
        if not lib.is_file():
            errors.append(f"missing {lib}")
    if errors:
        print("check_abi: " + "\n check_abi: ".join(errors), file=sys.stderr)
        return 1
    if ggml_ver.encode() not in libbase.read_bytes():
        errors.append(f"GGML_VERSION {ggml_ver} of the headers not found in {libbase}")

    inc = src / "include"
    ginc = src / "ggml" / "include"
    checks = [
        ([inc / "llama.h"], "LLAMA_API", [libllama]),
        ([ginc / h for h in ("ggml.h", "ggml-backend.h", "ggml-alloc.h", "gguf.h")], "GGML_API",
         [libbase, libggml]),
    ]
    n_checked = 0
    for headers, macro, libs in checks:
        have = exported(libs)
        for h in headers:
            declared = declared_functions(h, macro)
            if len(declared) < 10:
                errors.append(f"{h}: only {len(declared)} {macro} functions parsed; header layout changed?")
            n_checked += len(declared)
            missing = sorted(declared - have)
            if missing:
                errors.append(f"{h.name}: {len(missing)} declared functions not exported by "
                              f"{', '.join(l.name for l in libs)}: {', '.join(missing[:10])}")
    if errors:
        print("check_abi: " + "\n check_abi: ".join(errors), file=sys.stderr)
        return 1
    print(f"check_abi: llama.cpp {llama_ver} (tag {tag}), ggml {ggml_ver}: "
          f"{n_checked} header functions all exported by the prebuilt libraries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
