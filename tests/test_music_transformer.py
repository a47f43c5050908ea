"""Music Transformer (Huang et al. 2018): skew, bidirectional skew and gather.

Convention key_minus_query: table row r embeds distance j - i = r - (L - 1).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.kernels import skew as sk
from relpos_core.schemes import music_transformer as mt
from tests.references.music_transformer import music_relative_logits_ref

F64 = dict(rtol=0, atol=1e-10)
F32 = dict(rtol=1e-5, atol=1e-5)


def _lower(L):
    return torch.ones(L, L, dtype=torch.bool).tril()  # j <= i


def test_seed_skewing_example():
    """The seed's example: L = 6, d = 8, s[4, 2] == q[4] @ E[(j - i) + (L - 1)]."""
    torch.manual_seed(0)
    L, d = 6, 8
    q, E = torch.randn(L, d), torch.randn(L, d)  # E[r] embeds distance r - (L - 1)
    s = sk.skew(q @ E.T)
    i, j = 4, 2
    assert torch.allclose(s[i, j], q[i] @ E[(j - i) + (L - 1)])
    assert torch.allclose(sk.relative_logits_causal_skew(q, E)[i, j], q[i] @ E[(j - i) + (L - 1)])


@pytest.mark.parametrize("shape", [(1, 4), (5, 3), (2, 3, 7, 5)])
def test_all_forms_match_loop_reference(shape):
    g = torch.Generator().manual_seed(1)
    *lead, L, d = shape
    q = torch.randn(*lead, L, d, generator=g, dtype=torch.float64)
    E = torch.randn(2 * L - 1, d, generator=g, dtype=torch.float64)
    want = music_relative_logits_ref(q, E)
    torch.testing.assert_close(mt.relative_logits_gather(q, E), want, **F64)
    torch.testing.assert_close(sk.relative_logits_bidirectional_skew(q, E), want, **F64)
    # The causal table is the first L rows (distances -(L-1)..0); valid for j <= i.
    causal = sk.relative_logits_causal_skew(q, E[:L])
    torch.testing.assert_close(causal[..., _lower(L)], want[..., _lower(L)], **F64)
    assert torch.isnan(music_relative_logits_ref(q, E[:L])[..., ~_lower(L)]).all()  # undefined above


def test_float32_forms_agree():
    torch.manual_seed(2)
    q, E = torch.randn(2, 4, 16, 8), torch.randn(31, 8)
    want = music_relative_logits_ref(q, E).float()
    torch.testing.assert_close(mt.relative_logits_gather(q, E), want, **F32)
    torch.testing.assert_close(sk.relative_logits_bidirectional_skew(q, E), want, **F32)
    torch.testing.assert_close(sk.relative_logits_causal_skew(q, E[:16])[..., _lower(16)],
                               want[..., _lower(16)], **F32)


def test_gradients_of_skew_forms_match_gather():
    torch.manual_seed(3)
    q = torch.randn(2, 9, 5, dtype=torch.float64, requires_grad=True)
    E = torch.randn(17, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 9, 9, dtype=torch.float64)
    grads = []
    for f in (mt.relative_logits_gather, sk.relative_logits_bidirectional_skew):
        grads.append(torch.autograd.grad((f(q, E) * w).sum(), (q, E)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, **F64)
    # causal: masked loss (the junk never reaches the loss)
    m = _lower(9).double()
    g1 = torch.autograd.grad((mt.relative_logits_gather(q, E) * w * m).sum(), (q, E))
    g2 = torch.autograd.grad((sk.relative_logits_causal_skew(q, E[:9]) * w * m).sum(), (q, E))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, **F64)


@settings(max_examples=25, deadline=None)
@given(L=st.integers(1, 40), d=st.integers(1, 8), lead=st.lists(st.integers(1, 3), max_size=2),
       seed=st.integers(0, 2**16))
def test_skews_equal_gather_random_sizes(L, d, lead, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*lead, L, d, generator=g, dtype=torch.float64)
    E = torch.randn(2 * L - 1, d, generator=g, dtype=torch.float64)
    gather = mt.relative_logits_gather(q, E)
    torch.testing.assert_close(sk.relative_logits_bidirectional_skew(q, E), gather, **F64)
    low = _lower(L)
    torch.testing.assert_close(sk.relative_logits_causal_skew(q, E[:L])[..., low], gather[..., low], **F64)
    if L <= 8:  # the loop reference pins the gather itself
        torch.testing.assert_close(gather, music_relative_logits_ref(q, E), **F64)


@settings(max_examples=10, deadline=None)
@given(d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_two_token_sign(d, seed):
    """Key 0 before query 1 is distance j - i = -1: the first row of a 3-row table."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, d, generator=g, dtype=torch.float64)
    E = torch.zeros(3, d, dtype=torch.float64)
    E[0] = torch.randn(d, generator=g, dtype=torch.float64)  # distance -1 only
    for s in (mt.relative_logits_gather(q, E), sk.relative_logits_bidirectional_skew(q, E),
              sk.relative_logits_causal_skew(q, E[:2])):
        torch.testing.assert_close(s[1, 0], q[1] @ E[0], **F64)
        assert s[1, 1] == 0 and s[0, 0] == 0
    full = mt.relative_logits_gather(q, E)
    assert full[0, 1] == 0  # key 1 after query 0 (distance +1) does not read row 0


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(-100, 100), L=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_shift_invariance(shift, L, seed):
    """Shifting every absolute position by a constant leaves the relative logits unchanged."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, L, 3, generator=g, dtype=torch.float64)
    E = torch.randn(2 * L - 1, 3, generator=g, dtype=torch.float64)
    shifted = music_relative_logits_ref(q, E, positions=[shift + p for p in range(L)])
    torch.testing.assert_close(sk.relative_logits_bidirectional_skew(q, E), shifted, **F64)


def test_validation_errors_name_the_parameter():
    q, E = torch.randn(4, 3), torch.randn(7, 3)
    with pytest.raises(ValueError, match="qe"):
        sk.skew(torch.zeros(4, 5))  # L mismatch
    with pytest.raises(ValueError, match="qe"):
        sk.skew(torch.zeros(4))  # rank
    with pytest.raises(ValueError, match="rel_emb"):
        sk.relative_logits_causal_skew(q, E)  # 7 rows, needs L = 4
    with pytest.raises(ValueError, match="rel_emb"):
        mt.relative_logits_gather(q, E[:4])  # needs 2L - 1 = 7
    with pytest.raises(ValueError, match="rel_emb"):
        sk.relative_logits_bidirectional_skew(q, E[:6])
    with pytest.raises(ValueError, match="rel_emb"):
        mt.relative_logits_gather(q, torch.randn(7, 2))  # head size mismatch
    with pytest.raises(ValueError, match="rel_emb"):
        mt.relative_logits_gather(q, E.double())  # dtype
    with pytest.raises(ValueError, match="rel_emb"):
        mt.relative_logits_gather(q, E[None])  # rank
    with pytest.raises(ValueError, match=r"^q must"):
        mt.relative_logits_gather(torch.randn(3), E)
    with pytest.raises(ValueError, match=r"^q must"):
        sk.relative_logits_causal_skew(torch.ones(4, 3, dtype=torch.long), E[:4])
