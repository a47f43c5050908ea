"""Forgetting attention (relpos_core.schemes.forgetting): what the derived grids do not already check.

The registry's paths (naive eager, SDPA and FlexAttention), gradients, cached decoding and
the byte bound are checked for it by the derived tests (test_attend, test_decoding,
test_memory). Here: the refusals name the reason, keys given out of order and after an
eviction are summed in the order of their positions, a constant gate is ALiBi, and the
bias is the cumulative log of the gates the paper defines.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.kernels.forms import BACKENDS
from relpos_core.schemes import forgetting
from tests.references.forgetting import reference

H, D = 2, 8


def _inputs(B, Lq, Lk, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (Lq, Lk, Lk))
    params = dict(weight=torch.randn(H, D, generator=g, dtype=torch.float64) * 0.5,
                  bias=torch.randn(H, generator=g, dtype=torch.float64))
    return q, k, v, params


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn()


def test_gather_and_skew_are_refused_with_the_reason_and_so_is_a_bidirectional_call():
    q, k, v, p = _inputs(1, 3, 3, 0)
    term = forgetting.position_term(p["weight"], p["bias"])
    for form in ("gather", "skew"):
        for backend in BACKENDS:
            reason = registry.unsupported_reason(term, form, backend)
            assert "no per-offset table" in reason
            with pytest.raises(ValueError, match="no per-offset table"):
                rp.attend(q, k, v, term, form=form, backend=backend, causal=True)
    with pytest.raises(ValueError, match="decoder-only"):
        rp.attend(q, k, v, term, form="naive", causal=False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_out_of_order_and_after_an_eviction(backend):
    """Keys given as 9, 0, 7, 1, 6 (a permutation of kept positions): the sum runs in position order."""
    q, k, v, p = _inputs(2, 2, 5, 1)
    kpos, qpos = torch.tensor([9, 0, 7, 1, 6]), torch.tensor([7, 9])
    want = reference(q, k, v, p, qpos, kpos, True)
    dtype = torch.float32 if backend == "flex" else torch.float64
    term = forgetting.position_term(p["weight"].to(dtype), p["bias"].to(dtype))
    got = _quiet(lambda: rp.attend(q.to(dtype), k.to(dtype), v.to(dtype), term, form="naive", backend=backend,
                                   causal=True, query_positions=qpos, key_positions=kpos, compiled=False))
    tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got.double(), want, **tol)


def test_a_constant_gate_is_alibi():
    """w = 0 and sigmoid(b_h) = exp(-m_h): every token in between costs m_h, so D_ij = -m_h (i - j)."""
    q, k, v, _ = _inputs(1, 6, 6, 2)
    m = torch.tensor([0.25, 0.8], dtype=torch.float64)
    bias = torch.log(torch.exp(-m) / (1 - torch.exp(-m)))  # logit(exp(-m))
    term = forgetting.position_term(torch.zeros(H, D, dtype=torch.float64), bias)
    i = torch.arange(6)
    alibi = -(m[:, None, None] * (i[:, None] - i[None, :]))  # (H, L, L)
    logits = q @ k.transpose(-2, -1) / math.sqrt(D) + alibi
    logits = logits.masked_fill(i[None, :] > i[:, None], float("-inf"))
    want = torch.softmax(logits, -1) @ v
    torch.testing.assert_close(rp.attend(q, k, v, term, causal=True), want, atol=1e-12, rtol=1e-12)


def test_the_bias_is_the_cumulative_log_gate():
    """forgetting_bias: D_ij = sum_{l=j+1}^{i} log f_l, f_l = sigmoid(w . k_l + b), with queries the last Lq."""
    _, k, _, p = _inputs(1, 1, 5, 3)
    d = forgetting.forgetting_bias(k, p["weight"], p["bias"], 2)  # (1, H, 2, 5): queries at 3 and 4
    log_f = torch.log(torch.sigmoid(torch.einsum("hd,bhld->bhl", p["weight"], k) + p["bias"][None, :, None]))
    for h in range(H):
        for i, qp in enumerate((3, 4)):
            for j in range(qp + 1):
                torch.testing.assert_close(d[0, h, i, j], log_f[0, h, j + 1:qp + 1].sum(), atol=1e-12, rtol=0)
    assert d[0, :, 1, 4].abs().max() == 0  # the key at the query itself: nothing between


def test_a_model_decodes_with_eviction_as_it_recomputes_over_the_kept_tokens():
    cfg = rp.models.TransformerConfig(scheme="forgetting", vocab_size=32, d_model=16, num_heads=H, num_layers=2,
                                      max_positions=16)
    model = rp.models.Transformer(cfg, seed=3, dtype=torch.float64)
    tokens = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(0))
    for frame in ("cache", "original"):
        cache = model.new_cache(sinks=1, window=3, positions=frame)
        stepped = model.decode(tokens, cache)
        recomputed = model.recompute(tokens, sinks=1, window=3, positions=frame)
        torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
    full = model(tokens)
    assert (stepped[:, -1] - full[:, -1]).abs().max() > 1e-4  # eviction forgets the gates: a real difference


@pytest.mark.parametrize("bad", [float("inf"), "2", True])
def test_bias_init_is_validated_by_name(bad):
    with pytest.raises(ValueError, match="bias_init"):
        forgetting.ForgettingOptions(bias_init=bad)
