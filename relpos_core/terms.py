"""Position terms: what a scheme hands to the kernels ("schemes say what, kernels say how").

Book: "What it costs" (chapters/11_what_it_costs.ipynb), where every kernel path
is derived from these pieces; each scheme's chapter shows its own term.

Every relative scheme in this book changes attention in one or more of five ways, all
functions of the offset ``off = key_pos - query_pos`` (``key_minus_query``; a scheme
that speaks of i - j flips the sign inside its ``RowIndex``):

* ``ScalarTable``: a learned scalar per head and offset class, added to the logit
  (T5: ``table[h, bucket(off)]``);
* ``ScalarSlopes``: a fixed slope per head times the distance, added to the logit (ALiBi);
* ``ScalarFunction``: a scalar per head computed from the offset by a small function with
  learned parameters (Kerple's ``-r1 log(1 + r2 |i - j|)``);
* ``PairScalar``: a scalar per head that depends on the query's and the key's positions,
  not only on their offset (FIRE normalises the distance by the query's position), so
  it has no per-offset table: only the naive form computes it;
* ``QueryVectors``: ``(q_i + shift) . E[row(off)]``, scaled like the content score
  (Shaw's key term, DeBERTa's c2p, Transformer-XL's (b) + (d) with shift = v);
* ``KeyVectors``: ``k_j . E[row(off)]``, scaled like the content score (DeBERTa's p2c);
* ``ValueVectors``: ``sum_j p_ij E[row(off)]`` added to the *output* (Shaw's value term;
  it is not a logit, so no attention mask or score_mod can express it).

RoPE is none of these: it rotates q and k by their positions (``Rotary``, with its
context-extension scalings and xPos's decay) before any kernel. A ``PositionTerm`` bundles a scheme's pieces with its explicit logit scale:

    logit_ij = scale * ((q_i + content_shift) . k_j + sum of vector terms) + sum of scalar terms

``scale=None`` means 1/sqrt(d); T5 sets 1.0 (its logits are unscaled), DeBERTa 1/sqrt(3d).
The kernel paths in ``relpos_core.kernels`` turn these pieces into logits (naive: per
pair; gather: per row or offset, then index; skew: per offset, then a strided view) and
hand them to an attention backend (eager, SDPA or FlexAttention). A new scheme needs one
file in ``relpos_core/schemes`` that builds its ``PositionTerm`` from these pieces.

**One protocol.** Every piece kind is one class of ``relpos_core.pieces`` following the
protocol of ``relpos_core.pieces.base.Piece``: what it computes (its logits or output on
each form, its FlexAttention reader; it may read q and k), what it supports (form x
backend; anything else is refused with the piece's own reason, never skipped), what it
allocates (the tensors the memory guard sums), and its stage in the concept figure. The
kernels, the registry, ``rp.attend``'s checks, the byte count and the figures walk
``PositionTerm.all_pieces``; none names a piece class. A piece of a new kind goes into
``PositionTerm(pieces=(...))``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace

import torch

from relpos_core._validate import check_tensor
from relpos_core.pieces.base import Alloc, Piece, Sizes
from relpos_core.pieces.rotary import Rotary, XPosDecay
from relpos_core.pieces.scalars import PairScalar, ScalarFunction, ScalarSlopes, ScalarTable
from relpos_core.pieces.vectors import (KeyVectors, QueryVectors, RowIndex, ValueVectors, check_row_table,
                                        clipped_rows, no_work)

__all__ = [
    "Piece",
    "Alloc",
    "Sizes",
    "RowIndex",
    "no_work",
    "clipped_rows",
    "check_row_table",
    "example_tensor",
    "ScalarTable",
    "ScalarSlopes",
    "ScalarFunction",
    "PairScalar",
    "QueryVectors",
    "KeyVectors",
    "ValueVectors",
    "Rotary",
    "XPosDecay",
    "PositionTerm",
    "NO_POSITION",
]


def example_tensor(*shape, device=None, dtype=torch.float32, generator=None, scale: float = 1.0) -> torch.Tensor:
    """A random tensor for example terms (registry, benchmark, tests); empty on the meta device."""
    if torch.device(device or "cpu").type == "meta":
        return torch.empty(*shape, device="meta", dtype=dtype)
    return (torch.randn(*shape, generator=generator) * scale).to(device=device, dtype=dtype)


@dataclass(frozen=True)
class PositionTerm:
    """One scheme's whole position signal; see the module docstring for the logit it defines.

    The named slots (``query_vectors``, ``key_vectors``, ``scalars``, ``value``, ``rotary``)
    hold the pieces the book's schemes use; ``pieces`` holds pieces of any other kind.
    Every path walks ``all_pieces``.
    """

    scheme: str
    convention: str
    scale: float | None = None
    content_shift: torch.Tensor | None = None  # (H, d): Transformer-XL's u
    query_vectors: tuple = ()
    key_vectors: tuple = ()
    scalars: tuple = ()
    value: Piece | None = None
    rotary: Rotary | None = None
    pieces: tuple = ()
    causal_only: bool = False
    notes: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.scale is not None:
            ok = isinstance(self.scale, numbers.Real) and not isinstance(self.scale, bool)
            if not (ok and math.isfinite(float(self.scale)) and float(self.scale) > 0):
                raise ValueError(f"scale must be a finite positive number or None (1/sqrt(d)), got {self.scale!r}")
            object.__setattr__(self, "scale", float(self.scale))
        if self.content_shift is not None:
            check_tensor("content_shift", self.content_shift, ndim=2, floating=True)
        for piece in self.all_pieces:
            if not isinstance(piece, Piece):
                raise ValueError(f"every piece of a PositionTerm must follow relpos_core.pieces.base.Piece, "
                                 f"got {type(piece).__name__}")

    @property
    def all_pieces(self) -> tuple:
        """Every piece, rotation first, then the logit pieces, then the output pieces."""
        named = ((self.rotary,) if self.rotary is not None else ()) + tuple(self.query_vectors) \
            + tuple(self.key_vectors) + tuple(self.scalars) + tuple(self.pieces)
        return named + ((self.value,) if self.value is not None else ())

    @property
    def formed(self) -> tuple:
        """The pieces a form computes (all but the rotation, which every path applies first)."""
        return tuple(p for p in self.all_pieces if p.stage != "rotary")

    @property
    def query_pieces(self) -> tuple:
        """The pre-kernel pieces other than the rotation (length scaling): each changes q first."""
        return tuple(p for p in self.pieces if p.stage == "rotary")

    @property
    def logit_pieces(self) -> tuple:
        return tuple(p for p in self.formed if p.stage != "output")

    @property
    def output_pieces(self) -> tuple:
        return tuple(p for p in self.formed if p.stage == "output")

    @property
    def has_logit_terms(self) -> bool:
        """True when something must be added to the logits (a bias, a vector term)."""
        return bool(self.logit_pieces)

    @property
    def offset_only(self) -> bool:
        """True when every piece is a function of the offset alone (a per-offset table exists)."""
        return all(p.offset_only for p in self.formed)

    def without_rotary(self) -> "PositionTerm":
        """The same term with the rotation removed (q and k were rotated already, e.g. in a KV cache)."""
        return replace(self, rotary=None)

    def nbytes(self) -> int:
        """Bytes of every tensor the term holds (its tables, slopes, parameters)."""
        return sum(t.numel() * t.element_size() for _, t in self.tensors())

    def logit_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(head_dim) if self.scale is None else float(self.scale)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every (name, tensor) the term holds: for device, dtype and gradient checks."""
        out = [("content_shift", self.content_shift)] if self.content_shift is not None else []
        for piece in self.all_pieces:
            out.extend(piece.tensors())
        return out

    def kinds(self) -> list[str]:
        """Short names of the piece kinds present, once each (for the registry and error messages)."""
        return list(dict.fromkeys(p.kind for p in self.all_pieces))


NO_POSITION = PositionTerm(scheme="none", convention="none")
