"""What the per-scheme reference files share: softmax over keys, offsets as Python ints, RoPE pairs."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class Case:
    reference: Callable
    make_params: Callable
    term: Callable
    params_of: Callable | None = None  # a PositionTerm's tables as this reference's params (decoder checks)


def softmax_list(scores: list[float]) -> list[float]:
    """softmax of a list of floats (-inf for a hidden key), for the loop references."""
    m = max(s for s in scores)
    e = [math.exp(s - m) if s != -math.inf else 0.0 for s in scores]
    z = sum(e)
    return [x / z for x in e]


def attend(logits, v, qpos, kpos, causal, value_rows=None):
    """softmax over keys (masked), then the weighted sum of v (+ value vectors per pair)."""
    if causal:
        visible = kpos[None, :] <= qpos[:, None]  # (Lq, Lk)
        logits = logits.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    empty = torch.isneginf(logits).all(-1, keepdim=True)
    probs = probs.masked_fill(empty, 0.0)
    out = probs @ v
    if value_rows is not None:  # (Lq, Lk, d)
        out = out + torch.einsum("bhij,ijd->bhid", probs, value_rows)
    return out


def pairwise(qpos, kpos):
    """offsets j - i as a (Lq, Lk) list of Python ints."""
    return [[int(kj) - int(qi) for kj in kpos] for qi in qpos]


def content(q, k):
    """q . k / sqrt(d): (B, H, Lq, Lk)."""
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def rotate_pairs(x, positions, theta, *, pairing="rotate_half", scale=None):
    """Rotate pair m of x (..., L, d) by positions[i] * theta[m], one 2x2 rotation at a time (float64 loops).

    rotate_half pairs dimension m with m + d/2, interleaved 2m with 2m + 1. ``scale(i, m)``, if
    given, multiplies both rotated coordinates (xPos).
    """
    d = x.shape[-1]
    out = x.clone()
    for i, p in enumerate(positions.tolist()):
        for m, t in enumerate(theta):
            a_idx, b_idx = (m, m + d // 2) if pairing == "rotate_half" else (2 * m, 2 * m + 1)
            c, s = math.cos(p * t), math.sin(p * t)
            f = 1.0 if scale is None else scale(p, m)
            a, b = x[..., i, a_idx], x[..., i, b_idx]
            out[..., i, a_idx], out[..., i, b_idx] = f * (a * c - b * s), f * (a * s + b * c)
    return out


def rnd(generator, *shape, s=0.3):
    return torch.randn(*shape, generator=generator, dtype=torch.float64) * s
