"""Exports a trained checkpoint to a clover_moe GGUF (docs/DESIGN.md §1) and writes the
reference-logit fixture the Rust tests compare the engine against.

    python3 training/export.py --ckpt training/runs/main/ckpt.pt \
        --out models/clover-tiny-kjv.gguf --fixture tests/fixtures/trained_model.json

Conventions (docs/DESIGN.md §1.2): zero-centred norm weights are written with the +1
baked in (ssm_norm is a plain weight, written as is); ssm_a = −exp(A_log);
GDN value heads are already tiled in the training model (head h reads key
head h % n_k); attn_q interleaves query and gate per head; the output head is
tied to token_embd (no output.weight).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import torch
import gguf
from tokenizers import Tokenizer

from model import CloverModel, Config
from rope_sections import rope_sections
from tokenizer import CHAT_TEMPLATE, vocab_for_gguf

HERE = Path(__file__).parent
ARCH = "clover_moe"


def load(ckpt_path: Path) -> CloverModel:
    ck = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    model = CloverModel(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    model.eval()
    return model, ck


# How a parameter is stored: as is, zero-centred norm (+1 baked in), or
# ssm_a = −exp(A_log).
AS_IS, NORM, NEG_EXP = "as_is", "norm", "neg_exp"
DIFFUSION = ("ssm_conv1d.weight_right", "ssm_bd_logit_scale.weight",
             "ssm_bd_history.weight", "ssm_bd_history.bias")


def block_params(i: int, b, attention: bool) -> list[tuple[str, torch.Tensor, str, bool]]:
    """Block i's (tensor name, parameter, storage, quantizable)."""
    n = lambda s: f"blk.{i}.{s}"
    out = [(n("attn_norm.weight"), b.attn_norm, NORM, False)]
    m = b.mixer
    if attention:
        out += [(n("attn_q.weight"), m.q.weight, AS_IS, True),
                (n("attn_k.weight"), m.k.weight, AS_IS, True),
                (n("attn_v.weight"), m.v.weight, AS_IS, True),
                (n("attn_output.weight"), m.o.weight, AS_IS, True),
                (n("attn_q_norm.weight"), m.q_norm, NORM, False),
                (n("attn_k_norm.weight"), m.k_norm, NORM, False)]
    else:
        out += [(n("attn_qkv.weight"), m.qkv.weight, AS_IS, True),
                (n("attn_gate.weight"), m.z.weight, AS_IS, True),
                (n("ssm_beta.weight"), m.beta.weight, AS_IS, True),
                (n("ssm_alpha.weight"), m.alpha.weight, AS_IS, True),
                (n("ssm_conv1d.weight"), m.conv, AS_IS, False),
                (n("ssm_dt.bias"), m.dt_bias, AS_IS, False),
                (n("ssm_a"), m.a_log, NEG_EXP, False),
                (n("ssm_norm.weight"), m.norm, AS_IS, False),
                (n("ssm_out.weight"), m.out.weight, AS_IS, True),
                (n("ssm_conv1d.weight_right"), m.conv_right, AS_IS, False),
                (n("ssm_bd_logit_scale.weight"), m.bd_scale, AS_IS, False),
                (n("ssm_bd_history.weight"), m.bd_hist_w, AS_IS, False),
                (n("ssm_bd_history.bias"), m.bd_hist_b, AS_IS, False)]
    e = b.moe
    out += [(n("post_attention_norm.weight"), b.post_norm, NORM, False),
            (n("ffn_gate_inp.weight"), e.router.weight, AS_IS, False),
            (n("ffn_gate_exps.weight"), e.gate_exps, AS_IS, True),
            (n("ffn_up_exps.weight"), e.up_exps, AS_IS, True),
            (n("ffn_down_exps.weight"), e.down_exps, AS_IS, True),
            (n("ffn_gate_inp_shexp.weight"), e.shexp_gate_inp, AS_IS, False),
            (n("ffn_gate_shexp.weight"), e.gate_sh.weight, AS_IS, True),
            (n("ffn_up_shexp.weight"), e.up_sh.weight, AS_IS, True),
            (n("ffn_down_shexp.weight"), e.down_sh.weight, AS_IS, True)]
    return out


