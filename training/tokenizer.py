"""Byte-level BPE for the trained model, with the `tokenizers` package.

The pre-tokenizer is the engine's (src/tokenizer.rs): a split on the `qwen35`
regex (docs/DESIGN.md §1.1), then GPT-2's byte-to-character map without a prefix space;
so `clover` encodes exactly as this tokenizer does. The special tokens of
docs/DESIGN.md §1.1 get the first ids (0 … 5).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from corpus import SPECIAL_TOKENS

QWEN35_PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
    r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The ChatML template stored in the GGUF (`tokenizer.chat_template`).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}\n"
)


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train(text_file: Path, vocab_size: int, out: Path) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(text_file)], trainer)
    tok.save(str(out))
    return tok


def vocab_for_gguf(tok: Tokenizer) -> tuple[list[str], list[int], list[str]]:
    """Tokens in id order, llama.cpp token types, merges as "left right"."""
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [""] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    types = []
    for t in tokens:
        if t in ("<think>", "</think>"):
            types.append(4)  # user-defined
        elif t in SPECIAL_TOKENS:
            types.append(3)  # control
        else:
            types.append(1)  # normal
    merges = []
    for m in spec["model"]["merges"]:
        merges.append(m if isinstance(m, str) else f"{m[0]} {m[1]}")
    return tokens, types, merges


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default=str(Path(__file__).parent / "data"))
    p.add_argument("--vocab", type=int, default=2048)
    a = p.parse_args()
    d = Path(a.data)
    t = train(d / "tokenizer_text.txt", a.vocab, d / "tokenizer.json")
    print("vocab", t.get_vocab_size())
    print(t.encode("In the beginning God created the heaven and the earth.").tokens)
