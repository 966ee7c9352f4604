#!/usr/bin/env bash
# Writes tests/fixtures/kld.json, what tests/cli_kld.rs checks in CI (where no
# llama.cpp build exists): llama-perplexity's log-probability base file (its
# sha256 and size) for the `small` qwen35moe f32 synthetic file over
# src/synth/corpus.txt at -c 128, and its KL-divergence statistics for the
# same file quantized Q4_K_M by llama-quantize, scored against that base.
#
#   scripts/oracle/make_kld_fixture.sh
#
# llama.cpp: the fixed-ISA build (scripts/build_llama_cpp.sh --fixtures, plus
# its llama-perplexity), whose f32 logits clover reproduces bit for bit in
# CLOVER_BATCH_ORDER=ggml; llama-quantize from the native build.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
FIX_BIN=${FIX_BIN:-$(scripts/build_llama_cpp.sh --fixtures | tail -1)}
[ -x "$FIX_BIN/llama-perplexity" ] || cmake --build "$(dirname "$FIX_BIN")" -j"$(nproc)" --target llama-perplexity >&2
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh | tail -1)}
out=${OUT:-$root/tests/fixtures/kld.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo build -q --release --bin clover
clover="${CARGO_TARGET_DIR:-$root/target}/release/clover"
"$clover" synth --arch qwen35moe --preset small --recipe f32 --seed 202 -o "$work/f32.gguf" >&2
"$LLAMA_BIN/llama-quantize" "$work/f32.gguf" "$work/q.gguf" Q4_K_M 2 >"$work/log" 2>&1
ppl="$FIX_BIN/llama-perplexity"
"$ppl" -m "$work/f32.gguf" -f src/synth/corpus.txt -c 128 -b 128 -t 2 -fa off -ctk f32 -ctv f32 \
  --kl-divergence-base "$work/base.kld" >"$work/base.log" 2>&1
"$ppl" -m "$work/q.gguf" -c 128 -b 128 -t 2 -fa off -ctk f32 -ctv f32 \
  --kl-divergence-base "$work/base.kld" --kl-divergence >"$work/kld.txt" 2>&1
python3 - "$work" "$out" <<'PY'
import hashlib, json, re, sys
work, out = sys.argv[1], sys.argv[2]
text = open(f"{work}/kld.txt").read()
def num(label):
    m = re.search(re.escape(label) + r"\s*:\s*(-?[0-9.]+)", text)
    return float(m.group(1))
stats = {k: num(k) for k in [
    "Mean PPL(Q)", "Mean PPL(base)", "Mean    KLD", "Maximum KLD", "99.0%   KLD",
    "Median  KLD", "Minimum KLD", "RMS Δp", "Same top p"]}
base = open(f"{work}/base.kld", "rb").read()
json.dump({
    "about": "llama-perplexity (llama.cpp 0c1e570, fixed-ISA build) on clover synth --arch qwen35moe --preset small --recipe f32 --seed 202, corpus src/synth/corpus.txt, -c 128, f32 KV, -fa off; Q = llama-quantize Q4_K_M of it; written by scripts/oracle/make_kld_fixture.sh",
    "base_sha256": hashlib.sha256(base).hexdigest(),
    "base_bytes": len(base),
    "stats": stats,
}, open(out, "w"), indent=1)
PY
echo "wrote $out" >&2
