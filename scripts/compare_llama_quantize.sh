#!/usr/bin/env bash
# Compares the per-tensor types of clover's recipes with what llama-quantize
# picks for the same f32 synthetic file. Usage: compare_llama_quantize.sh PRESET
# (needs /work/llama/build/bin/llama-quantize and python gguf).
set -euo pipefail
preset=${1:-tiny}
bin=${CLOVER:-target/debug/clover}
q=${LLAMA_QUANTIZE:-/work/llama/build/bin/llama-quantize}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" synth --arch qwen35moe --preset "$preset" --recipe f32 -o "$dir/f32.gguf" >/dev/null
status=0
for pair in q8_0:Q8_0 q4_0:Q4_0 q4_k_m:Q4_K_M; do
    recipe=${pair%%:*}; ftype=${pair##*:}
    "$q" "$dir/f32.gguf" "$dir/$recipe.gguf" "$ftype" 2 >"$dir/q.log" 2>&1 || { tail "$dir/q.log"; exit 1; }
    "$bin" synth --arch qwen35moe --preset "$preset" --recipe "$recipe" --dry-run --tensors \
        | awk -F'\t' 'NF==3 && $1!="name" {print $1"\t"$2}' | sort >"$dir/ours.tsv"
    python3 - "$dir/$recipe.gguf" <<'PY' | sort >"$dir/theirs.tsv"
import sys
from gguf import GGUFReader
for t in GGUFReader(sys.argv[1]).tensors:
    print(f"{t.name}\t{t.tensor_type.name}")
PY
    if diff "$dir/ours.tsv" "$dir/theirs.tsv" >"$dir/diff.txt"; then
        echo "$preset $recipe: all $(wc -l <"$dir/ours.tsv") tensor types match llama-quantize $ftype"
    else
        echo "$preset $recipe: differs from llama-quantize $ftype (< ours, > llama):"; cat "$dir/diff.txt"; status=1
    fi
done
exit $status
