#!/usr/bin/env bash
# The quantization table of README: the default model
# (clover-tiny-kjv, f32, trained) quantized with every seed recipe and q8_0 /
# q4_0 by `clover quantize`, without and with an importance matrix collected
# by `clover imatrix` over training text (the first 100 chunks of 512 tokens
# of the training chapters), each judged on the held-out KJV chapters against
# the f32 file: size, bits per weight, perplexity (-c 512), mean and 99 % KL
# divergence, same top token, and the mean accepted draft length per round of
# --spec-type draft-self --spec-fixed (greedy, 10 held-out prompts, 128 tokens).
#
#   scripts/quant_table.sh            # needs Debian's bible-kjv for the text
#
# The held-out text and prompts come from training/corpus.py (every 20th
# chapter, never trained on).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v bible >/dev/null || { apt-get update -qq && apt-get install -y -qq bible-kjv bible-kjv-text; } >&2
cargo build -q --release --bin clover
clover=${CARGO_TARGET_DIR:-target}/release/clover
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 training/corpus.py --out "$work/data" >/dev/null
"$clover" run -n 1 -p x >/dev/null 2>&1 # writes the default model if missing
model=$(ls -t ~/.cache/clover/clover-tiny-kjv-*.gguf | head -1)
text="$work/data/heldout.txt"
T=${T:-2}
"$clover" perplexity -m "$model" -f "$text" -c 512 -t "$T" --kl-divergence-base "$work/base.kld" \
  >"$work/base.txt" 2>/dev/null
params=$("$clover" inspect "$model" | awk '/^parameters:/ {print $2}')
"$clover" imatrix -m "$model" -f "$work/data/tokenizer_text.txt" -c 512 --chunks 100 -t "$T" \
  -o "$work/imatrix.gguf" >/dev/null 2>"$work/imatrix.log"
python3 - "$work/data/heldout_prompts.json" >"$work/prompts.txt" <<'PY'
import json, sys
for p in json.load(open(sys.argv[1]))[:10]:
    print(p.replace("\n", "\\n"))
PY
row() { # name imatrix file
  local name=$1 im=$2 f=$3 bytes ppl kld kld99 top acc
  bytes=$(stat -c %s "$f")
  if [ "$name" = f32 ]; then
    ppl=$(grep -o 'PPL = [0-9.]*' "$work/base.txt" | cut -d' ' -f3); kld=0; kld99=0; top=100
  else
    "$clover" perplexity -m "$f" -t "$T" --kl-divergence-base "$work/base.kld" --kl-divergence \
      >"$work/k.txt" 2>/dev/null
    ppl=$(awk -F': *' '/^Mean PPL\(Q\) +:/ {split($2,a," "); print a[1]}' "$work/k.txt")
    kld=$(awk -F': *' '/^Mean    KLD/ {split($2,a," "); print a[1]}' "$work/k.txt")
    kld99=$(awk -F': *' '/^99.0%   KLD/ {print $2}' "$work/k.txt")
    top=$(awk -F': *' '/^Same top p/ {split($2,a," "); print a[1]}' "$work/k.txt")
  fi
  acc=$(while IFS= read -r p; do
      "$clover" run -m "$f" --temp 0 -n 128 -t "$T" --spec-type draft-self --spec-fixed --json \
        -p "$(printf '%b' "$p")" 2>/dev/null | tail -1
    done <"$work/prompts.txt" | python3 -c '
import json, sys
a = v = 0
for l in sys.stdin:
    s = json.loads(l)["spec"]; a += s["drafts_accepted"]; v += s["verify_passes"]
print(f"{a / max(v, 1):.2f}")')
  printf '| %s | %s | %.2f | %.2f | %.3f | %s | %s | %s %% | %s |\n' "$name" "$im" \
    "$(echo "$bytes / 1048576" | bc -l)" "$(echo "8 * $bytes / $params" | bc -l)" "$ppl" "$kld" "$kld99" "$top" "$acc"
}
echo "| file | imatrix | MiB | bits/weight | held-out PPL | mean KLD | 99 % KLD | same top | accepted drafts / round |"
echo "|---|---|--:|--:|--:|--:|--:|--:|--:|"
row f32 - "$model"
for q in Q8_0 Q4_0 Q4_K_M q4_k_m-hq iq4_xs-exps-hq apex-miniplus; do
  case $q in Q*) how=("$q") ;; *) how=(--recipe "$q") ;; esac
  "$clover" quantize "$model" "$work/$q.gguf" "${how[@]}" -t "$T" 2>/dev/null
  row "$q" no "$work/$q.gguf"
  "$clover" quantize --imatrix "$work/imatrix.gguf" "$model" "$work/$q-imatrix.gguf" "${how[@]}" -t "$T" 2>/dev/null
  row "$q" yes "$work/$q-imatrix.gguf"
done
echo
echo "types chosen (fallbacks where rows are not whole blocks):"
for f in "$work"/*.gguf; do
  printf '%s: ' "$(basename "$f" .gguf)"
  "$clover" inspect "$f" --tsv | awk -F'\t' 'NR>1 {n[$2]++} END {for (t in n) printf "%s %d  ", t, n[t]; print ""}'
done
