"""Measures the shipped model with clover itself on held-out prompts.

    python3 training/measure.py [--clover target/release/clover] [--model models/clover-tiny-kjv.gguf]

For each held-out prompt (heading + first verse of a held-out chapter), runs
`clover run --temp 0 --json` plain and with `--spec-type draft-self` (fixed
draft length 15, and adaptive), checks the outputs are identical (exact greedy
acceptance), and sums the speculation counters: acceptance by draft position,
accepted-length histogram, mean accepted draft length, tokens per verify pass.
Also runs `clover perplexity` on the held-out text. Prints one JSON report.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent


def run_json(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def add(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def spec_summary(runs: list[dict]) -> dict:
    tot = {"drafts_proposed": 0, "drafts_accepted": 0, "verify_passes": 0, "draft_passes": 0,
           "plain_passes": 0, "tokens_emitted": 0}
    prop, acc, hist = [], [], []
    for r in runs:
        s = r["spec"]
        for k in tot:
            tot[k] += s[k]
        prop = add(prop, s["proposed_by_pos"])
        acc = add(acc, s["accepted_by_pos"])
        hist = add(hist, s["accepted_len_hist"])
    iters = sum(hist)
    mean_len = tot["drafts_accepted"] / max(iters, 1)
    return {
        **tot,
        "verify_iterations": iters,
        "mean_accepted_length": round(mean_len, 3),
        "tokens_per_verify_pass": round(mean_len + 1, 3),
        "acceptance_rate": round(tot["drafts_accepted"] / max(tot["drafts_proposed"], 1), 3),
        "acceptance_by_position": [round(a / p, 3) if p else None for a, p in zip(acc, prop)],
        "conditional_acceptance_by_position": [
            round(acc[j] / acc[j - 1], 3) if j and acc[j - 1] else (round(acc[0] / prop[0], 3) if j == 0 and prop[0] else None)
            for j in range(len(acc))
        ],
        "accepted_length_histogram": hist,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clover", default=str(ROOT / "target/release/clover"))
    p.add_argument("--model", default=str(ROOT / "models/clover-tiny-kjv.gguf"))
    p.add_argument("--data", default=str(HERE / "data"))
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("-n", type=int, default=128)
    p.add_argument("-t", type=int, default=2)
    p.add_argument("--ctx", type=int, default=512, help="perplexity window")
    p.add_argument("--no-ppl", action="store_true", help="skip the perplexity run")
    a = p.parse_args()
    data = Path(a.data)
    prompts = json.loads((data / "heldout_prompts.json").read_text())[: a.prompts]
    base = [a.clover, "run", "-m", a.model, "--temp", "0", "-n", str(a.n), "-t", str(a.t),
            "--json", "-c", "1024"]
    fixed, adaptive, identical = [], [], 0
    for pr in prompts:
        plain = run_json(base + ["-p", pr])
        f = run_json(base + ["-p", pr, "--spec-type", "draft-self", "--spec-fixed"])
        ad = run_json(base + ["-p", pr, "--spec-type", "draft-self"])
        same = plain["generated_tokens"] == f["generated_tokens"] == ad["generated_tokens"]
        identical += same
        fixed.append(f)
        adaptive.append(ad)
    ppl_report = None
    if not a.no_ppl:
        ppl = subprocess.run([a.clover, "perplexity", "-m", a.model, "-f",
                              str(data / "heldout.txt"), "-c", str(a.ctx), "-t", str(a.t)],
                             check=True, capture_output=True, text=True).stdout
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", ppl)
        ppl_report = {"ctx": a.ctx, "ppl": float(m.group(1)), "err": float(m.group(2))}
    report = {
        "prompts": len(prompts),
        "n_predict": a.n,
        "outputs_identical_to_plain_greedy": f"{identical}/{len(prompts)}",
        "heldout_perplexity": ppl_report,
        "draft_self_fixed_15": spec_summary(fixed),
        "draft_self_adaptive": spec_summary(adaptive),
        "sample_output": {"prompt": prompts[0], "text": fixed[0]["text"]},
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
