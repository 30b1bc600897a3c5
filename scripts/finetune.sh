#!/usr/bin/env bash
# Rebuilds efim's two fine-tunes of efim-base-py with identical budgets (models/README.md):
#
#   scripts/finetune.sh efim-tiny       fragment-tokenized FIM data (rate 0.005): the bundled model
#   scripts/finetune.sh efim-tiny-fim   canonically tokenized FIM data: the control
#
# Steps, each skipped when its output exists (so an interrupted run continues where it stopped):
# the corpus (scripts/build_corpus.sh -> out/corpus), the train and validation shards
# (`efim data build` -> out/data/<train|valid>[-canon]), the fine-tune (`efim train`, resumed
# bit-exactly from out/models/NAME/checkpoint when one exists) and out/models/NAME/model-q8_0.gguf.
# Budget: 184 steps x 4 accumulated batches x 4 x 1024 tokens = 3.01M tokens, about 1.7 h on
# 2 cores. The base model is read from EFIM_BASE_MODEL (default ../shared/models/efim-base-py).
set -euo pipefail

name="${1:-}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
efim="${EFIM_BIN:-$root/build/bin/efim}"
base="${EFIM_BASE_MODEL:-$root/../shared/models/efim-base-py}"
threads="${EFIM_THREADS:-2}"
case "$name" in
  efim-tiny) rate=0.005; data_suffix="" ;;
  efim-tiny-fim) rate=0; data_suffix="-canon" ;;
  *) echo "usage: $0 efim-tiny|efim-tiny-fim" >&2; exit 2 ;;
esac
[ -x "$efim" ] || { echo "$efim is missing: run make build" >&2; exit 1; }
[ -f "$base/config.json" ] || { echo "base model not found at $base (EFIM_BASE_MODEL)" >&2; exit 1; }

[ -f "$root/out/corpus/manifest.tsv" ] || "$root/scripts/build_corpus.sh" "$root/out/corpus"
for split in train valid; do
  shards="$root/out/data/$split$data_suffix"
  [ -f "$shards/index.json" ] ||
    "$efim" data build --corpus "$root/out/corpus" --tokenizer "$base" --out "$shards" \
      --split "$split" --fragment-rate "$rate"
done

out="$root/out/models/$name"
if [ ! -f "$out/model.safetensors" ]; then
  if [ -f "$out/checkpoint/state.json" ]; then
    "$efim" train --resume "$out/checkpoint" --out "$out" --threads "$threads" --save-every 10
  else
    "$efim" train --model "$base" --data "$root/out/data/train$data_suffix" \
      --valid "$root/out/data/valid$data_suffix" --out "$out" --batch 4 --accum 4 --seq 1024 \
      --steps 184 --lr 3e-4 --warmup 10 --min-lr-ratio 0.1 --weight-decay 0.1 --clip 1.0 \
      --mask all --seed 1 --eval-every 20 --eval-batches 8 --save-every 10 --threads "$threads"
  fi
fi
[ -f "$out/model-q8_0.gguf" ] ||
  "$efim" convert "$out" -o "$out/model-q8_0.gguf" --dtype q8_0
echo "$name: $out/model-q8_0.gguf"
