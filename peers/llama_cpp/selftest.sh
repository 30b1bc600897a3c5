#!/usr/bin/env bash
# Self-test of the llama.cpp harness: builds .deps/bin/llama_ref, then checks
#  1. build is idempotent; `info` finds a CPU backend variant; a wrong bins dir fails loudly;
#  2. tokenize reproduces llama.cpp's own tokenizer vectors (models/ggml-vocab-*.gguf.inp/.out)
#     and --special parses special tokens;
#  3. on two tiny random GGUFs written by make_test_gguf.py (F32 with a synthetic BPE vocab,
#     F16 with the llama-bpe vocab): logits agree with an independent numpy forward pass,
#     greedy is deterministic and matches numpy's teacher-forced argmax, bench runs, bad ids
#     are rejected.
# Exit status non-zero on any failure. Needs scripts/deps.sh to have run (it fails otherwise).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3
REF=$ROOT/.deps/bin/llama_ref
SRC=$ROOT/.deps/llama.cpp
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }

echo "== build"
"$ROOT/scripts/build_llama_ref.sh"
"$ROOT/scripts/build_llama_ref.sh" | grep -q "up to date" || fail "second build was not a no-op"

echo "== info"
info=$("$REF" info)
echo "$info"
echo "$info" | $PY -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["cpu_variant"] and d["llama_version"].startswith("0.4.0") else 1)' \
  || fail "info lacks a CPU variant or reports an unexpected llama.cpp version"
if LLAMA_REF_BINS_DIR=$TMP "$REF" info >"$TMP/out" 2>"$TMP/err"; then fail "info succeeded without backends"; fi
grep -q "no CPU backend" "$TMP/err" || fail "missing-backend error unclear: $(cat "$TMP/err")"

echo "== tokenizer vectors"
names=$(ls "$SRC"/models/ggml-vocab-*.gguf.inp | sed -E 's#.*/ggml-vocab-(.*)\.gguf\.inp#\1#')
[ -n "$names" ] || fail "no tokenizer vectors under $SRC/models"
# shellcheck disable=SC2086
$PY "$HERE/check_vocab_tests.py" "$REF" "$SRC" $names

BPE=$SRC/models/ggml-vocab-llama-bpe.gguf
printf '<|begin_of_text|>Hello' >"$TMP/special.txt"
got=$("$REF" tokenize "$BPE" "$TMP/special.txt" --special)
[ "$got" = "128000 9906" ] || fail "--special: got '$got', expected '128000 9906'"
got=$("$REF" tokenize "$BPE" "$TMP/special.txt")
[ "$got" != "128000 9906" ] && [ "${got%% *}" != "128000" ] || fail "without --special the marker became a special token: '$got'"
echo "ok   --special parses <|begin_of_text|>; plain mode does not"

echo "== tiny F32 model, synthetic vocab"
$PY "$HERE/make_test_gguf.py" write "$TMP/tiny-f32.gguf" --seed 1
$PY "$HERE/check_model.py" "$REF" "$TMP/tiny-f32.gguf" "$TMP" --tol 1e-5

echo "== tiny F16 model, llama-bpe vocab"
$PY "$HERE/make_test_gguf.py" write "$TMP/tiny-f16.gguf" --seed 2 --dtype f16 --n-embd 32 \
  --vocab-from "$BPE"
$PY "$HERE/check_model.py" "$REF" "$TMP/tiny-f16.gguf" "$TMP" --tol 4e-3 \
  --prompt "128000 9906 1917 11 1618 374 264 1296" --n 6

echo "selftest: all checks passed"
