#!/bin/sh
# Regenerates kernels/tests/fixtures/ggml_kquants from ggml itself: builds
# scripts/ggml_kquant_oracle.c against a llama.cpp build's libggml-base and
# libggml-cpu and runs it.
#
# Usage: scripts/ggml_kquant_oracle.sh [LLAMA_BUILD_BIN] [OUT_DIR]
#   LLAMA_BUILD_BIN defaults to /work/llama/build/bin (libggml-base.so, libggml-cpu.so).
# ggml-base must be built without -ffast-math / FMA contraction for the f32
# searches to be reproducible (llama.cpp's default CMake flags for ggml-base).
set -eu
BIN=${1:-/work/llama/build/bin}
OUT=${2:-$(dirname "$0")/../kernels/tests/fixtures/ggml_kquants}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cc -O1 -o "$TMP/oracle" "$(dirname "$0")/ggml_kquant_oracle.c" -L"$BIN" -lggml-cpu -lggml-base -lm -Wl,-rpath,"$BIN"
mkdir -p "$OUT"
"$TMP/oracle" "$OUT"
ls -l "$OUT"
