#!/usr/bin/env bash
# Writes tests/fixtures/converter/perplexity.json: what llama-perplexity
# (llama.cpp 0c1e570) prints as its final estimate on the converter's F32
# file and the reference text, for a set of command lines: its defaults (f16
# K/V, flash attention auto, which is on for CPU), flash attention off, and
# other cache types. tests/real_files.rs runs `clover perplexity` with the
# same arguments in llama.cpp's summation order and wants the same line.
#
#   scripts/oracle/make_perplexity_fixture.sh
#
# llama.cpp: $LLAMA_BIN (default: the folder scripts/build_llama_cpp.sh prints).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=tests/fixtures/converter
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh | tail -1)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gunzip -c "$out/real-f32.gguf.gz" >"$work/real-f32.gguf"
python3 -c 'import json,sys; open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["text"])' \
  "$out/reference.json" "$work/text.txt"
cases=(
  "-c 64"
  "-c 16"
  "-c 64 -fa off"
  "-c 16 -fa off"
  "-c 64 -fa off -ctk f32 -ctv f32"
  "-c 64 -ctk f32 -ctv f16"
  "-c 16 -ctk bf16 -ctv bf16"
  "-c 64 -ctk bf16 -ctv bf16"
)
{
  echo '{"about": "llama-perplexity (llama.cpp 0c1e570) on real-f32.gguf and reference.json text, -t 2; written by scripts/oracle/make_perplexity_fixture.sh", "cases": ['
  first=1
  for args in "${cases[@]}"; do
    # shellcheck disable=SC2086 # the case's words are the arguments
    line=$("$LLAMA_BIN/llama-perplexity" -m "$work/real-f32.gguf" -f "$work/text.txt" -t 2 $args 2>&1 \
      | grep -o 'Final estimate: PPL = .*')
    [ $first = 1 ] || echo ','
    first=0
    printf '{"args": "%s", "final": "%s"}' "$args" "$line"
  done
  echo ']}'
} >"$out/perplexity.json"
cat "$out/perplexity.json"
