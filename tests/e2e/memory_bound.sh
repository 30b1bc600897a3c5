#!/bin/bash
# Per-request memory bounded and released (tests/e2e/memory_bound.py, bundled model).
# Usage: memory_bound.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
timeout 240 /usr/bin/python3 "$(dirname "$0")/memory_bound.py" "$EFIM" "$MODEL" ||
  e2e_fail "memory_bound.py failed"
echo "memory bound e2e: ok"
