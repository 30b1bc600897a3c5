#!/usr/bin/env bash
# The `efim` binary end to end on a tiny model it converts itself: every subcommand runs and
# says what it should, and bad input gets a clear error (exit 1, "efim: error: ...") instead of
# a crash.
# usage: cli_smoke.sh EFIM_BINARY
set -uo pipefail
EFIM=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=/usr/bin/python3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0; failed=0
pass() { passed=$((passed + 1)); }
failc() { echo "FAIL: $*"; failed=$((failed + 1)); }
# expect_ok NAME REGEX CMD...: exit 0 and stdout+stderr matching REGEX
expect_ok() {
  local name=$1 re=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 0 ] && grep -Eq -- "$re" <<<"$out"; then pass; else failc "$name (rc $rc): $out"; fi
}
# expect_err NAME REGEX CMD...: exit 1 with "efim: error: " and a message matching REGEX
expect_err() {
  local name=$1 re=$2; shift 2
  local out; out=$("$@" 2>&1); local rc=$?
  if [ $rc -eq 1 ] && grep -q "efim: error: " <<<"$out" && grep -Eq -- "$re" <<<"$out"; then pass
  else failc "$name (rc $rc): $out"; fi
}

M=$WORK/tiny
"$PY" "$ROOT/scripts/make_tiny_model.py" "$M" --kind llama --dtype bf16 >/dev/null
"$PY" "$ROOT/scripts/make_tiny_tokenizer.py" "$M/tokenizer.json" --vocab 300

expect_ok "inspect folder" "hidden 64, layers 2, heads 4/2 kv" "$EFIM" inspect "$M"
expect_ok "inspect fim" "prefix +1 <fim_prefix>" "$EFIM" inspect "$M"
expect_ok "convert bf16" "wrote .*22 tensors" "$EFIM" convert "$M" -o "$WORK/t.gguf" --dtype bf16
expect_ok "convert q8_0" "wrote " "$EFIM" convert "$M" -o "$WORK/t8.gguf" --dtype q8_0
expect_ok "inspect gguf" "GGUF v3.*22 tensors" "$EFIM" inspect "$WORK/t.gguf" --tensors
expect_ok "tokenize" "^[0-9]+( [0-9]+)*$" "$EFIM" tokenize "$WORK/t.gguf" "def push(self):"
# Special tokens are text unless --special: "<fim_prefix>" must not become id 1 by default.
a=$("$EFIM" tokenize "$WORK/t.gguf" "<fim_prefix>x" 2>/dev/null)
b=$("$EFIM" tokenize "$WORK/t.gguf" "<fim_prefix>x" --special 2>/dev/null)
if [ "${b%% *}" = 1 ] && [ "${a%% *}" != 1 ]; then pass; else failc "special parsing: '$a' / '$b'"; fi
expect_ok "generate greedy" "generated 8 tokens" "$EFIM" generate "$WORK/t.gguf" "def " -n 8 --ignore-eos
expect_ok "generate sampled" "generated 8 tokens" "$EFIM" generate "$WORK/t8.gguf" "def " -n 8 \
  --ignore-eos --temp 0.8 --top-k 20 --top-p 0.95 --seed 3
s1=$("$EFIM" generate "$WORK/t.gguf" "def " -n 12 --ids --ignore-eos --temp 1 --seed 5 2>/dev/null)
s2=$("$EFIM" generate "$WORK/t.gguf" "def " -n 12 --ids --ignore-eos --temp 1 --seed 5 2>/dev/null)
[ "$s1" = "$s2" ] && [ -n "$s1" ] && pass || failc "same seed gave '$s1' and '$s2'"
# A draft model (the Q8_0 copy drafting for the bf16 one): the same tokens as plain decoding.
g0=$("$EFIM" generate "$WORK/t.gguf" "def " -n 16 --ids --ignore-eos 2>/dev/null)
g1=$("$EFIM" generate "$WORK/t.gguf" "def " -n 16 --ids --ignore-eos --draft-model "$WORK/t8.gguf" \
  2>"$WORK/draft.err")
[ "$g0" = "$g1" ] && [ -n "$g0" ] && grep -q "draft model: [0-9]* tokens computed" "$WORK/draft.err" \
  && pass || failc "draft model gave '$g1' for '$g0': $(cat "$WORK/draft.err")"
expect_ok "logits" '"rows":3' "$EFIM" logits "$WORK/t.gguf" --tokens "5 6 7" --all --out "$WORK/l.f32"
[ "$(stat -c %s "$WORK/l.f32")" = $((3 * 300 * 4)) ] && pass || failc "logits file size"

