"""What every peer adapter shares: a contender, what building it gives, and the row it is built for."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

__all__ = ["Contender", "Built", "Row", "KERNEL_SCHEMES", "kernel_term", "kernel_causal"]


@dataclass(frozen=True)
class Contender:
    """One implementation a row times: ``build(row) -> Built``.

    ``kind``: "kernel" (``fn(q, k, v) -> (B, H, L, d)``) or "module" (``fn(hidden) -> (B, L, H d)``).
    ``pairing``: RoPE only, the pairing of dimensions it rotates (the float64 reference uses it).
    """

    name: str
    library: str
    scheme: str
    kind: str
    build: Callable
    pairing: str | None = None


@dataclass
class Built:
    """A built contender: its call and the tensors whose gradients a forward + backward row resets."""

    fn: Callable
    params: list = field(default_factory=list)


@dataclass
class Row:
    """The sizes and the shared parameters of one row (scheme, kind, L): every contender copies these."""

    scheme: str
    kind: str
    L: int
    B: int
    H: int
    d: int
    device: torch.device
    dtype: torch.dtype
    causal: bool
    t5_table: torch.Tensor | None = None  # (num_buckets, H)
    max_distance: int = 128
    alibi_slopes: torch.Tensor | None = None  # (H,)
    rope_base: float = 10000.0
    att_span: int = 256  # DeBERTa's S (log buckets, as DeBERTa-v2/v3)


KERNEL_SCHEMES = ("t5", "alibi", "rope")  # the kernel rows: q, k, v in, (B, H, L, d) out
_KERNEL_CAUSAL = {"t5": False, "alibi": True, "rope": True}  # T5's encoder; ALiBi and RoPE decoders


def kernel_causal(scheme: str) -> bool:
    return _KERNEL_CAUSAL[scheme]


def kernel_term(row: Row, dtype: torch.dtype, pairing: str | None = None, learnable: bool = False):
    """(relpos_core's term for a kernel row with the row's own parameters in ``dtype``, its leaves):
    ``learnable`` makes the T5 table a fresh leaf that a backward reaches (the leaves to reset)."""
    from relpos_core.schemes import alibi, rope, t5

    if row.scheme == "t5":
        table = row.t5_table.to(dtype).clone().requires_grad_(learnable)  # (num_buckets, H)
        term = t5.position_term(table, bidirectional=True, max_distance=row.max_distance)
        return term, [table] if learnable else []
    if row.scheme == "alibi":
        return alibi.position_term(row.H, slopes=row.alibi_slopes.to(dtype)), []
    return rope.position_term(base=row.rope_base, pairing=pairing or "rotate_half"), []
