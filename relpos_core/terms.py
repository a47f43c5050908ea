"""Position terms: what a scheme hands to the kernels ("schemes say what, kernels say how").

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb), where every kernel path
is derived from these pieces; each scheme's chapter shows its own term.

Every relative scheme in this book changes attention in one or more of five ways, all
functions of the offset ``off = key_pos - query_pos`` (``key_minus_query``; a scheme
that speaks of i - j flips the sign inside its ``RowIndex``):

* ``ScalarTable``: a learned scalar per head and offset class, added to the logit
  (T5: ``table[h, bucket(off)]``);
* ``ScalarSlopes``: a fixed slope per head times the distance, added to the logit (ALiBi);
* ``QueryVectors``: ``(q_i + shift) . E[row(off)]``, scaled like the content score
  (Shaw's key term, DeBERTa's c2p, Transformer-XL's (b) + (d) with shift = v);
* ``KeyVectors``: ``k_j . E[row(off)]``, scaled like the content score (DeBERTa's p2c);
* ``ValueVectors``: ``sum_j p_ij E[row(off)]`` added to the *output* (Shaw's value term;
  it is not a logit, so no attention mask or score_mod can express it).

RoPE is none of these: it rotates q and k by their positions (``Rotary``) before any
kernel. A ``PositionTerm`` bundles a scheme's pieces with its explicit logit scale:

    logit_ij = scale * ((q_i + content_shift) . k_j + sum of vector terms) + sum of scalar terms

``scale=None`` means 1/sqrt(d); T5 sets 1.0 (its logits are unscaled), DeBERTa 1/sqrt(3d).
The kernel paths in ``relpos_core.kernels`` turn these pieces into logits (naive: per
pair; gather: per row or offset, then index; skew: per offset, then a strided view) and
hand them to an attention backend (eager, SDPA or FlexAttention). A new scheme needs one
file in ``relpos_core/schemes`` that builds its ``PositionTerm`` from these pieces.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import torch

from relpos_core._validate import check_choice, check_int, check_tensor

__all__ = [
    "RowIndex",
    "clipped_rows",
    "example_tensor",
    "ScalarTable",
    "ScalarSlopes",
    "QueryVectors",
    "KeyVectors",
    "ValueVectors",
    "Rotary",
    "PositionTerm",
    "NO_POSITION",
]


@dataclass(frozen=True)
class RowIndex:
    """Which table row the pair (i, j) reads, as a function of its offset j - i.

    ``rows_of_offsets`` maps an int64 tensor of offsets (any shape) to rows in
    [0, num_rows) of the same shape; it must be elementwise (each output depends on its
    own offset only), which every kernel path relies on, and it may overwrite its
    argument (callers pass a fresh tensor). ``min_offset``: offsets below it have no row
    of their own (a Transformer-XL table covers distances up to its length only); a call
    whose visible pairs reach below it is refused rather than silently clipped.
    ``None``: every offset has its row (clipping, as in Shaw's, is part of the scheme).
    """

    num_rows: int
    rows_of_offsets: Callable[[torch.Tensor], torch.Tensor]
    description: str
    min_offset: int | None = None

    def __call__(self, offsets: torch.Tensor) -> torch.Tensor:
        return self.rows_of_offsets(offsets)


def clipped_rows(k: int) -> RowIndex:
    """Shaw's index: row clip(j - i, -k, k) + k in [0, 2k] (``key_minus_query``)."""
    k = check_int("k", k, min_value=1)
    return RowIndex(2 * k + 1, lambda off: off.clamp_(-k, k).add_(k), f"clip(j - i, -{k}, {k}) + {k}")


def example_tensor(*shape, device=None, dtype=torch.float32, generator=None, scale: float = 1.0) -> torch.Tensor:
    """A random tensor for example terms (registry, benchmark, tests); empty on the meta device."""
    if torch.device(device or "cpu").type == "meta":
        return torch.empty(*shape, device="meta", dtype=dtype)
    return (torch.randn(*shape, generator=generator) * scale).to(device=device, dtype=dtype)


def check_row_table(table: torch.Tensor, rows: RowIndex) -> None:
    """A vector table (R, d) or per head (H, R, d) with one row per row of ``rows``."""
    check_tensor("table", table, ndim=(2, 3), floating=True)
    if table.shape[-2] != rows.num_rows:
        raise ValueError(f"table must have {rows.num_rows} rows ({rows.description}), "
                         f"got shape {tuple(table.shape)}")


@dataclass(frozen=True)
class ScalarTable:
    """logit_ij += table[h, ids(off_ij)], unscaled. table: (H, n). T5: ids = bucket(off)."""

    table: torch.Tensor  # (H, n)
    ids: RowIndex
    name: str = "scalar table"

    def __post_init__(self):
        check_tensor("table", self.table, ndim=2, floating=True)
        if self.table.shape[1] != self.ids.num_rows:
            raise ValueError(f"table must have {self.ids.num_rows} columns (one per id of {self.ids.description}), "
                             f"got shape {tuple(self.table.shape)}")

    @property
    def num_heads(self) -> int:
        return self.table.shape[0]

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape): the bias of each offset (in ``dtype``, default the table's)."""
        out = self.table[:, self.ids(offsets)]
        return out if dtype is None else out.to(dtype)


@dataclass(frozen=True)
class ScalarSlopes:
    """logit_ij += slope_h * off_ij (ALiBi's -m_h (i - j)), or -slope_h |off_ij| when symmetric."""

    slopes: torch.Tensor  # (H,)
    symmetric: bool = False
    name: str = "slopes"

    def __post_init__(self):
        check_tensor("slopes", self.slopes, ndim=1, floating=True)
        check_choice("symmetric", self.symmetric, (False, True))

    @property
    def num_heads(self) -> int:
        return self.slopes.shape[0]

    def distance(self, offsets: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """off, or -|off| when symmetric, as ``dtype``."""
        off = offsets.to(dtype)
        return -off.abs() if self.symmetric else off

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape) in ``dtype`` (default float32)."""
        dtype = torch.float32 if dtype is None else dtype
        shape = (-1,) + (1,) * offsets.dim()
        return self.slopes.to(dtype).reshape(shape) * self.distance(offsets, dtype)


@dataclass(frozen=True)
class QueryVectors:
    """logit_ij += scale * (q_i + shift_h) . table[(h,) row(off_ij)].

    table: (R, d) shared by all heads (Shaw) or (H, R, d) per head (DeBERTa, Transformer-XL);
    shift: (H, d) or None.
    """

    table: torch.Tensor
    rows: RowIndex
    shift: torch.Tensor | None = None
    name: str = "query vectors"

    def __post_init__(self):
        check_row_table(self.table, self.rows)
        if self.shift is not None:
            check_tensor("shift", self.shift, ndim=2, floating=True, shape={1: self.table.shape[-1]})


@dataclass(frozen=True)
class KeyVectors:
    """logit_ij += scale * k_j . table[(h,) row(off_ij)]; table (R, d) or (H, R, d)."""

    table: torch.Tensor
    rows: RowIndex
    name: str = "key vectors"

    def __post_init__(self):
        check_row_table(self.table, self.rows)


@dataclass(frozen=True)
class ValueVectors:
    """out_i += sum_j p_ij table[(h,) row(off_ij)]; table (R, d) or (H, R, d)."""

    table: torch.Tensor
    rows: RowIndex
    name: str = "value vectors"

    def __post_init__(self):
        check_row_table(self.table, self.rows)


@dataclass(frozen=True)
class Rotary:
    """RoPE: rotate q by its query positions and k by its key positions (no logit term)."""

    base: float = 10000.0
    pairing: str = "rotate_half"


@dataclass(frozen=True)
class PositionTerm:
    """One scheme's whole position signal; see the module docstring for the logit it defines."""

    scheme: str
    convention: str
    scale: float | None = None
    content_shift: torch.Tensor | None = None  # (H, d): Transformer-XL's u
    query_vectors: tuple = ()
    key_vectors: tuple = ()
    scalars: tuple = ()
    value: ValueVectors | None = None
    rotary: Rotary | None = None
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

    @property
    def has_logit_terms(self) -> bool:
        """True when something must be added to the logits (a bias, a vector term)."""
        return bool(self.query_vectors or self.key_vectors or self.scalars)

    def logit_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(head_dim) if self.scale is None else float(self.scale)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every (name, tensor) the term holds: for device, dtype and gradient checks."""
        out = []
        if self.content_shift is not None:
            out.append(("content_shift", self.content_shift))
        for piece in self.query_vectors + self.key_vectors:
            out.append((f"{piece.name} table", piece.table))
            if getattr(piece, "shift", None) is not None:
                out.append((f"{piece.name} shift", piece.shift))
        for piece in self.scalars:
            out.append((piece.name, piece.table if isinstance(piece, ScalarTable) else piece.slopes))
        if self.value is not None:
            out.append((f"{self.value.name} table", self.value.table))
        return out

    def pieces(self) -> list[str]:
        """Short names of the piece kinds present (for the registry and error messages)."""
        kinds = []
        if self.rotary is not None:
            kinds.append("rotary")
        if self.query_vectors:
            kinds.append("query_vectors")
        if self.key_vectors:
            kinds.append("key_vectors")
        if any(isinstance(s, ScalarTable) for s in self.scalars):
            kinds.append("scalar_table")
        if any(isinstance(s, ScalarSlopes) for s in self.scalars):
            kinds.append("scalar_slopes")
        if self.value is not None:
            kinds.append("value_vectors")
        return kinds


NO_POSITION = PositionTerm(scheme="none", convention="none")
