"""The gather form: score against the few distinct rows or offsets, then index per pair.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Shaw et al. (2018)
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

Each piece computes its own gather form (``Piece.logits(form="gather", ...)`` in
``relpos_core.pieces``); offsets are ``key_minus_query``.
"""
from __future__ import annotations

from relpos_core.pieces.vectors import per_row_scores

__all__ = ["per_row_scores"]
