"""rp.attend on meta tensors (shapes only): the finiteness scan has no values to read there and is skipped,
so the call gives the output's shape. Before: NotImplementedError from the scan's ``.tolist()``."""
import torch

import relpos_core as rp


def test_attend_on_meta_tensors_gives_the_output_shape():
    q = torch.empty(1, 2, 8, 16, device="meta")
    term = rp.registry.example_term("alibi", num_heads=2, head_dim=16, k=None, device="meta")
    out = rp.attend(q, q, q, term, causal=True)
    assert out.is_meta and out.shape == (1, 2, 8, 16)
