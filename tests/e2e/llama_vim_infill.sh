#!/bin/bash
# llama.vim's /infill requests (curl, llama.vim-shaped JSON bodies) against real `efim serve`
# processes in --infill-mode auto, efim and psm: a 3-request typing sequence per mode, checking
# that auto/efim keep the suffix cached across rounds and psm does not (llama_vim_client.py).
# Usage: llama_vim_infill.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
PY=/usr/bin/python3
[ -x "$PY" ] || e2e_fail "$PY is required"

for mode in auto efim psm; do
  t0=$(date +%s%N)
  e2e_start "srv_$mode" --infill-mode "$mode"
  port_var="srv_${mode}_PORT"
  "$PY" "$(dirname "$0")/llama_vim_client.py" "${!port_var}" "$mode" "$EFIM" "$MODEL" ||
    e2e_fail "llama.vim sequence failed in mode $mode"
  e2e_stop "srv_$mode"
  echo "mode $mode: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
done
echo "llama.vim infill e2e: ok"
