"""The training corpus: the King James Bible from Debian's `bible-kjv-text`.

The text comes from the `bible` program of Debian's `bible-kjv` package, which
decodes `/usr/lib/bible.data` (package `bible-kjv-text`):

    apt-get install -y bible-kjv bible-kjv-text

Every chapter becomes one document: a heading line ("Genesis 1"), a blank line,
then one verse per line (no verse numbers). Chapters are numbered in canonical
order (0 … 1188); every 20th one (index % 20 == 19) is held out, from training,
from the tokenizer and from the chat samples.

Chat samples (ChatML, docs/DESIGN.md §1.1 special tokens) are built from the training
chapters only: a user names a chapter, a verse range, a verse or a topic word,
and the assistant answers with the text.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

# The 66 books in the order `bible` prints them, with their full names.
BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges",
    "Ruth", "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles",
    "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job", "Psalms", "Proverbs",
    "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations",
    "Ezekiel", "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah",
    "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah", "Malachi", "Matthew",
    "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians", "2 Corinthians",
    "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews",
    "James", "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude",
    "Revelation",
]

HOLDOUT_EVERY = 20

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<|mask|>",
]

TOPICS = [
    "love", "faith", "hope", "light", "water", "bread", "wisdom", "peace", "mercy",
    "fear", "joy", "truth", "prayer", "sin", "grace", "king", "shepherd", "sea",
    "fire", "life", "death", "heaven", "earth", "righteousness", "salvation",
    "strength", "glory", "children", "wine", "gold", "war", "temple", "spirit",
    "angel", "mountain", "river", "sword", "blessing", "covenant", "forgiveness",
]

GREETINGS = [
    ("Hello", "Peace be unto thee. Name a book, a chapter or a verse, and I will read it unto thee."),
    ("Hi", "Grace be unto you, and peace. Ask me for a chapter, a verse or a word, and I will answer with the scripture."),
    ("Who are you?", "I am a small model that hath read the King James Bible. Name a book, a chapter or a topic, and I will read it unto thee."),
    ("What can you do?", "I can read thee a chapter or a verse of the King James Bible, or find a verse about a word, as love or faith or light."),
    ("Thank you", "The LORD bless thee, and keep thee."),
]


@dataclass
class Chapter:
    index: int
    book: str
    number: int
    verses: list[str]

    @property
    def heldout(self) -> bool:
        return self.index % HOLDOUT_EVERY == HOLDOUT_EVERY - 1

    def text(self) -> str:
        return f"{self.book} {self.number}\n\n" + "\n".join(self.verses) + "\n"


_REF = re.compile(r"^(\S+?)(\d+):(\d+) (.*)$")


def read_bible() -> list[Chapter]:
    """Decodes the whole Bible with `bible -f` (one verse per line, with references)."""
    out = subprocess.run(
        ["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True, text=True
    ).stdout
    chapters: list[Chapter] = []
    book_abbrevs: list[str] = []
    for line in out.splitlines():
        m = _REF.match(line)
        if not m:
            raise ValueError(f"unexpected line from bible: {line[:60]!r}")
        abbrev, ch, _verse, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if not book_abbrevs or book_abbrevs[-1] != abbrev:
            book_abbrevs.append(abbrev)
        book = BOOKS[len(book_abbrevs) - 1]
        if not chapters or chapters[-1].book != book or chapters[-1].number != ch:
            chapters.append(Chapter(len(chapters), book, ch, []))
        chapters[-1].verses.append(" ".join(text.split()))
    if len(book_abbrevs) != len(BOOKS):
        raise ValueError(f"expected {len(BOOKS)} books, found {len(book_abbrevs)}")
    return chapters


def chatml(user: str, assistant: str) -> str:
    return (
        f"<|im_start|>user\n{user}<|im_end|>\n"
        f"<|im_start|>assistant\n{assistant}<|im_end|>\n"
    )


def chapter_name(c: Chapter) -> str:
    return "Psalm" if c.book == "Psalms" else c.book


def chat_sample(rng: random.Random, train: list[Chapter], verse_index: dict) -> str:
    """One ChatML exchange drawn from the training chapters."""
    kind = rng.random()
    c = rng.choice(train)
    name = f"{chapter_name(c)} {c.number}"
    if kind < 0.35:
        ask = rng.choice([
            f"Read me {name}.", f"Recite {name}.", f"What does {name} say?",
            f"{name}", f"Please read {name}.", f"Can you read {c.book} chapter {c.number}?",
        ])
        n = min(len(c.verses), rng.randint(2, 6))
        return chatml(ask, "\n".join(c.verses[:n]))
    if kind < 0.6:
        a = rng.randrange(len(c.verses))
        b = min(len(c.verses), a + rng.randint(1, 4))
        ref = f"{name}:{a + 1}" if b == a + 1 else f"{name}:{a + 1}-{b}"
        ask = rng.choice([f"Quote {ref}.", f"{ref}", f"What is {ref}?", f"Give me {ref}."])
        return chatml(ask, " ".join(c.verses[a:b]))
    if kind < 0.95:
        topic = rng.choice(TOPICS)
        hits = verse_index.get(topic, [])
        if not hits:
            return chatml(f"Read me {name}.", "\n".join(c.verses[:3]))
        ask = rng.choice([
            f"What does the Bible say about {topic}?", f"Give me a verse about {topic}.",
            f"Tell me about {topic}.", f"A verse on {topic}, please.",
        ])
        n = rng.randint(1, 2)
        parts = [f"{ref}: {text}" for ref, text in rng.sample(hits, min(n, len(hits)))]
        return chatml(ask, "\n".join(parts))
    user, reply = rng.choice(GREETINGS)
    return chatml(user, reply)


def topic_index(train: list[Chapter]) -> dict:
    idx: dict[str, list[tuple[str, str]]] = {t: [] for t in TOPICS}
    for c in train:
        for i, v in enumerate(c.verses):
            words = set(re.findall(r"[a-z]+", v.lower()))
            for t in TOPICS:
                if t in words and len(v) < 240:
                    idx[t].append((f"{chapter_name(c)} {c.number}:{i + 1}", v))
    return idx


def build(out_dir: Path, seed: int = 1, n_chat: int = 2500) -> dict:
    """Writes train.jsonl (documents), heldout.txt, heldout_prompts.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    chapters = read_bible()
    train = [c for c in chapters if not c.heldout]
    held = [c for c in chapters if c.heldout]
    rng = random.Random(seed)
    vidx = topic_index(train)
    docs = [{"kind": "chapter", "text": c.text()} for c in train]
    docs += [{"kind": "chat", "text": chat_sample(rng, train, vidx)} for _ in range(n_chat)]
    with open(out_dir / "train.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    (out_dir / "heldout.txt").write_text("".join(c.text() + "\n" for c in held))
    # Held-out prompts: the heading and first verse of each held-out chapter.
    prompts = [f"{c.book} {c.number}\n\n{c.verses[0]}\n" for c in held]
    (out_dir / "heldout_prompts.json").write_text(json.dumps(prompts, indent=0))
    (out_dir / "tokenizer_text.txt").write_text("".join(c.text() for c in train))
    stats = {
        "chapters": len(chapters),
        "train_chapters": len(train),
        "heldout_chapters": len(held),
        "chat_samples": n_chat,
        "train_words": sum(len(c.text().split()) for c in train),
        "heldout_words": sum(len(c.text().split()) for c in held),
    }
    (out_dir / "corpus_stats.json").write_text(json.dumps(stats, indent=1))
    return stats


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(Path(__file__).parent / "data"))
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print(json.dumps(build(Path(a.out), a.seed), indent=1))
