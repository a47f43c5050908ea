"""Plain scaled dot-product attention with an optional additive bias, written out:
``rp.attention`` and ``rp.attention_weights``, the reference chapter 1 builds every
scheme on (chapters/01_why_relative_positions.ipynb).

Kept explicit (no fused kernel) so the book can show each step; ``rp.attend`` computes
the same numbers for every scheme on every kernel path. Same rules as there: the queries
are the last Lq keys under ``causal``, causality is a mask (never part of a bias), a row
whose keys are all masked gets weight 0 (not NaN), and the [..., Lq, Lk] scores are
checked against the memory budget first.
"""
from __future__ import annotations

import math
import numbers

import torch

from relpos_core._validate import check_tensor
from relpos_core.budget import check_memory

__all__ = ["attention", "attention_weights"]


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
    if q.shape[-2] < 1 or k.shape[-2] < 1 or q.shape[-1] < 1:
        raise ValueError(f"q and k must hold at least one query, one key and one feature, got shapes "
                         f"{tuple(q.shape)} and {tuple(k.shape)}")
    if k.device != q.device:
        raise ValueError(f"k must be on q's device {q.device}, got {k.device}")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not 0 < float(scale) < math.inf:
        raise ValueError(f"scale must be a finite positive number (or None for 1/sqrt(d)), got {scale!r}")
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    check_memory(2 * math.prod(lead) * q.shape[-2] * k.shape[-2] * q.element_size(), what="rp.attention scores",
                 shape=(*lead, q.shape[-2], k.shape[-2]), dtype=q.dtype,
                 alternative="rp.attend (fused SDPA or FlexAttention backends)")
    scores = (q @ k.transpose(-2, -1)) * float(scale)  # (..., Lq, Lk)
    if bias is not None:
        scores = scores + bias
    if causal:
        lq, lk = scores.shape[-2:]
        future = torch.ones(lq, lk, dtype=torch.bool, device=q.device).triu(lk - lq + 1)  # (Lq, Lk)
        scores = scores.masked_fill(future, float("-inf"))
    probs = scores.softmax(dim=-1)  # (..., Lq, Lk)
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)  # rows with no visible key
    return probs.masked_fill(empty, 0.0) if bool(empty.any()) else probs


def attention(q, k, v, *, bias=None, causal=False, scale=None) -> torch.Tensor:
    """attention_weights(q, k, ...) @ v: (..., Lq, d_v)."""
    check_tensor("v", v, ndim=k.dim() if isinstance(k, torch.Tensor) else None, floating=True)
    return attention_weights(q, k, bias=bias, causal=causal, scale=scale) @ v
