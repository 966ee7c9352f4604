"""Trains the small clover_moe: AR next-token loss + block diffusion (docs/DESIGN.md §3).

    python3 training/train.py --minutes 55 --seed 1 --out training/runs/main

Per step, a batch of B windows of L tokens (L a multiple of the block size 16).
The AR pass scores every next token. The diffusion pass runs on the first
`--diff-frac` of the windows: every aligned block [t_n, M × 15] (anchor at a
multiple of 16, clean prefix = the AR pass's own caches and states) predicts
t_{n+1} … t_{n+15} with shifted logits. Its loss at draft position j (weight
`--pos-decay`^j) is cross-entropy to the true token plus KL(AR ‖ diffusion)
toward the AR pass's own (detached) distribution at the same position, so the
drafts learn what the verifier will say. Some blocks are shortened (drafts of
fewer than 15 tokens, as the adaptive drafter runs them) and some have part of
their masks revealed (the `clover diffuse` denoising steps).

The run stops after `--minutes` of wall clock (the learning rate follows a
cosine over that time), writing `ckpt.pt` and `log.jsonl` to `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from model import CloverModel, Config

HERE = Path(__file__).parent


def load_docs(data: Path, tok: Tokenizer) -> tuple[list[list[int]], list[int]]:
    eot = tok.token_to_id("<|endoftext|>")
    docs = []
    with open(data / "train.jsonl") as f:
        texts = [json.loads(line)["text"] for line in f]
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        docs.append(enc.ids + [eot])
    held = tok.encode((data / "heldout.txt").read_text(), add_special_tokens=False).ids
    return docs, held


class Stream:
    """Shuffled documents, concatenated; windows of L + 1 tokens taken in order."""

    def __init__(self, docs, rng: random.Random):
        self.docs, self.rng = docs, rng
        self.buf: list[int] = []
        self.epoch = 0

    def take(self, n: int) -> list[int]:
        while len(self.buf) < n:
            order = list(range(len(self.docs)))
            self.rng.shuffle(order)
            for i in order:
                self.buf.extend(self.docs[i])
            self.epoch += 1
        out, self.buf = self.buf[:n], self.buf[n - 1 :]  # windows overlap by one token
        return out


def diffusion_inputs(tokens: torch.Tensor, cfg: Config, g: torch.Generator, args):
    """Block inputs, valid rows and loss weights for the diffusion pass.

    tokens: (bd, L) inputs. Returns diff_tokens, valid (bd, L) bool, weight (bd, L)
    where weight[r] is the loss weight of the output at row r (predicting the
    token at r + 1), 0 where that output is not a draft.
    """
    bd, L = tokens.shape
    T = cfg.block
    nb = L // T
    j = torch.arange(T).repeat(nb)  # index inside the block, per row
    # Block lengths: most full (anchor + 15); some shortened to 2 … 15 rows.
    lengths = torch.full((bd, nb), T)
    short = torch.rand(bd, nb, generator=g) < args.short_frac
    rand_len = torch.randint(2, T, (bd, nb), generator=g)
    lengths = torch.where(short, rand_len, lengths)
    length_row = lengths.repeat_interleave(T, dim=1)  # (bd, L)
    valid = j[None, :] < length_row
    # Revealed positions (denoising steps of clover diffuse) in some blocks.
    partial = (torch.rand(bd, nb, generator=g) < args.reveal_frac).repeat_interleave(T, dim=1)
    ratio = (0.1 + 0.8 * torch.rand(bd, nb, generator=g)).repeat_interleave(T, dim=1)
    revealed = partial & (torch.rand(bd, L, generator=g) < ratio) & (j[None, :] > 0)
    masked = (j[None, :] > 0) & ~revealed & valid
    diff_tokens = torch.where(masked, torch.full_like(tokens, cfg.mask_id), tokens)
    # Output at row r (index j) is a draft iff row r + 1 is in the same block,
    # valid, and masked.
    nxt_masked = torch.zeros_like(masked)
    nxt_masked[:, :-1] = masked[:, 1:]
    is_draft = nxt_masked & (j[None, :] < T - 1)
    pos_w = args.pos_decay ** j.to(torch.float32)
    weight = is_draft.to(torch.float32) * pos_w[None, :]
    return diff_tokens, valid, weight


def losses(model: CloverModel, batch: torch.Tensor, args, g: torch.Generator):
    cfg = model.cfg
    x, y = batch[:, :-1], batch[:, 1:]
    bd = max(1, int(round(args.diff_frac * x.shape[0]))) if args.diff_frac > 0 else 0
    if bd:
        dt, valid, w = diffusion_inputs(x[:bd], cfg, g, args)
        logits, dlogits, aux = model(x, dt, valid)
    else:
        logits, dlogits, aux = model(x)
    V = logits.shape[-1]
    ar = F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))
    out = {"ar": ar, "aux": aux}
    total = ar + args.aux_coef * aux
    if bd:
        wf = w.reshape(-1)
        sel = wf > 0
        dl = dlogits.reshape(-1, V)[sel]
        tgt = y[:bd].reshape(-1)[sel]
        ww = wf[sel]
        ce = F.cross_entropy(dl, tgt, reduction="none")
        teacher = logits[:bd].detach().reshape(-1, V)[sel].log_softmax(-1)
        logq = dl.log_softmax(-1)
        kl = (teacher.exp() * (teacher - logq)).sum(-1)
        wsum = ww.sum()
        out["dce"] = (ce * ww).sum() / wsum
        out["dkl"] = (kl * ww).sum() / wsum
        with torch.no_grad():
            first = (torch.arange(x.shape[1]) % cfg.block == 0).repeat(bd)[sel]
            agree = dl.argmax(-1) == teacher.argmax(-1)
            out["agree1"] = agree[first].float().mean() if first.any() else torch.tensor(0.0)
        total = total + args.diff_coef * (args.ce_coef * out["dce"] + args.kl_coef * out["dkl"])
    out["total"] = total
    return out


@torch.no_grad()
def evaluate(model: CloverModel, held: list[int], L: int, n_windows: int, args) -> dict:
    """Held-out AR loss (non-overlapping windows) and draft agreement with the AR argmax."""
    model.eval()
    cfg = model.cfg
    tot, n = 0.0, 0
    agree = torch.zeros(cfg.block - 1)
    count = 0
    for i in range(n_windows):
        s = i * L
        if s + L + 1 > len(held):
            break
        w = torch.tensor(held[s : s + L + 1])[None]
        x, y = w[:, :-1], w[:, 1:]
        T = cfg.block
        j = torch.arange(L) % T
        dt = torch.where(j[None] == 0, x, torch.full_like(x, cfg.mask_id))
        valid = torch.ones_like(x, dtype=torch.bool)
        logits, dlogits, _ = model(x, dt, valid)
        tot += F.cross_entropy(logits[0], y[0], reduction="sum").item()
        n += L
        # Draft j agrees with the AR argmax at the same position (teacher-forced).
        a = (dlogits[0].argmax(-1) == logits[0].argmax(-1)).float().reshape(-1, T)
        agree += a[:, : T - 1].sum(0)
        count += a.shape[0]
    model.train()
    loss = tot / max(n, 1)
    return {"held_loss": loss, "held_ppl": math.exp(loss),
            "agree_by_pos": [round(v, 3) for v in (agree / max(count, 1)).tolist()]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE / "data"))
    p.add_argument("--out", default=str(HERE / "runs" / "main"))
    p.add_argument("--minutes", type=float, default=55.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.05)
    p.add_argument("--warmup", type=int, default=60)
    p.add_argument("--wd", type=float, default=0.1)
    p.add_argument("--diff-frac", type=float, default=0.5)
    p.add_argument("--diff-coef", type=float, default=1.0)
    p.add_argument("--ce-coef", type=float, default=0.5)
    p.add_argument("--kl-coef", type=float, default=1.0)
    p.add_argument("--pos-decay", type=float, default=0.85)
    p.add_argument("--short-frac", type=float, default=0.25)
    p.add_argument("--reveal-frac", type=float, default=0.15)
    p.add_argument("--aux-coef", type=float, default=0.01)
    p.add_argument("--eval-every", type=float, default=5.0, help="minutes")
    p.add_argument("--eval-windows", type=int, default=24)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--ff-exp", type=int, default=128)
    p.add_argument("--ff-shexp", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    g = torch.Generator().manual_seed(args.seed)
    data = Path(args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(data / "tokenizer.json"))
    cfg = Config(vocab=tok.get_vocab_size(), d_model=args.d_model, ff_exp=args.ff_exp,
                 ff_shexp=args.ff_shexp, n_layer=args.layers,
                 mask_id=tok.token_to_id("<|mask|>"))
    model = CloverModel(cfg)
    docs, held = load_docs(data, tok)
    n_train = sum(len(d) for d in docs)
    print(f"params {model.n_params():,}  train tokens {n_train:,}  held-out tokens {len(held):,}",
          flush=True)
    decay, no_decay = [], []
    for name, prm in model.named_parameters():
        (decay if prm.dim() >= 2 else no_decay).append(prm)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    stream = Stream(docs, rng)
    log = open(out / "log.jsonl", "w")
    t0 = time.time()
    budget = args.minutes * 60
    next_eval = args.eval_every * 60
    step = 0

    def save(tag: str):
        torch.save({"config": cfg.to_dict(), "model": model.state_dict(), "step": step,
                    "args": vars(args), "elapsed_s": time.time() - t0}, out / f"{tag}.pt")

    while True:
        elapsed = time.time() - t0
        if elapsed >= budget or (args.max_steps and step >= args.max_steps):
            break
        frac = elapsed / budget
        warm = min(1.0, (step + 1) / args.warmup)
        cos = args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac))
        lr = args.lr * warm * cos
        for grp in opt.param_groups:
            grp["lr"] = lr
        batch = torch.tensor([stream.take(args.seq + 1) for _ in range(args.batch)])
        out_l = losses(model, batch, args, g)
        opt.zero_grad(set_to_none=True)
        out_l["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        rec = {"step": step, "t": round(time.time() - t0, 1), "lr": round(lr, 6),
               "epoch": stream.epoch}
        rec.update({k: round(float(v.detach() if torch.is_tensor(v) else v), 4) for k, v in out_l.items()})
        if step % 10 == 0 or step <= 3 or args.verbose:
            print(json.dumps(rec), flush=True)
        log.write(json.dumps(rec) + "\n")
        if time.time() - t0 >= next_eval:
            ev = evaluate(model, held, args.seq, args.eval_windows, args)
            ev.update({"step": step, "t": round(time.time() - t0, 1), "eval": True})
            print(json.dumps(ev), flush=True)
            log.write(json.dumps(ev) + "\n")
            log.flush()
            save("ckpt")
            next_eval += args.eval_every * 60
    ev = evaluate(model, held, args.seq, args.eval_windows, args)
    ev.update({"step": step, "t": round(time.time() - t0, 1), "eval": True, "final": True})
    print(json.dumps(ev), flush=True)
    log.write(json.dumps(ev) + "\n")
    log.close()
    save("ckpt")
    print(f"done: {step} steps in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
