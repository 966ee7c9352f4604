"""Inputs and packing for scripts/oracle/make_parity_fixtures.sh.

  parity_pack.py inputs WORK N_VOCAB
      writes WORK/seq.u32 (the 256-token logits batch) and WORK/prompt{0..4}.u32
  parity_pack.py pack WORK MODEL OUTDIR PRESET RECIPE SEED N_VOCAB [S0,S1,S2,S3]
      reads llama.cpp's WORK/logits.f32 and WORK/greedy{i}.u32 and writes
      OUTDIR/NAME.json and OUTDIR/NAME.logits.bin, NAME = PRESET-RECIPE, or
      PRESET-RECIPE-sections-S0-S1-S2-S3 for a file synthesised with
      `--rope-sections S0,S1,S2,S3` (recorded as "rope_sections")

The .logits.bin layout (little endian) is named in the JSON:
  "full": n_pos rows of n_vocab f32;
  "top":  per position: lse f32, top_k u32 ids (logit descending, ties by id),
          top_k f32 logits, n_probe f32 logits of `probe_ids`.
"""
import hashlib
import json
import os
import sys

import numpy as np

N_POS = 256
PROMPT_LENS = [1, 4, 9, 16, 33]
N_GREEDY = 48
TOP_K = 32
FULL_ROWS_MAX_VOCAB = 1024


def lcg_tokens(seed, n, n_vocab):
    """The fixed token sequences: a 64-bit LCG (Knuth's MMIX constants)."""
    out, s = [], seed
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append((s >> 33) % n_vocab)
    return out


def n_vocab(model):
    from gguf import GGUFReader

    r = GGUFReader(model)
    f = r.fields["tokenizer.ggml.tokens"]
    return len(f.data)


def inputs(work, nv):
    np.array(lcg_tokens(1, N_POS, nv), dtype="<u4").tofile(os.path.join(work, "seq.u32"))
    for i, n in enumerate(PROMPT_LENS):
        toks = lcg_tokens(1000 + i, n, nv)
        np.array(toks, dtype="<u4").tofile(os.path.join(work, f"prompt{i}.u32"))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def probe_ids(nv):
    return sorted({0, 1, nv // 7, nv // 3, nv // 2, (2 * nv) // 3, nv - 2, nv - 1})


def fixture_name(preset, recipe, sections):
    name = f"{preset}-{recipe}"
    if sections:
        name += "-sections-" + "-".join(str(x) for x in sections)
    return name


def pack(work, model, outdir, preset, recipe, seed, nv, sections=None):
    logits = np.fromfile(os.path.join(work, "logits.f32"), dtype="<f4").reshape(N_POS, nv)
    name = fixture_name(preset, recipe, sections)
    synth = f"clover synth --arch qwen35moe --preset {preset} --recipe {recipe} --seed {seed}"
    if sections:
        synth += " --rope-sections " + ",".join(str(x) for x in sections)
    binname = f"{name}.logits.bin"
    meta = {
        "arch": "qwen35moe",
        "preset": preset,
        "recipe": recipe,
        "seed": seed,
        "synth_command": f"{synth} -o FILE",
        "file_bytes": os.path.getsize(model),
        "sha256": sha256(model),
        "oracle": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36) via scripts/oracle/llama_logits.c: "
        "one batch, f32 K/V cache, flash attention off, CPU",
        "n_vocab": nv,
        "tokens": lcg_tokens(1, N_POS, nv),
    }
    if sections:
        meta["rope_sections"] = sections
    if nv <= FULL_ROWS_MAX_VOCAB:
        meta["logits"] = {"file": binname, "kind": "full"}
        logits.astype("<f4").tofile(os.path.join(outdir, binname))
    else:
        probes = probe_ids(nv)
        meta["logits"] = {"file": binname, "kind": "top", "top_k": TOP_K, "probe_ids": probes}
        parts = []
        l64 = logits.astype(np.float64)
        for row, r64 in zip(logits, l64):
            m = r64.max()
            lse = m + np.log(np.exp(r64 - m).sum())
            order = np.lexsort((np.arange(nv), -row))[:TOP_K]
            parts.append(np.array([lse], dtype="<f4").tobytes())
            parts.append(order.astype("<u4").tobytes())
            parts.append(row[order].astype("<f4").tobytes())
            parts.append(row[probes].astype("<f4").tobytes())
        with open(os.path.join(outdir, binname), "wb") as f:
            f.write(b"".join(parts))
    greedy = []
    for i, n in enumerate(PROMPT_LENS):
        gen = np.fromfile(os.path.join(work, f"greedy{i}.u32"), dtype="<u4").tolist()
        assert len(gen) == N_GREEDY
        greedy.append({"prompt": lcg_tokens(1000 + i, n, nv), "tokens": gen})
    meta["greedy"] = greedy
    with open(os.path.join(outdir, f"{name}.json"), "w") as f:
        json.dump(meta, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "n_vocab":
        print(n_vocab(sys.argv[2]))
    elif cmd == "inputs":
        inputs(sys.argv[2], int(sys.argv[3]))
    elif cmd == "pack":
        w, m, o, p, r, s, nv = sys.argv[2:9]
        sections = [int(x) for x in sys.argv[9].split(",")] if len(sys.argv) > 9 else None
        pack(w, m, o, p, r, int(s), int(nv), sections)
    else:
        sys.exit(f"unknown command {cmd}")
