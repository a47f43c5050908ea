"""The skew path: relative logits by a pad-and-reshape instead of a gather.

Book: chapter 2, "Shaw et al. and the Music Transformer's skew"
(chapters/02_shaw_and_skew.ipynb). Music Transformer (Huang et al., 2018) computes Q E^T
against one embedding per distance, pads a zero column, reinterprets the buffer and
drops a row: entry (i, j) then holds q_i against distance j - i. Extra memory O(L^2),
not O(L^2 d). The reshape itself is ``relpos_core.schemes.music_transformer.skew``
(reused here, not rewritten); Transformer-XL's ``rel_shift`` (Dai et al., 2019) is the
same trick in the ``query_minus_key`` layout.

* ``relative_logits``: the Music Transformer logits (causal: rel_emb has L rows;
  bidirectional: 2L - 1 rows).
* ``shaw_key_logits`` / ``shaw_attention``: Shaw's clipped table expanded to one row
  per distance ((2L - 1, d), or (L, d) causal), then skewed. The skew needs Lq == Lk.
* ``transformer_xl_position_logits``: terms (b) + (d) as rel_shift((q + v) r^T).
"""
from __future__ import annotations

import math

import torch

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.kernels.naive import _check_shaw_table, _guard_dense, check_qkv
from relpos_core.measure.analytic import analytic_bytes
from relpos_core.measure.guard import check_memory

__all__ = ["relative_logits", "shaw_key_logits", "shaw_attention", "transformer_xl_position_logits"]


def relative_logits(q, rel_emb, *, causal: bool) -> torch.Tensor:
    """Music Transformer relative logits q_i . E[j - i + L - 1] by the skew.

    Sign convention: ``key_minus_query`` (row r of rel_emb embeds distance r - (L - 1)).
    q (..., L, d); rel_emb (L, d) when causal (distances -(L-1)..0; entries j > i are
    junk, mask them), (2L - 1, d) otherwise. Returns (..., L, L).
    """
    check_tensor("q", q, ndim=tuple(range(2, 9)), floating=True)
    check_choice("causal", causal, (False, True))
    L, d = q.shape[-2], q.shape[-1]
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True, dtype=q.dtype, shape={1: d})
    want = L if causal else 2 * L - 1
    if rel_emb.shape[0] != want:
        raise ValueError(
            f"rel_emb must have {'L' if causal else '2L - 1'} = {want} rows for the {'causal' if causal else 'bidirectional'} "
            f"skew at sequence length L = {L} (one row per distance), got {rel_emb.shape[0]} rows; "
            f"for a clipped table use shaw_key_logits, for Lq != Lk use the gather path")
    lead = math.prod(q.shape[:-2])
    need = analytic_bytes("skew", "shaw", 1, lead, L, L, d, 1, q.dtype)  # qe and its padded copy
    check_memory(need, what="skew relative logits", shape=(*q.shape[:-2], L, 2 * L - 1), dtype=q.dtype,
                 alternative="the FlexAttention path (relpos_core.kernels.flex.shaw_key_attention)",
                 alternative_bytes=analytic_bytes("flex", "shaw", 1, lead, L, L, d, L, q.dtype))
    from relpos_core.schemes import music_transformer as mt

    if causal:
        return mt.relative_logits_causal_skew(q, rel_emb)  # (..., L, L)
    return mt.relative_logits_bidirectional_skew(q, rel_emb)  # (..., L, L)


def _expand_clipped(rel_key, kmax: int, L: int, causal: bool) -> torch.Tensor:
    """Shaw's (2k + 1, d) table as one row per distance r - (L - 1): (2L - 1, d) or (L, d)."""
    n = L if causal else 2 * L - 1
    dist = torch.arange(n, device=rel_key.device) - (L - 1)  # (n,) distances j - i
    return rel_key[dist.clamp(-kmax, kmax) + kmax]  # (n, d)


def shaw_key_logits(q, rel_key, *, max_relative_position: int, causal: bool = False) -> torch.Tensor:
    """Unscaled Shaw key term q_i . a_K[clip(j - i, -k, k) + k] by the skew.

    Sign convention: ``key_minus_query``. q (B, H, L, d), rel_key (2k + 1, d); the skew
    needs a square score matrix (Lq == Lk == L). causal: entries j > i are junk.
    Returns (B, H, L, L).
    """
    check_tensor("q", q, ndim=4, floating=True)
    L, d = q.shape[-2], q.shape[-1]
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_choice("causal", causal, (False, True))
    _check_shaw_table("rel_key", rel_key, kmax, d, q.dtype)
    table = _expand_clipped(rel_key, kmax, L, causal)  # (L or 2L - 1, d)
    return relative_logits(q, table, causal=causal)  # (B, H, L, L)


def shaw_attention(q, k, v, *, rel_key, max_relative_position: int, causal: bool = False,
                   rel_value=None) -> torch.Tensor:
    """Shaw attention (key term) with the relative logits from the skew; returns (B, H, L, d).

    Sign convention: ``key_minus_query``. Self-attention only (Lq == Lk). The skew gives
    logits, not the value term: pass ``rel_value=None`` and use the gather path for a_V.
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    if Lq != Lk:
        raise ValueError(f"k must have the same length as q for the skew (Lq == Lk = {Lq}), got Lk = {Lk}; "
                         f"use the gather path (relpos_core.kernels.gather) for Lq != Lk")
    if rel_value is not None:
        raise ValueError("rel_value must be None for the skew path (it computes logits only); "
                         "use relpos_core.kernels.gather.shaw_attention for Shaw's value term")
    scores = q @ k.transpose(-2, -1)  # (B, H, L, L)
    scores = scores + shaw_key_logits(q, rel_key, max_relative_position=max_relative_position, causal=causal)
    scores = scores / math.sqrt(d)  # (B, H, L, L)
    if causal:
        future = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1)  # (L, L) j > i (junk there)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, L, d)


def transformer_xl_position_logits(q, r_k, v_bias) -> torch.Tensor:
    """Transformer-XL terms (b) + (d), unscaled: rel_shift((q_i + v) . r_m) into (i, j).

    Sign convention: ``query_minus_key``: (i, j) uses the row for distance (Lk - Lq) + i - j;
    r_k (H, Lk, d) holds rows for distances Lk - 1 .. 0; entries with
    j > i + (Lk - Lq) are junk (masked by the causal mask). q (B, H, Lq, d), v_bias (H, d).
    Returns (B, H, Lq, Lk).
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("r_k", r_k, ndim=3, floating=True, dtype=q.dtype, shape={0: H, 2: d})
    check_tensor("v_bias", v_bias, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    Lk = r_k.shape[1]
    if Lq > Lk:
        raise ValueError(f"q must have query_len <= key_len = {Lk} (r_k rows), got {Lq}")
    _guard_dense("skew Transformer-XL logits", 2 * B, H, Lq, Lk, q.dtype, "transformer_xl", d=d)
    from relpos_core.schemes.transformer_xl import rel_shift

    qr = (q + v_bias[None, :, None, :]) @ r_k.transpose(-2, -1)  # (B, H, Lq, Lk) against each relative row
    return rel_shift(qr)  # (B, H, Lq, Lk)
