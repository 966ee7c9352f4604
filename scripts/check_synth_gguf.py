#!/usr/bin/env python3
"""Independent check of a `clover synth` file with gguf-py's GGUFReader.

Usage: check_synth_gguf.py FILE [FILE...]
Checks: the §1.1 keys exist with consistent values, the tensor set matches
§1.2 for the architecture and block count, shapes follow the hyperparameters,
and every F32/F16/BF16 tensor is finite.
"""
import sys

import numpy as np
from gguf import GGUFReader


def field(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    if len(f.types) == 1 and f.types[0].name == "STRING":
        return bytes(f.parts[f.data[0]]).decode()
    if f.types[0].name == "ARRAY":
        return [f.parts[i].tolist()[0] if f.types[-1].name != "STRING" else bytes(f.parts[i]).decode() for i in f.data]
    return f.parts[f.data[0]].tolist()[0]


def check(path):
    r = GGUFReader(path)
    arch = field(r, "general.architecture")
    a = lambda k: field(r, f"{arch}.{k}")
    n_layer, d = a("block_count"), a("embedding_length")
    keys = ["context_length", "attention.head_count", "attention.head_count_kv", "attention.key_length",
            "attention.value_length", "attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count",
            "rope.dimension_sections", "expert_count", "expert_used_count", "expert_feed_forward_length",
            "expert_shared_feed_forward_length", "ssm.conv_kernel", "ssm.state_size", "ssm.group_count",
            "ssm.time_step_rank", "ssm.inner_size", "full_attention_interval"]
    for k in keys:
        assert a(k) is not None, f"missing {arch}.{k}"
    clover = arch == "clover_moe"
    for k in ["clover_moe.ssm.conv_kernel_right", "clover_moe.diffusion.block_size", "tokenizer.ggml.mask_token_id"]:
        assert (field(r, k) is not None) == clover, k
    vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    assert field(r, "tokenizer.ggml.model") == "gpt2" and field(r, "tokenizer.ggml.pre") == "qwen35"
    assert len(r.fields["tokenizer.ggml.token_type"].data) == vocab
    toks = field(r, "tokenizer.ggml.tokens")
    assert toks[field(r, "tokenizer.ggml.bos_token_id")] == "<|endoftext|>"
    assert toks[field(r, "tokenizer.ggml.eos_token_id")] == "<|im_end|>"
    if clover:
        assert toks[field(r, "tokenizer.ggml.mask_token_id")] == "<|mask|>"
    hd, nh, nkv = a("attention.key_length"), a("attention.head_count"), a("attention.head_count_kv")
    st, ng, nv = a("ssm.state_size"), a("ssm.group_count"), a("ssm.time_step_rank")
    ne, ff, ffs = a("expert_count"), a("expert_feed_forward_length"), a("expert_shared_feed_forward_length")
    ch = 2 * ng * st + nv * st
    want = {"token_embd.weight": [d, vocab], "output_norm.weight": [d], "output.weight": [d, vocab]}
    for i in range(n_layer):
        b = f"blk.{i}."
        want |= {b + "attn_norm.weight": [d], b + "post_attention_norm.weight": [d],
                 b + "ffn_gate_inp.weight": [d, ne], b + "ffn_gate_exps.weight": [d, ff, ne],
                 b + "ffn_up_exps.weight": [d, ff, ne], b + "ffn_down_exps.weight": [ff, d, ne],
                 b + "ffn_gate_inp_shexp.weight": [d], b + "ffn_gate_shexp.weight": [d, ffs],
                 b + "ffn_up_shexp.weight": [d, ffs], b + "ffn_down_shexp.weight": [ffs, d]}
        if (i + 1) % a("full_attention_interval") == 0:
            want |= {b + "attn_q.weight": [d, 2 * nh * hd], b + "attn_k.weight": [d, nkv * hd],
                     b + "attn_v.weight": [d, nkv * hd], b + "attn_output.weight": [nh * hd, d],
                     b + "attn_q_norm.weight": [hd], b + "attn_k_norm.weight": [hd]}
        else:
            want |= {b + "attn_qkv.weight": [d, ch], b + "attn_gate.weight": [d, nv * st],
                     b + "ssm_beta.weight": [d, nv], b + "ssm_alpha.weight": [d, nv],
                     b + "ssm_conv1d.weight": [a("ssm.conv_kernel"), ch], b + "ssm_dt.bias": [nv],
                     b + "ssm_a": [nv], b + "ssm_norm.weight": [st], b + "ssm_out.weight": [nv * st, d]}
            if clover:
                want |= {b + "ssm_conv1d.weight_right": [field(r, "clover_moe.ssm.conv_kernel_right"), ch],
                         b + "ssm_bd_logit_scale.weight": [nv], b + "ssm_bd_history.weight": [nv],
                         b + "ssm_bd_history.bias": [nv]}
    got = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    assert set(got) == set(want), f"extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for k, v in want.items():
        assert got[k] == v, f"{k}: {got[k]} != {v}"
    n_params = sum(int(np.prod(v)) for v in got.values())
    for t in r.tensors:
        if t.tensor_type.name in ("F32", "F16"):
            assert np.isfinite(np.asarray(t.data, dtype=np.float32)).all(), t.name
    print(f"{path}: ok: {arch}, {len(got)} tensors, {n_params} parameters, vocab {vocab}")


for p in sys.argv[1:]:
    check(p)
