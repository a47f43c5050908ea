"""The skew reshapes: each equal to its definition, junk entries and all (kernels/skew.py)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.kernels import skew


def _definition(per_offset, Lq, Lk, side):
    """(i, j) -> column j - i + Lq - 1 of query row i, or column i - j + Lk - 1 of key row j."""
    B, H = per_offset.shape[:2]
    out = torch.empty(B, H, Lq, Lk, dtype=per_offset.dtype)
    for i in range(Lq):
        for j in range(Lk):
            out[:, :, i, j] = per_offset[:, :, i, j - i + Lq - 1] if side == "query" else \
                per_offset[:, :, j, i - j + Lk - 1]
    return out


@settings(max_examples=40, deadline=None)
@given(Lq=st.integers(1, 9), Lk=st.integers(1, 9), side=st.sampled_from(["query", "key"]))
def test_skew_view_reads_the_right_column_without_copying(Lq, Lk, side):
    rows = Lq if side == "query" else Lk
    per_offset = torch.randn(2, 3, rows, Lq + Lk - 1, dtype=torch.float64)
    view = skew.skew_view(per_offset, Lq, Lk, side=side)
    assert view.data_ptr() >= per_offset.data_ptr() and view.untyped_storage().data_ptr() == \
        per_offset.untyped_storage().data_ptr()  # a view of the same memory
    torch.testing.assert_close(view, _definition(per_offset, Lq, Lk, side))


@pytest.mark.parametrize("L", [1, 2, 5])
def test_music_transformer_skew_and_bidirectional_rel_shift(L):
    q, E = torch.randn(L, 4, dtype=torch.float64), torch.randn(2 * L - 1, 4, dtype=torch.float64)
    want = torch.stack([torch.stack([q[i] @ E[j - i + L - 1] for j in range(L)]) for i in range(L)])
    torch.testing.assert_close(skew.relative_logits_bidirectional_skew(q, E), want)
    causal = skew.relative_logits_causal_skew(q, E[:L])
    low = torch.ones(L, L, dtype=torch.bool).tril()
    torch.testing.assert_close(causal[low], want[low])


def test_rel_shift_needs_lq_at_most_lk_and_square_skew():
    with pytest.raises(ValueError, match="query_len <= key_len"):
        skew.rel_shift(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="square"):
        skew.skew(torch.zeros(4, 5))
    with pytest.raises(ValueError, match="per_offset must be"):
        skew.skew_view(torch.zeros(1, 1, 3, 4), 3, 3)
