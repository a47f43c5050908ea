"""The skew form: relative logits by reinterpreting memory instead of indexing it.

Book: "Shaw et al. and the Music Transformer's skew"
(chapters/02_shaw_and_skew.ipynb); costs in "What it costs" (chapters/11_what_it_costs.ipynb).

The Music Transformer (Huang et al., 2018) computes Q E^T against one embedding per
*distance*, pads a zero column, reinterprets the buffer and drops a row: entry (i, j) then
holds q_i against distance j - i, with O(L^2) extra memory instead of O(L^2 d) and no
index tensor. Transformer-XL's ``rel_shift`` (Dai et al., 2019) is the same trick for a
query block at the end of a longer key sequence, and the one-reshape bidirectional form
is the ``rel_shift`` of Conformer / ESPnet (Gulati et al., 2020). Three reshapes, as the
papers' code has them, then the form the kernel paths use:

* ``skew``: Huang et al.'s causal skew, (..., L, L) query-vs-distance -> query-vs-key;
* ``rel_shift``: Transformer-XL's, (..., Lq, Lk) with the queries the last Lq keys;
* ``rel_shift_bidirectional``: the Conformer / ESPnet one, (..., L, 2L - 1) -> (..., L, L);
* ``skew_view``: the general form as a strided *view* (no pad, no copy): per-offset
  scores (..., Lq, Lq + Lk - 1) seen as (..., Lq, Lk). Entry (i, j) must read column
  j - i + Lq - 1 of row i, i.e. flat element i (R - 1) + j + (Lq - 1) with R = Lq + Lk - 1:
  a row stride of R - 1 instead of R, which is what shifts each row one step left.

The kernel form is each vector piece's own (``Piece.logits(form="skew", ...)`` in
``relpos_core.pieces.vectors``, with ``skew_view_of`` and ``per_offset_table``): it needs
contiguous positions (the offsets must form one run); scalar pieces have no skew form and
refuse it (T5 and ALiBi use ``gather``). Offsets are ``key_minus_query``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from relpos_core._validate import check_tensor
from relpos_core.pieces.vectors import per_offset_table, skew_view_of

__all__ = [
    "skew",
    "rel_shift",
    "rel_shift_bidirectional",
    "relative_logits_causal_skew",
    "relative_logits_bidirectional_skew",
    "skew_view",
    "per_offset_table",
]

_ANY_RANK = tuple(range(2, 9))


def skew(qe: torch.Tensor) -> torch.Tensor:
    """Huang et al.'s skew: (..., L, L) "query vs distance" -> (..., L, L) "query vs key".

    Sign convention: ``key_minus_query``. Input column r of row i is query i against
    distance r - (L - 1) (distances -(L-1)..0). Output (i, j) is query i against distance
    j - i for j <= i; entries with j > i are junk (a decoder masks them).

    After padding, row i reads [0, qe[i, 0], ..., qe[i, L-1]] (length L + 1). Output (i, j)
    is flat element (i + 1) L + j = i (L + 1) + (L + j - i) of the padded buffer: padded
    row i, column L + j - i, which is qe[i, L - 1 + j - i] whenever j <= i.
    """
    check_tensor("qe", qe, ndim=_ANY_RANK)
    *lead, L, L2 = qe.shape
    if L != L2:
        raise ValueError(f"qe must be square in its last two dimensions (L, L), got shape {tuple(qe.shape)}")
    padded = F.pad(qe, (1, 0))  # (..., L, L + 1), zero column on the left
    padded = padded.reshape(*lead, L + 1, L)  # (..., L + 1, L), same memory reinterpreted
    return padded[..., 1:, :]  # (..., L, L), drop the first row


def rel_shift(x: torch.Tensor) -> torch.Tensor:
    """Transformer-XL's _rel_shift: "query vs relative row" -> "query vs key".

    Sign convention: ``query_minus_key``. x[..., i, r] scores query i against relative row
    r, i.e. distance Lk - 1 - r. Output y[..., i, j] = x[..., i, Lq - 1 + j - i], the score
    at distance (Lk - Lq) + i - j, for every j <= i + (Lk - Lq); other entries are junk
    (removed by the causal mask). Pad a zero column on the left, reinterpret (Lq, Lk + 1)
    as (Lk + 1, Lq), drop the first row, reinterpret as (Lq, Lk). Requires Lq <= Lk.
    """
    check_tensor("x", x, ndim=_ANY_RANK)
    *lead, Lq, Lk = x.shape
    if Lq > Lk:
        raise ValueError(f"x must have query_len <= key_len in its last two dims, got shape {tuple(x.shape)}")
    padded = F.pad(x, (1, 0))  # (..., Lq, Lk + 1)
    padded = padded.reshape(*lead, Lk + 1, Lq)  # (..., Lk + 1, Lq), same memory
    return padded[..., 1:, :].reshape(*lead, Lq, Lk)  # (..., Lq, Lk)


def rel_shift_bidirectional(qe: torch.Tensor) -> torch.Tensor:
    """Conformer / ESPnet rel_shift: (..., L, 2L - 1) "query vs distance" -> (..., L, L), both signs.

    Sign convention: ``key_minus_query``: column c of row i is distance c - (L - 1);
    output (i, j) = qe[i, j - i + L - 1] everywhere (no junk). Pad a zero column on the
    left (rows of 2L), flatten, drop the first L elements, reshape to (L, 2L - 1) and keep
    the first L columns: output (i, j) is padded element L + i (2L - 1) + j = 2L i + (j - i + L),
    padded row i, column j - i + L, i.e. qe[i, j - i + L - 1].
    """
    check_tensor("qe", qe, ndim=_ANY_RANK)
    *lead, L, R = qe.shape
    if R != 2 * L - 1:
        raise ValueError(f"qe must have 2L - 1 = {2 * L - 1} columns for L = {L} rows, got shape {tuple(qe.shape)}")
    padded = F.pad(qe, (1, 0))  # (..., L, 2L)
    flat = padded.reshape(*lead, 2 * L * L)[..., L:]  # (..., L (2L - 1))
    return flat.reshape(*lead, L, 2 * L - 1)[..., :L]  # (..., L, L)


def relative_logits_causal_skew(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """The Music Transformer's decoder logits q_i . E[j - i + L - 1] for j <= i, by ``skew``.

    Sign convention: ``key_minus_query``. q (..., L, d); rel_emb (L, d), row r embeds
    distance r - (L - 1) (the last row is distance 0). Returns (..., L, L); entries with
    j > i are junk and must be masked. Extra memory O(L^2), not O(L^2 d).
    """
    check_tensor("q", q, ndim=_ANY_RANK, floating=True)
    L, d = q.shape[-2], q.shape[-1]
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True, dtype=q.dtype, shape={1: d})
    if rel_emb.shape[0] != L:
        raise ValueError(f"rel_emb must have L = {L} rows (distances -(L-1) .. 0) for the causal skew, "
                         f"got shape {tuple(rel_emb.shape)}")
    return skew(q @ rel_emb.transpose(0, 1))  # (..., L, L)


def relative_logits_bidirectional_skew(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """Encoder logits q_i . E[j - i + L - 1] for every (i, j), by ``rel_shift_bidirectional``.

    Sign convention: ``key_minus_query``. q (..., L, d); rel_emb (2L - 1, d), row r embeds
    distance r - (L - 1). Returns (..., L, L), no junk.
    """
    check_tensor("q", q, ndim=_ANY_RANK, floating=True)
    L, d = q.shape[-2], q.shape[-1]
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True, dtype=q.dtype, shape={1: d})
    if rel_emb.shape[0] != 2 * L - 1:
        raise ValueError(f"rel_emb must have 2L - 1 = {2 * L - 1} rows for a sequence of length L = {L}, "
                         f"got shape {tuple(rel_emb.shape)}")
    return rel_shift_bidirectional(q @ rel_emb.transpose(0, 1))  # (..., L, L)


def skew_view(per_offset: torch.Tensor, query_len: int, key_len: int, *, side: str = "query") -> torch.Tensor:
    """Per-offset scores seen as per-pair scores, without copying.

    side="query": per_offset (B, H, Lq, R), R = Lq + Lk - 1, column c = offset c - (Lq - 1)
    (relative to the first query): returns the (B, H, Lq, Lk) view with (i, j) = column
    j - i + Lq - 1 of row i. side="key": per_offset (B, H, Lk, R) with columns in
    *reversed* offset order (column c = offset (Lk - 1) - c): returns the (B, H, Lq, Lk)
    view with (i, j) = column i - j + Lk - 1 of key row j. Both use positive strides only.
    """
    check_tensor("per_offset", per_offset, ndim=4)
    B, H, rows, R = per_offset.shape
    Lq, Lk = query_len, key_len
    if R != Lq + Lk - 1 or rows != (Lq if side == "query" else Lk):
        raise ValueError(f"per_offset must be (B, H, {Lq if side == 'query' else Lk}, Lq + Lk - 1 = {Lq + Lk - 1}) "
                         f"for Lq = {Lq}, Lk = {Lk}, got shape {tuple(per_offset.shape)}")
    t = per_offset.contiguous()
    return skew_view_of(t, Lq, Lk, side, t.storage_offset())
