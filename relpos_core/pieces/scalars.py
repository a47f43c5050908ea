"""Scalar pieces: a bias per head added to the logit, unscaled.

Book: "T5 buckets" (chapters/03_t5_buckets.ipynb), "RoPE and ALiBi"
(chapters/06_rope_and_alibi.ipynb), "What it costs" (chapters/11_what_it_costs.ipynb).

* ``ScalarTable``: table[h, ids(off)] (T5's buckets);
* ``ScalarSlopes``: slope_h off, or -slope_h |off| (ALiBi);
* ``ScalarFunction``: fn(off)[h], a small function with learned parameters (Kerple);
* ``PairScalar``: fn(query_pos, key_pos)[h], not a function of the offset alone (FIRE):
  it has no per-offset table, so only the naive form computes it.

The offset pieces are computed per pair (``naive``: the [Lq, Lk] offsets, then the dense
bias), or per offset then indexed (``gather``: Lq + Lk - 1 values, then the dense bias
read through one int64 column per pair; FlexAttention reads the per-offset table in its
kernel). None has a skew (a strided view of scalars saves nothing over the gather).
ALiBi's gather on the dense backends reads no table at all: slope x distance is one
multiply per pair, so it builds the distance from the positions (no int64 column per pair).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from relpos_core._validate import check_choice, check_int, check_tensor
from relpos_core.compile_ops import computed_once, flex_inputs
from relpos_core.pieces.base import ALL_BACKENDS, Alloc, Piece
from relpos_core.pieces.vectors import RowIndex

__all__ = ["ScalarTable", "ScalarSlopes", "ScalarFunction", "PairScalar"]

I64, F32 = torch.int64, torch.float32


class _Scalar(Piece):
    """A bias of H values per pair; ``num_heads`` and ``name`` come from the subclass."""

    stage: ClassVar[str] = "scalar"
    scaled: ClassVar[bool] = False

    def check(self, num_heads, head_dim):
        if self.num_heads != num_heads:
            raise ValueError(f"the term's {self.name} has {self.num_heads} heads, q has H = {num_heads}")

    @property
    def heads(self):
        return self.num_heads

    def tensors(self):
        return [(f"{self.name} params[{i}]", p) for i, p in enumerate(self.params)]

    #: what a decode step computes for each kept key (``decode_step_work``), one value per head
    step_description: ClassVar[str] = ""

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        return self.step_description or f"{self.name} for every kept key, per head", num_heads * context


class _OffsetScalar(_Scalar):
    """A function of the offset alone: ``values(offsets, dtype)`` (H, *offsets.shape), and the bytes it
    holds at its peak on n offsets, its result included (``value_allocs``)."""

    computes: ClassVar = {"naive": ALL_BACKENDS, "gather": ALL_BACKENDS}

    def refusal(self, form, backend):
        if form == "skew":
            return f"the skew form has no scalar bias ({self.name}): use form 'gather'"
        return super().refusal(form, backend)

    def value_allocs(self, n: int, dtype: torch.dtype) -> list[Alloc]:
        return [Alloc(f"{self.name} values", (self.num_heads, n), dtype)]

    def logits(self, form, q, k, pos, dtype):
        if form == "naive":
            return self.values(pos.offsets(), dtype).unsqueeze(0)  # (1, H, Lq, Lk)
        offsets = torch.arange(pos.min_offset, pos.max_offset + 1, device=pos.query.device)  # (R_off,)
        per_offset = computed_once(self.values(offsets, dtype))  # (H, R_off): once per offset, compiled too
        cols = pos.offsets().sub_(pos.min_offset).reshape(-1)  # (Lq Lk,) int64: column of each pair's offset
        return per_offset.index_select(1, cols).view(1, -1, pos.query_len, pos.key_len)  # (1, H, Lq, Lk)

    def score_mod(self, form, q, k, pos):
        if form == "naive":  # evaluated per pair, read per pair
            Lk = pos.key_len
            vals = flex_inputs(self.values(pos.offsets(), F32).reshape(self.num_heads, -1).contiguous())  # (H, Lq Lk)
            return lambda b, h, qi, ki, off: vals[h, qi * Lk + ki]
        lo = torch.tensor(pos.min_offset, device=pos.query.device)  # 0-d
        offsets = torch.arange(pos.min_offset, pos.max_offset + 1, device=pos.query.device)  # (R_off,)
        vals = self.values(offsets, F32).contiguous()  # (H, R_off) fp32
        vals, lo = flex_inputs(vals, lo)  # under torch.compile on CPU: buffers of their own (compile_ops)
        return lambda b, h, qi, ki, off: vals[h, off - lo]

    def allocations(self, form, backend, s):
        P, H = s.Lq * s.Lk, self.num_heads
        if backend == "flex":
            n = P if form == "naive" else s.num_offsets
            return [Alloc("offsets", (n,), I64), *self.value_allocs(n, F32)]
        if form == "naive":
            return [Alloc("offsets per pair", (P,), I64), *self.value_allocs(P, s.dtype)]
        return [Alloc("offsets", (s.num_offsets,), I64), *self.value_allocs(s.num_offsets, s.dtype),
                Alloc("column of each pair's offset", (P,), I64), Alloc(f"{self.name} per pair", (H, P), s.dtype)]


@dataclass(frozen=True)
class ScalarTable(_OffsetScalar):
    """logit_ij += table[h, ids(off_ij)], unscaled. table: (H, n). T5: ids = bucket(off)."""

    table: torch.Tensor  # (H, n)
    ids: RowIndex
    name: str = "scalar table"
    kind: ClassVar[str] = "scalar_table"
    step_description: ClassVar[str] = "the bucket of every kept key's offset, then a table lookup"

    def __post_init__(self):
        check_tensor("table", self.table, ndim=2, floating=True)
        if self.table.shape[1] != self.ids.num_rows:
            raise ValueError(f"table must have {self.ids.num_rows} columns (one per id of {self.ids.description}), "
                             f"got shape {tuple(self.table.shape)}")

    @property
    def num_heads(self) -> int:
        return self.table.shape[0]

    @property
    def params(self) -> tuple:
        return (self.table,)

    def tensors(self):
        return [(self.name, self.table)]

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape): the bias of each offset (in ``dtype``, default the table's)."""
        out = self.table[:, self.ids(offsets)]
        return out if dtype is None else out.to(dtype)

    def value_allocs(self, n, dtype):
        return [*self.ids.work(n), Alloc(f"{self.name} ids", (n,), I64), *super().value_allocs(n, dtype)]

    def score_mod(self, form, q, k, pos):
        if form == "naive":  # the [Lq, Lk] bucket-id tensor, read per pair
            ids, table = flex_inputs(self.ids(pos.offsets()), self.table.float().contiguous())  # (Lq, Lk), (H, n)
            return lambda b, h, qi, ki, off: table[h, ids[qi, ki]]
        return super().score_mod(form, q, k, pos)

    def allocations(self, form, backend, s):
        if backend == "flex" and form == "naive":
            P = s.Lq * s.Lk
            return [Alloc("offsets per pair", (P,), I64), *self.ids.work(P), Alloc("bucket id per pair", (P,), I64)]
        return super().allocations(form, backend, s)


