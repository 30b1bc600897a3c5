#!/bin/bash
# Idle and slowloris connections against the real binary (tests/e2e/connections.py).
# Usage: connections.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
ulimit -n 4096 2>/dev/null || true
timeout 120 /usr/bin/python3 "$(dirname "$0")/connections.py" "$EFIM" "$MODEL" ||
  e2e_fail "connections.py failed"
echo "connections e2e: ok"
