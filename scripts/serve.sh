#!/usr/bin/env bash
# `make serve`: serves the bundled model. efim has no HTTP server yet (it is the next piece of
# work: the "Serving engine" issue); until then this runs `efim generate` on the bundled model
# with a fill-in-the-middle prompt, so a fresh machine can see the engine work end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${EFIM_MODEL:-models/efim-base-py-q8_0.gguf}
EFIM=${EFIM_BIN:-build/bin/efim}
echo "efim: no HTTP server yet (coming with the serving engine); running 'efim generate' on"
echo "      $MODEL with a fill-in-the-middle prompt instead."
echo
"$EFIM" inspect "$MODEL"
PROMPT=$(mktemp)
trap 'rm -f "$PROMPT"' EXIT
printf '<fim_prefix>def add(a, b):\n    """Return the sum of a and b."""\n    <fim_suffix>\n\n\nprint(add(1, 2))\n<fim_middle>' > "$PROMPT"
echo
echo "--- prompt (PSM layout, sentinels parsed with --special) ---"
cat "$PROMPT"; echo
echo "--- completion ---"
"$EFIM" generate "$MODEL" --prompt-file "$PROMPT" --special -n 48
