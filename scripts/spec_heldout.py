#!/usr/bin/env python3
"""Speculation on the held-out KJV chapter openings (training/corpus.py's
heldout_prompts.json): 128 tokens from each, a fixed draft length, at one
temperature, with one --spec-type; prints acceptance by draft position and
writes the replay profile (clover bench --spec-replay).

    scripts/spec_heldout.py CLOVER_BIN heldout_prompts.json TEMP SPEC_TYPE OUT.json \
        [MODEL [N_MAX]]

SPEC_TYPE: e.g. ngram:ngram_size_n=6 (docs/profiles/ngram-kjv-heldout-t*.json,
default model) or mtp (docs/profiles/mtp-kjv-heldout-t*.json, with
models/clover-tiny-kjv-mtp.gguf). N_MAX: the draft length (default 8).
"""
import json
import subprocess
import sys

clover, prompts_path, temp, spec, out = sys.argv[1:6]
model = sys.argv[6] if len(sys.argv) > 6 else None
n_max = int(sys.argv[7]) if len(sys.argv) > 7 else 8
prompts = json.load(open(prompts_path))
reached, acc = [0] * n_max, [0] * n_max
proposed = accepted = rounds = tokens = passes = 0
for i, p in enumerate(prompts):
    r = subprocess.run(
        [clover, "run", *(["-m", model] if model else []), "-p", p, "-n", "128",
         "--temp", temp, "--seed", str(i), "--spec-type", spec, "--spec-fixed",
         "--spec-draft-n-max", str(n_max), "--json", "-t", "2"],
        capture_output=True, text=True, check=True)
    s = json.loads(r.stdout.strip().splitlines()[-1])["spec"]
    for j, (re_, a) in enumerate(zip(s["reached_by_pos"], s["accepted_by_pos"])):
        reached[j] += re_
        acc[j] += a
    proposed += s["drafts_proposed"]
    accepted += s["drafts_accepted"]
    rounds += s["verify_passes"]
    tokens += s["tokens_emitted"]
    passes += s["verify_passes"] + s["plain_passes"]
cond = [a / r for r, a in zip(reached, acc) if r > 0]
print(f"temp {temp}, {spec}: {len(prompts)} prompts x 128 tokens; drafted {proposed}, accepted "
      f"{accepted} ({100 * accepted / max(proposed, 1):.1f} %); {rounds} verify rounds of {passes} "
      f"passes; {tokens / passes:.3f} tokens per pass")
print("conditional acceptance by position:", " ".join(f"{c:.3f}" for c in cond))
name = (model or "clover-tiny-kjv").split("/")[-1].removesuffix(".gguf")
source = (f"{name}, {spec}, {len(prompts)} held-out KJV chapter openings x 128 tokens, "
          f"temp {temp}, fixed draft length {n_max}")
json.dump({"source": source, "rounds": rounds, "conditional": cond}, open(out, "w"), indent=1)
