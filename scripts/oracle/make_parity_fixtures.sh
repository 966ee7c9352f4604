#!/usr/bin/env bash
# Writes the llama.cpp parity fixtures that tests/llama_parity_fixtures.rs
# checks in CI (where no llama.cpp build exists):
#
#   for each (preset, recipe): `clover synth --arch qwen35moe` with a fixed
#   seed, then llama.cpp (scripts/oracle/llama_logits.c: f32 K/V cache, flash
#   attention off, docs/DESIGN.md §2.6) on it:
#     - the logits of every position of one fixed 256-token batch: full rows
#       for `tiny` (vocab 448); for larger vocabularies per position the top 32
#       logits with their ids, the log-sum-exp and 8 fixed probe ids;
#     - 48 greedy tokens after each of 5 fixed prompts.
#   Output: tests/fixtures/parity/PRESET-RECIPE.json (+ .logits.bin), each
#   recording the synth command, the seed and the file's sha256.
#   Then the same for each PRESET:RECIPE:S0,S1,S2,S3 of $SECTIONED, a file
#   synthesised with `--rope-sections S0,S1,S2,S3` (default: small f32 with
#   4,2,2,0, under which ggml leaves rope pair 7 of 8 unrotated, and with
#   0,4,4,0, which leaves pairs 0, 3 and 6 unrotated; docs/DESIGN.md §2.4):
#   PRESET-RECIPE-sections-S0-S1-S2-S3.json (+ .logits.bin).
#
#   scripts/oracle/make_parity_fixtures.sh                 # tiny + small + sectioned
#   PRESETS="tiny small a3b-4l" RECIPES="q4_k_m" SECTIONED= scripts/oracle/make_parity_fixtures.sh
#   PRESETS= scripts/oracle/make_parity_fixtures.sh        # the sectioned fixture only
#   OUT=/tmp/fx scripts/oracle/make_parity_fixtures.sh     # elsewhere (to compare)
#
# llama.cpp: $LLAMA_BIN (default: what `scripts/build_llama_cpp.sh --fixtures`
# prints, which builds it once under $LLAMA_DIR for a fixed AVX-512 ISA: the
# build that reproduces the stored fixtures bit for bit on any AVX-512 host; a
# -march=native build does on some hosts only, see that script); its headers
# come from the same source tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
PRESETS=${PRESETS-"tiny small"}
RECIPES=${RECIPES:-"f32 q8_0 q4_k_m apex-miniplus"}
SECTIONED=${SECTIONED-"small:f32:4,2,2,0 small:f32:0,4,4,0"}
THREADS=${THREADS:-2}
out=${OUT:-$root/tests/fixtures/parity}
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh --fixtures | tail -1)}
LLAMA_SRC=${LLAMA_SRC:-$(dirname "$(dirname "$LLAMA_BIN")")/llama_cpp_python-0.3.36/vendor/llama.cpp}
[ -f "$LLAMA_SRC/include/llama.h" ] || { echo "llama.h not found under LLAMA_SRC=$LLAMA_SRC" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -o "$work/llama_logits" scripts/oracle/llama_logits.c \
  -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  -L"$LLAMA_BIN" -lllama -lggml-base -Wl,-rpath,"$LLAMA_BIN"
cargo build -q --profile test --bin clover
clover="${CARGO_TARGET_DIR:-$root/target}/debug/clover"
mkdir -p "$out"

seed_of() { # fixed seed per preset, shared by its recipes
  case "$1" in tiny) echo 101 ;; small) echo 202 ;; a3b-4l) echo 303 ;; *) echo 404 ;; esac
}

# One model through llama.cpp: logits of the fixed batch, then the greedy runs.
oracle_runs() {
  "$work/llama_logits" logits "$1" "$work/seq.u32" "$work/logits.f32" "$THREADS"
  for i in 0 1 2 3 4; do
    "$work/llama_logits" greedy "$1" "$work/prompt$i.u32" 48 "$work/greedy$i.u32" "$THREADS"
  done
}

for preset in $PRESETS; do
  for recipe in $RECIPES; do
    seed=$(seed_of "$preset")
    name="$preset-$recipe"
    model="$work/$name.gguf"
    echo "== $name (seed $seed)" >&2
    "$clover" synth --arch qwen35moe --preset "$preset" --recipe "$recipe" --seed "$seed" \
      -t "$THREADS" -o "$model" >&2
    n_vocab=$(python3 "$root/scripts/oracle/parity_pack.py" n_vocab "$model")
    python3 "$root/scripts/oracle/parity_pack.py" inputs "$work" "$n_vocab"
    oracle_runs "$model"
    python3 "$root/scripts/oracle/parity_pack.py" pack "$work" "$model" "$out" \
      "$preset" "$recipe" "$seed" "$n_vocab"
  done
done

for spec in $SECTIONED; do
  IFS=: read -r preset recipe sections <<<"$spec"
  seed=$(seed_of "$preset")
  name="$preset-$recipe-sections-${sections//,/-}"
  model="$work/$name.gguf"
  echo "== $name (seed $seed)" >&2
  "$clover" synth --arch qwen35moe --preset "$preset" --recipe "$recipe" --seed "$seed" \
    --rope-sections "$sections" -t "$THREADS" -o "$model" >&2
  n_vocab=$(python3 "$root/scripts/oracle/parity_pack.py" n_vocab "$model")
  python3 "$root/scripts/oracle/parity_pack.py" inputs "$work" "$n_vocab"
  oracle_runs "$model"
  python3 "$root/scripts/oracle/parity_pack.py" pack "$work" "$model" "$out" \
    "$preset" "$recipe" "$seed" "$n_vocab" "$sections"
done
ls -l "$out" >&2
