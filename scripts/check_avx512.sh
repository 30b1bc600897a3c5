#!/usr/bin/env bash
# Optional check of the native AVX-512 kernels on a machine without AVX-512 (not part of
# `make test`: it takes ~15-25 minutes on 2 cores). `make test` already runs the AVX-512 sources
# compiled on SIMDe's emulation of the intrinsics; this runs the real AVX-512 machine code, on an
# AVX-512 CPU emulated by Bochs (scripts/avx512_bochs.sh):
#  1. matmul_test: every kernel variant (scalar, avx2, avx512) against the f64 reference for all
#     dtypes and shapes, and the int8 kernels against the scalar kernel's integer arithmetic;
#     it also checks that the dispatcher chose avx512 there.
#  2. `efim generate`, greedy, on the bundled efim-tiny (Q8_0: the int8 kernels) and on
#     efim-base-py (BF16: the float kernels; only when ../shared is present): the token ids
#     generated on the emulated AVX-512 CPU must equal those of this machine's AVX2 run.
# On a CPU with AVX-512 none of this is needed: `make test` runs the native kernels directly.
#
#   scripts/check_avx512.sh [--cpu tigerlake|corei7_skylake_x]      (BUILD=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CPU_ARGS=("$@")
BUILD=${BUILD:-$ROOT/build}

echo "== build ($BUILD)"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target matmul_test efim >/dev/null

echo "== 1. matmul_test on the emulated AVX-512 CPU"
bash scripts/avx512_bochs.sh "${CPU_ARGS[@]}" --timeout 2400 "$BUILD/tests/backend/matmul_test" \
  '--gtest_filter=*EveryVariant*:*OddK*:*SimdVariants*:*NativeKernels*:*ActiveKernel*' \
  --gtest_color=no

# Greedy ids of `efim generate` here (AVX2) and in the guest (AVX-512) for one model.
PROMPT=$'<fim_prefix>def mean(xs):\n    total = 0\n    for x in xs:\n        <fim_suffix>\n    return total / len(xs)\n<fim_middle>'
compare_generate() {
  local model=$1 name=$2 host out guest
  host=$(EFIM_KERNEL=avx2 "$BUILD/bin/efim" generate "$model" "$PROMPT" --special -n 24 --ids -t 1 \
    2>/dev/null | xargs)
  out=$(bash scripts/avx512_bochs.sh "${CPU_ARGS[@]}" --timeout 2400 --add "$model" \
    --env EFIM_KERNEL=avx512 "$BUILD/bin/efim" generate "$(basename "$model")" "$PROMPT" \
    --special -n 24 --ids -t 1 2>&1) ||
    { echo "$out"; echo "check_avx512: $name: the guest run failed" >&2; exit 1; }
  echo "$out"
  # The ids: the binary's output between the markers, without efim's timing line.
  guest=$(printf '%s\n' "$out" | tr -d '\r' | awk '/EFIM_RUN_BEGIN/ {on = 1; next}
      on { i = index($0, "EFIM_RUN_END"); if (i) { print substr($0, 1, i - 1); on = 0 } else print }' |
    grep -v '^prompt:' | xargs)
  echo "$name avx2 (here):       $host"
  echo "$name avx512 (emulated): $guest"
  [ -n "$host" ] && [ "$host" = "$guest" ] ||
    { echo "check_avx512: $name: the AVX-512 run generated other tokens" >&2; exit 1; }
}

echo "== 2. efim generate: AVX-512 (emulated CPU) against AVX2 (this CPU)"
compare_generate "$ROOT/models/efim-tiny-q8_0.gguf" "efim-tiny Q8_0"
if [ -d "$ROOT/../shared/models/efim-base-py" ]; then
  compare_generate "$(realpath "$ROOT/../shared/models/efim-base-py")" "efim-base-py BF16"
else
  echo "(../shared/models/efim-base-py not present: the BF16 model run is skipped)"
fi
echo "check_avx512: all passed"
