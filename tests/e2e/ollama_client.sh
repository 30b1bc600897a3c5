#!/bin/bash
# The official `ollama` npm client and Continue's / twinny's Ollama request bodies against a
# real `efim serve --alias efim-tiny` of the bundled model (tests/e2e/ollama_client.test.js).
# Usage: ollama_client.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
command -v node >/dev/null || e2e_fail "node is required (scripts/deps.sh installs it)"
[ -f "$E2E_SRC/.deps/npm/node_modules/ollama/package.json" ] ||
  e2e_fail "the ollama npm package is missing: run scripts/deps.sh"
e2e_start olla --infill-mode psm --alias efim-tiny
node "$(dirname "$0")/ollama_client.test.js" "http://127.0.0.1:$olla_PORT" ||
  e2e_fail "ollama_client.test.js failed"
e2e_stop olla
echo "ollama client e2e: ok"
