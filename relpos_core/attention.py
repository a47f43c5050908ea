"""Plain scaled dot-product attention with an optional additive bias: the reference
every scheme's output is built on (chapter 1).

Kept explicit (no fused kernel) so the book can show each step; the kernel paths in
``relpos_core.kernels`` compute the same numbers faster.
"""
from __future__ import annotations

import math

import torch

from ._validate import check_tensor


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q k^T * scale + bias), rows are queries, columns keys.

    q: (..., Lq, d), k: (..., Lk, d); bias broadcasts to (..., Lq, Lk). ``scale``
    defaults to 1/sqrt(d). ``causal`` masks keys after the query (key j > query i,
    queries aligned to the end of the keys).
    """
    check_tensor("q", q, ndim=(2, 3, 4), floating=True)
    check_tensor("k", k, ndim=q.dim(), floating=True, shape={-1: q.shape[-1]})
    if bias is not None:
        check_tensor("bias", bias, floating=True)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., Lq, Lk)
    if bias is not None:
        scores = scores + bias
    if causal:
        lq, lk = scores.shape[-2:]
        future = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(lk - lq + 1)  # (Lq, Lk)
        scores = scores.masked_fill(future, float("-inf"))
    return scores.softmax(dim=-1)


def attention(q, k, v, *, bias=None, causal=False, scale=None) -> torch.Tensor:
    """attention_weights(q, k, ...) @ v: (..., Lq, d_v)."""
    check_tensor("v", v, ndim=k.dim() if isinstance(k, torch.Tensor) else None, floating=True)
    return attention_weights(q, k, bias=bias, causal=causal, scale=scale) @ v
