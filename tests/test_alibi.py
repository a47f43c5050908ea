"""ALiBi slopes and biases, against BLOOM's build_alibi_tensor (transformers, oracle) and the paper."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.schemes import alibi

transformers = pytest.importorskip("transformers")
from transformers.models.bloom import modeling_bloom as hf_bloom  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)
HEADS = [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 32]


@pytest.fixture(scope="module", autouse=True)
def oracle_version():
    print(f"\n[test_alibi] oracle: transformers {transformers.__version__}")


def _causal_mask(Lq, Lk, offset=0):
    """True where key j comes after query i (at position offset + i)."""
    return torch.arange(Lk)[None, :] > torch.arange(Lq)[:, None] + offset  # (Lq, Lk)


@pytest.mark.parametrize("num_heads", HEADS)
def test_slopes_equal_bloom(num_heads):
    L = 5
    bloom = hf_bloom.build_alibi_tensor(torch.ones(1, L, dtype=torch.long), num_heads, torch.float32)  # (H, 1, L)
    bloom_slopes = bloom[:, 0, 1]  # BLOOM adds slope * j, so column j = 1 holds the slope
    ours = alibi.alibi_slopes(num_heads)
    assert ours.dtype == torch.float32 and ours.shape == (num_heads,)
    torch.testing.assert_close(ours, bloom_slopes, rtol=1e-6, atol=0)


def test_slopes_pinned_from_paper():
    # 8 heads: 1/2, 1/4, ..., 1/256 (the paper's example); 16 heads: 2^-0.5, 2^-1, ..., 2^-8
    assert alibi.alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    torch.testing.assert_close(alibi.alibi_slopes(16), torch.tensor([2.0 ** (-k / 2) for k in range(1, 17)]))
    # 6 heads: the 4-head slopes (2^-2, 2^-4, 2^-6, 2^-8), then every other 8-head slope (2^-1, 2^-3)
    assert alibi.alibi_slopes(6).tolist() == [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]
    assert alibi.alibi_slopes(1).tolist() == [2.0 ** -8]


def _paper_get_slopes(n):
    """The paper's reference code (ofirpress/attention_with_linear_biases), transcribed."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_get_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("num_heads", list(range(1, 65)))
def test_slopes_equal_paper_code(num_heads):
    torch.testing.assert_close(alibi.alibi_slopes(num_heads), torch.tensor(_paper_get_slopes(num_heads)).float(),
                               rtol=1e-6, atol=0)


@pytest.mark.parametrize("num_heads", HEADS)
@pytest.mark.parametrize("L", [1, 7, 33])
def test_causal_attention_equals_bloom_after_softmax(num_heads, L):
    """BLOOM adds slope * j; we add -slope * (i - j): a per-row constant apart, so softmax agrees."""
    torch.manual_seed(num_heads * 100 + L)
    scores = torch.randn(num_heads, L, L) * 3
    bloom = hf_bloom.build_alibi_tensor(torch.ones(1, L, dtype=torch.long), num_heads, torch.float32)  # (H, 1, L)
    future = _causal_mask(L, L)
    theirs = (scores + bloom).masked_fill(future, float("-inf")).softmax(-1)
    ours = (scores + alibi.alibi_bias(num_heads, L)).masked_fill(future, float("-inf")).softmax(-1)  # mask apart
    torch.testing.assert_close(ours, theirs, **TOL)
    # the biases themselves differ by slope * i, constant along each row
    slopes = alibi.alibi_slopes(num_heads)[:, None, None]
    diff = (bloom - alibi.alibi_bias(num_heads, L)).masked_fill(future, 0.0)
    expected = (slopes * torch.arange(L)[None, :, None]).expand(num_heads, L, L).masked_fill(future, 0.0)
    torch.testing.assert_close(diff, expected, **TOL)


