#!/usr/bin/env bash
# `make serve`: serves the bundled model on 127.0.0.1:8012 (llama.vim's default), with the
# OpenAI-compatible /v1/completions (prompt + suffix) and llama.cpp-compatible /infill routes;
# the server picks PSM or EFIM per request (--infill-mode auto).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${EFIM_MODEL:-models/efim-tiny-q8_0.gguf}
EFIM=${EFIM_BIN:-build/bin/efim}
PORT=${EFIM_PORT:-8012}
echo "efim: serving $MODEL on http://127.0.0.1:$PORT (Ctrl-C to stop). Try:"
echo "  curl -s 127.0.0.1:$PORT/infill -d '{\"input_prefix\": \"def add(a, b):\\n    \", \"input_suffix\": \"\\n\\nprint(add(1, 2))\\n\", \"n_predict\": 32}'"
exec "$EFIM" serve "$MODEL" --host 127.0.0.1 --port "$PORT" --infill-mode auto
