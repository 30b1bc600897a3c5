#!/usr/bin/env bash
# Optional (make check-peer-infill): the paper's typing workload against efim serve and against
# llama.cpp's own llama-server on the same GGUF, same prompts, same threads (efim bench infill
# --peer-llama-server). Builds llama-server from the bundled source first (peers/llama_cpp/
# build_server.sh: ~10 min on 2 cores the first time). Writes out/peer-infill/.
# usage: check_peer_infill.sh [MODEL.gguf] [extra efim bench infill options]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
MODEL=${1:-models/efim-base-py-q8_0.gguf}
shift || true
./peers/llama_cpp/build_server.sh
build/bin/efim bench infill "$MODEL" -t 2 --schemes cache-psm,cache-spm,cache-efim \
  --peer-llama-server .deps/llama-server/bin/llama-server --out out/peer-infill "$@"
