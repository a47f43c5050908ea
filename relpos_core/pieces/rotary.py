"""RoPE's piece: q and k rotated by their positions before any kernel (no logit term of its own).

Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb); the maths is in
``relpos_core.kernels.rotary`` (applied by ``relpos_core.kernels.forms.prepare_qk`` on every
path), the context-extension scalings in ``relpos_core.kernels.rope_scaling``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

import torch

from relpos_core._validate import check_choice, check_int
from relpos_core.pieces.base import ALL_BACKENDS, Alloc, Piece

__all__ = ["Rotary", "XPosDecay"]


@dataclass(frozen=True)
class XPosDecay:
    """xPos's decay (Sun et al., 2022): q_n scaled by zeta^(n / scale_base), k_m by zeta^(-m / scale_base).

    zeta_k = (2k / d + gamma) / (1 + gamma) per rotated pair k, so q . k gains
    zeta^((n - m) / scale_base): a factor < 1 that shrinks with the distance behind the query.
    """

    scale_base: float = 512.0
    gamma: float = 0.4

    def __post_init__(self):
        for name in ("scale_base", "gamma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < math.inf:
                raise ValueError(f"{name} must be a finite positive number, got {value!r}")


@dataclass(frozen=True)
class Rotary(Piece):
    """RoPE: rotate q by its query positions and k by its key positions (no logit term).

    ``base``: theta_k = base^(-2k / r) for pair k of the ``rotary_dim`` rotated dimensions
    (None: the whole head; fewer: partial rotary, the rest pass through unchanged).
    ``pairing``: "rotate_half" (dimension k with k + r/2) or "interleaved" (2k with 2k + 1).
    ``scaling``: a context-extension method (``relpos_core.kernels.rotary``: its
    ``inverse_frequencies`` and ``attention_factor``), or None. ``decay``: xPos, or None.
    The maths is in ``relpos_core.kernels.rotary``.
    """

    base: float = 10000.0
    pairing: str = "rotate_half"
    rotary_dim: int | None = None
    scaling: object | None = None
    decay: XPosDecay | None = None
    keep_fraction: float = 1.0
    kind: ClassVar[str] = "rotary"
    stage: ClassVar[str] = "rotary"
    computes: ClassVar = {form: ALL_BACKENDS for form in ("none", "naive", "gather", "skew")}
    name: ClassVar[str] = "rotary"

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, numbers.Real) or not self.base > 1:
            raise ValueError(f"base must be a real number > 1, got {self.base!r}")
        check_choice("pairing", self.pairing, ("rotate_half", "interleaved"))
        if self.rotary_dim is not None:
            r = check_int("rotary_dim", self.rotary_dim, min_value=2)
            if r % 2:
                raise ValueError(f"rotary_dim must be even (dimensions are rotated in pairs), got {r}")
        p = self.keep_fraction
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 < float(p) <= 1:
            raise ValueError(f"keep_fraction must be a real number in (0, 1] (the fraction of rotated pairs "
                             f"p-RoPE keeps, highest frequencies first), got {p!r}")
        object.__setattr__(self, "keep_fraction", float(p))
        if self.decay is not None and not isinstance(self.decay, XPosDecay):
            raise ValueError(f"decay must be an XPosDecay or None, got {type(self.decay).__name__}")

    def kept_pairs(self, head_dim: int) -> int:
        """How many of the r / 2 pairs turn (p-RoPE: floor(p r / 2), the highest frequencies; else all)."""
        r = head_dim if self.rotary_dim is None else min(self.rotary_dim, head_dim)
        return math.floor(self.keep_fraction * (r // 2) + 1e-9)

    def check(self, num_heads, head_dim):
        if self.kept_pairs(head_dim) < 1:
            r = head_dim if self.rotary_dim is None else min(self.rotary_dim, head_dim)
            raise ValueError(f"keep_fraction = {self.keep_fraction} keeps no pair of the {r // 2} rotated pairs "
                             f"(head size {head_dim}): use keep_fraction >= {2 / r} or the scheme 'none'")

    @property
    def dynamic(self) -> bool:
        """True when the frequencies depend on the sequence length (dynamic NTK scaling)."""
        return bool(getattr(self.scaling, "dynamic", False))

    @property
    def rotated_keys_cacheable(self) -> bool:
        """Whether a key rotated once, at write time, stays right for every later query.

        Not with xPos (its scale is kept relative to the call's positions, or it would
        overflow) nor with a dynamic scaling (the frequencies change as the sequence grows).
        """
        return self.decay is None and not self.dynamic

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        """2 multiply-adds per rotated dimension: the new query and key once when the cache keeps keys
        rotated, the new query and every kept key (and the new one) when it keeps them unrotated."""
        if layout not in ("rotated", "unrotated"):
            raise ValueError(f"layout must be 'rotated' or 'unrotated' for a rotation (how the cache keeps keys), "
                             f"got {layout!r}")
        r = 2 * self.kept_pairs(head_dim)  # the dimensions that turn (p-RoPE leaves the others)
        if layout == "rotated":
            return "rotate the new query and the new key, once", 2 * 2 * num_heads * r
        return "rotate the new query and every kept key", 2 * num_heads * r * (context + 1)

    def allocations(self, form, backend, s):
        """The rotated q and k (kept), and the working set of rotating the longer of the two: its angles,
        cos and sin, and three half-size products (x1 cos, x2 sin and their difference)."""
        ws = torch.float64 if s.dtype == torch.float64 else torch.float32  # the angles' dtype
        n = max(s.Lq, s.Lk)
        out = [Alloc("rotated query", (s.B, s.H, s.Lq, s.d), s.dtype), Alloc("rotated key", (s.B, s.H, s.Lk, s.d), s.dtype),
               Alloc("angles, cos and sin", (3, n, s.d // 2), ws),
               Alloc("half-size products", (3, s.B, s.H, n, s.d // 2), s.dtype)]
        if s.dtype != ws:
            out.append(Alloc("cos and sin cast", (2, n, s.d // 2), s.dtype))
        return out
