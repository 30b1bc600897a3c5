#!/bin/bash
# SIGTERM, a second SIGTERM and a client that stops reading, against the real binary
# (tests/e2e/shutdown.py, bundled model).
# Usage: shutdown.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
timeout 120 /usr/bin/python3 "$(dirname "$0")/shutdown.py" "$EFIM" "$MODEL" ||
  e2e_fail "shutdown.py failed"
echo "shutdown e2e: ok"
