#!/bin/bash
# `efim train` end to end on a tiny model: corpus -> `efim data build` shards -> 20 steps with
# validation -> the loss falls, the output folder loads (inspect, generate), and a run split by
# --stop-at + --resume ends with the same weights, byte for byte, as the straight run.
# usage: train_cli_smoke.sh path/to/efim
set -euo pipefail
EFIM=$1
SRC=$(cd "$(dirname "$0")/../../.." && pwd)
PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/efim-train-smoke-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A tiny random Llama (vocab 300) with a byte-level BPE tokenizer of exactly 300 ids.
$PY "$SRC/scripts/make_tiny_model.py" "$TMP/model" --kind llama --dtype f32 >/dev/null \
  || fail "make_tiny_model.py (needs numpy)"
$PY "$SRC/scripts/make_tiny_tokenizer.py" "$TMP/model/tokenizer.json" --vocab 300 >/dev/null \
  || fail "make_tiny_tokenizer.py"

# A corpus in the layout of scripts/build_corpus.sh: files/<path> + manifest.tsv.
mkdir -p "$TMP/corpus/files/pkg"
for i in 1 2 3 4; do
  {
    for j in $(seq 1 40); do
      printf 'def add_%s_%s(a, b):\n    return a + b * %s\n\n' "$i" "$j" "$j"
      printf 'class Stack%s:\n    def push(self, item):\n        self.items.append(item)\n\n' "$j"
    done
  } > "$TMP/corpus/files/pkg/mod$i.py"
done
{
  printf 'path\tpackage\tbytes\tsha256\tsplit\n'
  for i in 1 2 3 4; do
    f="$TMP/corpus/files/pkg/mod$i.py"
    split=train; [ "$i" = 4 ] && split=valid
    printf 'pkg/mod%s.py\tpkg\t%s\t%s\t%s\n' "$i" "$(stat -c %s "$f")" \
      "$(sha256sum "$f" | cut -d' ' -f1)" "$split"
  done
} > "$TMP/corpus/manifest.tsv"
for split in train valid; do
  "$EFIM" data build --corpus "$TMP/corpus" --tokenizer "$TMP/model/tokenizer.json" \
    --out "$TMP/$split" --split "$split" --fragment-rate 0.01 >/dev/null \
    || fail "efim data build --split $split"
done

ARGS=(--model "$TMP/model" --data "$TMP/train" --valid "$TMP/valid" --eval-every 10
      --eval-batches 2 --steps 20 --batch 4 --seq 64 --lr 1e-2 --warmup 2 --threads 1
      --save-dtype f32)
"$EFIM" train "${ARGS[@]}" --out "$TMP/out" > "$TMP/train.txt" || fail "efim train"

# The log: step 0 validation, 20 steps, loss and validation loss fell.
$PY - "$TMP/out/train_log.jsonl" <<'PYEOF' || fail "training log check"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
valid = [r["valid_loss"] for r in rows if "valid_loss" in r]
assert rows[0]["step"] == 0 and "valid_loss" in rows[0], rows[0]
assert [r["step"] for r in steps] == list(range(1, 21)), [r["step"] for r in steps]
assert len(valid) == 3, valid
for r in steps:
    assert r["tokens"] == 256 and r["tokens_per_s"] > 0 and r["grad_norm"] > 0 and r["lr"] > 0, r
first = sum(r["loss"] for r in steps[:3]) / 3
last = sum(r["loss"] for r in steps[-3:]) / 3
assert last < first - 1.0, f"loss {first:.3f} -> {last:.3f}"
assert valid[-1] < valid[0] - 1.0, f"valid loss {valid}"
print(f"loss {first:.3f} -> {last:.3f}, valid {valid[0]:.3f} -> {valid[-1]:.3f}")
PYEOF

# The output folder is a model efim loads.
"$EFIM" inspect "$TMP/out" > "$TMP/inspect.txt" || fail "efim inspect on the output"
grep -q -i "llama" "$TMP/inspect.txt" || fail "inspect does not show a llama model: $(cat "$TMP/inspect.txt")"
"$EFIM" generate "$TMP/out" "def add" -n 8 --temp 0 > "$TMP/gen.txt" || fail "efim generate"
[ -s "$TMP/gen.txt" ] || fail "efim generate printed nothing"
# ... and so is the GGUF written beside it (Q8_0 by default), the file `efim serve` takes.
GGUF="$TMP/out/model-q8_0.gguf"
[ -f "$GGUF" ] || fail "no $GGUF after training"
"$EFIM" inspect "$GGUF" > "$TMP/inspect_gguf.txt" || fail "efim inspect on the GGUF"
grep -q -i "q8_0" "$TMP/inspect_gguf.txt" || fail "GGUF is not Q8_0: $(cat "$TMP/inspect_gguf.txt")"
# Trained on fragment-tokenized shards: declared in config.json and in the GGUF (the server's
# token-healing auto mode reads it).
grep -q '"efim_fragment_tokenization": true' "$TMP/out/config.json" \
  || fail "config.json does not declare fragment-tokenized training"
grep -q "fragment-tokenized training" "$TMP/inspect.txt" "$TMP/inspect_gguf.txt" \
  || fail "inspect does not show fragment-tokenized training"
[ "$(grep -c "fragment-tokenized training" "$TMP/inspect.txt" "$TMP/inspect_gguf.txt" | \
     grep -c ':1')" = 2 ] || fail "the folder and the GGUF must both declare it"
"$EFIM" generate "$GGUF" "def add" -n 8 --temp 0 > "$TMP/gen_gguf.txt" || fail "efim generate on the GGUF"
[ -s "$TMP/gen_gguf.txt" ] || fail "efim generate on the GGUF printed nothing"

# Resume: 10 steps, checkpoint, resume to 20 (on 2 threads) == the straight run, bit for bit.
"$EFIM" train "${ARGS[@]}" --out "$TMP/a" --stop-at 10 --save-every 10 --gguf none >/dev/null \
  || fail "efim train --stop-at 10"
[ -f "$TMP/a/checkpoint/state.json" ] || fail "no checkpoint after --stop-at 10"
"$EFIM" train --resume "$TMP/a/checkpoint" --out "$TMP/b" --threads 2 --gguf none >/dev/null \
  || fail "efim train --resume"
cmp "$TMP/out/model.safetensors" "$TMP/b/model.safetensors" \
  || fail "resumed weights differ from the straight run"
[ "$(grep -c '"loss"' "$TMP/b/train_log.jsonl")" = 10 ] || fail "resumed log should hold steps 11..20"
[ ! -e "$TMP/b/model-q8_0.gguf" ] || fail "--gguf none still wrote a GGUF"
echo "train CLI smoke: OK"
