"""`rope.dimension_sections` for the exported file (docs/DESIGN.md §2.4).

llama.cpp runs `qwen35moe` / `clover_moe`-style files with ggml's interleaved
multi-section rope: a text token's position is (p, p, p, 0) and pair i, in
sector c = i mod (s0+s1+s2+s3), turns with p only while c < 3·s[c mod 3]; the
other pairs get position 0 and are not rotated. The training model rotates
every pair (model.rope), so the exporter must write sections that cover all
n_rot/2 pairs: s_j = ceil((n_pairs − j) / 3), which is [11, 11, 10, 0] for
Qwen3.5's 32 pairs and [3, 3, 2, 0] for 8.
"""


def rope_sections(n_rot: int) -> list[int]:
    """Sections under which every one of the n_rot/2 pairs rotates."""
    half = n_rot // 2
    return [(half + 2) // 3, (half + 1) // 3, half // 3, 0]


def rotated_pairs(sections: list[int], n_pairs: int) -> list[bool]:
    """Per pair: whether it turns with the text position (docs/DESIGN.md §2.4's rule)."""
    s0, s1, s2, _ = sections
    total = sum(sections)
    out = []
    for i in range(n_pairs):
        sector = i % total
        out.append((sector % 3 == 0 and sector < 3 * s0)
                   or (sector % 3 == 1 and sector < 3 * s1)
                   or (sector % 3 == 2 and sector < 3 * s2))
    return out
