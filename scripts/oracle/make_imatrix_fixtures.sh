#!/usr/bin/env bash
# Writes tests/fixtures/imatrix/{tiny,small}.gguf, what tests/imatrix.rs and
# tests/quantize.rs check in CI (where no llama.cpp build exists):
# llama-imatrix's importance matrices of the `tiny` (seed 101) and `small`
# (seed 202) `clover synth --arch qwen35moe --recipe f32` files over
# src/synth/corpus.txt, in chunks of 64 tokens.
#
#   scripts/oracle/make_imatrix_fixtures.sh
#
# llama-imatrix from the fixed-ISA build (scripts/build_llama_cpp.sh
# --fixtures), with the settings under which clover's forward pass is
# llama.cpp's: f32 KV cache, -fa off. `-b 64` gives each chunk a batch of its
# own, as clover imatrix runs it: with a larger batch llama.cpp evaluates
# several chunks as parallel sequences, and a hybrid model's equal-split
# micro-batches can then hand a GDN layer's ssm_out fewer than 16 rows of one
# sequence, which llama-imatrix skips (tiny at -c 64: 63 of 64 rows counted).
# Run from the repository root so the recorded dataset is the relative path.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
FIX_BIN=${FIX_BIN:-$(scripts/build_llama_cpp.sh --fixtures | tail -1)}
out=${OUT:-$root/tests/fixtures/imatrix}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build -q --release --bin clover
clover="${CARGO_TARGET_DIR:-$root/target}/release/clover"
for c in "tiny 101" "small 202"; do
  read -r preset seed <<<"$c"
  "$clover" synth --arch qwen35moe --preset "$preset" --recipe f32 --seed "$seed" -o "$work/$preset.gguf" >&2
  "$FIX_BIN/llama-imatrix" -m "$work/$preset.gguf" -f src/synth/corpus.txt -c 64 -b 64 -t 2 \
    -ctk f32 -ctv f32 -fa off -o "$out/$preset.gguf" >"$work/$preset.log" 2>&1 \
    || { tail "$work/$preset.log" >&2; exit 1; }
  echo "== $preset: $(grep -o 'Final estimate.*' "$work/$preset.log")" >&2
done
echo "wrote $out" >&2
