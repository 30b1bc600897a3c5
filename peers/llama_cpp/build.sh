#!/usr/bin/env bash
# Builds .deps/bin/llama_ref: the llama.cpp reference/peer harness, compiled with g++ against the
# headers of .deps/llama.cpp and linked to node-llama-cpp's PREBUILT shared libraries (rpath to
# their folder). Not part of the CMake build. Idempotent: skips the compile when the inputs
# (sources, flags, libraries) are unchanged. Fails loudly when an input is missing or the
# headers do not match the libraries. Needs scripts/deps.sh to have run.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEPS=$ROOT/.deps
SRC=$DEPS/llama.cpp
NLC=$DEPS/node_modules/node-llama-cpp
BINS=$DEPS/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
OUT_DIR=$DEPS/bin
OUT=$OUT_DIR/llama_ref
CXX=${CXX:-g++}

die() { echo "build_llama_ref: error: $*" >&2; exit 1; }

[ -f "$SRC/include/llama.h" ] || die "$SRC/include/llama.h missing; run scripts/deps.sh"
[ -f "$SRC/ggml/include/ggml.h" ] || die "$SRC/ggml/include/ggml.h missing; run scripts/deps.sh"
[ -f "$NLC/llama/llama.cpp.info.json" ] || die "$NLC/llama/llama.cpp.info.json missing; run scripts/deps.sh"
[ -d "$BINS" ] || die "$BINS missing; run scripts/deps.sh"
ls "$BINS"/libggml-cpu-*.so >/dev/null 2>&1 || die "no libggml-cpu-*.so in $BINS"
command -v "$CXX" >/dev/null || die "compiler $CXX not found"

# Versions and header/library ABI agreement (exits non-zero with reasons).
/usr/bin/python3 "$HERE/check_abi.py" "$SRC" "$NLC" "$BINS"

VERSION=$(sed -nE 's/^set\(LLAMA_VERSION_(MAJOR|MINOR|PATCH) ([0-9]+)\)/\2/p' "$SRC/CMakeLists.txt" | paste -sd.)
LIBS=("$BINS/libllama.v$VERSION.so" "$BINS/libggml.v$VERSION.so" "$BINS/libggml-base.so")
SOURCES=("$HERE/llama_ref.cpp" "$HERE/llama_ref_common.cpp" "$HERE/llama_ref_bench.cpp"
  "$HERE/llama_ref_quant.cpp")
CXXFLAGS=(-std=c++20 -O2 -g -Wall -Wextra -Werror -pthread
  -I"$SRC/include" -I"$SRC/ggml/include" -DLLAMA_REF_BINS_DIR="\"$BINS\"")
LDFLAGS=(-Wl,-rpath,"$BINS" -Wl,--no-as-needed)

# Stamp: hash of every input; an identical stamp means the binary is current.
STAMP=$OUT_DIR/.llama_ref.stamp
stamp=$( { "$CXX" --version | head -n 1; echo "${CXXFLAGS[*]} ${LDFLAGS[*]}";
           sha256sum "${SOURCES[@]}" "$HERE/llama_ref_common.h" "$0" "${LIBS[@]}"; } | sha256sum | cut -d' ' -f1)
if [ -x "$OUT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$stamp" ]; then
  echo "build_llama_ref: $OUT is up to date"
  exit 0
fi

mkdir -p "$OUT_DIR"
TMP=$(mktemp "$OUT_DIR/.llama_ref.XXXXXX")
trap 'rm -f "$TMP"' EXIT
echo "build_llama_ref: compiling $OUT (llama.cpp $VERSION)"
"$CXX" "${CXXFLAGS[@]}" "${SOURCES[@]}" -o "$TMP" "${LDFLAGS[@]}" "${LIBS[@]}"
# Smoke test before installing: the binary starts, resolves its libraries and finds a CPU backend.
"$TMP" info >/dev/null || die "the freshly built llama_ref fails 'info' (see above)"
mv -f "$TMP" "$OUT"
trap - EXIT
echo "$stamp" >"$STAMP"
echo "build_llama_ref: built $OUT"
