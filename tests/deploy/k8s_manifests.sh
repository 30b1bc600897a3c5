#!/bin/bash
# deploy/k8s checked without a cluster: published schemas (npm kubernetes-models), the
# InferencePool's v1 fields, every cross-reference, and the efim binary behind the manifest
# (tests/deploy/k8s_manifests.py). Usage: k8s_manifests.sh EFIM_BINARY
set -euo pipefail
source "$(dirname "$0")/../e2e/e2e_lib.sh"
e2e_init "$1"
timeout 120 /usr/bin/python3 "$(dirname "$0")/k8s_manifests.py" "$EFIM" "$MODEL" ||
  e2e_fail "k8s_manifests.py failed"
echo "k8s manifests: ok"
