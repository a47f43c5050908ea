"""Position terms: what a scheme hands to the kernels ("schemes say what, kernels say how").

Book: "What it costs" (chapters/08_what_it_costs.ipynb), where every kernel path
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

**Bytes.** Every piece says what it allocates beyond its result (``values_peak``, a
``RowIndex``'s ``work_bytes``), so the byte ledger of ``relpos_core.measure.analytic``
asks the pieces and guesses nothing about a scheme.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from relpos_core._validate import check_choice, check_int, check_tensor

__all__ = [
    "RowIndex",
    "no_work",
    "clipped_rows",
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


_I64 = 8
_F32 = 4


def no_work(n: int) -> int:
    """A map that allocates nothing beyond its result (it works in place on its input)."""
    return 0


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
    ``work_bytes(n)``: the bytes the map allocates at its peak on n offsets, beyond its
    int64 input (0 for an in-place clamp; T5's buckets declare their float32 steps).
    """

    num_rows: int
    rows_of_offsets: Callable[[torch.Tensor], torch.Tensor]
    description: str
    min_offset: int | None = None
    work_bytes: Callable[[int], int] = no_work

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

    def values_peak(self, n: int, out_bytes: int) -> int:
        """Peak bytes of ``values`` on n offsets beyond its input, result (``out_bytes``) included."""
        return max(self.ids.work_bytes(n), _I64 * n + out_bytes)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(self.name, self.table)]


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

    def values_peak(self, n: int, out_bytes: int) -> int:
        """The offsets in the result's dtype (and |.| and its negation when symmetric), then the result."""
        es = out_bytes // max(1, self.num_heads * n)
        return es * n * (3 if self.symmetric else 1) + out_bytes

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(self.name, self.slopes)]


@dataclass(frozen=True)
class ScalarFunction:
    """logit_ij += fn(off_ij)[h]: a scalar per head computed from the offset (Kerple).

    ``fn`` maps int64 offsets of any shape to (H, *shape) in float32 (or the dtype asked
    for), reading the learned ``params`` (so gradients reach them); it must be
    elementwise in the offset. ``peak(n, out_bytes)``: the most bytes ``fn`` holds at once
    on n offsets, its result (``out_bytes``) included, declared by the scheme. Every form
    that handles scalar terms computes it: per pair (naive), per offset then indexed
    (gather, and FlexAttention's per-offset table).
    """

    fn: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    params: tuple
    num_heads: int
    name: str = "scalar function"
    peak: Callable[[int, int], int] = lambda n, out_bytes: out_bytes

    def __post_init__(self):
        for i, p in enumerate(self.params):
            check_tensor(f"params[{i}]", p, floating=True)
        check_int("num_heads", self.num_heads, min_value=1)

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape) in ``dtype`` (default float32)."""
        return self.fn(offsets, torch.float32 if dtype is None else dtype)

    def values_peak(self, n: int, out_bytes: int) -> int:
        return self.peak(n, out_bytes)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(f"{self.name} params[{i}]", p) for i, p in enumerate(self.params)]


@dataclass(frozen=True)
class PairScalar:
    """logit_ij += fn(query_pos_i, key_pos_j)[h]: a scalar that depends on both positions (FIRE).

    ``fn(query_positions (Lq,), key_positions (Lk,), dtype)`` returns (H, Lq, Lk). The
    value is not a function of the offset alone, so no per-offset table exists: only the
    naive form (per pair) computes it, on every backend. ``peak(Lq, Lk, out_bytes)``: the
    most bytes ``fn`` holds at once, its result included, declared by the scheme.
    """

    fn: Callable[[torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
    params: tuple
    num_heads: int
    name: str = "pair scalar"
    peak: Callable[[int, int, int], int] = lambda Lq, Lk, out_bytes: out_bytes

    def __post_init__(self):
        for i, p in enumerate(self.params):
            check_tensor(f"params[{i}]", p, floating=True)
        check_int("num_heads", self.num_heads, min_value=1)

    def pair_values(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, Lq, Lk) in ``dtype`` (default float32)."""
        return self.fn(query_positions, key_positions, torch.float32 if dtype is None else dtype)

    def pairs_peak(self, Lq: int, Lk: int, out_bytes: int) -> int:
        return self.peak(Lq, Lk, out_bytes)

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        return [(f"{self.name} params[{i}]", p) for i, p in enumerate(self.params)]


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
class Rotary:
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

    def __post_init__(self):
        if isinstance(self.base, bool) or not isinstance(self.base, numbers.Real) or not self.base > 1:
            raise ValueError(f"base must be a real number > 1, got {self.base!r}")
        check_choice("pairing", self.pairing, ("rotate_half", "interleaved"))
        if self.rotary_dim is not None:
            r = check_int("rotary_dim", self.rotary_dim, min_value=2)
            if r % 2:
                raise ValueError(f"rotary_dim must be even (dimensions are rotated in pairs), got {r}")
        if self.decay is not None and not isinstance(self.decay, XPosDecay):
            raise ValueError(f"decay must be an XPosDecay or None, got {type(self.decay).__name__}")

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

    @property
    def offset_only(self) -> bool:
        """True when every piece is a function of the offset alone (a per-offset table exists)."""
        return not any(isinstance(s, PairScalar) for s in self.scalars)

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
        out = []
        if self.content_shift is not None:
            out.append(("content_shift", self.content_shift))
        for piece in self.query_vectors + self.key_vectors:
            out.append((f"{piece.name} table", piece.table))
            if getattr(piece, "shift", None) is not None:
                out.append((f"{piece.name} shift", piece.shift))
        for piece in self.scalars:
            out.extend(piece.tensors())
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
        if any(isinstance(s, ScalarFunction) for s in self.scalars):
            kinds.append("scalar_function")
        if any(isinstance(s, PairScalar) for s in self.scalars):
            kinds.append("pair_scalar")
        if self.value is not None:
            kinds.append("value_vectors")
        return kinds


NO_POSITION = PositionTerm(scheme="none", convention="none")
