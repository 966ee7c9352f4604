#!/usr/bin/env python3
"""N-gram drafting with the default model on the held-out KJV chapter
openings (training/corpus.py's heldout_prompts.json): 128 tokens each, fixed
draft length 8, at one temperature; prints acceptance by position and writes
the replay profile (docs/profiles/ngram-kjv-heldout-t*.json).

    scripts/ngram_heldout.py CLOVER_BIN heldout_prompts.json TEMP NGRAM_N OUT.json
"""
import json
import subprocess
import sys

clover, prompts_path, temp, n, out = sys.argv[1:6]
prompts = json.load(open(prompts_path))
reached, acc = [0] * 8, [0] * 8
proposed = accepted = rounds = tokens = passes = 0
for i, p in enumerate(prompts):
    r = subprocess.run(
        [clover, "run", "-p", p, "-n", "128", "--temp", temp, "--seed", str(i),
         "--spec-type", f"ngram:ngram_size_n={n}", "--spec-fixed", "--spec-draft-n-max", "8",
         "--json", "-t", "2"],
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
print(f"temp {temp}, n {n}: {len(prompts)} prompts x 128 tokens; drafted {proposed}, accepted "
      f"{accepted} ({100 * accepted / max(proposed, 1):.1f} %); {rounds} verify rounds of {passes} "
      f"passes; {tokens / passes:.3f} tokens per pass")
print("conditional acceptance by position:", " ".join(f"{c:.3f}" for c in cond))
source = (f"clover-tiny-kjv, ngram (n {n}), {len(prompts)} held-out KJV chapter openings x 128 "
          f"tokens, temp {temp}, fixed draft length 8")
json.dump({"source": source, "rounds": rounds, "conditional": cond}, open(out, "w"), indent=1)
