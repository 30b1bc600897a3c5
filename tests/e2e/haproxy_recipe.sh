#!/bin/bash
# deploy/haproxy/haproxy.cfg in front of 3 real `efim serve` replicas: affinity by header, API
# key and client address; a killed replica's and a draining replica's requests retried
# elsewhere (tests/e2e/haproxy_recipe.py, bundled model). Needs Debian's haproxy (scripts/deps.sh).
# Usage: haproxy_recipe.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
command -v haproxy >/dev/null || e2e_fail "haproxy is not installed (scripts/deps.sh installs it)"
timeout 180 /usr/bin/python3 "$(dirname "$0")/haproxy_recipe.py" "$EFIM" "$MODEL" ||
  e2e_fail "haproxy_recipe.py failed"
echo "haproxy recipe e2e: ok"
