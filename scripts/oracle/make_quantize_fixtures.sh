#!/usr/bin/env bash
# Writes tests/fixtures/quantize.json, what tests/quantize.rs checks in CI
# (where no llama.cpp build exists): for each case below, llama-quantize's
# output for a `clover synth --arch qwen35moe --recipe f32` file, as a sha256
# and a size. `clover quantize` with the same arguments must write the same
# bytes. The --imatrix cases use llama-imatrix's files from
# scripts/oracle/make_imatrix_fixtures.sh (run from the repository root: the
# path given is recorded in the output's metadata).
#
#   scripts/oracle/make_quantize_fixtures.sh
#
# llama-quantize: $LLAMA_BIN (default: what scripts/build_llama_cpp.sh prints).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh | tail -1)}
out=${OUT:-$root/tests/fixtures/quantize.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build -q --release --bin clover
clover="${CARGO_TARGET_DIR:-$root/target}/release/clover"

# preset seed | llama-quantize arguments before the files | TYPE
cases=(
  "tiny 101||Q8_0" "tiny 101||Q4_0" "tiny 101||Q4_K_M" "tiny 101||Q6_K" "tiny 101||IQ4_XS"
  "tiny 101||F16" "tiny 101||BF16"
  "small 202||Q8_0" "small 202||Q4_0" "small 202||Q4_K_M" "small 202||Q6_K" "small 202||IQ4_XS"
  "small 202||F16" "small 202||BF16"
  "small 202|--pure|Q4_K_M"
  "small 202|--tensor-type ffn_down_exps=q8_0 --tensor-type attn_gate=q6_k|Q4_K_M"
  "small 202|--output-tensor-type q8_0 --token-embedding-type q8_0|Q4_K_M"
  "tiny 101|--imatrix tests/fixtures/imatrix/tiny.gguf|Q4_K_M"
  "tiny 101|--imatrix tests/fixtures/imatrix/tiny.gguf|IQ4_XS"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf|Q8_0"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf|Q4_0"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf|Q4_K_M"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf|Q6_K"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf|IQ4_XS"
  "small 202|--imatrix tests/fixtures/imatrix/small.gguf --tensor-type ffn_down_exps=q8_0 --tensor-type attn_gate=q6_k|Q4_K_M"
)
{
  echo '{"about": "sha256 and size of llama-quantize outputs (llama.cpp 0c1e570) for clover synth --arch qwen35moe --recipe f32 files; written by scripts/oracle/make_quantize_fixtures.sh", "cases": ['
  first=1
  for c in "${cases[@]}"; do
    IFS='|' read -r src args ty <<<"$c"
    read -r preset seed <<<"$src"
    f32="$work/$preset-f32.gguf"
    [ -f "$f32" ] || "$clover" synth --arch qwen35moe --preset "$preset" --recipe f32 --seed "$seed" -o "$f32" >&2
    # shellcheck disable=SC2086
    "$LLAMA_BIN/llama-quantize" $args "$f32" "$work/q.gguf" "$ty" 2 >"$work/log" 2>&1 || { tail "$work/log" >&2; exit 1; }
    sha=$(sha256sum "$work/q.gguf" | cut -d' ' -f1)
    bytes=$(stat -c %s "$work/q.gguf")
    src_sha=$(sha256sum "$f32" | cut -d' ' -f1)
    [ $first = 1 ] || echo ','
    first=0
    printf '{"preset": "%s", "seed": %s, "source_sha256": "%s", "args": "%s", "type": "%s", "sha256": "%s", "bytes": %s}' \
      "$preset" "$seed" "$src_sha" "$args" "$ty" "$sha" "$bytes"
    echo "== $preset $args $ty: $bytes bytes" >&2
  done
  echo ']}'
} >"$out"
echo "wrote $out" >&2
