#!/usr/bin/env bash
# clover bench vs llama-bench on the same synthesized qwen35moe file, run
# alternately (clover, llama, clover, llama, …) so that load from other
# processes hits both alike; prints pp / tg t/s side by side with the ratio
# clover / llama, the machine's read bandwidth, and cold / warm load times.
#
#   scripts/bench_vs_llama.sh                 # a3b-4l q4_k_m (~4.6 GB), -r 3, -t 1,2
#   scripts/bench_vs_llama.sh --full          # full apex-miniplus: the full-size benchmark file
#   scripts/bench_vs_llama.sh -r 5 -t 1,2,4 --rounds 2 -p 512 -n 128 --keep
#   scripts/bench_vs_llama.sh --preset small --recipe q4_k_m -r 2   # seconds: a smoke test
#
# ik_llama.cpp, the fastest CPU peer, joins the table when
# IK_BIN (its bin dir: scripts/build_ik_llama.sh) is set; it runs with
# run-time repacking (-rtr 1), its fused MoE being on by default.
#
# Environment: LLAMA_BIN (dir with llama-bench), CLOVER_BIN (clover binary),
# BENCH_DIR (where the model file goes; default /tmp/clover-bench, never the
# repository). The model file is deleted at the end unless --keep is given.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

preset=a3b-4l
recipe=q4_k_m
reps=3
threads=1,2
rounds=1
n_prompt=512
n_gen=128
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --full) preset=full; recipe=apex-miniplus ;;
    --preset) preset=$2; shift ;;
    --recipe) recipe=$2; shift ;;
    -r) reps=$2; shift ;;
    -t) threads=$2; shift ;;
    -p) n_prompt=$2; shift ;;
    -n) n_gen=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --keep) keep=1 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "bench_vs_llama: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# llama.cpp: $LLAMA_BIN, the shared build, or build it.
if [ -z "${LLAMA_BIN:-}" ]; then
  if [ -x /work/llama/build/bin/llama-bench ]; then
    LLAMA_BIN=/work/llama/build/bin
  else
    LLAMA_BIN=$(scripts/build_llama_cpp.sh | tail -1)
  fi
fi
[ -x "$LLAMA_BIN/llama-bench" ] || { echo "bench_vs_llama: no llama-bench in $LLAMA_BIN" >&2; exit 1; }

if [ -z "${CLOVER_BIN:-}" ]; then
  cargo build --release --bin clover >&2
  CLOVER_BIN=$ROOT/target/release/clover
fi

BENCH_DIR=${BENCH_DIR:-/tmp/clover-bench}
mkdir -p "$BENCH_DIR"
model=$BENCH_DIR/qwen35moe-$preset-$recipe.gguf
if [ ! -s "$model" ]; then
  if [ "$preset" = full ]; then
    echo "bench_vs_llama: synthesizing the full apex-miniplus file: ~16 GB on disk and slow (tens of minutes on few cores)" >&2
  fi
  "$CLOVER_BIN" synth --arch qwen35moe --preset "$preset" --recipe "$recipe" -o "$model" >&2
fi
cleanup() { if [ "$keep" = 0 ]; then rm -f "$model"; fi; }
trap cleanup EXIT

out=$(mktemp -d)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "loadavg before: $(cat /proc/loadavg)"

# Read bandwidth, the yardstick for tg.
"$CLOVER_BIN" bench --membw -t "$threads" -r 5 --membw-mib 1024

