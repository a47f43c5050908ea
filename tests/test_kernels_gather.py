"""Gather kernel path == each scheme's reference (float64), fp32 tolerance 1e-5."""
from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from relpos_core.kernels import gather, naive
from relpos_core.schemes import shaw, t5

TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(B=2, H=2, L=12, d=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kmax", [2, 30])  # 30 > L: no clipping at all
def test_shaw_attention_matches_reference(causal, kmax):
    q, k, v = qkv()
    rk, rv = torch.randn(2 * kmax + 1, 8), torch.randn(2 * kmax + 1, 8)
    want = shaw.shaw_attention(q.double(), k.double(), v.double(), rel_key=rk.double(), rel_value=rv.double(),
                               max_relative_position=kmax, causal=causal)
    got = gather.shaw_attention(q, k, v, rel_key=rk, rel_value=rv, max_relative_position=kmax, causal=causal)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_shaw_key_logits_rectangular():
    q, _, _ = qkv(L=5)
    rk = torch.randn(7, 8)
    want = shaw.shaw_relative_logits(q.double(), rk.double(), max_relative_position=3, key_len=9)
    got = gather.shaw_key_logits(q, rk, max_relative_position=3, key_len=9)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_shaw_value_output_is_the_papers_sum():
    """sum_j p_ij a_V[idx(i, j)] written as a float64 einsum over the gathered [L, L, d] table."""
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(2, 2, 10, 10, generator=g), -1)
    rv = torch.randn(5, 8, generator=g)
    idx = shaw.shaw_relative_index(10, 10, max_relative_position=2)
    want = torch.einsum("bhij,ijd->bhid", probs.double(), rv.double()[idx])
    torch.testing.assert_close(gather.shaw_value_output(probs, rv, max_relative_position=2).double(), want, **TOL)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("Lq, Lk", [(40, 40), (7, 33)])
def test_t5_bias_and_clamped_table_are_exact(bidirectional, Lq, Lk):
    table = torch.randn(8, 3)
    want = t5.t5_bias_from_table(table, Lq, Lk, bidirectional=bidirectional, max_distance=16)  # (H, Lq, Lk)
    torch.testing.assert_close(gather.t5_bias(table, Lq, Lk, bidirectional=bidirectional, max_distance=16), want)
    clamped = gather.t5_offset_table(table, Lq, Lk, bidirectional=bidirectional, max_distance=16, clamped=True)
    rel = torch.arange(Lk)[None, :] - torch.arange(Lq)[:, None]  # (Lq, Lk) j - i
    torch.testing.assert_close(clamped[:, rel.clamp(-16, 16) + 16], want)


def test_t5_attention_matches_reference():
    q, k, v = qkv(L=20)
    table = torch.randn(8, 2)
    bias = t5.t5_bias_from_table(table.double(), 20, bidirectional=True, max_distance=16)
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(8) + bias
    want = torch.softmax(s, -1) @ v.double()
    torch.testing.assert_close(gather.t5_attention(q, k, v, table, max_distance=16).double(), want, **TOL)


@pytest.mark.parametrize("call, param", [
    (lambda q: gather.shaw_key_logits(q, torch.randn(5, 8), max_relative_position=2, key_len=0), "key_len"),
    (lambda q: gather.shaw_value_output(q, torch.randn(4, 8), max_relative_position=2), "rel_value"),
    (lambda q: gather.t5_offset_table(torch.randn(8, 2), 4, max_distance=0), "max_distance"),
    (lambda q: gather.t5_offset_table(torch.randn(8, 2), 4, clamped="yes"), "clamped"),
    (lambda q: gather.shaw_attention(q, q, q, max_relative_position=2, causal=None), "causal"),
])
def test_bad_input_raises_value_error(call, param):
    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=param):
        call(q)


def test_precomputed_index_is_the_schemes_index_and_gives_the_same_logits():
    L, k = 12, 3
    index = gather.shaw_gather_index(L, max_relative_position=k)
    assert torch.equal(index, shaw.shaw_relative_index(L, L, max_relative_position=k))
    q, rk = torch.randn(2, 3, L, 8), torch.randn(2 * k + 1, 8)
    for mod in (gather, naive):
        torch.testing.assert_close(
            mod.shaw_key_logits(q, rk, max_relative_position=k, index=index),
            mod.shaw_key_logits(q, rk, max_relative_position=k),
        )


@pytest.mark.parametrize("index", [torch.zeros(5, 5, dtype=torch.int64), torch.zeros(6, 6, dtype=torch.int32)])
def test_bad_precomputed_index_is_named(index):
    with pytest.raises(ValueError, match="index"):
        gather.shaw_key_logits(torch.randn(1, 1, 6, 4), torch.randn(5, 4), max_relative_position=2, index=index)
