#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` from the bundled source (.deps/llama.cpp) into
# .deps/llama-server/bin/llama-server: the peer of `efim bench infill --peer llama-server`
# (make check-peer-infill). Optional, not part of `make test`: ~10 min on 2 cores the first
# time. CPU only, native instruction set (the same machine runs both servers), no web UI, no
# HTTPS, no downloads. Idempotent: cmake rebuilds only what changed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SRC=$ROOT/.deps/llama.cpp
BUILD=$ROOT/.deps/llama-server
[ -f "$SRC/tools/server/CMakeLists.txt" ] || { echo "build_server: $SRC missing; run scripts/deps.sh" >&2; exit 1; }
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >/dev/null
cmake --build "$BUILD" --target llama-server -j "${JOBS:-$(nproc)}"
"$BUILD/bin/llama-server" --version
