#!/usr/bin/env bash
# Builds the llama.cpp oracle/peer harness .deps/bin/llama_ref (see peers/llama_cpp/README.md).
# Run scripts/deps.sh first. Idempotent.
set -euo pipefail
exec "$(dirname "$0")/../peers/llama_cpp/build.sh" "$@"
