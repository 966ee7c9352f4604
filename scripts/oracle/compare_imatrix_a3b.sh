#!/usr/bin/env bash
# The imatrix and quantize oracle checks at the a3b-4l shape (too slow for CI, which checks
# tiny and small): `clover synth --arch qwen35moe --preset a3b-4l`, as
# q4_k_m (for the imatrix) and bf16 (the quantizers' source), then
#   1. llama-imatrix and clover imatrix on the q4_k_m file over
#      src/synth/corpus.txt (-c 128, f32
#      KV, -fa off, one chunk per batch; clover in CLOVER_BATCH_ORDER=ggml: at
#      this size the default summation order flips near-tied expert choices of
#      the random router in later layers, which changes the per-expert counts;
#      on the bf16 file ggml's bf16 dot products differ from ours in the last
#      bits and do the same): same entries and counts, values within 1e-4
#      relative;
#   2. llama-quantize and clover quantize --imatrix (llama-imatrix's file) to
#      Q4_K_M and IQ4_XS: the same bytes; and both quantizers given clover's
#      imatrix file: the same bytes again (the files are exchangeable).
#
#   scripts/oracle/compare_imatrix_a3b.sh      # ~10 GB of disk under $TMPDIR
set -euo pipefail
cd "$(dirname "$0")/../.."
FIX_BIN=${FIX_BIN:-$(scripts/build_llama_cpp.sh --fixtures | tail -1)}
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh | tail -1)}
T=${T:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build -q --release --bin clover
clover=$(realpath "${CARGO_TARGET_DIR:-target}/release/clover")
src=${SRC:-$work/bf16.gguf}
[ -f "$src" ] || "$clover" synth --arch qwen35moe --preset a3b-4l --recipe bf16 --seed 7 -o "$src" >&2
q4=${Q4:-$work/q4_k_m.gguf}
[ -f "$q4" ] || "$clover" synth --arch qwen35moe --preset a3b-4l --recipe q4_k_m --seed 7 -o "$q4" >&2
imat() { # tool out
  if [ "$1" = llama ]; then
    "$FIX_BIN/llama-imatrix" -m "$q4" -f src/synth/corpus.txt -c 128 -b 128 -t "$T" \
      -ctk f32 -ctv f32 -fa off -o "$2" >"$work/li.log" 2>&1 || { tail "$work/li.log" >&2; exit 1; }
  else
    CLOVER_BATCH_ORDER=ggml "$clover" imatrix -m "$q4" -f src/synth/corpus.txt -c 128 -t "$T" \
      -o "$2" >/dev/null 2>&1
  fi
}
SECONDS=0; imat llama "$work/l.gguf"; echo "llama-imatrix: $SECONDS s"
SECONDS=0; imat clover "$work/c.gguf"; echo "clover imatrix: $SECONDS s"
python3 - "$work/l.gguf" "$work/c.gguf" <<'PY'
import sys, numpy as np
from gguf import GGUFReader
def load(p):
    return {t.name: np.array(t.data, dtype=np.float32).ravel() for t in GGUFReader(p).tensors}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), "different entries"
worst = 0.0
for k in a:
    if k.endswith(".counts"):
        assert np.array_equal(a[k], b[k]), f"counts differ: {k}"
    else:
        worst = max(worst, float(np.max(np.abs(a[k] - b[k]) / np.maximum(np.abs(a[k]), 1e-30))))
print(f"imatrix: {len(a) // 2} entries, counts identical, worst relative difference {worst:.2e}")
assert worst <= 1e-4
PY
status=0
for im in l c; do
  for ty in Q4_K_M IQ4_XS; do
    (cd "$work" && "$LLAMA_BIN/llama-quantize" --imatrix "$im.gguf" "$src" lq.gguf "$ty" "$T" >lq.log 2>&1)
    (cd "$work" && "$clover" quantize --imatrix "$im.gguf" "$src" cq.gguf "$ty" -t "$T" 2>/dev/null)
    if cmp -s "$work/lq.gguf" "$work/cq.gguf"; then
      echo "quantize --imatrix ($im imatrix) $ty: identical, $(stat -c %s "$work/cq.gguf") bytes"
    else
      echo "quantize --imatrix ($im imatrix) $ty: DIFFERENT"; status=1
    fi
  done
done
exit $status
