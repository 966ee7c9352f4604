#!/usr/bin/env bash
# Start-up and memory of clover, llama.cpp and ik_llama.cpp (with and without
# -rtr 1) on one qwen35moe model file, each run the way its users start it:
#   - cold start: one token from a one-word prompt after the file (and
#     clover's layout cache) left the page cache, wall time to the process's
#     exit: `clover run -n 1`, `llama-completion -n 1`, ik's `llama-cli -n 1`;
#   - warm start: the same again at once, the files cached;
#   - memory: the proportional set size (Pss, /proc/PID/smaps_rollup) of one
#     server of the file (`clover serve`, `llama-server`), and of two at once
#     when the pair fits in memory (the shared bytes once and the private
#     ones twice under 95 % of MemTotal; else the line says so), each
#     read after the server answered one one-token completion.
#
#   LLAMA_BIN=... IK_BIN=... scripts/startup_peers.sh MODEL [THREADS]
#
# LLAMA_BIN: a llama.cpp bin dir with llama-completion and llama-server
# (scripts/build_llama_cpp.sh --fixtures on AMX hosts); IK_BIN: an
# ik_llama.cpp bin dir with llama-cli and llama-server
# (scripts/build_ik_llama.sh). CLOVER_BIN defaults to target/release/clover.
# clover's layout cache is written first (`clover repack`) when missing.
set -euo pipefail
model=$(realpath "$1")
threads=${2:-2}
ctx=4096 # every runtime's context (servers: 4 slots sharing it), clover's default
root=$(cd "$(dirname "$0")/.." && pwd)
clover=$(realpath "${CLOVER_BIN:-$root/target/release/clover}")
: "${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp bin dir}"
: "${IK_BIN:?set IK_BIN to an ik_llama.cpp bin dir}"
LLAMA_BIN=$(realpath "$LLAMA_BIN") IK_BIN=$(realpath "$IK_BIN")

drop() { python3 -c 'import os,sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"; }
now() { python3 -c 'import time; print(time.time())'; }
secs() { python3 -c 'import sys,time; print(f"{time.time()-float(sys.argv[1]):.2f}")' "$1"; }

# No cache where the kernels read the file's own layout (an f32 file).
cache=$("$clover" repack "$model" | grep -o '/[^ ]*\.clover-layout' || true)
echo "model $model ($(du -h "$model" | cut -f1)); clover's layout cache ${cache:-none}${cache:+ ($(du -h "$cache" | cut -f1))}"
echo "threads $threads; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"

# One token from "hi", each runtime's own one-shot command.
one_token() {
  case $1 in
    clover) "$clover" run -m "$model" -p hi -n 1 --temp 0 -t "$threads" -c "$ctx" ;;
    llama) "$LLAMA_BIN/llama-completion" -m "$model" -p hi -n 1 --temp 0 -t "$threads" -c "$ctx" -no-cnv ;;
    ik) "$IK_BIN/llama-cli" -m "$model" -p hi -n 1 --temp 0 -t "$threads" -c "$ctx" ;;
    ik-rtr) "$IK_BIN/llama-cli" -m "$model" -p hi -n 1 --temp 0 -t "$threads" -c "$ctx" -rtr ;;
  esac
}
serve() {
  case $1 in
    clover) exec "$clover" serve -m "$model" -t "$threads" -c "$ctx" -np 4 --port "$2" ;;
    llama) exec "$LLAMA_BIN/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 4 --port "$2" ;;
    ik) exec "$IK_BIN/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 4 --port "$2" ;;
    ik-rtr) exec "$IK_BIN/llama-server" -m "$model" -t "$threads" -c "$ctx" -np 4 --port "$2" -rtr ;;
  esac
}
# ik_llama.cpp's programs write main.log and llama.log where they run.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
field() { awk -v f="^$2:" '$0 ~ f {print $2}' "/proc/$1/smaps_rollup"; }
ready() {
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
mib() { echo $(($1 / 1024)); }
# One completion of one token, so that each server has run a pass.
poke() {
  curl -sf "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model": "m", "prompt": "hi", "max_tokens": 1, "temperature": 0}' >/dev/null
}

for rt in clover llama ik ik-rtr; do
  for kind in cold warm; do
    [ "$kind" = cold ] && drop "$model" ${cache:+"$cache"}
    t=$(now)
    one_token "$rt" >/dev/null 2>&1 || { echo "$rt: the one-token run failed" >&2; exit 1; }
    echo "$rt $kind start, one token: $(secs "$t") s"
  done
  serve "$rt" 18441 >/dev/null 2>&1 &
  a=$!
  t=$(now)
  ready 18441 "$a" || { echo "$rt: the server did not come up" >&2; kill "$a" 2>/dev/null; exit 1; }
  up=$(secs "$t")
  poke 18441
  one=$(field "$a" Pss)
  anon=$(field "$a" Anonymous)
  # A pair fits when the shared bytes once and the private ones twice
  # stay under 95 % of the memory (else it runs by evicting its own pages).
  total=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
  need=$((one + anon))
  if [ $((need * 100)) -gt $((total * 95)) ]; then
    echo "$rt serve: ready in $up s; Pss $(mib "$one") MiB (anonymous $(mib "$anon") MiB);" \
      "two would need $(mib "$need") MiB of $(mib "$total") MiB: not run"
    kill "$a"; wait "$a" 2>/dev/null || true
    continue
  fi
  serve "$rt" 18442 >/dev/null 2>&1 &
  b=$!
  ready 18442 "$b" || { echo "$rt: the second server did not come up" >&2; kill "$a" "$b" 2>/dev/null; exit 1; }
  poke 18442
  pa=$(field "$a" Pss); pb=$(field "$b" Pss)
  kill "$a" "$b"; wait "$a" "$b" 2>/dev/null || true
  echo "$rt serve: ready in $up s; Pss one alone $(mib "$one") MiB (anonymous $(mib "$anon") MiB);" \
    "two at once $(mib "$pa") + $(mib "$pb") = $(mib $((pa + pb))) MiB" \
    "($(python3 -c "print(f'{($pa+$pb)/$one:.2f}')")x one)"
done
