"""python3 -m unittest training/test_rope_sections.py (from the repo root; no torch needed)."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rope_sections import rope_sections, rotated_pairs  # noqa: E402


class RopeSections(unittest.TestCase):
    def test_exported_sections_rotate_every_pair_for_every_even_n_rot(self):
        for n_rot in range(2, 258, 2):
            s = rope_sections(n_rot)
            self.assertEqual(sum(s), n_rot // 2, n_rot)
            self.assertTrue(all(rotated_pairs(s, n_rot // 2)), (n_rot, s))

    def test_known_sections(self):
        self.assertEqual(rope_sections(64), [11, 11, 10, 0])
        self.assertEqual(rope_sections(16), [3, 3, 2, 0])
        self.assertEqual(rope_sections(4), [1, 1, 0, 0])

    def test_old_exporter_sections_left_pair_7_of_8_unrotated(self):
        self.assertEqual(rotated_pairs([4, 2, 2, 0], 8), [True] * 7 + [False])


if __name__ == "__main__":
    unittest.main()
