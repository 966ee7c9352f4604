#!/usr/bin/env python3
"""Greedy text of llama.cpp vs the numpy forward of synth_activations.py.

Usage: compare_llama_greedy.py FILE [PROMPT] [N]
Runs llama-completion (temp 0) on FILE, takes its prompt token ids from
--verbose-prompt, continues them greedily with the numpy forward written from
docs/DESIGN.md §2, decodes both with the file's byte-level vocab and compares the
bytes (ours must be a prefix of llama's n+1 tokens). Exit status 1 on a
mismatch. Needs LLAMA_BIN (default
/work/llama/build/bin) and python gguf + numpy.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from gguf import GGUFReader  # noqa: E402

from synth_activations import forward, load  # noqa: E402


def byte_decoder():
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    path = sys.argv[1]
    prompt = sys.argv[2] if len(sys.argv) > 2 else "Hello"
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    llama = os.path.join(os.environ.get("LLAMA_BIN", "/work/llama/build/bin"), "llama-completion")
    base = [llama, "-m", path, "-p", prompt, "-t", "2", "--temp", "0", "-no-cnv", "-c", "256"]
    # The prompt ids come from a separate run: with --verbose-prompt this
    # llama-completion build leaves the last generated token off stdout.
    ids = []
    for _ in range(4):
        ids_run = subprocess.run(base + ["-n", "1", "--verbose-prompt"], capture_output=True, timeout=600)
        err = ids_run.stderr.decode(errors="replace")
        ids = [int(m) for m in re.findall(r"^\S+ I +(\d+) -> '", err, re.M)]
        if ids:
            break
    assert ids, "no prompt ids in llama output"
    r = GGUFReader(path)
    f = r.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(f.parts[i]).decode() for i in f.data]
    dec = byte_decoder()
    hp, w = load(path)
    toks = list(ids)
    for _ in range(n):
        toks.append(int(np.argmax(forward(hp, w, np.array(toks))[-1])))
    ours = b"".join(bytes(dec[c] for c in vocab[t]) if not vocab[t].startswith("<|") else b"" for t in toks)
    ours = ours.rstrip(b"\n")
    # One token more than we compare, and a few tries: this llama-completion
    # build prints through an asynchronous logger that sometimes loses the
    # tail of its output at exit. A run that diverges from ours fails at once.
    theirs = b""
    for _ in range(8):
        run = subprocess.run(base + ["-n", str(n + 1)], capture_output=True, timeout=600)
        theirs = run.stdout.rstrip(b"\n")
        if theirs.startswith(ours):
            break
        if not ours.startswith(theirs):
            break
    print(f"llama: {theirs!r}")
    print(f"numpy: {ours!r}")
    if not theirs.startswith(ours):
        print("MISMATCH" if not ours.startswith(theirs) else "INCONCLUSIVE: llama output truncated every time")
        sys.exit(1)
    print(f"match: {len(ids)} prompt tokens + {n} greedy tokens")


if __name__ == "__main__":
    main()
