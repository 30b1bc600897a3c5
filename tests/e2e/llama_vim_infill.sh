#!/bin/bash
# llama.vim's /infill requests (curl, llama.vim-shaped JSON bodies) against real `efim serve`
# processes in --infill-mode auto, efim and psm: a 3-request typing sequence per mode, checking
# that auto/efim keep the suffix cached across rounds and psm does not (llama_vim_client.py),
# and that auto mode token-heals for a model not trained with fragments and only for it.
# Usage: llama_vim_infill.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
PY=/usr/bin/python3
[ -x "$PY" ] || e2e_fail "$PY is required"

# efim-tiny declares fragment-tokenized training: auto mode leaves its EFIM prompts unhealed.
# efim-base-py does not: auto mode token-heals the typed text after the middle sentinel.
TINY=$MODEL
BASE="$E2E_SRC/models/efim-base-py-q8_0.gguf"
[ -f "$BASE" ] || e2e_fail "bundled model '$BASE' is missing"
for run in "auto tiny noheal" "efim tiny noheal" "psm tiny noheal" "auto base heal"; do
  read -r mode model heal <<<"$run"
  t0=$(date +%s%N)
  if [ "$model" = base ]; then MODEL=$BASE; else MODEL=$TINY; fi
  name="srv_${mode}_${model}"
  e2e_start "$name" --infill-mode "$mode"
  port_var="${name}_PORT"
  "$PY" "$(dirname "$0")/llama_vim_client.py" "${!port_var}" "$mode" "$EFIM" "$MODEL" "$heal" ||
    e2e_fail "llama.vim sequence failed in mode $mode on $model"
  e2e_stop "$name"
  echo "mode $mode on $model ($heal): $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
echo "llama.vim infill e2e: ok"