def params(model: CloverModel) -> list[tuple[str, torch.Tensor, str, bool]]:
    """Every parameter of the model with its tensor name and storage."""
    out = [("token_embd.weight", model.embed.weight, AS_IS, True),
           ("output_norm.weight", model.out_norm, NORM, False)]
    for i, b in enumerate(model.blocks):
        out += block_params(i, b, model.cfg.is_attention(i))
    return out


def stored(p: torch.Tensor, how: str) -> np.ndarray:
    """A parameter as the file stores it (numpy row-major = reversed ggml ne)."""
    t = {AS_IS: p, NORM: 1 + p, NEG_EXP: -p.exp()}[how]
    return t.detach().to(torch.float32).cpu().numpy()


def tensors(model: CloverModel) -> list[tuple[str, np.ndarray, bool]]:
    """(name, array in numpy row-major order = reversed ggml ne, quantizable)."""
    return [(name, stored(p, how), q) for name, p, how, q in params(model)]


def export_gguf(model: CloverModel, tok: Tokenizer, path: Path, qtype: str, name: str,
                arch: str = ARCH, extra: list | None = None) -> None:
    """Writes `model` as a `clover_moe` file, or as `qwen35moe` (no diffusion
    tensors or keys); `extra`: the tensors of an MTP block after the trunk
    (`block_count` + 1, `nextn_predict_layers` 1)."""
    cfg = model.cfg
    w = gguf.GGUFWriter(str(path), arch)
    k = lambda s: f"{arch}.{s}"
    w.add_string("general.name", name)
    w.add_uint32("general.alignment", 32)
    w.add_uint32("general.file_type", 0 if qtype == "f32" else 7)
    w.add_uint32(k("block_count"), cfg.n_layer + (1 if extra else 0))
    if extra:
        w.add_uint32(k("nextn_predict_layers"), 1)
    w.add_uint32(k("context_length"), cfg.context_length)
    w.add_uint32(k("embedding_length"), cfg.d_model)
    w.add_uint32(k("attention.head_count"), cfg.n_head)
    w.add_uint32(k("attention.head_count_kv"), cfg.n_head_kv)
    w.add_uint32(k("attention.key_length"), cfg.head_dim)
    w.add_uint32(k("attention.value_length"), cfg.head_dim)
    w.add_float32(k("attention.layer_norm_rms_epsilon"), cfg.eps)
    w.add_float32(k("rope.freq_base"), cfg.rope_base)
    w.add_uint32(k("rope.dimension_count"), cfg.n_rot)
    # Sections under which llama.cpp rotates every pair, as the training model does.
    w.add_array(k("rope.dimension_sections"), rope_sections(cfg.n_rot))
    w.add_uint32(k("expert_count"), cfg.n_expert)
    w.add_uint32(k("expert_used_count"), cfg.top_k)
    w.add_uint32(k("expert_feed_forward_length"), cfg.ff_exp)
    w.add_uint32(k("expert_shared_feed_forward_length"), cfg.ff_shexp)
    w.add_uint32(k("ssm.conv_kernel"), cfg.conv_left)
    w.add_uint32(k("ssm.state_size"), cfg.ssm_d)
    w.add_uint32(k("ssm.group_count"), cfg.ssm_nk)
    w.add_uint32(k("ssm.time_step_rank"), cfg.ssm_nv)
    w.add_uint32(k("ssm.inner_size"), cfg.ssm_inner)
    w.add_uint32(k("full_attention_interval"), cfg.attn_interval)
    if arch == ARCH:
        w.add_uint32(k("ssm.conv_kernel_right"), cfg.conv_right)
        w.add_uint32(k("diffusion.block_size"), cfg.block)
    tokens, types, merges = vocab_for_gguf(tok)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen35")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", tok.token_to_id("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.eos_token_id", tok.token_to_id("<|im_end|>"))
    w.add_uint32("tokenizer.ggml.padding_token_id", tok.token_to_id("<|endoftext|>"))
    w.add_uint32("tokenizer.ggml.mask_token_id", tok.token_to_id("<|mask|>"))
    w.add_bool("tokenizer.ggml.add_bos_token", False)
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)
    trunk = [t for t in tensors(model) if arch == ARCH or not t[0].endswith(DIFFUSION)]
    for tname, arr, quantizable in trunk + (extra or []):
        if qtype == "q8_0" and quantizable and arr.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(tname, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------
# Reference logits for the Rust fixture test (tests/trained_model.rs).
# ----------------------------------------------------------------------------

N_IDS = 96  # logits compared per row: the argmax plus a fixed spread of ids


def row_ids(v: int, argmax: int) -> list[int]:
    ids = sorted(set([argmax] + [int(x) for x in np.linspace(0, v - 1, N_IDS)]))
    return ids


def ref_rows(logits: torch.Tensor) -> list[dict]:
    out = []
    for row in logits:
        am = int(row.argmax())
        ids = row_ids(row.shape[0], am)
        out.append({"argmax": am, "ids": ids, "logits": [round(float(row[i]), 6) for i in ids]})
    return out


@torch.no_grad()
def fixture(model: CloverModel, tok: Tokenizer, text: str, gguf_path: Path) -> dict:
    """AR logits of a held-out text, and diffusion logits of three blocks at
    position 32: all masks, a shortened block (5 drafts), part revealed."""
    m64 = CloverModel(model.cfg).double()
    m64.load_state_dict(model.state_dict())
    m64.eval()
    cfg = model.cfg
    T = cfg.block
    ids = tok.encode(text, add_special_tokens=False).ids
    n = 2 * T
    assert len(ids) >= n + T, "fixture text too short"
    seq = torch.tensor(ids[: n + T])[None]
    ar_logits, _, _ = m64(seq)
    blocks = []
    for kind, length, reveal in [("masks", T, []), ("short", 6, []), ("revealed", T, [2, 3, 7, 11])]:
        dt = seq.clone()
        dt[0, n + 1 :] = cfg.mask_id
        for r in reveal:
            dt[0, n + r] = seq[0, n + r]
        valid = torch.ones_like(seq, dtype=torch.bool)
        valid[0, n + length :] = False
        _, dl, _ = m64(seq, dt, valid)
        blocks.append({"kind": kind, "pos": n, "tokens": dt[0, n : n + length].tolist(),
                       "rows": ref_rows(dl[0, n : n + length - 1])})
    return {
        "about": "reference logits of the training code (training/model.py, float64) for the "
                 "shipped model; written by training/export.py",
        "model_sha256": hashlib.sha256(gguf_path.read_bytes()).hexdigest(),
        "text": text,
        "tokens": ids[: n + T],
        "ar": ref_rows(ar_logits[0]),
        "diffusion": blocks,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", default=str(HERE / "runs" / "main" / "ckpt.pt"))
    p.add_argument("--data", default=str(HERE / "data"))
    p.add_argument("--out", required=True)
    p.add_argument("--type", choices=["f32", "q8_0"], default="f32")
    p.add_argument("--fixture", default="")
    p.add_argument("--name", default="clover-tiny-kjv")
    a = p.parse_args()
    model, ck = load(Path(a.ckpt))
    tok = Tokenizer.from_file(str(Path(a.data) / "tokenizer.json"))
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    export_gguf(model, tok, out, a.type, a.name)
    print(f"wrote {out} ({out.stat().st_size:,} bytes, {model.n_params():,} parameters, "
          f"step {ck['step']})")
    if a.fixture:
        prompts = json.loads((Path(a.data) / "heldout_prompts.json").read_text())
        held = (Path(a.data) / "heldout.txt").read_text()
        text = held[:1200]
        fx = fixture(model, tok, text, out)
        fx["chat_prompt"] = "<|im_start|>user\nRead me Psalm 23.<|im_end|>\n<|im_start|>assistant\n"
        fx["chat_prompt_tokens"] = tok.encode(fx["chat_prompt"], add_special_tokens=False).ids
        fx["heldout_prompt"] = prompts[0]
        Path(a.fixture).parent.mkdir(parents=True, exist_ok=True)
        Path(a.fixture).write_text(json.dumps(fx, separators=(",", ":")) + "\n")
        print(f"wrote {a.fixture} ({Path(a.fixture).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
