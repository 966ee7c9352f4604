#!/usr/bin/env python3
"""Per-layer activation statistics of a synthetic qwen35moe / clover_moe file
(F32/F16/BF16 tensors only), from a plain numpy forward written from docs/DESIGN.md §2.

Usage: synth_activations.py FILE [N_TOKENS]
       synth_activations.py FILE --greedy ID,ID,... N   (greedy continuation)
Prints, per layer, the RMS of the mixer output, the MoE output and the
residual stream, then the std of the final logits. Used to check that the
`clover synth` weight scales keep activations finite and spread.
"""
import sys

import numpy as np
from gguf import GGUFReader


def load(path):
    r = GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    hp = {}
    for k, f in r.fields.items():
        if k.startswith(arch + ".") and f.types[0].name != "ARRAY":
            hp[k[len(arch) + 1:]] = f.parts[f.data[0]].tolist()[0]
    w = {}
    for t in r.tensors:
        a = np.asarray(t.data)
        if t.tensor_type.name == "BF16":
            a = (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        w[t.name] = a.astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
    return hp, w


def rms_norm(x, wt, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * wt


def silu(x):
    return x / (1 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def l2n(x, eps):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)


def gdn(u, w, b, hp, eps):
    T = u.shape[0]
    st, ng, nv = hp["ssm.state_size"], hp["ssm.group_count"], hp["ssm.time_step_rank"]
    mixed = u @ w[b + "attn_qkv.weight"].T
    z = u @ w[b + "attn_gate.weight"].T
    beta = 1 / (1 + np.exp(-(u @ w[b + "ssm_beta.weight"].T)))
    g = softplus(u @ w[b + "ssm_alpha.weight"].T + w[b + "ssm_dt.bias"]) * w[b + "ssm_a"]
    cw = w[b + "ssm_conv1d.weight"]  # [C, K]
    K = cw.shape[1]
    pad = np.concatenate([np.zeros((K - 1, mixed.shape[1]), np.float32), mixed])
    c = silu(sum(cw[:, j] * pad[j:j + T] for j in range(K)))
    q = l2n(c[:, :ng * st].reshape(T, ng, st), eps) / np.sqrt(st)
    k = l2n(c[:, ng * st:2 * ng * st].reshape(T, ng, st), eps)
    v = c[:, 2 * ng * st:].reshape(T, nv, st)
    S = np.zeros((nv, st, st), np.float32)
    o = np.zeros((T, nv, st), np.float32)
    for t in range(T):
        for h in range(nv):
            kh = h % ng
            S[h] *= np.exp(g[t, h])
            m = S[h].T @ k[t, kh]
            d = beta[t, h] * (v[t, h] - m)
            S[h] += np.outer(k[t, kh], d)
            o[t, h] = S[h].T @ q[t, kh]
    o = rms_norm(o, w[b + "ssm_norm.weight"], eps) * silu(z.reshape(T, nv, st))
    return o.reshape(T, -1) @ w[b + "ssm_out.weight"].T


def attention(u, w, b, hp, eps):
    T = u.shape[0]
    nh, nkv, hd = hp["attention.head_count"], hp["attention.head_count_kv"], hp["attention.key_length"]
    nrot, base = hp["rope.dimension_count"], hp["rope.freq_base"]
    qg = (u @ w[b + "attn_q.weight"].T).reshape(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (u @ w[b + "attn_k.weight"].T).reshape(T, nkv, hd)
    v = (u @ w[b + "attn_v.weight"].T).reshape(T, nkv, hd)
    q = rms_norm(q, w[b + "attn_q_norm.weight"], eps)
    k = rms_norm(k, w[b + "attn_k_norm.weight"], eps)
    half = nrot // 2
    theta = np.arange(T)[:, None] * base ** (-2 * np.arange(half) / nrot)
    cos, sin = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]

    def rope(x):
        x = x.copy()
        a, bb = x[..., :half].copy(), x[..., half:nrot].copy()
        x[..., :half], x[..., half:nrot] = a * cos - bb * sin, bb * cos + a * sin
        return x

    q, k = rope(q), rope(k)
    out = np.zeros((T, nh, hd), np.float32)
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for h in range(nh):
        s = q[:, h] @ k[:, h * nkv // nh].T / np.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, h] = p @ v[:, h * nkv // nh]
    out = out / (1 + np.exp(-gate))
    return out.reshape(T, -1) @ w[b + "attn_output.weight"].T


def moe(u, w, b, hp):
    n_used = hp["expert_used_count"]
    logits = u @ w[b + "ffn_gate_inp.weight"].T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.zeros_like(u)
    ge, ue, de = w[b + "ffn_gate_exps.weight"], w[b + "ffn_up_exps.weight"], w[b + "ffn_down_exps.weight"]
    for t in range(u.shape[0]):
        top = np.argsort(-p[t])[:n_used]
        wts = p[t, top] / max(p[t, top].sum(), 6.1e-5)
        for e, we in zip(top, wts):
            out[t] += we * (de[e] @ (silu(ge[e] @ u[t]) * (ue[e] @ u[t])))
    sg = 1 / (1 + np.exp(-(u @ w[b + "ffn_gate_inp_shexp.weight"])))
    sh = (silu(u @ w[b + "ffn_gate_shexp.weight"].T) * (u @ w[b + "ffn_up_shexp.weight"].T)) @ w[b + "ffn_down_shexp.weight"].T
    return out + sg[:, None] * sh


def forward(hp, w, toks, verbose=False):
    eps = hp["attention.layer_norm_rms_epsilon"]
    x = w["token_embd.weight"][toks]
    rms = lambda a: float(np.sqrt((a * a).mean()))
    if verbose:
        print(f"embedding rms {rms(x):.3f}")
    for il in range(hp["block_count"]):
        b = f"blk.{il}."
        u = rms_norm(x, w[b + "attn_norm.weight"], eps)
        attn = (il + 1) % hp["full_attention_interval"] == 0
        m = attention(u, w, b, hp, eps) if attn else gdn(u, w, b, hp, eps)
        h = x + m
        f = moe(rms_norm(h, w[b + "post_attention_norm.weight"], eps), w, b, hp)
        x = h + f
        if verbose:
            kind = "attn" if attn else "gdn "
            print(f"layer {il:2d} {kind}: mixer rms {rms(m):.3f}, moe rms {rms(f):.3f}, residual rms {rms(x):.3f}")
    logits = rms_norm(x, w["output_norm.weight"], eps) @ w["output.weight"].T
    assert np.isfinite(logits).all()
    return logits


def main():
    hp, w = load(sys.argv[1])
    if len(sys.argv) > 2 and sys.argv[2] == "--greedy":
        # synth_activations.py FILE --greedy ID,ID,... N: greedy continuation ids
        toks = [int(t) for t in sys.argv[3].split(",")]
        for _ in range(int(sys.argv[4])):
            toks.append(int(np.argmax(forward(hp, w, np.array(toks))[-1])))
        print(",".join(map(str, toks)))
        return
    T = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    rng = np.random.default_rng(0)
    toks = rng.integers(0, w["token_embd.weight"].shape[0] - 300, T)
    logits = forward(hp, w, toks, verbose=True)
    print(f"logits std {float(logits.std(-1).mean()):.3f}, max |logit| {float(np.abs(logits).max()):.2f}")


if __name__ == "__main__":
    main()
