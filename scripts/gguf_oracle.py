#!/usr/bin/env python3
"""Writes dequantisation (and, where gguf-py has one, quantisation) fixtures
from the PyPI package `gguf` (llama.cpp's own numpy code), the outside oracle
for our block formats.

For each type: `<T>.bin` holds deterministic blocks (random bits with finite
scale fields), `<T>.f32` what gguf-py dequantises them to. For the types gguf-py
can quantise: `<T>.qin.f32` (input) and `<T>.qout.bin` (its quantisation).

Usage: python3 scripts/gguf_oracle.py OUT_DIR   (pip install gguf numpy)
"""
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# type -> (block bytes, elements per block, byte offsets of f16 scale fields)
LAYOUT = {
    "Q4_0": (18, 32, [0]),
    "Q4_1": (20, 32, [0, 2]),
    "Q5_0": (22, 32, [0]),
    "Q5_1": (24, 32, [0, 2]),
    "Q8_0": (34, 32, [0]),
    "Q2_K": (84, 256, [80, 82]),
    "Q3_K": (110, 256, [108]),
    "Q4_K": (144, 256, [0, 2]),
    "Q5_K": (176, 256, [0, 2]),
    "Q6_K": (210, 256, [208]),
    "IQ4_NL": (18, 32, [0]),
    "IQ4_XS": (136, 256, [0]),
}
QUANTISABLE = ["BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]
N_BLOCKS = 19  # an awkward count


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)
    for name, (size, elems, scale_offsets) in LAYOUT.items():
        raw = rng.integers(0, 256, size=(N_BLOCKS, size), dtype=np.uint8)
        for off in scale_offsets:
            scales = (rng.standard_normal(N_BLOCKS) * 0.05).astype(np.float16)
            raw[:, off:off + 2] = scales.view(np.uint8).reshape(N_BLOCKS, 2)
        data = raw.reshape(-1)
        deq = quants.dequantize(data, T[name]).astype(np.float32).reshape(-1)
        assert deq.size == N_BLOCKS * elems and np.all(np.isfinite(deq)), name
        (out / f"{name}.bin").write_bytes(data.tobytes())
        (out / f"{name}.f32").write_bytes(deq.astype("<f4").tobytes())
    # Float types: the bits themselves, from random floats.
    n = 333
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    f16 = x.astype(np.float16)
    (out / "F16.bin").write_bytes(f16.tobytes())
    (out / "F16.f32").write_bytes(quants.dequantize(f16.view(np.uint8), T.F16).astype("<f4").tobytes())
    bf16 = (x.view(np.uint32) >> 16).astype(np.uint16)
    (out / "BF16.bin").write_bytes(bf16.tobytes())
    (out / "BF16.f32").write_bytes(quants.dequantize(bf16.view(np.uint8), T.BF16).astype("<f4").tobytes())
    # Quantisation oracle, on inputs with a wide spread and some exact zeros.
    for name in QUANTISABLE:
        elems = 1 if name == "BF16" else 32
        x = (rng.standard_normal(elems * N_BLOCKS) * rng.choice([0.01, 1.0, 40.0], elems * N_BLOCKS)).astype(np.float32)
        x[:7] = 0.0
        q = quants.quantize(x.reshape(1, -1), T[name])
        (out / f"{name}.qin.f32").write_bytes(x.astype("<f4").tobytes())
        (out / f"{name}.qout.bin").write_bytes(np.ascontiguousarray(q).view(np.uint8).tobytes())


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
