"""rp.attend's per-call work (issue 25): the one-pass finiteness scan, ALiBi's dense bias without an index."""
from __future__ import annotations

import pytest
import torch

import relpos_core as rp
from relpos_core.attend import _check_finite
from relpos_core.measure import measure_peak_memory

BAD = [float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("bad", BAD, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("where", [0, 17, -1])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_the_scan_catches_one_non_finite_value_anywhere(bad, where, dtype):
    """One NaN or inf, first, inside or last, in a contiguous tensor and in a transposed view."""
    x = torch.randn(2, 3, 40, 8).to(dtype)
    x.view(-1)[where] = bad
    for t in (x, x.transpose(1, 2), x[:, :, ::2]):
        if not torch.isfinite(t).all():
            with pytest.raises(ValueError, match="q holds non-finite"):
                _check_finite([("q", t)])


def test_the_scan_names_the_tensor_and_passes_finite_extremes():
    q = torch.randn(1, 2, 5, 4, dtype=torch.float64)
    q[0, 0, 0, 0] = 1e300  # finite in float64 (it would overflow a float32 cast)
    _check_finite([("q", q), ("k", torch.arange(4)), ("empty", torch.empty(0))])
    table = torch.randn(8, 2)
    table[3, 1] = float("nan")
    term = rp.schemes.t5.position_term(table, max_distance=16)
    x = torch.randn(1, 2, 6, 4)
    with pytest.raises(ValueError, match="the term's T5 bias table holds non-finite"):
        rp.attend(x, x, x, term, form="gather")


def test_finite_values_whose_sum_overflows_pass_the_scan():
    """The fast check sums each tensor; a finite tensor whose sum overflows falls to the exact check."""
    x = torch.full((1, 2, 64, 8), torch.finfo(torch.float32).max)
    assert torch.isinf(x.sum())  # the fast check cannot decide it
    _check_finite([("q", x), ("k", -x), ("v", x)])  # finite: accepted
    y = x.clone()
    y[0, 1, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="v holds non-finite"):
        _check_finite([("q", x), ("k", -x), ("v", y)])


def test_the_scan_allocates_nothing_for_q_k_v_dense_in_memory():
    """A (B, L, H, d) projection transposed to (B, H, L, d) is read in place (isfinite wrote 3.5 bytes per value)."""
    x = torch.randn(1, 256, 4, 32).transpose(1, 2)  # (B, H, L, d), not contiguous
    assert measure_peak_memory(lambda: _check_finite([("q", x), ("k", x), ("v", x)])) < 1024


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_alibi_gather_equals_slope_times_distance_far_apart(symmetric, dtype):
    """Queries and keys spanning more than 2^24 (where float32 positions round: 2^25 + 3 is not one):
    the dense gather equals the float64 slope x distance rounded once, as the naive form is."""
    H, d = 4, 8
    keys = torch.tensor([0, 3, 2**25 + 1, 2**25 + 3, 2**25 + 6])  # (Lk,)
    q, k, v = (torch.randn(1, H, n, d, dtype=dtype) for n in (2, 5, 5))
    term = rp.schemes.alibi.position_term(H, symmetric=symmetric)
    qpos = torch.tensor([4, 2**25 + 5])
    where = dict(key_positions=keys, query_positions=qpos, causal=True)  # no key 2^25 after a query
    got = rp.attend(q, k, v, term, form="gather", backend="sdpa", **where)
    dist = (keys[None, :] - qpos[:, None]).double()  # (Lq, Lk) key - query
    dist = -dist.abs() if symmetric else dist
    bias = rp.schemes.alibi.alibi_slopes(H).double()[:, None, None] * dist.to(dtype).double()  # (H, Lq, Lk)
    bias = bias.masked_fill(keys[None, :] > qpos[:, None], float("-inf"))
    ref = rp.attention(q.double(), k.double(), v.double(), bias=bias[None])
    if dtype != torch.bfloat16:  # bf16 attention itself is further from float64 than the rounding tested
        tol = 1e-12 if dtype == torch.float64 else 1e-5
        torch.testing.assert_close(got.double(), ref, atol=tol, rtol=tol)
    naive = rp.attend(q, k, v, term, form="naive", backend="sdpa", **where)
    torch.testing.assert_close(got, naive, atol=0, rtol=0)  # the same bias: the same numbers


def test_alibi_gather_on_dense_backends_builds_no_int64_pair_index():
    """Building the dense bias holds the float32 distance and the bias, no int64 column per pair."""
    H, L, d = 2, 128, 8
    q = torch.randn(1, H, L, d)
    (slopes,) = rp.schemes.alibi.position_term(H).scalars
    pos = rp.positions.resolve_positions(L, L)
    peak = measure_peak_memory(lambda: slopes.logits("gather", q, q, pos, torch.float32))
    pairs = L * L
    assert peak <= 4 * H * pairs + 4 * pairs + 64 * L, peak  # bias + distance; an int64 column adds 8 per pair
