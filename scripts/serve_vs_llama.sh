#!/usr/bin/env bash
# clover serve against llama-server on the same qwen35moe file and threads:
# 1, 4 and 8 concurrent streaming clients (fixed prompts, greedy, N tokens
# each, ignore_eos), one server at a time, alternating, R rounds.
#
#   scripts/serve_vs_llama.sh MODEL.gguf [THREADS=2] [TOKENS=128] [ROUNDS=1]
#
# llama-server: $LLAMA_SERVER (default: the native build of
# scripts/build_llama_cpp.sh, else the fixed-ISA one of --fixtures, which
# also runs where the native build dies on AMX). Needs `pip install openai`.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1
T=${2:-2}
N=${3:-128}
R=${4:-1}
CLIENTS=${CLIENTS:-1,4,8}
native=$HOME/.cache/clover/llama.cpp/build/bin/llama-server
[ -x "$native" ] || native=$HOME/.cache/clover/llama.cpp/build-avx512/bin/llama-server
LLAMA_SERVER=${LLAMA_SERVER:-$native}
cargo build -q --release --bin clover
clover=${CARGO_TARGET_DIR:-target}/release/clover
port=18123
wait_ready() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "server not ready" >&2; exit 1
}
run() { # label command...
  local label=$1; shift
  "$@" >"/tmp/serve_vs_llama.$label.log" 2>&1 &
  local pid=$!
  wait_ready
  python3 scripts/serve_bench.py "http://127.0.0.1:$port/v1" -c "$CLIENTS" -n "$N" --label "$label" | tail -n +3
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
# The file read back into the page cache in 2 MiB pages before each server
# (clover --recache; see scripts/bench_vs_llama.sh): pages that came back
# from the disk one by one, in 4 KiB pages, stream markedly slower.
recache() {
  "$clover" bench -m "$model" --recache -p 1 -n 0 -r 1 -t 1 2>&1 >/dev/null | grep '^recache' >&2 || true
}
echo "| server | clients | aggregate t/s | TTFT p50 s | TTFT p99 s | per-stream t/s | tokens |"
echo "|---|--:|--:|--:|--:|--:|--:|"
for _ in $(seq "$R"); do
  recache
  run clover "$clover" serve -m "$model" --port $port -t "$T" -np 8 -c 8192
  recache
  run llama-server "$LLAMA_SERVER" -m "$model" --port $port -t "$T" -tb "$T" -np 8 -c 8192 -fa off
done