@dataclass(frozen=True)
class ScalarSlopes(_OffsetScalar):
    """logit_ij += slope_h * off_ij (ALiBi's -m_h (i - j)), or -slope_h |off_ij| when symmetric."""

    slopes: torch.Tensor  # (H,)
    symmetric: bool = False
    name: str = "slopes"
    kind: ClassVar[str] = "scalar_slopes"
    step_description: ClassVar[str] = "slope x distance for every kept key"

    def __post_init__(self):
        check_tensor("slopes", self.slopes, ndim=1, floating=True)
        check_choice("symmetric", self.symmetric, (False, True))

    @property
    def num_heads(self) -> int:
        return self.slopes.shape[0]

    @property
    def params(self) -> tuple:
        return (self.slopes,)

    def tensors(self):
        return [(self.name, self.slopes)]

    def distance(self, offsets: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """off, or -|off| when symmetric, as ``dtype``."""
        off = offsets.to(dtype)
        return -off.abs() if self.symmetric else off

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape) in ``dtype`` (default float32)."""
        dtype = torch.float32 if dtype is None else dtype
        shape = (-1,) + (1,) * offsets.dim()
        return self.slopes.to(dtype).reshape(shape) * self.distance(offsets, dtype)

    def value_allocs(self, n, dtype):
        return [Alloc("offsets as floats (|.| and its negation when symmetric)", (3 if self.symmetric else 1, n),
                      dtype), *super().value_allocs(n, dtype)]

    def logits(self, form, q, k, pos, dtype):
        """naive: the int64 offsets per pair, then slope x offset. gather: the value is linear in
        the offset, so the dense bias needs no per-offset table and no int64 column per pair:
        the positions as floats, one subtraction and one multiply per pair."""
        if form == "naive":
            return super().logits(form, q, k, pos, dtype)
        exact = _distance_dtype(pos, dtype)  # float32 (float64 for spans past 2^24 or float64 inputs)
        base = pos.min_query  # positions relative to the first query: exact in float32 up to 2^24
        key = (pos.key - base).to(exact)  # (Lk,)
        query = (pos.query - base).to(exact)  # (Lq,)
        dist = key[None, :] - query[:, None]  # (Lq, Lk) key_pos - query_pos
        if self.symmetric:
            dist = dist.abs_().neg_()
        dist = dist.to(dtype)  # as the per-offset values were: the exact distance rounded once
        slopes = self.slopes.to(dtype)[:, None, None]  # (H, 1, 1)
        return (slopes * dist).unsqueeze(0)  # (1, H, Lq, Lk)

    def score_mod(self, form, q, k, pos):
        slopes = flex_inputs(self.slopes.float().contiguous())  # (H,)
        if form == "naive":
            per_pair = flex_inputs(pos.offsets())  # (Lq, Lk) int64, read per pair
            if self.symmetric:
                return lambda b, h, qi, ki, off: -slopes[h] * per_pair[qi, ki].abs()
            return lambda b, h, qi, ki, off: slopes[h] * per_pair[qi, ki]
        if self.symmetric:  # slope x offset in the kernel: no table at all
            return lambda b, h, qi, ki, off: -slopes[h] * off.abs()
        return lambda b, h, qi, ki, off: slopes[h] * off

    def allocations(self, form, backend, s):
        if backend == "flex":
            return [Alloc("offsets per pair", (s.Lq * s.Lk,), I64)] if form == "naive" else []
        if form == "gather":  # the distance per pair in float32 (and in the input dtype), the bias
            P, exact = s.Lq * s.Lk, torch.float64 if s.dtype == torch.float64 else F32
            cast = [Alloc("distance per pair in the input dtype", (P,), s.dtype)] if s.dtype != exact else []
            return [Alloc("positions from the first query", (s.Lq + s.Lk,), I64),
                    Alloc("positions as floats", (s.Lq + s.Lk,), exact), Alloc("distance per pair", (P,), exact),
                    *cast, Alloc(f"{self.name} per pair", (s.H, P), s.dtype)]
        return super().allocations(form, backend, s)


def _distance_dtype(pos, dtype: torch.dtype) -> torch.dtype:
    """float32, or float64 for float64 inputs or positions more than 2^24 apart (float32 holds
    every integer up to 2^24 exactly)."""
    span = max(pos.max_key, pos.max_query) - min(pos.min_key, pos.min_query)
    return torch.float64 if dtype == torch.float64 or span >= 2**24 else F32


@dataclass(frozen=True)
class ScalarFunction(_OffsetScalar):
    """logit_ij += fn(off_ij)[h]: a scalar per head computed from the offset (Kerple).

    ``fn`` maps int64 offsets of any shape to (H, *shape) in float32 (or the dtype asked
    for), reading the learned ``params`` (so gradients reach them); it must be elementwise
    in the offset. ``working``: how many (H, n) tensors ``fn`` holds at once at its peak on
    n offsets, its result included (Kerple's log kernel: its argument, its log and the
    result, 3): a count the scheme states, checked against the profiler by tests/test_memory.py.
    """

    fn: Callable[[torch.Tensor, torch.dtype], torch.Tensor]
    params: tuple
    num_heads: int
    name: str = "scalar function"
    working: int = 2
    kind: ClassVar[str] = "scalar_function"
    step_description: ClassVar[str] = "the kernel of every kept key's distance, per head"

    def __post_init__(self):
        for i, p in enumerate(self.params):
            check_tensor(f"params[{i}]", p, floating=True)
        check_int("num_heads", self.num_heads, min_value=1)
        check_int("working", self.working, min_value=1)

    def values(self, offsets: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, *offsets.shape) in ``dtype`` (default float32)."""
        return self.fn(offsets, torch.float32 if dtype is None else dtype)

    def value_allocs(self, n, dtype):
        return [Alloc(f"{self.name}: working", (self.working, self.num_heads, n), dtype)]


