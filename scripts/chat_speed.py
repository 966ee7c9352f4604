#!/usr/bin/env python3
"""Wall clock of `clover chat` (line mode) with and without a --spec-type:
one chat of N turns (the held-out KJV chapter openings of
training/corpus.py's heldout_prompts.json, one a turn), greedy, each turn up
to 128 tokens, the two modes run alternately R times; the replies must be
identical (each pair runs them in the other order than the pair before). Prints
each pair's ratio and their median.

    scripts/chat_speed.py CLOVER_BIN MODEL SPEC_TYPE heldout_prompts.json [N [R [THREADS]]]
"""
import json
import statistics
import subprocess
import sys
import time

clover, model, spec, prompts_path = sys.argv[1:5]
n = int(sys.argv[5]) if len(sys.argv) > 5 else 20
reps = int(sys.argv[6]) if len(sys.argv) > 6 else 5
threads = sys.argv[7] if len(sys.argv) > 7 else "1"
turns = "".join(p.replace("\n", " ") + "\n" for p in json.load(open(prompts_path))[:n])


def chat(extra):
    t = time.perf_counter()
    r = subprocess.run(
        [clover, "chat", "-m", model, "-n", "128", "--temp", "0", "-t", threads, *extra],
        input=turns, capture_output=True, text=True, check=True)
    return time.perf_counter() - t, r.stdout


ratios = []
for i in range(reps):
    # Which mode goes first alternates, so that an order effect (the
    # machine warming up, the page cache) weighs on both alike.
    if i % 2 == 0:
        plain_s, plain_out = chat([])
        spec_s, spec_out = chat(["--spec-type", spec])
    else:
        spec_s, spec_out = chat(["--spec-type", spec])
        plain_s, plain_out = chat([])
    if spec_out != plain_out:
        sys.exit(f"chat_speed: the replies with {spec} differ from plain decoding's")
    ratios.append(plain_s / spec_s)
    print(f"pair {i + 1}: plain {plain_s:.3f} s, {spec} {spec_s:.3f} s, speed-up {plain_s / spec_s:.3f}x")
print(f"{spec}: {n} turns, {len(plain_out.split())} words of replies; median speed-up "
      f"{statistics.median(ratios):.3f}x over {reps} interleaved pairs, replies identical")
