"""The gather form: score against the few distinct rows or offsets, then index per pair.

Book: "What it costs" (chapters/08_what_it_costs.ipynb). Shaw et al. (2018)
note that only 2k + 1 relative vectors exist, so q @ E^T is an [Lq, 2k + 1] matrix (one
batched matmul) and the [Lq, Lk] relative logits are a gather from it by row index:
O(L k) extra numbers instead of O(L^2 d), plus the int64 [Lq, Lk] index that
``torch.gather`` needs (8 bytes per pair).

* vector terms: ``x @ E^T`` per row, then ``torch.gather`` by ``row(j - i)``; key-side
  terms (DeBERTa's p2c) gather along the key axis and transpose;
* scalar terms (T5, ALiBi): the bias of each *offset* (Lq + Lk - 1 of them, never one per
  pair: T5 buckets Lq + Lk - 1 numbers, not Lq Lk), then the dense [H, Lq, Lk] bias read
  from that row through one int64 column index per pair. This per-offset table is also
  what the FlexAttention path reads (``relpos_core.kernels.flex``);
* the value term (Shaw): the weights are summed into their row buckets (``scatter_add``),
  then one [Lq, R] @ [R, d] matmul.

Same interface as ``naive`` and ``skew``; offsets are ``key_minus_query``.
"""
from __future__ import annotations

import torch

__all__ = ["vector_logits", "scalar_bias", "value_output", "per_row_scores", "per_offset_values"]


def per_row_scores(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, d) against every table row: (B, H, L, R); table (R, d) or (H, R, d)."""
    return x @ table.to(x.dtype).transpose(-2, -1)  # (B, H, L, R)


def per_offset_values(piece, pos, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A scalar piece's bias at every offset min_offset .. max_offset: (H, R_off).

    Only for pieces that are a function of the offset (not ``PairScalar``: the registry
    refuses the gather form for those)."""
    offsets = torch.arange(pos.min_offset, pos.max_offset + 1, device=pos.query.device)  # (R_off,)
    return piece.values(offsets, dtype)  # (H, R_off)


def vector_logits(term, q: torch.Tensor, k: torch.Tensor, pos) -> torch.Tensor | None:
    """Sum of the term's query- and key-vector logits, unscaled: (B, H, Lq, Lk), or None."""
    if not (term.query_vectors or term.key_vectors):
        return None
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    out = None
    for piece in term.query_vectors:
        x = q if piece.shift is None else q + piece.shift[None, :, None, :].to(q.dtype)  # (B, H, Lq, d)
        rows = piece.rows(pos.offsets())  # (Lq, Lk) int64
        scores = per_row_scores(x, piece.table)  # (B, H, Lq, R)
        t = torch.gather(scores, -1, rows.expand(B, H, Lq, Lk))  # (B, H, Lq, Lk)
        del rows, scores
        out = t if out is None else out.add_(t)
    for piece in term.key_vectors:
        rows = piece.rows(pos.offsets())  # (Lq, Lk) int64
        scores = per_row_scores(k, piece.table)  # (B, H, Lk, R)
        t = torch.gather(scores, -1, rows.t().expand(B, H, Lk, Lq)).transpose(-2, -1)  # (B, H, Lq, Lk)
        del rows, scores
        out = t if out is None else out.add_(t)
    return out


def scalar_bias(term, pos, dtype: torch.dtype) -> torch.Tensor | None:
    """Sum of the term's scalar biases: (H, Lq, Lk) in ``dtype``, or None."""
    if not term.scalars:
        return None
    Lq, Lk = pos.query_len, pos.key_len
    per_offset = None
    for piece in term.scalars:
        vals = per_offset_values(piece, pos, dtype)  # (H, R_off)
        per_offset = vals if per_offset is None else per_offset.add_(vals)
    cols = pos.offsets().sub_(pos.min_offset).reshape(-1)  # (Lq Lk,) int64: column of each pair's offset
    return per_offset.index_select(1, cols).view(-1, Lq, Lk)  # (H, Lq, Lk), written once, contiguous


def value_output(value, probs: torch.Tensor, pos) -> torch.Tensor:
    """sum_j probs_ij E[row(j - i)] via row buckets: (B, H, Lq, d)."""
    B, H, Lq, Lk = probs.shape
    rows = value.rows(pos.offsets())  # (Lq, Lk) int64
    buckets = probs.new_zeros(B, H, Lq, value.rows.num_rows)  # (B, H, Lq, R)
    buckets = buckets.scatter_add_(-1, rows.expand(B, H, Lq, Lk), probs)  # weight of each row
    del rows
    return buckets @ value.table.to(probs.dtype)  # (B, H, Lq, d)
