#!/bin/bash
# The playground page in headless chromium (tests/e2e/playground.test.js) against a real
# `efim serve` of the bundled model in auto infill mode.
# Usage: playground.sh EFIM_BINARY [SCREENSHOT.png]
set -euo pipefail
source "$(dirname "$0")/e2e_lib.sh"
e2e_init "$1"
command -v node >/dev/null || e2e_fail "node is required (scripts/deps.sh installs it)"
CHROMIUM=$(command -v chromium || true)
[ -n "$CHROMIUM" ] || e2e_fail "chromium is required (scripts/deps.sh installs Debian's)"
[ -f "$E2E_SRC/.deps/npm/node_modules/puppeteer-core/package.json" ] ||
  e2e_fail "puppeteer-core is missing: run scripts/deps.sh"
e2e_start page --infill-mode auto
node "$(dirname "$0")/playground.test.js" "http://127.0.0.1:$page_PORT" "$CHROMIUM" "${2:-}" ||
  e2e_fail "playground.test.js failed"
e2e_stop page
echo "playground e2e: ok"