def _loop_reference(num_heads, Lq, Lk, symmetric, offset):
    """-m_h (i - j) for every pair (no mask: causality is the mask's job) or -m_h |i - j|, in float64."""
    m = _paper_get_slopes(num_heads)
    out = torch.empty(num_heads, Lq, Lk, dtype=torch.float64)
    for h in range(num_heads):
        for i in range(Lq):
            for j in range(Lk):
                d = (offset + i) - j
                out[h, i, j] = -m[h] * (abs(d) if symmetric else d)
    return out


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("num_heads,Lq,Lk,offset", [(5, 6, 6, 0), (8, 1, 9, 8), (3, 4, 10, 6), (12, 5, 5, 0)])
def test_bias_equals_loop_reference(symmetric, num_heads, Lq, Lk, offset):
    ours = alibi.alibi_bias(num_heads, Lq, Lk, symmetric=symmetric, query_offset=offset)
    assert ours.shape == (num_heads, Lq, Lk) and ours.dtype == torch.float32
    assert torch.isfinite(ours).all()  # never -inf: a bias holds no mask
    torch.testing.assert_close(ours.double(), _loop_reference(num_heads, Lq, Lk, symmetric, offset), **TOL)


def test_the_default_places_the_queries_last():
    """alibi_bias(H, 2, 5): queries at 3 and 4, as rp.attend puts them."""
    torch.testing.assert_close(alibi.alibi_bias(4, 2, 5), alibi.alibi_bias(4, 2, 5, query_offset=3))


@settings(max_examples=20, deadline=None)
@given(num_heads=st.integers(1, 24), extra=st.integers(0, 200), gap=st.integers(1, 100))
def test_two_token_sign(num_heads, extra, gap):
    """Keys at q - gap (before) and q + gap (after) a query at q (query_minus_key: i - j = +gap, -gap)."""
    q = gap + extra
    b = alibi.alibi_bias(num_heads, 1, q + gap + 1, query_offset=q)[:, 0]  # (H, Lk)
    slopes = alibi.alibi_slopes(num_heads)
    torch.testing.assert_close(b[:, q + gap], slopes * gap)  # the later key: i - j = -gap (the mask removes it)
    torch.testing.assert_close(b[:, q - gap], -slopes * gap)  # the earlier key: -m * (i - j)
    assert (b[:, q] == 0).all()
    s = alibi.alibi_bias(num_heads, 1, q + gap + 1, symmetric=True, query_offset=q)[:, 0]
    torch.testing.assert_close(s[:, q - gap], s[:, q + gap])  # bidirectional: symmetric
    assert (s[:, q - gap] < 0).all()


@settings(max_examples=15, deadline=None)
@given(num_heads=st.integers(1, 16), L=st.integers(1, 12), shift=st.integers(1, 500), symmetric=st.booleans())
def test_shift_invariance(num_heads, L, shift, symmetric):
    """Every position moved by `shift`: the window's bias and attention do not change."""
    base = alibi.alibi_bias(num_heads, L, symmetric=symmetric)
    shifted = alibi.alibi_bias(num_heads, L, shift + L, symmetric=symmetric, query_offset=shift)[:, :, shift:]
    torch.testing.assert_close(shifted, base, rtol=1e-6, atol=1e-6)
    scores = torch.randn(num_heads, L, L, generator=torch.Generator().manual_seed(shift))
    torch.testing.assert_close((scores + shifted).softmax(-1), (scores + base).softmax(-1), **TOL)


@pytest.mark.parametrize("call,param", [
    (lambda: alibi.alibi_slopes(0), "num_heads"),
    (lambda: alibi.alibi_slopes(-3), "num_heads"),
    (lambda: alibi.alibi_slopes(2.0), "num_heads"),
    (lambda: alibi.alibi_bias(0, 4), "num_heads"),
    (lambda: alibi.alibi_bias(4, 0), "query_len"),
    (lambda: alibi.alibi_bias(4, 3, 0), "key_len"),
    (lambda: alibi.alibi_bias(4, 3, symmetric="yes"), "symmetric"),
    (lambda: alibi.alibi_bias(4, 3, 2), "q must not be longer than k"),
    (lambda: alibi.alibi_bias(4, 3, query_offset=0.5), "query_offset"),
])
def test_validation(call, param):
    with pytest.raises(ValueError, match=param):
        call()
