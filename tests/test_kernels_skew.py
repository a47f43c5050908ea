"""Skew kernel path == the scheme references (float64), fp32 tolerance 1e-5."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from relpos_core.kernels import skew
from relpos_core.schemes import music_transformer as mt
from relpos_core.schemes import shaw
from relpos_core.schemes import transformer_xl as txl

TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(B=2, H=2, L=12, d=8, seed=2):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g) for _ in range(3))


@pytest.mark.parametrize("kmax", [3, 20])
def test_shaw_key_logits_by_skew(kmax):
    q, _, _ = qkv()
    rk = torch.randn(2 * kmax + 1, 8)
    want = shaw.shaw_relative_logits(q.double(), rk.double(), max_relative_position=kmax)
    torch.testing.assert_close(skew.shaw_key_logits(q, rk, max_relative_position=kmax).double(), want, **TOL)
    causal = skew.shaw_key_logits(q, rk, max_relative_position=kmax, causal=True).double()
    lower = torch.ones(12, 12, dtype=torch.bool).tril()  # j <= i: the entries the causal skew defines
    torch.testing.assert_close(causal[..., lower], want[..., lower], **TOL)


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_attention_by_skew(causal):
    q, k, v = qkv()
    rk = torch.randn(9, 8)
    want = shaw.shaw_attention(q.double(), k.double(), v.double(), rel_key=rk.double(), max_relative_position=4,
                               causal=causal)
    got = skew.shaw_attention(q, k, v, rel_key=rk, max_relative_position=4, causal=causal)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_music_transformer_logits_equal_the_gather():
    q, _, _ = qkv()
    E = torch.randn(23, 8)
    want = mt.relative_logits_gather(q.double(), E.double())
    torch.testing.assert_close(skew.relative_logits(q, E, causal=False).double(), want, **TOL)


def test_transformer_xl_position_logits_are_terms_b_plus_d():
    q, k, _ = qkv()
    r, u, vb = torch.randn(2, 12, 8), torch.randn(2, 8), torch.randn(2, 8)
    t = txl.transformer_xl_terms(q.double(), k.double(), r.double(), u.double(), vb.double(), r_layout="HLd")
    visible = txl.transformer_xl_causal_mask(12, 12)
    got = skew.transformer_xl_position_logits(q, r, vb).double()
    torch.testing.assert_close(got[..., visible], (t["b"] + t["d"])[..., visible], **TOL)


@pytest.mark.parametrize("call, match", [
    (lambda q: skew.relative_logits(q, torch.randn(6, 8), causal=False), "rel_emb must have 2L - 1 = 11 rows"),
    (lambda q: skew.relative_logits(q, torch.randn(11, 8), causal=True), "rel_emb must have L = 6 rows"),
    (lambda q: skew.shaw_attention(q, q[:, :, :4], q[:, :, :4], rel_key=torch.randn(5, 8), max_relative_position=2),
     "gather path"),
    (lambda q: skew.shaw_attention(q, q, q, rel_key=torch.randn(5, 8), rel_value=torch.randn(5, 8),
                                   max_relative_position=2), "rel_value"),
    (lambda q: skew.shaw_key_logits(q, torch.randn(5, 8), max_relative_position=-1), "max_relative_position"),
    (lambda q: skew.transformer_xl_position_logits(q, torch.randn(2, 3, 8), torch.randn(2, 8)), "query_len"),
])
def test_bad_input_raises_value_error(call, match):
    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=match):
        call(q)
