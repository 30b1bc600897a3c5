#!/bin/bash
# The official `openai` npm client against a real `efim serve` (bundled model, --api-key):
# starts the server on a free port, runs tests/e2e/openai_client.test.js, stops the server.
# Usage: openai_client.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
command -v node >/dev/null || e2e_fail "node is required (scripts/deps.sh installs it)"
[ -f "$E2E_SRC/.deps/node_modules/openai/package.json" ] ||
  e2e_fail "the openai npm package is missing: run scripts/deps.sh"

KEY="e2e-secret"
e2e_start api --infill-mode auto --api-key "$KEY"
node "$(dirname "$0")/openai_client.test.js" "http://127.0.0.1:$api_PORT/v1" "$KEY" \
  "$(basename "$MODEL")" || e2e_fail "openai_client.test.js failed"
e2e_stop api
echo "openai client e2e: ok"
