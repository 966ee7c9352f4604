"""Makes the converter fixtures: a Qwen3.5-MoE checkpoint built with
transformers, converted by llama.cpp's own convert_hf_to_gguf.py, and
transformers' answers on it.

Run through scripts/oracle/make_converter_fixtures.sh, which provides
transformers 5.23.0, PyTorch and the converter of llama.cpp 0c1e570 (from the
llama-cpp-python 0.3.36 source package). Writes into OUT (tests/fixtures/converter):

- real-f32.gguf.gz, real-bf16.gguf.gz: the converter's output (`--outtype f32`
  and `bf16`), gzipped byte for byte;
- reference.json: the configuration, transformers' greedy ids for a fixed
  prompt, the teacher-forced logits (in logits.f32), and the per-window NLL of
  a short text as `clover perplexity` scores it.

The checkpoint: `Qwen3_5MoeForCausalLM`, random init, scaled down from the
config class's defaults -- hidden 64, 8 layers with full attention at 3 and 7
(`layer_types`), 8 query / 2 KV heads of 64, Gated DeltaNet with 4 key / 8
value heads of 16 (so the converter's V-head reordering is exercised), 16
experts top-4 of width 32 plus a shared expert of 32, rope theta 1e7 with
partial rotary 0.25 and mrope sections [3, 3, 2], untied output head, and an
`mtp.*` block (`mtp_num_hidden_layers: 1`) laid out as real checkpoints lay it
out: `mtp.fc`, the two pre-fc norms, `mtp.norm` and one decoder layer.

The vocabulary is Qwen2's 151936 tokens (rebuilt from llama.cpp's
ggml-vocab-qwen35.gguf test vocabulary: its tokens, merges and the three
control tokens), which the converter recognises by its pre-tokenizer hash and
writes as `qwen2`. So that the stored files stay small, only the embedding and
output rows of the tokens the fixtures use (and the control tokens) are
random; every other row is zero, which both files compress to nothing. Every
other weight is random, at a scale (initializer range 0.1, norms 1 + N(0,
0.1)) where every layer changes the logits.

A near-tie is a discontinuity, not an error: where two experts' router
logits (the 4th and 5th best) or two tokens' logits are within rounding of
each other, any two correct programs may choose differently. The script
takes the first seed from SEED on whose runs here (f32 and BF16 arithmetic,
greedy, teacher-forced and perplexity windows) have no router gap below
2e-5 (clover's router logits differ from transformers' by ~1e-6), no greedy top-2 gap below 1e-3 and no greedy token outside the random
rows, and records the seed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

QWEN2_PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

PROMPT = "In the beginning God created the heaven and the earth."
TEXT = (
    "And the earth was without form, and void; and darkness was upon the face of the deep. "
    "And the Spirit of God moved upon the face of the waters. And God said, Let there be light: "
    "and there was light. And God saw the light, that it was good: and God divided the light from "
    "the darkness. And God called the light Day, and the darkness he called Night. And the evening "
    "and the morning were the first day. And God said, Let there be a firmament in the midst of the "
    "waters, and let it divide the waters from the waters. And God made the firmament, and divided "
    "the waters which were under the firmament from the waters which were above the firmament: and "
    "it was so. And God called the firmament Heaven. And the evening and the morning were the second "
    "day. And God said, Let the waters under the heaven be gathered together unto one place, and let "
    "the dry land appear: and it was so. And God called the dry land Earth; and the gathering "
    "together of the waters called he Seas: and God saw that it was good.\n"
)
N_GREEDY = 32
N_FORCED = 64
PPL_CTX = 64
SEED = 4242


def build_tokenizer(vocab_gguf: Path) -> PreTrainedTokenizerFast:
    r = gguf.GGUFReader(str(vocab_gguf))
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in r.fields["tokenizer.ggml.merges"].contents()]
    vocab = {t: i for i, t in enumerate(toks) if types[i] == 1}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    control = [i for i, t in enumerate(types) if t == 3]
    tok.add_special_tokens([AddedToken(toks[i], special=True, normalized=False) for i in control])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
    )


def config() -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(
        vocab_size=151936,
        hidden_size=64,
        num_hidden_layers=8,
        layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3
        + ["full_attention"],
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=16,
        num_experts_per_tok=4,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
        max_position_embeddings=4096,
        initializer_range=0.1,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=151645,
        # No pad token: transformers zeroes the hidden state of pad tokens.
        pad_token_id=None,
    )


def randomise(model: Qwen3_5MoeForCausalLM, active: list[int], g: torch.Generator) -> None:
    """Norms and GDN vectors away from their neutral init; embedding and
    output rows zero outside `active`."""
    keep = torch.zeros(model.config.vocab_size, dtype=torch.bool)
    keep[active] = True
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("norm.weight"):
                # zero-centred: the model multiplies by (1 + w)
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("dt_bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            elif name in ("model.embed_tokens.weight", "lm_head.weight"):
                p[~keep] = 0.0


def mtp_tensors(state: dict[str, torch.Tensor], g: torch.Generator, hidden: int) -> dict:
    """An MTP block named as real Qwen3.5 checkpoints name it: one decoder
    layer shaped as the last full-attention layer, the fc over [emb; hidden],
    and its norms."""
    out = {}
    src = "model.layers.7."
    for k, v in state.items():
        if k.startswith(src):
            t = 0.1 * torch.randn(v.shape, generator=g)
            out["mtp.layers.0." + k[len(src):]] = t.to(v.dtype).contiguous()
    out["mtp.fc.weight"] = (0.1 * torch.randn(hidden, 2 * hidden, generator=g)).contiguous()
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        out[f"mtp.{n}.weight"] = (0.1 * torch.randn(hidden, generator=g)).contiguous()
    return out


def greedy(model, ids: list[int], n: int) -> tuple[list[int], float, list[float]]:
    seq = list(ids)
    gaps = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1].double()
            top = torch.topk(logits, 2).values
            gaps.append(float(top[0] - top[1]))
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], min(gaps), gaps


def bf16_jitter(model, forced: list[int], logits: np.ndarray, active: list[int]) -> dict:
    """How far BF16 arithmetic moves the logits when the f32 values it rounds
    differ in their last bits, as any two correct programs' sums do: the
    emulation rerun with each product's input scaled by (1 + 1e-6 N(0, 1))
    before its BF16 rounding, three times. A value near a rounding edge then
    lands on the other side, one element moves by a BF16 step, and this
    random model carries it on. Per run: the mean over positions of the
    largest |difference| in the row, and the largest overall. Also the same
    for the emulation without the activations' rounding (weights rounded
    only): a program that skipped that rounding must fall outside."""
    rounded = torch.nn.functional.linear
    ref = logits[:, active]

    def run(linear) -> tuple[float, float]:
        torch.nn.functional.linear = linear
        try:
            with torch.no_grad():
                out = model(torch.tensor([forced])).logits[0].float().numpy()[:, active]
        finally:
            torch.nn.functional.linear = rounded
        d = np.abs(out - ref).max(axis=1)
        return float(d.mean()), float(d.max())

    runs = []
    for k in range(3):
        gen = torch.Generator().manual_seed(k)

        def jittered(x, w, b=None):
            return rounded(x * (1 + 1e-6 * torch.randn(x.shape, generator=gen)), w, b)

        runs.append(run(jittered))
    # The weights are rounded already; this skips only the activations' rounding.
    plain = torch.nn.functional.linear.__wrapped__
    weights_only = run(plain)
    return {
        "row_max_mean": max(r[0] for r in runs),
        "max": max(r[1] for r in runs),
        "weights_only_row_max_mean": weights_only[0],
    }


def window_nll(model, tokens: list[int], c: int) -> list[float]:
    """Mean NLL of each window's second half, as clover perplexity scores it."""
    out = []
    with torch.no_grad():
        for w in range(len(tokens) // c):
            win = tokens[w * c:(w + 1) * c]
            logp = torch.log_softmax(model(torch.tensor([win])).logits[0].double(), dim=-1)
            nll = [-float(logp[j, win[j + 1]]) for j in range(c // 2, c - 1)]
            out.append(sum(nll) / len(nll))
    return out


# The tensors the converter stores as BF16 with `--outtype bf16` (the others,
# norms, conv taps, A, dt bias, the router and the shared expert's gate, stay
# F32), by their transformers names.
BF16_WEIGHTS = (
    "embed_tokens.weight", "lm_head.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
    "o_proj.weight", "in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
    "in_proj_a.weight", "out_proj.weight", "experts.gate_up_proj", "experts.down_proj",
    "shared_expert.gate_proj.weight", "shared_expert.up_proj.weight",
    "shared_expert.down_proj.weight",
)


class Bf16Arithmetic:
    """The BF16 file's arithmetic in f32 PyTorch, as ggml does it: every
    weight the file stores as BF16 rounded to BF16, and the activations a
    product with such a weight reads rounded to BF16 too (ggml's BF16 dot
    converts its input row, then sums products in f32). The embedding lookup
    reads rounded rows and rounds nothing else."""

    def __init__(self, model):
        self.model = model
        self.linear = torch.nn.functional.linear

    def __enter__(self):
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                if name.endswith(BF16_WEIGHTS):
                    p.copy_(p.to(torch.bfloat16).float())
                    if not name.endswith("embed_tokens.weight"):
                        p.bf16_operand = True
        linear = self.linear

        def rounded(x, w, b=None):
            if getattr(w, "bf16_operand", False) or getattr(w, "_base", None) is not None and getattr(
                w._base, "bf16_operand", False
            ):
                x = x.to(torch.bfloat16).float()
            return linear(x, w, b)

        rounded.__wrapped__ = linear
        torch.nn.functional.linear = rounded
        return self.model

    def __exit__(self, *exc):
        torch.nn.functional.linear = self.linear


class RouterGaps:
    """The smallest gap between the k-th and (k+1)-th router logit seen."""

    def __init__(self, model):
        self.min = math.inf
        self.handles = [
            m.register_forward_hook(self.hook)
            for n, m in model.named_modules()
            if n.endswith("mlp.gate")
        ]

    def hook(self, module, args, output):
        top = torch.topk(output[0].double(), module.top_k + 1, dim=-1).values
        self.min = min(self.min, float((top[:, -2] - top[:, -1]).min()))


def main() -> None:
    converter, vocab_gguf, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    for seed in range(SEED, SEED + 50):
        ref = make(converter, vocab_gguf, out, seed)
        if ref is not None:
            return
    raise SystemExit("no seed without near-ties")


def make(converter: Path, vocab_gguf: Path, out: Path, seed: int) -> dict | None:
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)
    ckpt = work / "checkpoint"
    ckpt.mkdir(parents=True)
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)

    tok = build_tokenizer(vocab_gguf)
    prompt_ids = tok.encode(PROMPT, add_special_tokens=False)
    text_ids = tok.encode(TEXT, add_special_tokens=False)
    control = [151643, 151644, 151645]
    active = sorted(set(prompt_ids) | set(text_ids) | set(control))

    cfg = config()
    model = Qwen3_5MoeForCausalLM(cfg).eval()
    randomise(model, active, g)
    model.save_pretrained(ckpt, safe_serialization=True)
    tok.save_pretrained(ckpt)
    # The MTP block: real checkpoints carry it, transformers does not run it.
    st = ckpt / "model.safetensors"
    state = load_file(str(st))
    state.update(mtp_tensors(state, g, cfg.hidden_size))
    save_file(state, str(st), metadata={"format": "pt"})
    cj = json.loads((ckpt / "config.json").read_text())
    cj["mtp_num_hidden_layers"] = 1
    (ckpt / "config.json").write_text(json.dumps(cj, indent=2))

    # The reference, from the model as saved.
    # Eager experts: their products go through F.linear, which Bf16Arithmetic rounds.
    ref_model = Qwen3_5MoeForCausalLM.from_pretrained(
        ckpt, dtype=torch.float32, experts_implementation="eager"
    ).eval()
    routers = RouterGaps(ref_model)
    ids, min_gap, _ = greedy(ref_model, prompt_ids, N_GREEDY)
    forced = (prompt_ids + text_ids)[:N_FORCED]
    with torch.no_grad():
        logits = ref_model(torch.tensor([forced])).logits[0].float().numpy()
    inactive = np.setdiff1d(np.arange(cfg.vocab_size), np.array(active))
    assert np.all(logits[:, inactive] == 0.0), "zero output rows give zero logits"
    logits[:, active].astype("<f4").tofile(out / "logits.f32")
    nll = window_nll(ref_model, text_ids, PPL_CTX)
    with Bf16Arithmetic(ref_model) as bf16_model:
        ids_bf16, gap_bf16, gaps_bf16 = greedy(bf16_model, prompt_ids, N_GREEDY)
        with torch.no_grad():
            logits_bf16 = bf16_model(torch.tensor([forced])).logits[0].float().numpy()
        nll_bf16 = window_nll(bf16_model, text_ids, PPL_CTX)
        jitter = bf16_jitter(bf16_model, forced, logits_bf16, active)
    logits_bf16[:, active].astype("<f4").tofile(out / "logits_bf16.f32")
    bf16_effect = float(np.abs(logits_bf16 - logits).max())
    print(f"seed {seed}: router gap {routers.min:.2e}, greedy gaps {min_gap:.2e} {gap_bf16:.2e}")
    if routers.min < 2e-5 or min(min_gap, gap_bf16) < 1e-3 or not set(ids + ids_bf16) <= set(active):
        return None

    for outtype in ("f32", "bf16"):
        gg = work / f"real-{outtype}.gguf"
        subprocess.run(
            [sys.executable, str(converter), str(ckpt), "--outtype", outtype, "--outfile", str(gg)],
            check=True,
        )
        with open(gg, "rb") as src, gzip.GzipFile(
            out / f"real-{outtype}.gguf.gz", "wb", compresslevel=9, mtime=0
        ) as dst:
            shutil.copyfileobj(src, dst)

    ref = {
        "about": "transformers 5.23.0 on a random Qwen3_5MoeForCausalLM; the GGUFs are llama.cpp "
        "0c1e570's convert_hf_to_gguf.py output; written by scripts/oracle/make_converter_fixtures.sh",
        "seed": seed,
        "min_router_gap": routers.min,
        "config": cj,
        "files": {
            f"real-{t}.gguf": {
                "sha256": hashlib.sha256((work / f"real-{t}.gguf").read_bytes()).hexdigest(),
                "bytes": (work / f"real-{t}.gguf").stat().st_size,
            }
            for t in ("f32", "bf16")
        },
        "prompt": PROMPT,
        "prompt_ids": prompt_ids,
        "greedy_ids": ids,
        "greedy_min_top2_gap": min_gap,
        "forced_ids": forced,
        "logits_columns": active,
        "logits_file": "logits.f32",
        "text": TEXT,
        "text_ids": text_ids,
        "ppl_ctx": PPL_CTX,
        "window_nll": nll,
        "ppl": math.exp(sum(nll) / len(nll)),
        "bf16": {
            "about": "the BF16 file's arithmetic emulated in f32 (Bf16Arithmetic)",
            "greedy_ids": ids_bf16,
            "greedy_min_top2_gap": gap_bf16,
            "greedy_top2_gaps": gaps_bf16,
            "jitter": jitter,
            "logits_file": "logits_bf16.f32",
            "max_abs_diff_from_f32": bf16_effect,
            "window_nll": nll_bf16,
            "ppl": math.exp(sum(nll_bf16) / len(nll_bf16)),
        },
    }
    (out / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"greedy min top-2 gap {min_gap:.4f}; ppl {ref['ppl']:.6f}; active rows {len(active)}")
    print(f"bf16: greedy gap {gap_bf16:.4f}, ppl {ref['bf16']['ppl']:.6f}, |bf16 - f32| {bf16_effect:.3e}")
    return ref


if __name__ == "__main__":
    main()
