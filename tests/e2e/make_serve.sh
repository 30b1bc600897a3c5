#!/bin/bash
# `make serve` out of the box: scripts/serve.sh (what `make serve` runs after building) serves
# the bundled efim-tiny, and it answers the requests editors send: llama.vim's /infill with a
# half-typed word after the cursor's line start (EFIM, chosen by the server), and OpenAI
# /v1/completions with a suffix. The port is 0 (the kernel picks one) instead of 8012.
# Usage: make_serve.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
PY=/usr/bin/python3
[ -x "$PY" ] || e2e_fail "$PY is required"

e2e_start_cmd serve env EFIM_BIN="$EFIM" EFIM_PORT=0 "$E2E_SRC/scripts/serve.sh"
URL="http://127.0.0.1:$serve_PORT"
grep -q "serving efim-tiny-q8_0.gguf " "$E2E_DIR/serve.log" ||
  e2e_fail "make serve does not serve the bundled efim-tiny-q8_0.gguf"

curl -sf "$URL/v1/models" > "$E2E_DIR/models.json" || e2e_fail "GET /v1/models"
curl -sf "$URL/infill" -H 'Content-Type: application/json' -d '{
  "input_prefix": "import os\n\ndef list_python_files(root):\n    result = []\n",
  "input_suffix": "\n    return result\n",
  "input_extra": [],
  "prompt": "    for name in os.list",
  "n_predict": 24, "temperature": 0, "cache_prompt": true
}' > "$E2E_DIR/infill.json" || e2e_fail "POST /infill"
curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' -d '{
  "model": "efim-tiny-q8_0.gguf",
  "prompt": "def square(x):\n    ret",
  "suffix": "\n\nprint(square(3))\n",
  "max_tokens": 16, "temperature": 0
}' > "$E2E_DIR/completions.json" || e2e_fail "POST /v1/completions"

"$PY" - "$E2E_DIR" <<'PYEOF' || e2e_fail "response check"
import json, sys, os
d = sys.argv[1]
load = lambda n: json.load(open(os.path.join(d, n)))
models = load("models.json")
assert [m["id"] for m in models["data"]] == ["efim-tiny-q8_0.gguf"], models
infill = load("infill.json")
assert isinstance(infill["content"], str), infill
assert infill["tokens_predicted"] >= 1, infill
assert infill["timings"]["prompt_n"] >= 1, infill
comp = load("completions.json")
assert comp["model"] == "efim-tiny-q8_0.gguf", comp
choice = comp["choices"][0]
assert isinstance(choice["text"], str) and choice["finish_reason"] in ("stop", "length"), comp
assert comp["usage"]["completion_tokens"] >= 1, comp
print("infill:", repr(infill["content"]), "| completion:", repr(choice["text"]))
PYEOF
e2e_stop serve
echo "make serve e2e: ok"