@dataclass(frozen=True)
class PairScalar(_Scalar):
    """logit_ij += fn(query_pos_i, key_pos_j)[h]: a scalar that depends on both positions (FIRE).

    ``fn(query_positions (Lq,), key_positions (Lk,), dtype)`` returns (H, Lq, Lk). The
    value is not a function of the offset alone, so no per-offset table exists: only the
    naive form (per pair) computes it, on every backend. ``working``: how many values per
    pair ``fn`` holds at once at its peak, its result (H per pair) included (FIRE: its MLP's
    hidden layer twice, 2 width + 2). ``pair_work``: what ``fn`` computes for one (query,
    key) pair and its multiply-adds, for the decode ledger (``decode_step_work``; FIRE: its
    MLP at the pair's normalised distance, width + width H); None: one value per head, H.
    """

    fn: Callable[[torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
    params: tuple
    num_heads: int
    name: str = "pair scalar"
    working: int | None = None
    pair_work: tuple[str, int] | None = None
    kind: ClassVar[str] = "pair_scalar"
    computes: ClassVar = {"naive": ALL_BACKENDS}
    offset_only: ClassVar[bool] = False

    def __post_init__(self):
        for i, p in enumerate(self.params):
            check_tensor(f"params[{i}]", p, floating=True)
        check_int("num_heads", self.num_heads, min_value=1)
        if self.working is not None:
            check_int("working", self.working, min_value=1)
        if self.pair_work is not None:
            what = self.pair_work[0] if isinstance(self.pair_work, tuple) and len(self.pair_work) == 2 else None
            if not isinstance(what, str):
                raise ValueError(f"pair_work must be (description, multiply-adds per pair) or None, "
                                 f"got {self.pair_work!r}")
            check_int("pair_work[1]", self.pair_work[1], min_value=1)

    def refusal(self, form, backend):
        return (f"{self.name}'s bias depends on the query's position, not only on the offset, so no per-offset "
                f"table exists: use form 'naive'")

    def pair_values(self, query_positions: torch.Tensor, key_positions: torch.Tensor,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
        """(H, Lq, Lk) in ``dtype`` (default float32)."""
        return self.fn(query_positions, key_positions, torch.float32 if dtype is None else dtype)

    def logits(self, form, q, k, pos, dtype):
        return self.pair_values(pos.query, pos.key, dtype).unsqueeze(0)  # (1, H, Lq, Lk)

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        if self.pair_work is None:
            return f"{self.name} at every kept key's pair of positions, per head", num_heads * context
        what, per_pair = self.pair_work
        return what, context * per_pair

    def score_mod(self, form, q, k, pos):
        Lk = pos.key_len
        vals = flex_inputs(self.pair_values(pos.query, pos.key, F32).reshape(self.num_heads, -1))  # (H, Lq Lk)
        return lambda b, h, qi, ki, off: vals[h, qi * Lk + ki]

    def allocations(self, form, backend, s):
        dtype = F32 if backend == "flex" else s.dtype
        per_pair = self.num_heads if self.working is None else self.working
        return [Alloc(f"{self.name}: working", (per_pair, s.Lq * s.Lk), dtype)]
