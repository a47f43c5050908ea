"""FIRE in half precision: distances formed in int64 and the bias reduced before the cast to the input dtype.

Before: positions were cast to bf16 before |i - j|, so at position 1000 the keys 998 .. 1000
all had distance 0, and float16 overflowed to NaN with threshold 0 and a query at 0.
"""
from __future__ import annotations

import pytest
import torch

from relpos_core.schemes import fire


def _params(dtype, *, L=512.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    w, H = 32, 2
    p = dict(w1=torch.randn(w, generator=g), b1=torch.randn(w, generator=g), w2=torch.randn(H, w, generator=g) * 0.3,
             b2=torch.randn(H, generator=g), c=torch.tensor(0.1), L=torch.tensor(L))
    return {k: v.to(dtype) for k, v in p.items()}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("position", [1000, 3000, 60000])
def test_half_precision_bias_equals_float64_to_its_rounding(dtype, position):
    params = _params(dtype)
    q, k = torch.tensor([position]), torch.arange(position - 8, position + 1)
    out = fire.fire_bias(params, q, k, dtype=dtype)  # (H, 1, 9)
    ref = fire.fire_bias({n: t.double() for n, t in params.items()}, q, k, dtype=torch.float64)
    # one rounding of the result: relative eps of the dtype on values of size about 1
    tol = 2 * torch.finfo(dtype).eps * max(1.0, float(ref.abs().max()))
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol)
    assert len(set(out[0, 0, -3:].tolist())) > 1  # the last three keys are told apart


def test_float16_threshold_zero_query_at_zero_is_finite():
    params = _params(torch.float16, L=0.0)
    out = fire.fire_bias(params, torch.tensor([0]), torch.arange(3000), dtype=torch.float16)
    assert torch.isfinite(out).all()
