#!/usr/bin/env python3
"""Writes the (prompt, target) pairs the n-gram acceptance figures replay
(examples/ngram_acceptance.rs; docs/PERFORMANCE.md, "N-gram drafting"):

  kjv_heldout_pairs.json  each held-out KJV chapter: its heading and first
                          verse as the prompt, the rest as the target (the
                          corpus of training/corpus.py; needs Debian's
                          bible-kjv and bible-kjv-text packages)
  edit_pairs.json         four files of this repository, each asked to be
                          rewritten with a few renames, and the rewritten
                          file as the target

    scripts/ngram_pairs.py OUT_DIR
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "training"))

EDITS = [
    ("src/spec/verify.rs", [("accept_exact", "accepts_exactly"), ("Relaxation", "Relaxed"), ("// ", "//  ")]),
    ("src/spec/cost.rs", [("stash", "saved"), ("bytes", "size")]),
    ("src/model/cx.rs", [("kt", "kernels"), ("Cx", "Context")]),
    ("training/corpus.py", [("chapters", "chaps"), ("def ", "def  ")]),
]


def kjv_pairs(out: Path) -> list:
    import corpus

    corpus.build(out)
    text = (out / "heldout.txt").read_text()
    blocks = re.split(r"\n\n(?=[1-3]? ?[A-Z][A-Za-z ]+ \d+\n\n)", text.strip())
    pairs = []
    for b in blocks:
        head, _, body = b.partition("\n\n")
        verses = body.split("\n")
        pairs.append({"prompt": f"{head}\n\n{verses[0]}\n", "target": "\n".join(verses[1:]) + "\n"})
    return pairs


def edit_pairs() -> list:
    pairs = []
    for path, edits in EDITS:
        src = (ROOT / path).read_text()
        out = src
        for a, b in edits:
            out = out.replace(a, b)
        ask = "; ".join(f"{a!r} becomes {b!r}" for a, b in edits)
        prompt = f"Rewrite this file with these changes: {ask}.\n\n{src}\n\nThe rewritten file:\n\n"
        pairs.append({"prompt": prompt, "target": out})
    return pairs


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "kjv_heldout_pairs.json").write_text(json.dumps(kjv_pairs(out)))
    (out / "edit_pairs.json").write_text(json.dumps(edit_pairs()))
    print(f"pairs written to {out}")
