"""Held-out perplexity of a training checkpoint, in PyTorch, on exactly the
windows `clover perplexity -c CTX` scores, and the other figures it is
compared with.

    python3 training/heldout_ppl.py [--ckpt training/runs/main/ckpt.pt] [--ctx 512]

The held-out text (every 20th chapter) is tokenized with the training
tokenizer and cut into non-overlapping windows of CTX tokens, each run from
an empty state. Printed, as perplexities over the mean NLL in nats:

- llama-perplexity's figure (what `clover perplexity` prints): the second
  half of every window (predictions of tokens CTX/2+1 … CTX−1);
- every position of every window;
- both again over the first `--eval-windows` windows only, the slice the
  training run's own evaluation (`train.py --eval-windows`, default 24)
  covers — train.py scores every position of windows of CTX+1 tokens, so its
  figure is close to the last line, not to the first.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from export import load  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default=str(HERE / "runs/main/ckpt.pt"))
    p.add_argument("--data", default=str(HERE / "data"))
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--eval-windows", type=int, default=24)
    a = p.parse_args()
    torch.set_num_threads(1)
    model, _ = load(Path(a.ckpt))
    tok = Tokenizer.from_file(str(Path(a.data) / "tokenizer.json"))
    ids = tok.encode((Path(a.data) / "heldout.txt").read_text(), add_special_tokens=False).ids
    L = a.ctx
    rows = []  # per window: (sum nll second half, count, sum nll all, count)
    with torch.no_grad():
        for w in range(len(ids) // L):
            win = torch.tensor(ids[w * L : (w + 1) * L])[None]
            logits, _, _ = model(win)
            lp = logits[0].double().log_softmax(-1)
            nll = -lp[:-1].gather(1, win[0, 1:, None]).squeeze(1)  # token j+1 from logits j
            half = nll[L // 2 :]
            rows.append((half.sum().item(), half.numel(), nll.sum().item(), nll.numel()))

    def ppl(rs, k):
        s, n = sum(r[k] for r in rs), sum(r[k + 1] for r in rs)
        return f"{math.exp(s / n):.4f} ({n} tokens)"

    e = a.eval_windows
    print(f"held-out: {len(ids)} tokens, {len(rows)} windows of {L}")
    print(f"all windows, second half (llama-perplexity, clover perplexity): {ppl(rows, 0)}")
    print(f"all windows, every position:                                    {ppl(rows, 2)}")
    print(f"first {e} windows, second half:                                  {ppl(rows[:e], 0)}")
    print(f"first {e} windows, every position (train.py's evaluation):       {ppl(rows[:e], 2)}")


if __name__ == "__main__":
    main()
