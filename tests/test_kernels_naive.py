"""Naive kernel path == each scheme's reference (float64), fp32 tolerance 1e-5."""
from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.kernels import gather, naive
from relpos_core.measure.guard import MemoryBudgetError, memory_budget
from relpos_core.schemes import alibi, deberta, shaw, t5
from relpos_core.schemes import transformer_xl as txl

TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(B=2, H=2, L=12, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g) for _ in range(3))


def ref_attention(q, k, v, bias, scale):
    """float64 softmax(q k^T scale + bias) v."""
    s = (q.double() @ k.double().transpose(-2, -1)) * scale + bias.double()
    return torch.softmax(s, -1) @ v.double()


@pytest.mark.parametrize("causal", [False, True])
def test_shaw_attention_matches_reference(causal):
    q, k, v = qkv()
    rk, rv = torch.randn(2 * 3 + 1, 8), torch.randn(2 * 3 + 1, 8)
    want = shaw.shaw_attention(q.double(), k.double(), v.double(), rel_key=rk.double(), rel_value=rv.double(),
                               max_relative_position=3, causal=causal)
    got = naive.shaw_attention(q, k, v, rel_key=rk, rel_value=rv, max_relative_position=3, causal=causal)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_shaw_key_logits_matches_reference():
    q, _, _ = qkv()
    rk = torch.randn(9, 8)
    want = shaw.shaw_relative_logits(q.double(), rk.double(), max_relative_position=4)
    torch.testing.assert_close(naive.shaw_key_logits(q, rk, max_relative_position=4).double(), want, **TOL)


@settings(max_examples=8, deadline=None)
@given(L=st.integers(1, 20), kmax=st.integers(1, 25))
def test_naive_and_gather_shaw_agree(L, kmax):
    q, k, v = qkv(B=1, H=2, L=L, d=4, seed=L)
    rk, rv = torch.randn(2 * kmax + 1, 4), torch.randn(2 * kmax + 1, 4)
    a = naive.shaw_attention(q, k, v, rel_key=rk, rel_value=rv, max_relative_position=kmax)
    b = gather.shaw_attention(q, k, v, rel_key=rk, rel_value=rv, max_relative_position=kmax)
    torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_matches_reference(bidirectional):
    q, k, v = qkv(L=20)
    table = torch.randn(8, 2)
    bias = t5.t5_bias_from_table(table.double(), 20, bidirectional=bidirectional, max_distance=10)
    want = ref_attention(q, k, v, bias, 1.0)
    got = naive.t5_attention(q, k, v, table, bidirectional=bidirectional, max_distance=10, scale=1.0)
    torch.testing.assert_close(got.double(), want, **TOL)


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_matches_reference(causal):
    q, k, v = qkv(H=4)
    want = ref_attention(q, k, v, alibi.alibi_bias(4, 12, causal=causal), 1 / math.sqrt(8))
    torch.testing.assert_close(naive.alibi_attention(q, k, v, causal=causal).double(), want, **TOL)


@pytest.mark.parametrize("buckets", [(-1, -1), (4, 12)])
def test_deberta_matches_reference(buckets):
    q, k, v = qkv(L=16)
    S = 4
    pk, pq = torch.randn(2, 2 * S, 8), torch.randn(2, 2 * S, 8)
    rel = deberta.build_relative_position(16, 16, bucket_size=buckets[0], max_position=buckets[1])
    c2p, p2c = deberta.deberta_c2p_p2c(q.double(), k.double(), pk.double(), pq.double(), rel, S, pos_layout="hsd")
    scale = 1 / math.sqrt(3 * 8)
    want = ref_attention(q, k, v, (c2p + p2c) * scale, scale)
    got = naive.deberta_attention(q, k, v, pk, pq, att_span=S, relative_pos=rel)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_transformer_xl_matches_reference():
    q, k, v = qkv()
    r, u, vb = torch.randn(2, 12, 8), torch.randn(2, 8), torch.randn(2, 8)
    t = txl.transformer_xl_terms(q.double(), k.double(), r.double(), u.double(), vb.double(), r_layout="HLd")
    s = (t["a"] + t["b"] + t["c"] + t["d"]) / math.sqrt(8)
    s = s.masked_fill(~txl.transformer_xl_causal_mask(12, 12), float("-inf"))
    want = torch.softmax(s, -1) @ v.double()
    torch.testing.assert_close(naive.transformer_xl_attention(q, k, v, r, u, vb).double(), want, **TOL)


def test_guard_names_the_alternative():
    q = torch.randn(1, 1, 64, 16)
    with memory_budget(10_000), pytest.raises(MemoryBudgetError, match="gather path"):
        naive.shaw_key_logits(q, torch.randn(9, 16), max_relative_position=4)
    with memory_budget(1_000), pytest.raises(MemoryBudgetError, match="FlexAttention"):
        naive.t5_attention(q, q, q, torch.randn(8, 1), max_distance=16)


@pytest.mark.parametrize("call, param", [
    (lambda q: naive.shaw_attention(q, q, q, rel_key=torch.randn(5, 8), max_relative_position=0), "max_relative_position"),
    (lambda q: naive.shaw_attention(q, q, q, rel_key=torch.randn(4, 8), max_relative_position=2), "rel_key"),
    (lambda q: naive.shaw_attention(q, q[:, :, :3], q[:, :, :3], max_relative_position=2), "Lq == Lk"),
    (lambda q: naive.attention_with_bias(q, q, q, scale=-1.0), "scale"),
    (lambda q: naive.attention_with_bias(q, q.double(), q), "k must have dtype"),
    (lambda q: naive.t5_attention(q, q, q, torch.randn(8, 3)), "table"),
    (lambda q: naive.alibi_attention(q, q, q, causal="yes"), "causal"),
    (lambda q: naive.deberta_attention(q, q, q, torch.randn(2, 8, 8), torch.randn(2, 8, 8), att_span=0), "att_span"),
    (lambda q: naive.transformer_xl_attention(q, q, q, torch.randn(2, 5, 8), torch.randn(2, 8), torch.randn(2, 8)), "r_k"),
    (lambda q: naive.t5_bias(torch.randn(8, 2), 0), "query_len"),
])
def test_bad_input_raises_value_error(call, param):
    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=param):
        call(q)
