#!/usr/bin/env bash
# Writes tests/fixtures/converter: a Qwen3.5-MoE checkpoint made with
# transformers, converted by llama.cpp's unmodified convert_hf_to_gguf.py
# (F32 and BF16), and transformers' greedy ids, logits and per-window NLL on
# it (scripts/oracle/make_converter_fixtures.py says what and why), then
# llama-quantize's outputs for both files as sha256 and size
# (quantize.json) and llama-imatrix's entries (imatrix.json).
#
#   scripts/oracle/make_converter_fixtures.sh
#
# Needs PyTorch (a 5.4 GB install): never run in CI. Python: $PY (default: a
# virtual environment in ~/.cache/clover/venv-oracle, made and filled here).
# llama.cpp: the source package scripts/build_llama_cpp.sh unpacks, and its
# llama-quantize and llama-imatrix ($LLAMA_BIN, default what that script prints).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=$root/tests/fixtures/converter
mkdir -p "$out"
LLAMA_BIN=${LLAMA_BIN:-$(scripts/build_llama_cpp.sh | tail -1)}
src=${LLAMA_DIR:-$HOME/.cache/clover/llama.cpp}/llama_cpp_python-0.3.36/vendor/llama.cpp
venv=${VENV:-$HOME/.cache/clover/venv-oracle}
if [ -z "${PY:-}" ]; then
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q torch transformers==5.23.0 safetensors numpy sentencepiece gguf==0.19.0
  PY=$venv/bin/python
fi
"$PY" scripts/oracle/make_converter_fixtures.py "$src/convert_hf_to_gguf.py" \
  "$src/models/ggml-vocab-qwen35.gguf" "$out"
work=$out/work
cargo build -q --release --bin clover
clover="${CARGO_TARGET_DIR:-$root/target}/release/clover"

# llama-quantize on both converter files: the bytes clover quantize must write.
{
  echo '{"about": "sha256 and size of llama-quantize outputs (llama.cpp 0c1e570) for the converter files; written by scripts/oracle/make_converter_fixtures.sh", "cases": ['
  first=1
  for f in f32 bf16; do
    for ty in Q8_0 Q4_K_M Q6_K IQ4_XS; do
      "$LLAMA_BIN/llama-quantize" "$work/real-$f.gguf" "$work/q.gguf" "$ty" 2 >"$work/log" 2>&1 \
        || { tail "$work/log" >&2; exit 1; }
      [ $first = 1 ] || echo ','
      first=0
      printf '{"source": "real-%s.gguf", "type": "%s", "sha256": "%s", "bytes": %s}' "$f" "$ty" \
        "$(sha256sum "$work/q.gguf" | cut -d' ' -f1)" "$(stat -c %s "$work/q.gguf")"
    done
  done
  echo ']}'
} >"$out/quantize.json"

# llama-imatrix on the F32 file: which matrices it collects, with how many values.
printf '%s' "$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$out/reference.json")" >"$work/text.txt"
"$LLAMA_BIN/llama-imatrix" -m "$work/real-f32.gguf" -f "$work/text.txt" -c 64 -b 64 -t 2 \
  -o "$work/imatrix.gguf" >"$work/log" 2>&1 || { tail "$work/log" >&2; exit 1; }
"$PY" - "$work/imatrix.gguf" "$out/imatrix.json" <<'PY'
import json, sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
entries = {}
for t in r.tensors:
    if t.name.endswith(".in_sum2"):
        entries[t.name[: -len(".in_sum2")]] = int(t.n_elements)
json.dump({"about": "llama-imatrix (llama.cpp 0c1e570) entries and value counts on real-f32.gguf, -c 64; "
           "written by scripts/oracle/make_converter_fixtures.sh", "entries": entries},
          open(sys.argv[2], "w"), indent=1, sort_keys=True)
PY
rm -rf "$work"
ls -la "$out"
