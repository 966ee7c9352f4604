#!/usr/bin/env python3
"""Writes quantisation fixtures from ggml's own C code (libggml-base, built
from the llama.cpp sources), for the paths the gguf-py oracle cannot check:
the importance-weighted searches (`quantize_q4_0` ... `quantize_iq4_nl` with
quant_weights), IQ4_NL's reference quantiser and Q8_1's (which stores s).

For each case NAME: `NAME.qin.f32` (one row), `NAME.imatrix.f32` (when
weighted) and `NAME.qout.bin` (ggml's bytes).

It also records ggml's scalar dot products (`ggml_vec_dot_T_q8_x_generic`
in libggml-cpu, next to libggml-base) on ggml-quantised rows: `T.dot.w.bin`,
`T.dot.a.bin` and `T.dot.f32` (the generic result, then ggml's SIMD result).

Usage: python3 scripts/ggml_c_oracle.py OUT_DIR LIBGGML_BASE_SO
"""
import ctypes
import sys
from pathlib import Path

import numpy as np

BLOCK_BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24, "IQ4_NL": 18, "Q8_1": 36}
N_BLOCKS = 23
N = 32 * N_BLOCKS
F32P = ctypes.POINTER(ctypes.c_float)


def ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def main(out: Path, lib_path: str) -> None:
    lib = ctypes.CDLL(lib_path)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)

    def row() -> np.ndarray:
        x = (rng.standard_normal(N) * rng.choice([0.01, 1.0, 40.0], N)).astype(np.float32)
        x[:7] = 0.0
        x[64:96] = 0.75  # a constant block
        return x

    def save(name, x, q, w=None):
        (out / f"{name}.qin.f32").write_bytes(x.astype("<f4").tobytes())
        (out / f"{name}.qout.bin").write_bytes(q.tobytes())
        if w is not None:
            (out / f"{name}.imatrix.f32").write_bytes(w.astype("<f4").tobytes())

    # Importance-weighted searches: size_t quantize_T(src, dst, nrow, n_per_row, quant_weights).
    for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL"]:
        fn = getattr(lib, f"quantize_{name.lower()}")
        fn.restype = ctypes.c_size_t
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        x = row()
        w = rng.exponential(1.0, N).astype(np.float32)
        w[::9] = 1e-4
        q = np.zeros(N_BLOCKS * BLOCK_BYTES[name], dtype=np.uint8)
        assert fn(ptr(x), ptr(q), 1, N, ptr(w)) == q.size
        save(f"{name}.weighted", x, q, w)

    # Reference quantisers: void quantize_row_T_ref(src, dst, k).
    for name in ["IQ4_NL", "Q8_1"]:
        fn = getattr(lib, f"quantize_row_{name.lower()}_ref")
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        x = row()
        q = np.zeros(N_BLOCKS * BLOCK_BYTES[name], dtype=np.uint8)
        fn(ptr(x), ptr(q), N)
        save(f"{name}.ref", x, q)

    # Dots: void ggml_vec_dot_T_A(n, float *s, bs, vx, bx, vy, by, nrc).
    cpu = ctypes.CDLL(str(Path(lib_path).with_name("libggml-cpu.so")))
    cpu.ggml_cpu_init()
    act_of = {"Q4_0": "q8_0", "Q4_1": "q8_1", "Q5_0": "q8_0", "Q5_1": "q8_1", "Q8_0": "q8_0", "IQ4_NL": "q8_0"}
    wbytes = dict(BLOCK_BYTES, Q8_0=34)
    for name, act in act_of.items():
        quant = getattr(lib, f"quantize_{name.lower()}")
        quant.restype = ctypes.c_size_t
        quant.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        aref = getattr(lib, f"quantize_row_{act}_ref")
        aref.restype = None
        aref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        x, y = row(), row()
        wq = np.zeros(N_BLOCKS * wbytes[name], dtype=np.uint8)
        quant(ptr(x), ptr(wq), 1, N, None)
        aq = np.zeros(N_BLOCKS * (36 if act == "q8_1" else 34), dtype=np.uint8)
        aref(ptr(y), ptr(aq), N)
        results = []
        for suffix in ["_generic", ""]:
            dot = getattr(cpu, f"ggml_vec_dot_{name.lower()}_{act}{suffix}")
            dot.restype = None
            s_out = np.zeros(1, dtype=np.float32)
            dot(ctypes.c_int(N), ptr(s_out), ctypes.c_size_t(0), ptr(wq), ctypes.c_size_t(0),
                ptr(aq), ctypes.c_size_t(0), ctypes.c_int(1))
            results.append(s_out[0])
        (out / f"{name}.dot.w.bin").write_bytes(wq.tobytes())
        (out / f"{name}.dot.a.bin").write_bytes(aq.tobytes())
        (out / f"{name}.dot.f32").write_bytes(np.array(results, dtype="<f4").tobytes())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2])
