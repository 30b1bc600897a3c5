#!/bin/bash
# `efim serve` as a process: tiny model + FIM tokenizer, --port 0, then HTTP checks with
# python3's urllib (health, models, auth, a completion, an infill, a 400, /metrics), with
# --no-prefix-cache and --max-requests.
set -euo pipefail
EFIM="$1"
SRC="$(cd "$(dirname "$0")/../.." && pwd)"
DIR="$(mktemp -d)"
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT
/usr/bin/python3 "$SRC/scripts/make_tiny_model.py" "$DIR/m" --kind llama >/dev/null
/usr/bin/python3 "$SRC/scripts/make_tiny_tokenizer.py" "$DIR/m/tokenizer.json" --vocab 300 >/dev/null
if "$EFIM" serve "$DIR/m" --max-requests 0 2>"$DIR/bad"; then echo "--max-requests 0 accepted"; exit 1; fi
grep -q -- '--max-requests must be positive, got 0' "$DIR/bad" || { cat "$DIR/bad"; exit 1; }
# The KV cache against the context, checked at start (the bundled efim-tiny: 2048 tokens, 5 KiB
# of f16 K/V per token, the default; 10 KiB in f32, 2.6 KiB in q8_0): a --ctx-size it cannot hold
# is refused with the size needed; a cache smaller than the model's context narrows the served
# context with a warning.
TINY="$SRC/models/efim-tiny-q8_0.gguf"
if "$EFIM" serve "$TINY" --kv-cache-mb 4 --ctx-size 2048 2>"$DIR/bad"; then
  echo "--ctx-size over the KV cache accepted"; exit 1
fi
grep -q -- '--ctx-size 2048 needs a KV cache of 10 MiB (5120 bytes per token); --kv-cache-mb 4 holds 816 tokens' \
  "$DIR/bad" || { cat "$DIR/bad"; exit 1; }
if "$EFIM" serve "$TINY" --kv-cache-mb 4 --ctx-size 2048 --kv-type f32 2>"$DIR/bad"; then
  echo "--ctx-size over the f32 KV cache accepted"; exit 1
fi
grep -q -- '--ctx-size 2048 needs a KV cache of 20 MiB' "$DIR/bad" || { cat "$DIR/bad"; exit 1; }
if "$EFIM" serve "$TINY" --kv-type q4_0 2>"$DIR/bad"; then echo "--kv-type q4_0 accepted"; exit 1; fi
grep -q "K/V cache type 'q4_0' is not one of f32, f16, q8_0" "$DIR/bad" || { cat "$DIR/bad"; exit 1; }
if "$EFIM" serve "$TINY" --ctx-size 4096 2>"$DIR/bad"; then echo "--ctx-size 4096 accepted"; exit 1; fi
grep -q "over the model's context of 2048" "$DIR/bad" || { cat "$DIR/bad"; exit 1; }
for kv in f16 q8_0; do
  timeout 20 "$EFIM" serve "$TINY" --port 0 --threads 1 --kv-cache-mb 2 --kv-type $kv 2>"$DIR/clamp" &
  CLAMP=$!
  for _ in $(seq 100); do grep -q 'serving' "$DIR/clamp" && break; sleep 0.1; done
  kill "$CLAMP"; wait "$CLAMP" || true
  want=$([ $kv = f16 ] && echo 400 || echo 768)  # 2 MiB / 5120 and / 2720 bytes, whole blocks of 16
  grep -q "holds $want tokens, less than the model.s context of 2048: serving a context of $want" \
    "$DIR/clamp" || { cat "$DIR/clamp"; exit 1; }
  grep -q "$want-token $kv K/V cache" "$DIR/clamp" || { cat "$DIR/clamp"; exit 1; }
done
"$EFIM" serve "$DIR/m" --port 0 --threads 1 --api-key k --max-requests 8 --no-prefix-cache \
  2>"$DIR/log" &
PID=$!
for _ in $(seq 100); do grep -q 'serving' "$DIR/log" && break; sleep 0.1; done
grep -q 'prefix cache off' "$DIR/log" || { echo "no prefix-cache note:"; cat "$DIR/log"; exit 1; }
PORT="$(sed -n 's/.*http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$DIR/log")"
[ -n "$PORT" ] || { echo "server did not start:"; cat "$DIR/log"; exit 1; }
/usr/bin/python3 - "$PORT" <<'PY'
import json, re, sys, urllib.request, urllib.error
base = f"http://127.0.0.1:{sys.argv[1]}"
def call(path, body=None, key="k"):
    req = urllib.request.Request(base + path, data=None if body is None else body.encode())
    if key: req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, r.read().decode()
    except urllib.error.HTTPError as e: return e.code, e.read().decode()
s, b = call("/health", key=None); assert s == 200 and json.loads(b)["status"] == "ok", b
s, b = call("/v1/models"); assert s == 200 and json.loads(b)["data"][0]["id"] == "m", b
s, b = call("/v1/models", key="wrong"); assert s == 401, (s, b)
s, b = call("/v1/completions", json.dumps({"prompt": "def", "max_tokens": 4, "ignore_eos": True}))
j = json.loads(b); assert s == 200 and j["usage"]["completion_tokens"] == 4, b
s, b = call("/infill", json.dumps({"input_prefix": "x = ", "input_suffix": "\n", "n_predict": 3}))
j = json.loads(b); assert s == 200 and "content" in j and "tokens_cached" in j, b
s, b = call("/v1/completions", json.dumps({"prompt": "def", "max_tokens": 4, "ignore_eos": True}))
j = json.loads(b); assert s == 200 and j["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, b
s, b = call("/v1/completions", json.dumps({"model": "other", "prompt": [5, 6], "max_tokens": 1}))
assert s == 404 and json.loads(b)["error"]["code"] == "model_not_found", b
s, b = call("/metrics"); assert s == 200, b
assert 'vllm:prefix_cache_hits_total{model_name="m"} 0\n' in b, b
done = {r: int(re.search(r'finished_reason="%s"} (\d+)\n' % r, b).group(1))
        for r in ("stop", "length", "abort")}
assert done["stop"] + done["length"] == 3 and done["length"] >= 2 and done["abort"] == 0, done
s, b = call("/v1/completions", "{bad")
assert s == 400 and json.loads(b)["error"]["type"] == "invalid_request_error", b
s, b = call("/health", key=None); assert s == 200, b
print("serve smoke: http ok")
PY
kill -TERM "$PID"
wait "$PID" || { echo "efim serve exited with status $? after SIGTERM"; cat "$DIR/log"; exit 1; }
PID=""
grep -q 'server stopped' "$DIR/log" || { echo "no clean stop:"; cat "$DIR/log"; exit 1; }
echo "serve smoke: ok"
