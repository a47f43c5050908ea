"""Vector pieces: a table of vectors read by the row of each pair's offset.

Book: "Shaw et al. and the Music Transformer's skew" (chapters/02_shaw_and_skew.ipynb),
"What it costs" (chapters/11_what_it_costs.ipynb).

* ``QueryVectors``: logit_ij += (q_i + shift_h) . E[row(off_ij)] (Shaw's key term,
  DeBERTa's c2p, Transformer-XL's (b) + (d) with shift = v), scaled like q . k;
* ``KeyVectors``: logit_ij += k_j . E[row(off_ij)] (DeBERTa's p2c), scaled;
* ``ValueVectors``: out_i += sum_j p_ij E[row(off_ij)] (Shaw's value term): not a logit,
  so only the eager backend applies it.

Each is computed in three forms: ``naive`` (the table gathered per pair, [Lq, Lk, d],
then one batched matmul), ``gather`` (scores against the R rows, then indexed per pair
through an int64 [Lq, Lk] index) and ``skew`` (scores against one row per offset, then a
strided view: Huang et al.'s skew). Offsets are ``key_minus_query`` (j - i).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from relpos_core._validate import check_int, check_tensor
from relpos_core.compile_ops import flex_inputs
from relpos_core.pieces.base import ALL_BACKENDS, DENSE_BACKENDS, Alloc, Piece, Sizes

__all__ = ["RowIndex", "no_work", "clipped_rows", "check_row_table", "embed_pairs", "pair_logits",
           "per_row_scores", "per_offset_table", "skew_view_of", "QueryVectors", "KeyVectors", "ValueVectors"]

I64 = torch.int64


def no_work(n: int) -> int:
    """A map that allocates nothing beyond its result (it works in place on its input)."""
    return 0


@dataclass(frozen=True)
class RowIndex:
    """Which table row the pair (i, j) reads, as a function of its offset j - i.

    ``rows_of_offsets`` maps an int64 tensor of offsets (any shape) to rows in
    [0, num_rows) of the same shape; it must be elementwise, and it may overwrite its
    argument (callers pass a fresh tensor). ``min_offset``: offsets below it have no row
    of their own (a Transformer-XL table covers distances up to its length only); a call
    whose visible pairs reach below it is refused rather than silently clipped.
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

    def work(self, n: int) -> list[Alloc]:
        """The map's working bytes on n offsets, as one byte tensor (for ``allocations``)."""
        w = int(self.work_bytes(n))
        return [Alloc(f"{self.description}: working", (w,), torch.uint8)] if w else []


def clipped_rows(k: int) -> RowIndex:
    """Shaw's index: row clip(j - i, -k, k) + k in [0, 2k] (``key_minus_query``)."""
    k = check_int("k", k, min_value=1)
    return RowIndex(2 * k + 1, lambda off: off.clamp_(-k, k).add_(k), f"clip(j - i, -{k}, {k}) + {k}")


def _map_offsets_first(rows: RowIndex, num_offsets: int, num_pairs: int) -> bool:
    return bool(rows.work(1)) and num_offsets <= num_pairs


def rows_per_pair(rows: RowIndex, pos) -> torch.Tensor:
    """rows(key_pos - query_pos) for every pair: (Lq, Lk) int64.

    A map that computes (it allocates working tensors: DeBERTa's log buckets) is applied to
    the call's distinct offsets only (Lq + Lk - 1 of them when the positions are contiguous)
    and read per pair through one int64 column; a map done in place (a clamp) runs per pair,
    which holds one (Lq, Lk) tensor instead of two (so does any map when the call's offsets
    outnumber its pairs: explicit positions far apart).
    """
    if not _map_offsets_first(rows, pos.num_offsets, pos.query_len * pos.key_len):
        return rows(pos.offsets())  # (Lq, Lk), mapped in place
    lut = rows(torch.arange(pos.min_offset, pos.max_offset + 1, device=pos.query.device))  # (R_off,)
    cols = pos.offsets().sub_(pos.min_offset)  # (Lq, Lk) column of each pair's offset
    return lut.index_select(0, cols.reshape(-1)).view(cols.shape)  # (Lq, Lk)


