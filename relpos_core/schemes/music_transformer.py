"""Music Transformer: relative logits by the skewing trick.

Paper: Cheng-Zhi Anna Huang, Ashish Vaswani, Jakob Uszkoreit, Noam Shazeer, Ian Simon,
Curtis Hawthorne, Andrew M. Dai, Matthew D. Hoffman, Monica Dinculescu, Douglas Eck,
"Music Transformer", 2018 (ICLR 2019). Book: chapter 2, "Shaw et al. and the Music Transformer's skew"
(chapters/02_shaw_and_skew.ipynb): relative logits without an L x L x d tensor.

Sign convention: ``key_minus_query``. A relative embedding table E has one row per
distance r = j - i; row ``r + (L - 1)`` embeds distance r, so the first row is the
farthest key *before* the query. The relative logit is S^rel_ij = q_i . E[j - i + L - 1].

Three ways to compute it, equal where each is defined:

* ``relative_logits_gather``: Q E^T is (L, 2L - 1); index column j - i + L - 1 (any sign).
* ``relative_logits_causal_skew``: the paper's decoder trick. E has L rows (distances
  -(L-1)..0); Q E^T is (L, L); pad a zero column on the left, reshape (L + 1, L), drop the
  first row. Correct for j <= i; entries above the diagonal are junk (a decoder masks them).
* ``relative_logits_bidirectional_skew``: the same reshape idea for an encoder (both
  signs), derived below in ``_skew_bidirectional``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from relpos_core._validate import check_tensor
from relpos_core.offsets import relative_offsets

__all__ = [
    "skew",
    "relative_logits_causal_skew",
    "relative_logits_gather",
    "relative_logits_bidirectional_skew",
]

_ANY_RANK = tuple(range(2, 9))


def skew(qe: torch.Tensor) -> torch.Tensor:
    """Huang et al.'s skew: (..., L, L) "query vs distance" -> (..., L, L) "query vs key".

    Sign convention: ``key_minus_query``. Input column r of row i is query i against
    distance r - (L - 1) (distances -(L-1)..0). Output (i, j) is query i against distance
    j - i for j <= i; entries with j > i are junk (padding or the next row's values).

    Why it works: after padding, row i reads [0, qe[i, 0], ..., qe[i, L-1]] (length L + 1).
    Output (i, j) is flat element (i + 1) L + j = i (L + 1) + (L + j - i) of the padded
    buffer: padded row i, column L + j - i, which is qe[i, L - 1 + j - i] whenever j <= i.
    """
    check_tensor("qe", qe, ndim=_ANY_RANK)
    *lead, L, L2 = qe.shape
    if L != L2:
        raise ValueError(f"qe must be square in its last two dimensions (L, L), got shape {tuple(qe.shape)}")
    padded = F.pad(qe, (1, 0))  # (..., L, L + 1), zero column on the left
    padded = padded.reshape(*lead, L + 1, L)  # (..., L + 1, L), same memory reinterpreted
    return padded[..., 1:, :]  # (..., L, L), drop the first row


def _check_q_and_table(q, rel_emb, *, causal: bool) -> tuple[int, int]:
    check_tensor("q", q, ndim=_ANY_RANK, floating=True)
    L, d = q.shape[-2], q.shape[-1]
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True, dtype=q.dtype, shape={1: d})
    want, rows_text = (L, "L") if causal else (2 * L - 1, "2L - 1")
    if rel_emb.shape[0] != want:
        raise ValueError(
            f"rel_emb must have {rows_text} = {want} rows for a sequence of length L = {L}, "
            f"got shape {tuple(rel_emb.shape)}"
        )
    return L, d


def relative_logits_causal_skew(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """Relative logits q_i . E[j - i + L - 1] for j <= i, by the skew (decoder form).

    Sign convention: ``key_minus_query``. q: (..., L, d); rel_emb: (L, d), row r embeds
    distance r - (L - 1) (so the last row is distance 0). Returns (..., L, L); entries with
    j > i are junk and must be masked. Extra memory O(L^2), not O(L^2 d).
    """
    _check_q_and_table(q, rel_emb, causal=True)
    qe = q @ rel_emb.transpose(0, 1)  # (..., L, L): query i vs distance r - (L - 1)
    return skew(qe)  # (..., L, L): query i vs key j (j <= i)


def relative_logits_gather(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """Relative logits q_i . E[j - i + L - 1] for every (i, j), by an explicit gather.

    Sign convention: ``key_minus_query``. q: (..., L, d); rel_emb: (2L - 1, d), row r
    embeds distance r - (L - 1), covering every j - i in [-(L-1), L-1]. Returns (..., L, L).
    """
    L, _ = _check_q_and_table(q, rel_emb, causal=False)
    qe = q @ rel_emb.transpose(0, 1)  # (..., L, 2L - 1): query i vs every distance
    idx = relative_offsets(L, convention="key_minus_query", device=q.device) + (L - 1)  # (L, L) in [0, 2L-2]
    idx = idx.expand(*qe.shape[:-2], L, L)  # (..., L, L)
    return torch.gather(qe, -1, idx)  # (..., L, L)


def _skew_bidirectional(qe: torch.Tensor) -> torch.Tensor:
    """(..., L, 2L - 1) "query vs distance" -> (..., L, L) "query vs key", both signs.

    Derivation (our own, in the spirit of Huang et al.'s skew). We need output (i, j) =
    qe[i, j - i + L - 1]: a window of L columns that slides one step left per row.
    Pad a zero column on the left, giving rows of length 2L: padded[i, c] = qe[i, c - 1].
    Flatten (L * 2L elements) and drop the first L of them; reshape the remaining
    2L^2 - L = L (2L - 1) elements to (L, 2L - 1) and keep the first L columns. Output
    (i, j) is then flat element L + i (2L - 1) + j = 2L i + (j - i + L) of the padded
    buffer: padded row i, column j - i + L in [1, 2L - 1], i.e. qe[i, j - i + L - 1].
    The row stride shrinks by one (2L -> 2L - 1), which is what shifts each row left by
    one. The padded column is never read; it only makes the sizes divide exactly.
    """
    *lead, L, _ = qe.shape
    padded = F.pad(qe, (1, 0))  # (..., L, 2L)
    flat = padded.reshape(*lead, 2 * L * L)[..., L:]  # (..., L (2L - 1))
    return flat.reshape(*lead, L, 2 * L - 1)[..., :L]  # (..., L, L)


def relative_logits_bidirectional_skew(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """Relative logits q_i . E[j - i + L - 1] for every (i, j), by a reshape (encoder form).

    Sign convention: ``key_minus_query``. q: (..., L, d); rel_emb: (2L - 1, d), row r
    embeds distance r - (L - 1). Returns (..., L, L), equal to ``relative_logits_gather``
    everywhere (no junk). See ``_skew_bidirectional`` for the derivation.
    """
    _check_q_and_table(q, rel_emb, causal=False)
    qe = q @ rel_emb.transpose(0, 1)  # (..., L, 2L - 1)
    return _skew_bidirectional(qe)  # (..., L, L)
