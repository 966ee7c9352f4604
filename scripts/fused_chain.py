#!/usr/bin/env python3
"""Tokens per plain step of self-speculation with separate draft and verify
passes against the fused verify + draft pass (docs/PERFORMANCE.md, "The fused
verify + draft pass, measured"), from measured pass costs in plain steps and
a recorded acceptance profile.

Separate: every round drafts D tokens (draft pass over D+1 rows) and verifies
them (verify pass over D+1 rows). Fused: the verify pass also runs the next
block, whose drafts are kept when all D drafts were accepted; they sit one
position further from their anchor, so their acceptance is the profile's
from its second position on. Otherwise the round starts with a draft pass.
A two-state chain (drafts carried or not) gives the long-run rate.

usage: fused_chain.py PROFILE.json
"""
import json
import sys

# Pass costs in plain steps from `clover bench --pass-costs 4,5 -r 6 -d 64`
# on the full clover_moe apex-miniplus file: verify(k), draft(k), fused(k).
RUNS = {
    "1, -t 2": dict(v={4: 2.09, 5: 2.40}, d={4: 1.53, 5: 1.65}, f={4: 3.15, 5: 3.64}),
    "2, -t 2": dict(v={4: 1.91, 5: 2.19}, d={4: 1.36, 5: 1.51}, f={4: 2.92, 5: 3.35}),
    "1, -t 1": dict(v={4: 1.96, 5: 2.26}, d={4: 1.40, 5: 1.54}, f={4: 2.95, 5: 3.46}),
    "2, -t 1": dict(v={4: 1.92, 5: 2.18}, d={4: 1.37, 5: 1.49}, f={4: 2.80, 5: 3.22}),
}


def tokens(cond, d):
    """Expected tokens of a d-draft round and the chance all d are accepted."""
    run, total = 1.0, 1.0
    for j in range(d):
        run *= cond[j] if j < len(cond) else 0.0
        total += run
    return total, run


def main():
    cond = json.load(open(sys.argv[1]))["conditional"]
    print("| run | D | verify + draft passes | fused (share of rounds carried) |")
    print("|---|--:|--:|--:|")
    for name, c in RUNS.items():
        for d in (3, 4):
            k = d + 1
            t_new, p_new = tokens(cond, d)
            t_car, p_car = tokens(cond[1:], d)
            separate = t_new / (c["v"][k] + c["d"][k])
            carried = p_new / (p_new + 1.0 - p_car)
            tok = carried * t_car + (1 - carried) * t_new
            cost = carried * c["f"][k] + (1 - carried) * (c["d"][k] + c["f"][k])
            print(f"| {name} | {d} | {separate:.3f} | {tok / cost:.3f} ({carried:.2f}) |")


if __name__ == "__main__":
    main()
