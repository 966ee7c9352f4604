"""A small clover_moe in PyTorch: the exact math of docs/DESIGN.md §2 (autoregressive)
and §3 (block diffusion), in the engine's conventions.

Layer i is full attention iff (i + 1) % attn_interval == 0, else Gated DeltaNet.
Every parameter maps one-to-one onto a GGUF tensor (see export.py); the only
re-parametrisations are the zero-centred RMSNorm weights (stored +1 in the file)
and `A_log` (stored as ssm_a = −exp(A_log)).

GDN value head h reads key head h % n_k (tiled). The AR GDN runs in the chunked
(WY) form with chunk = the diffusion block size, so the state before every
block is a by-product; `gdn_recurrent` is the token-by-token reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab: int = 4096
    d_model: int = 256
    n_layer: int = 4
    attn_interval: int = 4
    n_head: int = 4
    n_head_kv: int = 1
    head_dim: int = 64
    n_rot: int = 16
    rope_base: float = 10000.0
    n_expert: int = 8
    top_k: int = 2
    ff_exp: int = 128
    ff_shexp: int = 256
    conv_left: int = 4
    conv_right: int = 3
    ssm_d: int = 64
    ssm_nk: int = 2
    ssm_nv: int = 4
    block: int = 16
    eps: float = 1e-6
    context_length: int = 4096
    mask_id: int = 5

    def is_attention(self, i: int) -> bool:
        return (i + 1) % self.attn_interval == 0

    @property
    def ssm_inner(self) -> int:
        return self.ssm_nv * self.ssm_d

    @property
    def conv_ch(self) -> int:
        return 2 * self.ssm_nk * self.ssm_d + self.ssm_inner

    def to_dict(self) -> dict:
        return asdict(self)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def l2norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def rope(x: torch.Tensor, pos: torch.Tensor, n_rot: int, base: float) -> torch.Tensor:
    """NeoX rope on the first n_rot dims: pairs (i, i + n_rot/2). x: (..., L, H, d)."""
    half = n_rot // 2
    inv = base ** (-2.0 * torch.arange(half, dtype=torch.float32) / n_rot)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]  # (L, half)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2, rest = x[..., :half], x[..., half:n_rot], x[..., n_rot:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos, rest], dim=-1)


# ----------------------------------------------------------------------------
# Gated delta rule: token-by-token reference and chunked (WY) form.
# q, k, v: (B, H, L, d) with q already scaled by 1/sqrt(d); g, beta: (B, H, L).
# State S: (B, H, d_k, d_v), S[i][j] with i the key dim.
# ----------------------------------------------------------------------------


def gdn_recurrent(q, k, v, g, beta, s0=None):
    b, h, L, d = q.shape
    s = q.new_zeros(b, h, d, v.shape[-1]) if s0 is None else s0
    outs = []
    for t in range(L):
        s = s * g[:, :, t].exp()[..., None, None]
        kt = k[:, :, t]
        m = torch.einsum("bhi,bhij->bhj", kt, s)
        delta = beta[:, :, t][..., None] * (v[:, :, t] - m)
        s = s + kt[..., :, None] * delta[..., None, :]
        outs.append(torch.einsum("bhi,bhij->bhj", q[:, :, t], s))
    return torch.stack(outs, dim=2), s


def gdn_chunked(q, k, v, g, beta, chunk: int, s0=None):
    """Returns (o, states before each chunk (B, H, n_chunks, d_k, d_v), final state)."""
    b, h, L, d = q.shape
    dv = v.shape[-1]
    assert L % chunk == 0, "sequence length must be a multiple of the chunk"
    nc = L // chunk
    q = q.reshape(b, h, nc, chunk, d)
    k = k.reshape(b, h, nc, chunk, d)
    v = v.reshape(b, h, nc, chunk, dv)
    g = g.reshape(b, h, nc, chunk)
    beta = beta.reshape(b, h, nc, chunk)
    gam = g.cumsum(-1)  # γ_t: log decay from the chunk start through t
    incl = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    strict = torch.ones(chunk, chunk, dtype=torch.bool).tril(-1)
    diff = (gam[..., :, None] - gam[..., None, :]).masked_fill(~incl, float("-inf"))
    decay = diff.exp()  # e^{γ_t − γ_s} for s ≤ t, else 0
    kk = k @ k.transpose(-1, -2)
    a = (beta[..., :, None] * kk * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype)
    ia = eye + a
    u = torch.linalg.solve_triangular(ia, beta[..., None] * v, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(
        ia, (beta * gam.exp())[..., None] * k, upper=False, unitriangular=True
    )
    qk = (q @ k.transpose(-1, -2)) * decay
    qdec = q * gam.exp()[..., None]
    kdec = k * (gam[..., -1:] - gam).exp()[..., None]
    s = q.new_zeros(b, h, d, dv) if s0 is None else s0
    outs, states = [], []
    for c in range(nc):
        states.append(s)
        delta = u[:, :, c] - w[:, :, c] @ s
        outs.append(qdec[:, :, c] @ s + qk[:, :, c] @ delta)
        s = gam[:, :, c, -1].exp()[..., None, None] * s + kdec[:, :, c].transpose(-1, -2) @ delta
    o = torch.stack(outs, dim=2).reshape(b, h, L, dv)
    return o, torch.stack(states, dim=2), s


# ----------------------------------------------------------------------------
# Layers. Each mixer's forward takes the AR stream and, optionally, the
# diffusion stream of the first `bd` sequences (blocks of cfg.block tokens
# aligned at multiples of the block size).
# ----------------------------------------------------------------------------


class DiffBatch:
    """What the diffusion stream needs besides its hidden states.

    valid: (bd, L) bool — block rows that exist (rows past a shortened block's
    end are absent: no key, no right-conv input).
    """

    def __init__(self, valid: torch.Tensor, block: int):
        self.valid = valid
        self.block = block


class GatedDeltaNet(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        e, ch, inner, nv = cfg.d_model, cfg.conv_ch, cfg.ssm_inner, cfg.ssm_nv
        self.qkv = nn.Linear(e, ch, bias=False)
        self.z = nn.Linear(e, inner, bias=False)
        self.beta = nn.Linear(e, nv, bias=False)
        self.alpha = nn.Linear(e, nv, bias=False)
        self.conv = nn.Parameter(torch.empty(ch, cfg.conv_left))
        self.conv_right = nn.Parameter(torch.zeros(ch, cfg.conv_right))
        self.dt_bias = nn.Parameter(torch.empty(nv))
        self.a_log = nn.Parameter(torch.empty(nv))
        self.norm = nn.Parameter(torch.ones(cfg.ssm_d))
        self.out = nn.Linear(inner, e, bias=False)
        # Diffusion: block-softmax scale, history-mix gate λ = σ(w·g + b).
        self.bd_scale = nn.Parameter(torch.full((nv,), 8.0))
        self.bd_hist_w = nn.Parameter(torch.zeros(nv))
        self.bd_hist_b = nn.Parameter(torch.zeros(nv))
        with torch.no_grad():
            nn.init.uniform_(self.conv, -1 / math.sqrt(cfg.conv_left), 1 / math.sqrt(cfg.conv_left))
            # dt ~ logU(1e-3, 1e-1) as in Mamba/GDN; dt_bias = softplus⁻¹(dt).
            dt = torch.exp(torch.rand(nv) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
            self.a_log.copy_(torch.log(torch.empty(nv).uniform_(1, 16)))

    def gates(self, u):
        g = F.softplus(self.alpha(u) + self.dt_bias) * (-self.a_log.exp())
        return g

    def split(self, c):
        """Post-conv rows → unit q̂, k̂ tiled to value heads, and v: (B, L, H, d)."""
        cfg = self.cfg
        nk, nv, d = cfg.ssm_nk, cfg.ssm_nv, cfg.ssm_d
        lead = c.shape[:-1]
        q = l2norm(c[..., : nk * d].reshape(*lead, nk, d), cfg.eps)
        k = l2norm(c[..., nk * d : 2 * nk * d].reshape(*lead, nk, d), cfg.eps)
        v = c[..., 2 * nk * d :].reshape(*lead, nv, d)
        rep = nv // nk
        return q.repeat(*([1] * (q.dim() - 2)), rep, 1), k.repeat(*([1] * (k.dim() - 2)), rep, 1), v

    def finish(self, o, z):
        cfg = self.cfg
        lead = o.shape[:-2]
        zz = z.reshape(*lead, cfg.ssm_nv, cfg.ssm_d)
        o = rmsnorm(o, self.norm, cfg.eps) * F.silu(zz)
        return self.out(o.reshape(*lead, cfg.ssm_inner))

    def forward(self, u, ud=None, diff: DiffBatch | None = None, recurrent=False):
        cfg = self.cfg
        B, L, _ = u.shape
        d = cfg.ssm_d
        mixed = self.qkv(u)
        z = self.z(u)
        beta = torch.sigmoid(self.beta(u))
        g = self.gates(u)
        xp = F.pad(mixed, (0, 0, cfg.conv_left - 1, 0))
        c = sum(self.conv[:, j] * xp[:, j : j + L] for j in range(cfg.conv_left))
        c = F.silu(c)
        q, k, v = self.split(c)
        scale = 1.0 / math.sqrt(d)
        tr = lambda x: x.transpose(1, 2)  # (B, L, H, d) → (B, H, L, d)
        if recurrent:
            o, _ = gdn_recurrent(tr(q) * scale, tr(k), tr(v), tr(g), tr(beta))
            states = None
        else:
            o, states, _ = gdn_chunked(tr(q) * scale, tr(k), tr(v), tr(g), tr(beta), cfg.block)
        out = self.finish(tr(o), z)
        if ud is None:
            return out, None
        return out, self.diffusion(ud, diff, mixed, states)

    def diffusion(self, ud, diff: DiffBatch, mixed_ar, states):
        """docs/DESIGN.md §3 GDN block pass for all blocks of the first bd sequences."""
        cfg = self.cfg
        bd, L, _ = ud.shape
        T = cfg.block
        nb = L // T
        ch, d, kl, kr = cfg.conv_ch, cfg.ssm_d, cfg.conv_left, cfg.conv_right
        mixed = self.qkv(ud) * diff.valid[..., None]  # absent rows are 0 for the right taps
        z = self.z(ud)
        g = self.gates(ud)  # (bd, L, H)
        x = mixed.reshape(bd, nb, T, ch)
        prev = F.pad(mixed_ar[:bd], (0, 0, kl - 1, 0))  # row r + kl − 1 = position r
        starts = torch.arange(nb) * T
        prev_rows = torch.stack([prev[:, starts + r] for r in range(kl - 1)], dim=2)
        xp = torch.cat([prev_rows, x, x.new_zeros(bd, nb, kr, ch)], dim=2)
        c = sum(self.conv[:, j] * xp[:, :, j : j + T] for j in range(kl))
        c = c + sum(self.conv_right[:, j] * xp[:, :, kl + j : kl + j + T] for j in range(kr))
        c = F.silu(c)
        q, k, v = self.split(c)  # (bd, nb, T, H, d)
        p = lambda x: x.permute(0, 3, 1, 2, 4)  # → (bd, H, nb, T, d)
        q, k, v = p(q), p(k), p(v)
        o_hist = (q / math.sqrt(d)) @ states[:bd]  # (bd, H, nb, T, d_v)
        logits = self.bd_scale[None, :, None, None, None] * (q @ k.transpose(-1, -2))
        key_ok = diff.valid.reshape(bd, 1, nb, 1, T)
        a = logits.masked_fill(~key_ok, float("-inf")).softmax(-1)
        o_blk = a @ v
        gh = g.reshape(bd, nb, T, cfg.ssm_nv).permute(0, 3, 1, 2)[..., None]
        lam = torch.sigmoid(self.bd_hist_w[None, :, None, None, None] * gh
                            + self.bd_hist_b[None, :, None, None, None])
        o = lam * o_hist + (1 - lam) * o_blk  # (bd, H, nb, T, d)
        o = o.permute(0, 2, 3, 1, 4).reshape(bd, L, cfg.ssm_nv, d)
        return self.finish(o, z)


class GatedAttention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        e, nh, nkv, d = cfg.d_model, cfg.n_head, cfg.n_head_kv, cfg.head_dim
        self.q = nn.Linear(e, nh * 2 * d, bias=False)  # per head: query d, then gate d
        self.k = nn.Linear(e, nkv * d, bias=False)
        self.v = nn.Linear(e, nkv * d, bias=False)
        self.o = nn.Linear(nh * d, e, bias=False)
        self.q_norm = nn.Parameter(torch.zeros(d))  # zero-centred: weight 1 + w
        self.k_norm = nn.Parameter(torch.zeros(d))

    def project(self, u, pos):
        cfg = self.cfg
        B, L, _ = u.shape
        nh, nkv, d = cfg.n_head, cfg.n_head_kv, cfg.head_dim
        qg = self.q(u).reshape(B, L, nh, 2 * d)
        q, gate = qg[..., :d], qg[..., d:]
        k = self.k(u).reshape(B, L, nkv, d)
        v = self.v(u).reshape(B, L, nkv, d)
        q = rope(rmsnorm(q, 1 + self.q_norm, cfg.eps), pos, cfg.n_rot, cfg.rope_base)
        k = rope(rmsnorm(k, 1 + self.k_norm, cfg.eps), pos, cfg.n_rot, cfg.rope_base)
        return q, gate, k, v

    def attend(self, q, gate, k, v, mask):
        """q: (B, Lq, nh, d); k, v: (B, Lk, nkv, d); mask: (Lq, Lk) or (B, 1, Lq, Lk) bool."""
        cfg = self.cfg
        B, Lq = q.shape[:2]
        rep = cfg.n_head // cfg.n_head_kv
        kk = k.transpose(1, 2).repeat_interleave(rep, dim=1)
        vv = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask)
        o = o.transpose(1, 2) * torch.sigmoid(gate)
        return self.o(o.reshape(B, Lq, cfg.n_head * cfg.head_dim))

    def forward(self, u, ud=None, diff: DiffBatch | None = None, recurrent=False):
        L = u.shape[1]
        pos = torch.arange(L)
        q, gate, k, v = self.project(u, pos)
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        out = self.attend(q, gate, k, v, causal)
        if ud is None:
            return out, None
        bd = ud.shape[0]
        T = diff.block
        qd, gd, kd, vd = self.project(ud, pos)
        blk = torch.arange(L) // T
        # Block b's queries: clean keys at positions < b·T, block keys of block b.
        clean = pos[None, :] < (blk * T)[:, None]
        same = (blk[:, None] == blk[None, :])[None] & diff.valid[:, None, :]
        mask = torch.cat([clean[None].expand(bd, L, L), same], dim=2)[:, None]
        kk = torch.cat([k[:bd], kd], dim=1)
        vv = torch.cat([v[:bd], vd], dim=1)
        return out, self.attend(qd, gd, kk, vv, mask)


class MoE(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        e, E, ff, fs = cfg.d_model, cfg.n_expert, cfg.ff_exp, cfg.ff_shexp
        self.router = nn.Linear(e, E, bias=False)
        self.gate_exps = nn.Parameter(torch.randn(E, ff, e) * 0.02)
        self.up_exps = nn.Parameter(torch.randn(E, ff, e) * 0.02)
        self.down_exps = nn.Parameter(torch.randn(E, e, ff) * 0.02)
        self.shexp_gate_inp = nn.Parameter(torch.zeros(e))
        self.gate_sh = nn.Linear(e, fs, bias=False)
        self.up_sh = nn.Linear(e, fs, bias=False)
        self.down_sh = nn.Linear(fs, e, bias=False)

    def forward(self, x):
        cfg = self.cfg
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        p = self.router(x).softmax(-1)
        topv, topi = p.topk(cfg.top_k, dim=-1)
        w = topv / topv.sum(-1, keepdim=True).clamp_min(1.0 / 16384)
        out = torch.zeros_like(x)
        flat_e = topi.reshape(-1)
        flat_t = torch.arange(x.shape[0]).repeat_interleave(cfg.top_k)
        flat_w = w.reshape(-1)
        for e in range(cfg.n_expert):
            sel = (flat_e == e).nonzero(as_tuple=True)[0]
            if sel.numel() == 0:
                continue
            tok = flat_t[sel]
            xe = x[tok]
            h = F.silu(xe @ self.gate_exps[e].t()) * (xe @ self.up_exps[e].t())
            out.index_add_(0, tok, (h @ self.down_exps[e].t()) * flat_w[sel, None])
        sh = self.down_sh(F.silu(self.gate_sh(x)) * self.up_sh(x))
        out = out + torch.sigmoid(x @ self.shexp_gate_inp)[:, None] * sh
        # Switch-style balance: E · Σ_e (fraction routed to e) · (mean prob of e).
        frac = torch.zeros(cfg.n_expert, dtype=x.dtype).index_add_(0, flat_e, torch.ones_like(flat_w))
        frac = frac / flat_e.numel()
        aux = cfg.n_expert * (frac * p.mean(0)).sum()
        return out.reshape(shape), aux


class Block(nn.Module):
    def __init__(self, cfg: Config, i: int):
        super().__init__()
        self.cfg = cfg
        self.attn_norm = nn.Parameter(torch.zeros(cfg.d_model))  # zero-centred
        self.post_norm = nn.Parameter(torch.zeros(cfg.d_model))
        self.mixer = GatedAttention(cfg) if cfg.is_attention(i) else GatedDeltaNet(cfg)
        self.moe = MoE(cfg)

    def forward(self, x, xd=None, diff=None, recurrent=False):
        eps = self.cfg.eps
        w1, w2 = 1 + self.attn_norm, 1 + self.post_norm
        ud = None if xd is None else rmsnorm(xd, w1, eps)
        m, md = self.mixer(rmsnorm(x, w1, eps), ud, diff, recurrent)
        h = x + m
        if xd is None:
            f, aux = self.moe(rmsnorm(h, w2, eps))
            return h + f, None, aux
        hd = xd + md
        # One MoE call over both streams (same weights).
        both = torch.cat([h, hd], dim=0)
        f, aux = self.moe(rmsnorm(both, w2, eps))
        return h + f[: h.shape[0]], hd + f[h.shape[0]:], aux


class CloverModel(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.out_norm = nn.Parameter(torch.zeros(cfg.d_model))
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        nn.init.normal_(self.embed.weight, std=std)
        for name, p in self.named_parameters():
            if p.dim() == 2 and name.endswith(".weight") and "embed" not in name:
                nn.init.normal_(p, std=std)
        out_std = std / math.sqrt(2 * self.cfg.n_layer)
        for b in self.blocks:
            nn.init.normal_(b.mixer.out.weight if hasattr(b.mixer, "out") else b.mixer.o.weight,
                            std=out_std)
            nn.init.normal_(b.moe.down_exps, std=out_std)
            nn.init.normal_(b.moe.down_sh.weight, std=out_std)

    def head(self, x):
        return rmsnorm(x, 1 + self.out_norm, self.cfg.eps) @ self.embed.weight.t()

    def forward(self, tokens, diff_tokens=None, diff_valid=None, recurrent=False):
        """tokens (B, L); diff_tokens (bd, L) with blocks of cfg.block (anchor, then
        masks or revealed tokens); returns AR logits, diffusion logits (or None), aux."""
        x = self.embed(tokens)
        xd, diff = None, None
        if diff_tokens is not None:
            xd = self.embed(diff_tokens)
            diff = DiffBatch(diff_valid, self.cfg.block)
        aux = 0.0
        for b in self.blocks:
            x, xd, a = b(x, xd, diff, recurrent)
            aux = aux + a
        logits = self.head(x)
        dlogits = None if xd is None else self.head(xd)
        return logits, dlogits, aux / len(self.blocks)

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
