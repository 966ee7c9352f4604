#!/usr/bin/env bash
# Start-up and memory of clover on one model file:
#   - reading the model and its layout cache once (cat, after both leave the
#     page cache): the floor of a cold start;
#   - cold start: `clover run -n 1` after both leave the page cache (wall time
#     to its exit, and the load time it reports);
#   - warm start: the same again, files cached;
#   - memory: the proportional set size (Pss, /proc/PID/smaps_rollup) of one
#     `clover serve` of the file, and of two at once.
#
#   scripts/startup.sh MODEL [CLOVER]     (CLOVER: default target/release/clover)
#
# Writes the layout cache first (`clover repack`) when it is missing.
set -euo pipefail
model=$1
clover=${2:-$(dirname "$0")/../target/release/clover}
drop() { python3 -c 'import os,sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"; }
secs() { python3 -c 'import sys,time; print(f"{time.time()-float(sys.argv[1]):.2f}")' "$1"; }
now() { python3 -c 'import time; print(time.time())'; }

cache=$("$clover" repack "$model" | grep -o '/[^ ]*\.clover-layout')
echo "model $model ($(du -h "$model" | cut -f1)), layout cache $cache ($(du -h "$cache" | cut -f1))"

drop "$model" "$cache"
t=$(now); cat "$model" "$cache" >/dev/null; echo "read both once: $(secs "$t") s"
drop "$model" "$cache"
t=$(now); cat "$model" >/dev/null; echo "read the model alone once: $(secs "$t") s"

for kind in cold warm; do
  [ "$kind" = cold ] && drop "$model" "$cache"
  t=$(now)
  load=$("$clover" run -m "$model" -p hi -n 1 --temp 0 2>&1 >/dev/null | grep -o 'load time = *[0-9.]*' | grep -o '[0-9.]*$')
  echo "$kind start, run -n 1: $(secs "$t") s wall (load $load ms)"
done

pss() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }
serve() { "$clover" serve -m "$model" --port "$1" >/dev/null 2>&1 & echo $!; }
ready() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.5; done; return 1; }
a=$(serve 18431); ready 18431
one=$(pss "$a")
b=$(serve 18432); ready 18432
pa=$(pss "$a"); pb=$(pss "$b")
kill "$a" "$b"; wait "$a" "$b" 2>/dev/null || true
echo "serve Pss: one alone $((one / 1024)) MiB; two at once $((pa / 1024)) + $((pb / 1024)) = $(((pa + pb) / 1024)) MiB ($(python3 -c "print(f'{($pa+$pb)/$one:.2f}')")× one)"
