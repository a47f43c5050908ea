"""The naive form: every position quantity materialised per (query, key) pair.

Book: "What it costs" (chapters/08_what_it_costs.ipynb). This is each paper's
equations written out literally, the baseline the other forms are measured against:

* vector terms (Shaw et al., 2018; DeBERTa, He et al., 2021; Transformer-XL, Dai et al.,
  2019): the table gathered into an [Lq, Lk, d] tensor (per head: [H, Lq, Lk, d]), then
  one einsum with q or k: about Lq Lk d numbers (4 GiB at L = 4096, d = 64, fp32);
* scalar terms (T5, Raffel et al., 2020; ALiBi, Press et al., 2022): the [Lq, Lk] offset
  (and bucket-id) tensors, then the dense [H, Lq, Lk] bias;
* the value term (Shaw): the table gathered into [Lq, Lk, d], then einsum with the weights.

Every function takes a ``PositionTerm`` (``relpos_core.terms``) and the call's
``Positions`` and returns *unscaled* vector logits, the scalar bias, or the value output;
the backends (``eager``, ``sdpa``, ``flex``) apply the scale and the mask. Offsets are
``key_minus_query`` (j - i). The memory guard runs in ``relpos_core.attend`` before any of
this, with the byte count of ``relpos_core.measure.analytic``.
"""
from __future__ import annotations

import torch

from relpos_core.terms import PairScalar

__all__ = ["vector_logits", "scalar_bias", "value_output", "embed_pairs", "pair_logits"]


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
    matmul over a (or over h and a): x is copied once into that batch layout, the
    pairs are read in place, and the result is returned as a (B, H, A, C) view.
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


def vector_logits(term, q: torch.Tensor, k: torch.Tensor, pos) -> torch.Tensor | None:
    """Sum of the term's query- and key-vector logits, unscaled: (B, H, Lq, Lk), or None."""
    if not (term.query_vectors or term.key_vectors):
        return None
    out = None
    for piece in term.query_vectors:
        x = q if piece.shift is None else q + piece.shift[None, :, None, :].to(q.dtype)  # (B, H, Lq, d)
        pairs = embed_pairs(piece.table, piece.rows(pos.offsets()))  # (Lq, Lk, d) or (H, Lq, Lk, d)
        t = pair_logits(x, pairs)  # (B, H, Lq, Lk)
        del pairs, x
        out = t if out is None else out.add_(t)
    for piece in term.key_vectors:
        pairs = embed_pairs(piece.table, piece.rows(pos.offsets().t()))  # (Lk, Lq, d) or (H, Lk, Lq, d)
        t = pair_logits(k, pairs).transpose(-2, -1)  # (B, H, Lq, Lk)
        del pairs
        out = t if out is None else out.add_(t)
    return out


def scalar_bias(term, pos, dtype: torch.dtype) -> torch.Tensor | None:
    """Sum of the term's scalar biases per pair: (H, Lq, Lk) in ``dtype``, or None."""
    if not term.scalars:
        return None
    out = None
    for piece in term.scalars:
        if isinstance(piece, PairScalar):  # FIRE: a function of both positions
            b = piece.pair_values(pos.query, pos.key, dtype)  # (H, Lq, Lk)
        else:
            b = piece.values(pos.offsets(), dtype)  # (H, Lq, Lk): T5 buckets every pair here
        out = b if out is None else out.add_(b)
    return out


def value_output(value, probs: torch.Tensor, pos) -> torch.Tensor:
    """sum_j probs_ij E[row(j - i)] with E gathered per pair: (B, H, Lq, d)."""
    B, H, Lq, Lk = probs.shape
    pairs = embed_pairs(value.table, value.rows(pos.offsets())).to(probs.dtype)  # (Lq, Lk, d) or (H, Lq, Lk, d)
    if pairs.dim() == 3:
        pa = probs.permute(2, 0, 1, 3).reshape(Lq, B * H, Lk)  # (Lq, B H, Lk), a view
        return torch.bmm(pa, pairs).view(Lq, B, H, -1).permute(1, 2, 0, 3)  # (B, H, Lq, d)
    pa = probs.permute(1, 2, 0, 3).reshape(H * Lq, B, Lk)  # (H Lq, B, Lk), one copy
    return torch.bmm(pa, pairs.reshape(H * Lq, Lk, -1)).view(H, Lq, B, -1).permute(2, 0, 1, 3)  # (B, H, Lq, d)
