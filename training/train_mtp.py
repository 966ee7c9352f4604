"""Trains a multi-token-prediction block (docs/DESIGN.md §2.7) on the default model's
frozen trunk and writes the model's qwen35moe sibling that carries it.

    python3 training/train_mtp.py --minutes 20 --seed 1 \\
        --out models/clover-tiny-kjv-mtp.gguf

The trunk is read from models/clover-tiny-kjv.gguf (every tensor, checked to
round-trip). Entry p of the block is fed the embedding of token p and the trunk's
normed last hidden state at p − 1, and predicts token p + 1, as the engine runs
it. Its loss at every entry is 0.5 · cross-entropy to the true token plus
KL(trunk ‖ block) toward the trunk's own (detached) distribution for the same
token, so the drafts learn what the verifier will say. The block is a
gated-attention layer with its MoE, started from the trunk's attention layer;
eh_proj starts as [0 | I] (the hidden row passed through). AdamW, cosine
learning rate over the wall-clock budget.

The sibling is the default model as `qwen35moe` (its trunk bit for bit, without
the block-diffusion tensors and keys) plus the block as `blk.4.*`, the layout
llama.cpp's converter gives a checkpoint's MTP layer.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import gguf
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tokenizers import Tokenizer

import export
from model import Block, CloverModel, Config, rmsnorm

HERE = Path(__file__).parent
ROOT = HERE.parent


def config_of(r: gguf.GGUFReader) -> Config:
    def u(key):
        f = r.fields[f"clover_moe.{key}"]
        return f.parts[f.data[0]][0].item()
    mask = r.fields["tokenizer.ggml.mask_token_id"]
    return Config(
        vocab=len(r.fields["tokenizer.ggml.tokens"].data), d_model=u("embedding_length"),
        n_layer=u("block_count"), attn_interval=u("full_attention_interval"),
        n_head=u("attention.head_count"), n_head_kv=u("attention.head_count_kv"),
        head_dim=u("attention.key_length"), n_rot=u("rope.dimension_count"),
        rope_base=float(u("rope.freq_base")), n_expert=u("expert_count"),
        top_k=u("expert_used_count"), ff_exp=u("expert_feed_forward_length"),
        ff_shexp=u("expert_shared_feed_forward_length"), conv_left=u("ssm.conv_kernel"),
        conv_right=u("ssm.conv_kernel_right"), ssm_d=u("ssm.state_size"),
        ssm_nk=u("ssm.group_count"), ssm_nv=u("ssm.time_step_rank"),
        block=u("diffusion.block_size"), eps=float(u("attention.layer_norm_rms_epsilon")),
        context_length=u("context_length"), mask_id=mask.parts[mask.data[0]][0].item())


def load_trunk(path: Path) -> CloverModel:
    """The clover_moe file as a training model, every tensor checked to come
    back out as the file stores it."""
    r = gguf.GGUFReader(str(path))
    model = CloverModel(config_of(r))
    data = {t.name: np.array(t.data, dtype=np.float32) for t in r.tensors}
    with torch.no_grad():
        for name, p, how, _ in export.params(model):
            a = torch.from_numpy(data[name].reshape(tuple(p.shape)))
            p.copy_({export.AS_IS: a, export.NORM: a - 1, export.NEG_EXP: (-a).log()}[how])
    for name, arr, _ in export.tensors(model):
        if not np.allclose(arr, data[name].reshape(arr.shape), rtol=0, atol=2e-7):
            raise SystemExit(f"{name} does not round-trip")
    model.eval()
    return model


class Mtp(nn.Module):
    """The MTP block: entry p = block(eh_proj · [enorm(embd(t_p)) ; hnorm(h_{p−1})]),
    then shared_head_norm; the trunk's tied head makes its logits."""

    def __init__(self, cfg: Config, trunk: CloverModel):
        super().__init__()
        e = cfg.d_model
        self.cfg = cfg
        self.enorm = nn.Parameter(torch.zeros(e))
        self.hnorm = nn.Parameter(torch.zeros(e))
        self.shared_head_norm = nn.Parameter(torch.zeros(e))
        self.eh_proj = nn.Linear(2 * e, e, bias=False)
        ia = cfg.attn_interval - 1
        self.block = Block(cfg, ia)
        with torch.no_grad():
            self.eh_proj.weight.zero_()
            self.eh_proj.weight[:, e:] = torch.eye(e)
            self.eh_proj.weight.add_(torch.randn(e, 2 * e) * 0.01)
            self.block.load_state_dict(trunk.blocks[ia].state_dict())

    def forward(self, emb, hidden):
        eps = self.cfg.eps
        cat = torch.cat([rmsnorm(emb, 1 + self.enorm, eps), rmsnorm(hidden, 1 + self.hnorm, eps)], -1)
        x, _, aux = self.block(self.eh_proj(cat))
        return rmsnorm(x, 1 + self.shared_head_norm, eps), aux

    def tensors(self, il: int) -> list[tuple[str, np.ndarray, bool]]:
        n = lambda s: f"blk.{il}.nextn.{s}"
        own = [(n("eh_proj.weight"), self.eh_proj.weight, export.AS_IS, True),
               (n("enorm.weight"), self.enorm, export.NORM, False),
               (n("hnorm.weight"), self.hnorm, export.NORM, False),
               (n("shared_head_norm.weight"), self.shared_head_norm, export.NORM, False)]
        layer = export.block_params(il, self.block, True)
        return [(name, export.stored(p, how), q) for name, p, how, q in layer + own]


