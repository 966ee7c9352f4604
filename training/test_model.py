"""Checks of the training model: python3 -m unittest training/test_model.py (from the repo root)
or `python3 -m unittest test_model` inside training/."""

import sys
import unittest
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from model import CloverModel, Config, gdn_chunked, gdn_recurrent  # noqa: E402

torch.set_num_threads(1)


def rand_inputs(b=2, h=3, L=48, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(b, h, L, d, generator=g, dtype=torch.float64), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(b, h, L, d, generator=g, dtype=torch.float64), dim=-1)
    v = torch.randn(b, h, L, d, generator=g, dtype=torch.float64)
    g_ = -torch.rand(b, h, L, generator=g, dtype=torch.float64) * 3
    beta = torch.rand(b, h, L, generator=g, dtype=torch.float64)
    return q / d**0.5, k, v, g_, beta


class GdnForms(unittest.TestCase):
    def test_chunked_form_matches_token_by_token_recurrence(self):
        q, k, v, g, beta = rand_inputs()
        o_ref, s_ref = gdn_recurrent(q, k, v, g, beta)
        for chunk in (1, 4, 16):
            o, states, s = gdn_chunked(q, k, v, g, beta, chunk)
            self.assertLess((o - o_ref).abs().max().item(), 1e-10, f"chunk {chunk}")
            self.assertLess((s - s_ref).abs().max().item(), 1e-10, f"chunk {chunk}")

    def test_chunked_states_are_the_recurrent_state_before_each_chunk(self):
        q, k, v, g, beta = rand_inputs(L=32)
        _, states, _ = gdn_chunked(q, k, v, g, beta, 8)
        for c in range(4):
            if c == 0:
                expect = torch.zeros_like(states[:, :, 0])
            else:
                _, expect = gdn_recurrent(q[:, :, : 8 * c], k[:, :, : 8 * c], v[:, :, : 8 * c],
                                         g[:, :, : 8 * c], beta[:, :, : 8 * c])
            self.assertLess((states[:, :, c] - expect).abs().max().item(), 1e-10)

    def test_chunked_form_survives_strong_decay(self):
        q, k, v, g, beta = rand_inputs(L=32, seed=3)
        g = g * 20  # e^{γ} underflows towards 0 inside a chunk
        o_ref, _ = gdn_recurrent(q, k, v, g, beta)
        o, _, _ = gdn_chunked(q, k, v, g, beta, 16)
        self.assertTrue(torch.isfinite(o).all())
        self.assertLess((o - o_ref).abs().max().item(), 1e-9)


class WholeModel(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.cfg = Config(vocab=64, d_model=32, n_head=2, n_head_kv=1, head_dim=16, n_rot=4,
                          n_expert=4, top_k=2, ff_exp=16, ff_shexp=16, ssm_d=8, ssm_nk=2,
                          ssm_nv=4, mask_id=5)
        self.model = CloverModel(self.cfg).double()
        with torch.no_grad():  # non-trivial diffusion tensors
            for b in self.model.blocks:
                m = b.mixer
                if hasattr(m, "conv_right"):
                    m.conv_right.normal_(0, 0.3)
                    m.bd_hist_w.normal_(0, 1)
                    m.bd_hist_b.normal_(0, 1)

    def test_chunked_and_recurrent_model_logits_agree(self):
        x = torch.randint(0, 64, (2, 32))
        a, _, _ = self.model(x)
        b, _, _ = self.model(x, recurrent=True)
        self.assertLess((a - b).abs().max().item(), 1e-10)

    def test_diffusion_block_does_not_see_later_blocks_or_absent_rows(self):
        x = torch.randint(6, 64, (1, 32))
        dt = x.clone()
        dt[:, 1:16] = 5
        dt[:, 17:32] = 5
        valid = torch.ones_like(x, dtype=torch.bool)
        valid[:, 20:] = False
        _, d1, _ = self.model(x, dt, valid)
        # Changing the second block's absent rows and tokens after the first
        # block in the AR stream must not change the first block's outputs...
        dt2 = dt.clone()
        dt2[:, 25] = 7
        _, d2, _ = self.model(x, dt2, valid)
        self.assertLess((d1[:, :20] - d2[:, :20]).abs().max().item(), 1e-12)
        x3 = x.clone()
        x3[:, 16:] = torch.randint(6, 64, (1, 16))
        dt3 = dt.clone()
        dt3[:, 16] = x3[:, 16]
        _, d3, _ = self.model(x3, dt3, valid)
        self.assertLess((d1[:, :16] - d3[:, :16]).abs().max().item(), 1e-12)


if __name__ == "__main__":
    unittest.main()
