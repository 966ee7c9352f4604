#!/usr/bin/env bash
# Writes tests/fixtures/converter/mtp_ik.json: what ik_llama.cpp's MTP block
# drafts on the converter fixture (tests/mtp_oracle.rs compares clover's).
# Needs an ik_llama.cpp build (scripts/build_ik_llama.sh; IK_DIR as there).
# Builds scripts/oracle/ik_mtp_drafts.cpp against it and prints the
# program's path: `CLOVER_IK_MTP=<path> cargo test --test mtp_oracle` then
# asks it live as well.
set -euo pipefail
cd "$(dirname "$0")/../.."
IK_DIR=${IK_DIR:-$HOME/.cache/clover/ik_llama.cpp}
[ -f "$IK_DIR/build/src/libllama.so" ] || { echo "no ik_llama.cpp build in $IK_DIR (scripts/build_ik_llama.sh)" >&2; exit 1; }
out=target/oracle-ik
mkdir -p "$out"
g++ -O2 -std=c++17 -o "$out/ik_mtp_drafts" scripts/oracle/ik_mtp_drafts.cpp \
  -I"$IK_DIR/src/include" -I"$IK_DIR/src/ggml/include" \
  -L"$IK_DIR/build/src" -L"$IK_DIR/build/ggml/src" -lllama -lggml \
  -Wl,-rpath,"$IK_DIR/build/src" -Wl,-rpath,"$IK_DIR/build/ggml/src"
gunzip -c tests/fixtures/converter/real-f32.gguf.gz > "$out/real-f32.gguf"
python3 - "$out" <<'PY'
import json, subprocess, sys
out = sys.argv[1]
ref = json.load(open("tests/fixtures/converter/reference.json"))
# A short history (one MTP pass catches up) and a long one (several).
histories = [ref["prompt_ids"], ref["text_ids"][:100]]
cases = []
for h in histories:
    res = subprocess.run([f"{out}/ik_mtp_drafts", f"{out}/real-f32.gguf", "4", *map(str, h)],
                         check=True, capture_output=True, text=True)
    cases.append(json.loads(res.stdout))
doc = {"oracle": "ik_llama.cpp 8337e4c, scripts/oracle/ik_mtp_drafts.cpp", "cases": cases}
with open("tests/fixtures/converter/mtp_ik.json", "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"{len(cases)} cases written", file=sys.stderr)
PY
echo "$PWD/$out/ik_mtp_drafts"