@torch.no_grad()
def trunk_rows(trunk: CloverModel, tokens: torch.Tensor):
    """The trunk's normed last hidden rows and its logits."""
    x = trunk.embed(tokens)
    for b in trunk.blocks:
        x, _, _ = b(x)
    h = rmsnorm(x, 1 + trunk.out_norm, trunk.cfg.eps)
    return h, h @ trunk.embed.weight.t()


def mtp_loss(mtp: Mtp, trunk: CloverModel, win: torch.Tensor):
    """Windows of L tokens (a multiple of the block size, for the chunked GDN):
    entries 1 … L − 1 (fed h_0 … h_{L−2}) predict tokens 2 … L, the last one
    outside the window; the trunk's rows 1 … L − 1 are the verifier's
    distributions for the same tokens."""
    h, logits = trunk_rows(trunk, win)
    g, aux = mtp(trunk.embed(win[:, 1:]).detach(), h[:, :-1])
    out = g @ trunk.embed.weight.t().detach()
    ce = F.cross_entropy(out[:, :-1].reshape(-1, out.shape[-1]), win[:, 2:].reshape(-1))
    teacher = logits[:, 1:].log_softmax(-1)
    kl = F.kl_div(out.log_softmax(-1), teacher, log_target=True, reduction="none").sum(-1).mean()
    agree = (out.argmax(-1) == logits[:, 1:].argmax(-1)).float().mean()
    return 0.5 * ce + kl + 0.01 * aux, ce.item(), kl.item(), agree.item()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(ROOT / "models" / "clover-tiny-kjv.gguf"))
    p.add_argument("--data", default=str(HERE / "data"))
    p.add_argument("--out", required=True)
    p.add_argument("--minutes", type=float, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--len", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    torch.set_num_threads(2)
    trunk = load_trunk(Path(a.model))
    for q in trunk.parameters():
        q.requires_grad_(False)
    cfg = trunk.cfg
    tok = Tokenizer.from_file(str(Path(a.data) / "tokenizer.json"))
    eot = tok.token_to_id("<|endoftext|>")
    texts = [json.loads(line)["text"] for line in open(Path(a.data) / "train.jsonl")]
    stream = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        stream += enc.ids + [eot]
    held = tok.encode((Path(a.data) / "heldout.txt").read_text(), add_special_tokens=False).ids
    held = torch.tensor(held[: (len(held) // a.len) * a.len]).reshape(-1, a.len)[:32]
    mtp = Mtp(cfg, trunk)
    opt = torch.optim.AdamW(mtp.parameters(), lr=a.lr, weight_decay=0.1, betas=(0.9, 0.95))
    t0, step, budget = time.time(), 0, a.minutes * 60
    W = a.len
    while True:
        el = time.time() - t0
        if el > budget:
            break
        lr = a.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * el / budget)))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = [rng.randrange(len(stream) - W) for _ in range(a.batch)]
        win = torch.tensor([stream[s:s + W] for s in starts])
        loss, ce, kl, agree = mtp_loss(mtp, trunk, win)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0:
            with torch.no_grad():
                _, hce, hkl, hagree = mtp_loss(mtp, trunk, held)
            print(json.dumps({"step": step, "min": round(el / 60, 1), "lr": round(lr, 5),
                              "ce": round(ce, 3), "kl": round(kl, 3), "agree": round(agree, 3),
                              "held_ce": round(hce, 3), "held_agree": round(hagree, 3)}), flush=True)
    mtp.eval()
    out = Path(a.out)
    export.export_gguf(trunk, tok, out, "f32", "clover-tiny-kjv-mtp", arch="qwen35moe",
                       extra=mtp.tensors(cfg.n_layer))
    print(f"wrote {out} ({out.stat().st_size:,} bytes) after {step} steps")


if __name__ == "__main__":
    main()