def rows_per_pair_allocs(rows: RowIndex, s: Sizes) -> list[Alloc]:
    """What ``rows_per_pair`` holds at its peak, its result included."""
    P = s.Lq * s.Lk
    if not _map_offsets_first(rows, s.num_offsets, P):
        return [Alloc("row per pair", (P,), I64), *rows.work(P)]
    return [Alloc("row of each offset", (s.num_offsets,), I64), *rows.work(s.num_offsets),
            Alloc("column of each pair's offset", (P,), I64), Alloc("row per pair", (P,), I64)]


def check_row_table(table: torch.Tensor, rows: RowIndex) -> None:
    """A vector table (R, d) or per head (H, R, d) with one row per row of ``rows``."""
    check_tensor("table", table, ndim=(2, 3), floating=True)
    if table.shape[-2] != rows.num_rows:
        raise ValueError(f"table must have {rows.num_rows} rows ({rows.description}), "
                         f"got shape {tuple(table.shape)}")


def embed_pairs(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """table (R, d) -> (A, C, d), or (H, R, d) -> (H, A, C, d), at rows (A, C).

    ``index_select`` writes the result once (``table[:, rows]`` would build it in another
    layout and copy it: twice the memory of the largest tensor of the naive form).
    """
    flat = rows.reshape(-1)  # (A C,)
    if table.dim() == 2:
        return table.index_select(0, flat).view(*rows.shape, table.shape[-1])  # (A, C, d)
    return table.index_select(1, flat).view(table.shape[0], *rows.shape, table.shape[-1])  # (H, A, C, d)


def pair_logits(x: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """out[b, h, a, c] = x[b, h, a] . pairs[(h,) a, c]: (B, H, A, C).

    x (B, H, A, d); pairs (A, C, d) shared by the heads or (H, A, C, d). One batched
    matmul over a (or over h and a): the result is returned as a (B, H, A, C) view.
    """
    B, H, A, d = x.shape
    pairs = pairs.to(x.dtype)
    if pairs.dim() == 3:
        xa = x.permute(2, 0, 1, 3).reshape(A, B * H, d)  # (A, B H, d), a view when x is contiguous
        out = torch.bmm(xa, pairs.transpose(1, 2))  # (A, B H, C)
        return out.view(A, B, H, -1).permute(1, 2, 0, 3)  # (B, H, A, C) view
    xa = x.permute(1, 2, 0, 3).reshape(H * A, B, d)  # (H A, B, d), one copy
    out = torch.bmm(xa, pairs.reshape(H * A, -1, d).transpose(1, 2))  # (H A, B, C)
    return out.view(H, A, B, -1).permute(2, 0, 1, 3)  # (B, H, A, C) view


def per_row_scores(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, d) against every table row: (B, H, L, R); table (R, d) or (H, R, d)."""
    return x @ table.to(x.dtype).transpose(-2, -1)  # (B, H, L, R)


def per_offset_table(table: torch.Tensor, rows: RowIndex, pos, *, reverse: bool = False) -> torch.Tensor:
    """The table expanded to one row per offset of the call: (R_off, d) or (H, R_off, d).

    Row c holds E[row(min_offset + c)] (or, reversed, E[row(max_offset - c)]): Huang et
    al.'s one embedding per distance, built from a clipped or bucketed table.
    """
    offsets = torch.arange(pos.min_offset, pos.max_offset + 1, device=table.device)  # (R_off,)
    if reverse:
        offsets = offsets.flip(0)
    idx = rows(offsets)  # (R_off,)
    return table[idx] if table.dim() == 2 else table[:, idx]  # (R_off, d) or (H, R_off, d)


def skew_view_of(t: torch.Tensor, Lq: int, Lk: int, side: str, base: int = 0) -> torch.Tensor:
    """Per-offset scores t (B, H, rows, Lq + Lk - 1), contiguous, starting ``base`` into its storage (the
    kernels pass tensors they allocated, base 0: reading ``storage_offset()`` would break a torch.compile
    graph), seen as (B, H, Lq, Lk) without a copy (``relpos_core.kernels.skew.skew_view``)."""
    B, H, _, R = t.shape
    sb, sh = (R * t.shape[2]) * H, R * t.shape[2]  # the strides of a contiguous (B, H, rows, R) tensor
    if side == "query":  # element i R + (j - i + Lq - 1) = i (R - 1) + j + Lq - 1
        return t.as_strided((B, H, Lq, Lk), (sb, sh, R - 1, 1), base + Lq - 1)
    # key side: element j R + (i - j + Lk - 1) = j (R - 1) + i + Lk - 1
    return t.as_strided((B, H, Lq, Lk), (sb, sh, 1, R - 1), base + Lk - 1)


def _require_contiguous(pos):
    if not pos.contiguous:
        raise ValueError("the skew form needs contiguous positions (query and key positions each a run of "
                         "consecutive integers); use form='gather' for explicit or evicted positions")


class _RowVectors(Piece):
    """What the three vector pieces share: a table (R, d) or (H, R, d) and its ``RowIndex``."""

    offset_only: ClassVar[bool] = True

    def __post_init__(self):
        check_row_table(self.table, self.rows)

    @property
    def per_head(self) -> bool:
        return self.table.dim() == 3

    def check(self, num_heads, head_dim):
        if self.table.shape[-1] != head_dim:
            raise ValueError(f"the term's {self.name} table has head size {self.table.shape[-1]}, q has d = {head_dim}")
        if self.per_head and self.table.shape[0] != num_heads:
            raise ValueError(f"the term's {self.name} table has {self.table.shape[0]} heads, q has H = {num_heads}")

    def call_refusal(self, lowest_offset):
        floor = self.rows.min_offset
        if floor is not None and lowest_offset < floor:
            return (f"the term's {self.name} covers offsets j - i >= {floor} ({self.rows.description}); "
                    f"this call reaches {lowest_offset}: give the table at least {-lowest_offset + 1} rows")
        return None

    def tensors(self):
        return [(f"{self.name} table", self.table)]

    def _table_heads(self) -> int:
        return self.table.shape[0] if self.per_head else 1

    @property
    def heads(self):
        return self.table.shape[0] if self.per_head else None

    def _broadcast_copy(self, s: Sizes, rows: int, dtype) -> list[Alloc]:
        """x (B, H, n, d) @ E^T with a per-head E: matmul expands E to (B, H, d, R), a copy when B > 1."""
        return [Alloc("the table broadcast over the batch", (s.B, s.H, s.d, rows), dtype)] \
            if self.per_head and s.B > 1 else []


class _LogitVectors(_RowVectors):
    """QueryVectors and KeyVectors: x . E[row(off)] with x the query (plus a shift) or the key."""

    stage: ClassVar[str] = "vector"
    scaled: ClassVar[bool] = True
    batched: ClassVar[bool] = True
    computes: ClassVar = {"naive": ALL_BACKENDS, "gather": ALL_BACKENDS, "skew": DENSE_BACKENDS}
    side: ClassVar[str] = "query"

    def refusal(self, form, backend):
        if form == "skew" and backend == "flex":
            return ("FlexAttention reads small tables inside its kernel; the skew builds a dense tensor: "
                    "use form 'gather'")
        return super().refusal(form, backend)

    def _x(self, q, k):
        """The side's input: (B, H, n, d)."""
        return k if self.side == "key" else q

    def logits(self, form, q, k, pos, dtype):
        x = self._x(q, k)
        if form == "naive":
            off = pos.offsets() if self.side == "query" else pos.offsets().t()  # (n, m)
            pairs = embed_pairs(self.table, self.rows(off))  # (n, m, d) or (H, n, m, d)
            t = pair_logits(x, pairs)  # (B, H, n, m)
            return t if self.side == "query" else t.transpose(-2, -1)
        B, H, n, _ = x.shape
        Lq, Lk = pos.query_len, pos.key_len
        if form == "gather":
            rows = rows_per_pair(self.rows, pos)  # (Lq, Lk) int64
            scores = per_row_scores(x, self.table)  # (B, H, n, R)
            if self.side == "query":
                return torch.gather(scores, -1, rows.expand(B, H, Lq, Lk))  # (B, H, Lq, Lk)
            return torch.gather(scores, -1, rows.t().expand(B, H, Lk, Lq)).transpose(-2, -1)  # (B, H, Lq, Lk)
        _require_contiguous(pos)  # skew
        e = per_offset_table(self.table, self.rows, pos, reverse=self.side == "key").to(x.dtype)  # (R_off, d)
        per_offset = (x @ e.transpose(-2, -1)).contiguous()  # (B, H, n, R_off), a fresh tensor
        return skew_view_of(per_offset, Lq, Lk, self.side).clone(memory_format=torch.contiguous_format)

    def score_mod(self, form, q, k, pos):
        x = self._x(q, k).float()
        B, H, n, _ = x.shape
        table = flex_inputs(per_row_scores(x, self.table.float()).reshape(B * H * n, -1))  # (B H n, R) fp32
        query = self.side == "query"
        if form == "naive":
            rows = flex_inputs(self.rows(pos.offsets()))  # (Lq, Lk) int64, read per pair
            if query:
                return lambda b, h, qi, ki, off: table[(b * H + h) * n + qi, rows[qi, ki]]
            return lambda b, h, qi, ki, off: table[(b * H + h) * n + ki, rows[qi, ki]]
        lo = torch.tensor(pos.min_offset, device=x.device)  # 0-d
        lut = self.rows(torch.arange(pos.min_offset, pos.max_offset + 1, device=x.device))  # (R_off,)
        lut, lo = flex_inputs(lut, lo)  # under torch.compile on CPU: buffers of their own (compile_ops)
        if query:
            return lambda b, h, qi, ki, off: table[(b * H + h) * n + qi, lut[off - lo]]
        return lambda b, h, qi, ki, off: table[(b * H + h) * n + ki, lut[off - lo]]

    def allocations(self, form, backend, s):
        n, P, R, dt = s.side(self.side), s.Lq * s.Lk, self.rows.num_rows, s.dtype
        out = self._shift_allocs(s)
        if backend == "flex":
            if dt != torch.float32:
                out.append(Alloc(f"{self.side} in float32", (s.B, s.H, n, s.d), torch.float32))
            out += self._broadcast_copy(s, R, torch.float32)
            out.append(Alloc(f"{self.name}: scores against every row", (s.B, s.H, n, R), torch.float32))
            if form == "naive":
                out += [Alloc("offsets per pair", (P,), I64), *self.rows.work(P)]
            else:
                out += [Alloc("row of each offset", (s.num_offsets,), I64), *self.rows.work(s.num_offsets)]
            return out
        if form == "naive":
            out += [Alloc("offsets per pair", (P,), I64), *self.rows.work(P),
                    Alloc(f"{self.name} gathered per pair", (self._table_heads(), P, s.d), self.table.dtype)]
        elif form == "gather":
            out += [*rows_per_pair_allocs(self.rows, s), *self._broadcast_copy(s, R, dt),
                    Alloc(f"{self.name}: scores against every row", (s.B, s.H, n, R), dt)]
        else:
            out += [Alloc("offsets", (s.num_offsets,), I64), *self.rows.work(s.num_offsets),
                    Alloc(f"{self.name} per offset", (self._table_heads(), s.num_offsets, s.d), self.table.dtype),
                    *self._broadcast_copy(s, s.num_offsets, dt),
                    Alloc(f"{self.name}: scores per offset", (s.B, s.H, n, s.num_offsets), dt)]
        return out + [Alloc(f"{self.name} logits", (s.B, s.H, s.Lq, s.Lk), dt)]

    def _shift_allocs(self, s):
        return []


@dataclass(frozen=True)
class QueryVectors(_LogitVectors):
    """logit_ij += scale * (q_i + shift_h) . table[(h,) row(off_ij)].

    table: (R, d) shared by all heads (Shaw) or (H, R, d) per head (DeBERTa, Transformer-XL);
    shift: (H, d) or None.
    """

    table: torch.Tensor
    rows: RowIndex
    shift: torch.Tensor | None = None
    name: str = "query vectors"
    kind: ClassVar[str] = "query_vectors"
    side: ClassVar[str] = "query"

    def __post_init__(self):
        check_row_table(self.table, self.rows)
        if self.shift is not None:
            check_tensor("shift", self.shift, ndim=2, floating=True, shape={1: self.table.shape[-1]})

    def check(self, num_heads, head_dim):
        super().check(num_heads, head_dim)
        if self.shift is not None and tuple(self.shift.shape) != (num_heads, head_dim):
            raise ValueError(f"the term's {self.name} shift must be (H, d) = ({num_heads}, {head_dim}), "
                             f"got {tuple(self.shift.shape)}")

    def tensors(self):
        return super().tensors() + ([(f"{self.name} shift", self.shift)] if self.shift is not None else [])

    def _x(self, q, k):
        return q if self.shift is None else q + self.shift[None, :, None, :].to(q.dtype)  # (B, H, Lq, d)

    def _shift_allocs(self, s):
        return [Alloc("q + shift", (s.B, s.H, s.Lq, s.d), s.dtype)] if self.shift is not None else []

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        rows = self.rows.num_rows  # the new query against every row, once: the kept keys read their row
        return f"q . E for the {rows} table rows", num_heads * rows * head_dim


@dataclass(frozen=True)
class KeyVectors(_LogitVectors):
    """logit_ij += scale * k_j . table[(h,) row(off_ij)]; table (R, d) or (H, R, d)."""

    table: torch.Tensor
    rows: RowIndex
    name: str = "key vectors"
    kind: ClassVar[str] = "key_vectors"
    side: ClassVar[str] = "key"

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        return "k . E for every kept key and table row", num_heads * context * self.rows.num_rows * head_dim


@dataclass(frozen=True)
class ValueVectors(_RowVectors):
    """out_i += sum_j p_ij table[(h,) row(off_ij)]; table (R, d) or (H, R, d)."""

    table: torch.Tensor
    rows: RowIndex
    name: str = "value vectors"
    kind: ClassVar[str] = "value_vectors"
    stage: ClassVar[str] = "output"
    computes: ClassVar = {"naive": ("eager",), "gather": ("eager",), "skew": ("eager",)}

    def refusal(self, form, backend):
        return (f"{self.name} changes the output, not the logits: no attn_mask or score_mod can express it; "
                f"use backend 'eager'")

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        rows = self.rows.num_rows  # the weights summed per row, then the rows once
        return "the value term over the same rows", num_heads * rows * head_dim

    def output(self, form, probs, pos):
        B, H, Lq, Lk = probs.shape
        if form == "naive":
            pairs = embed_pairs(self.table, self.rows(pos.offsets())).to(probs.dtype)  # (Lq, Lk, d) or (H, ...)
            if pairs.dim() == 3:
                pa = probs.permute(2, 0, 1, 3).reshape(Lq, B * H, Lk)  # (Lq, B H, Lk), a view
                return torch.bmm(pa, pairs).view(Lq, B, H, -1).permute(1, 2, 0, 3)  # (B, H, Lq, d)
            pa = probs.permute(1, 2, 0, 3).reshape(H * Lq, B, Lk)  # (H Lq, B, Lk), one copy
            return torch.bmm(pa, pairs.reshape(H * Lq, Lk, -1)).view(H, Lq, B, -1).permute(2, 0, 1, 3)
        if form == "gather":
            rows = self.rows(pos.offsets())  # (Lq, Lk) int64
            buckets = probs.new_zeros(B, H, Lq, self.rows.num_rows)  # (B, H, Lq, R)
            buckets = buckets.scatter_add_(-1, rows.expand(B, H, Lq, Lk), probs)  # weight of each row
            del rows
            return buckets @ self.table.to(probs.dtype)  # (B, H, Lq, d)
        _require_contiguous(pos)  # skew: the weights written into per-offset columns
        per_offset = probs.new_zeros(B, H, Lq, Lq + Lk - 1)  # (B, H, Lq, R_off)
        skew_view_of(per_offset, Lq, Lk, "query").copy_(probs)  # each pair lands in its offset column
        e = per_offset_table(self.table, self.rows, pos).to(probs.dtype)  # (R_off, d) or (H, R_off, d)
        return per_offset @ e  # (B, H, Lq, d)

    def allocations(self, form, backend, s):
        P, dt = s.Lq * s.Lk, s.dtype
        if form == "naive":
            out = [Alloc("offsets per pair", (P,), I64),
                   Alloc(f"{self.name} gathered per pair", (self._table_heads(), P, s.d), self.table.dtype)]
        elif form == "gather":
            out = [Alloc("row per pair", (P,), I64),
                   Alloc(f"{self.name}: weight of each row", (s.B, s.H, s.Lq, self.rows.num_rows), dt)]
        else:
            out = [Alloc("weights per offset", (s.B, s.H, s.Lq, s.num_offsets), dt),
                   Alloc("offsets", (s.num_offsets,), I64),
                   Alloc(f"{self.name} per offset", (self._table_heads(), s.num_offsets, s.d), self.table.dtype)]
        return out + [Alloc(f"{self.name} output", (s.B, s.H, s.Lq, s.d), dt)]