# Cold and warm load (mmap + bind) and the first token (a 1-token prompt).
load_line() { "$CLOVER_BIN" bench -m "$model" -p 1 -n 0 -r 1 -t 1 2>&1 >/dev/null | grep -E '^(load|first token):' | tr '\n' ' '; echo; }
sync
if (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
  echo "cold (page cache dropped): $(load_line)"
else
  echo "cold: not measured (cannot write /proc/sys/vm/drop_caches: not permitted)"
fi
echo "warm: $(load_line)"

# Before each clover and llama.cpp run the file is read back into the page
# cache in 2 MiB pages (clover --recache): ik_llama.cpp's -rtr copy of a
# full-size file does not fit beside the page cache, so after its run the
# file comes back from the disk page by page, in 4 KiB pages, which stream
# markedly slower (and a VM's proactive reclaim pages out what sat idle);
# ik's copy is anonymous memory and never meets either.
recache() {
  "$CLOVER_BIN" bench -m "$model" --recache -p 1 -n 0 -r 1 -t 1 2>&1 >/dev/null | grep '^recache' >&2 || true
}

# Alternate the tools: per round and thread count, clover then llama.
IFS=, read -r -a tlist <<<"$threads"
for round in $(seq 1 "$rounds"); do
  for t in "${tlist[@]}"; do
    recache
    echo "round $round, -t $t: clover" >&2
    "$CLOVER_BIN" bench -m "$model" -p "$n_prompt" -n "$n_gen" -r "$reps" -t "$t" -o json \
      >"$out/clover-$round-$t.json" 2>"$out/clover-$round-$t.err"
    grep -E 'traffic|bandwidth' "$out/clover-$round-$t.err" >&2 || true
    recache
    echo "round $round, -t $t: llama" >&2
    "$LLAMA_BIN/llama-bench" -m "$model" -p "$n_prompt" -n "$n_gen" -r "$reps" -t "$t" -o json \
      >"$out/llama-$round-$t.json" 2>"$out/llama-$round-$t.err" \
      || { echo "llama-bench failed (-t $t): $(tail -1 "$out/llama-$round-$t.err")" >&2; rm -f "$out/llama-$round-$t.json"; }
    if [ -n "${IK_BIN:-}" ]; then
      echo "round $round, -t $t: ik_llama.cpp" >&2
      "$IK_BIN/llama-bench" -m "$model" -p "$n_prompt" -n "$n_gen" -r "$reps" -t "$t" -rtr 1 -o json \
        >"$out/ik-$round-$t.json" 2>"$out/ik-$round-$t.err" \
        || { echo "ik llama-bench failed (-t $t): $(tail -1 "$out/ik-$round-$t.err")" >&2; rm -f "$out/ik-$round-$t.json"; }
    fi
  done
done
echo "loadavg after: $(cat /proc/loadavg)"

python3 - "$out" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
samples = {}  # (tool, threads, test) -> [t/s]
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    tool = os.path.basename(path).split("-")[0]
    for r in json.load(open(path)):
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        if r.get("n_depth", 0):
            test += f" @ d{r['n_depth']}"
        samples.setdefault((tool, r["n_threads"], test), []).extend(r["samples_ts"])
def cell(v):
    if not v:
        return "-"
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return f"{statistics.mean(v):.2f} ± {sd:.2f}"
keys = sorted({(t, test) for (_, t, test) in samples}, key=lambda k: (k[0], not k[1].startswith("pp"), k[1]))
ik = any(k[0] == "ik" for k in samples)
def ratio(a, b):
    return f"{statistics.mean(a) / statistics.mean(b):.3f}" if a and b else "-"
print()
head = f"| {'threads':>7} | {'test':>8} | {'clover t/s':>20} | {'llama.cpp t/s':>20} |"
rule = f"| {'-'*6}: | {'-'*7}: | {'-'*19}: | {'-'*19}: |"
if ik:
    head += f" {'ik_llama.cpp t/s':>20} |"
    rule += f" {'-'*19}: |"
head += f" {'clover/llama':>12} |" + (f" {'clover/ik':>10} |" if ik else "")
rule += f" {'-'*11}: |" + (f" {'-'*9}: |" if ik else "")
print(head)
print(rule)
for t, test in keys:
    c = samples.get(("clover", t, test), [])
    l = samples.get(("llama", t, test), [])
    i = samples.get(("ik", t, test), [])
    row = f"| {t:>7} | {test:>8} | {cell(c):>20} | {cell(l):>20} |"
    if ik:
        row += f" {cell(i):>20} |"
    row += f" {ratio(c, l):>12} |" + (f" {ratio(c, i):>10} |" if ik else "")
    print(row)
EOF
rm -rf "$out"