# Bad input.
# A GGUF copied with edited metadata: tensors byte for byte, the declaration readable.
expect_ok "convert gguf --set" "1 metadata keys set" "$EFIM" convert "$WORK/t.gguf" \
  -o "$WORK/t_frag.gguf" --set efim.fragment_tokenization=true
expect_ok "inspect declared" "fragment-tokenized training" "$EFIM" inspect "$WORK/t_frag.gguf"
expect_err "convert bad --set" "KEY=VALUE" "$EFIM" convert "$WORK/t.gguf" -o "$WORK/x.gguf" \
  --set novalue
expect_err "missing model" "cannot open|neither" "$EFIM" inspect "$WORK/nope.gguf"
head -c 100 "$WORK/t.gguf" > "$WORK/trunc.gguf"
expect_err "truncated gguf" "trunc.gguf" "$EFIM" inspect "$WORK/trunc.gguf"
printf 'GGUF\x03\x00\x00\x00' > "$WORK/hdr.gguf"
expect_err "header only" "hdr.gguf" "$EFIM" generate "$WORK/hdr.gguf" "x"
expect_err "bad dtype" "unknown type 'q9' .expected one of f32, .*q4_k_m" "$EFIM" convert "$M" -o "$WORK/x.gguf" --dtype q9
expect_err "id out of range" "outside the vocabulary" "$EFIM" generate "$WORK/t.gguf" --prompt-ids "1 300"
expect_err "non-numeric id" "expected a number" "$EFIM" logits "$WORK/t.gguf" --tokens "1 x" --out "$WORK/o"
expect_err "context overflow" "exceeds the context" "$EFIM" generate "$WORK/t.gguf" "x" -n 100000
expect_err "bad temperature" "temperature" "$EFIM" generate "$WORK/t.gguf" "x" --temp -1
"$PY" - "$M/tokenizer.json" "$WORK/other_tok.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
a, b = sorted(v, key=v.get)[280:282]  # two merged tokens change places
v[a], v[b] = v[b], v[a]
json.dump(t, open(sys.argv[2], "w"))
PYEOF
mkdir -p "$WORK/other" && cp "$M"/*.safetensors "$M/config.json" "$WORK/other/" \
  && cp "$WORK/other_tok.json" "$WORK/other/tokenizer.json"
expect_err "draft model, other tokenizer" "draft-model .*token 28[01] is" "$EFIM" generate \
  "$WORK/t.gguf" "x" --draft-model "$WORK/other"
# Tokenizers that differ only in padding entries at the end (up to 128, as llama.cpp allows):
# a draft whose tokenizer lists 290 of the 300 tokens drafts; 150 more is refused.
mkdir -p "$WORK/d290" "$WORK/d450" && cp "$M"/*.safetensors "$M/config.json" "$WORK/d290/" \
  && cp "$M"/*.safetensors "$M/config.json" "$WORK/d450/"
"$PY" "$ROOT/scripts/make_tiny_tokenizer.py" "$WORK/d290/tokenizer.json" --vocab 290
"$PY" - "$M/tokenizer.json" "$WORK/d450/tokenizer.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
for i in range(150):
    t["model"]["vocab"][f"<pad{i}>"] = 300 + i
json.dump(t, open(sys.argv[2], "w"))
PYEOF
g2=$("$EFIM" generate "$WORK/t.gguf" "def " -n 16 --ids --ignore-eos --draft-model "$WORK/d290" \
  2>/dev/null)
[ "$g0" = "$g2" ] && pass || failc "290-token draft tokenizer gave '$g2' for '$g0'"
expect_err "draft model, 150 more tokens" "450 tokens, the model's 300 .at most 128 apart" \
  "$EFIM" generate "$WORK/t.gguf" "x" --draft-model "$WORK/d450"
expect_err "draft mode without a draft model" "needs --draft-model" "$EFIM" generate "$WORK/t.gguf" \
  "x" --speculative draft
expect_err "bad speculative mode" "off, ngram, draft or ngram\+draft" "$EFIM" generate \
  "$WORK/t.gguf" "x" --speculative fast
expect_err "empty prompt" "prompt is empty|either as text" "$EFIM" generate "$WORK/t.gguf" ""
printf '\xff\xfe invalid utf-8 \xc3' > "$WORK/bad.txt"
expect_ok "invalid utf-8 prompt" "tokens" "$EFIM" tokenize "$WORK/t.gguf" --text-file "$WORK/bad.txt"
cp -r "$M" "$WORK/broken" && echo '{"model_type": "llama", "hidden_size": -4}' > "$WORK/broken/config.json"
expect_err "bad config" "hidden_size|config" "$EFIM" inspect "$WORK/broken"

echo "cli smoke: $passed passed, $failed failed"
[ $failed -eq 0 ]
