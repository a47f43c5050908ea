"""The gather path: score against the few distinct offsets, then index by offset.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). Shaw et al. (2018)
note that only 2k + 1 relative vectors exist, so q @ a_K^T is an [Lq, 2k + 1] matrix (a
batched matmul does the work) and the [Lq, Lk] relative logits are a gather from it by
clipped offset: O(L k) extra memory instead of O(L^2 d) (66 MiB instead of 4 GiB at L =
4096, d = 64, k = 64, fp32).

* Shaw key term: ``shaw_key_logits`` (q @ a_K^T, then gather).
* Shaw value term: the attention weights are summed into their 2k + 1 offset buckets
  (``scatter_add``), then one [Lq, 2k + 1] @ [2k + 1, d] matmul: ``shaw_value_output``.
* T5 (Raffel et al., 2020): the bucket of each *offset* (Lq + Lk - 1 of them) rather than
  of each pair gives a per-offset table [H, Lq + Lk - 1]; the dense bias is a gather from
  it (``t5_offset_table``, ``t5_bias``). The per-offset table is also what FlexAttention
  reads (``relpos_core.kernels.flex``).
"""
from __future__ import annotations

import math

import torch

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.schemes.shaw import shaw_relative_index
from relpos_core.kernels.naive import _check_shaw_table, _guard_dense, attention_with_bias, check_qkv

__all__ = [
    "shaw_gather_index",
    "shaw_key_logits",
    "shaw_value_output",
    "shaw_attention",
    "t5_offset_table",
    "t5_bias",
    "t5_attention",
]


def shaw_gather_index(query_len: int, key_len: int | None = None, *, max_relative_position: int,
                      device=None) -> torch.Tensor:
    """The (Lq, Lk) int64 index clip(j - i, -k, k) + k that the Shaw paths gather by.

    ``schemes.shaw.shaw_relative_index``, under the name the kernel paths use. ``torch.gather``
    needs int64, so it costs 8 bytes per pair; it depends only on (Lq, Lk, k), so a model
    builds it once per forward pass and shares it across batch, heads and layers: pass it
    as ``index=`` to the Shaw paths. Sign convention: ``key_minus_query``.
    """
    return shaw_relative_index(query_len, key_len, max_relative_position=max_relative_position, device=device)


def check_shaw_index(index, Lq: int, Lk: int, kmax: int, device) -> torch.Tensor:
    """A precomputed ``index`` (see ``shaw_gather_index``), or a fresh one when None."""
    if index is None:
        return shaw_gather_index(Lq, Lk, max_relative_position=kmax, device=device)
    check_tensor("index", index, ndim=2, dtype=torch.int64, shape={0: Lq, 1: Lk})
    return index


def shaw_key_logits(q, rel_key, *, max_relative_position: int, key_len: int | None = None,
                    index: torch.Tensor | None = None) -> torch.Tensor:
    """Unscaled q_i . a_K[clip(j - i, -k, k) + k] via q @ a_K^T -> [Lq, 2k + 1], then gather.

    Sign convention: ``key_minus_query`` (j - i). q (B, H, Lq, d), rel_key (2k + 1, d),
    ``index`` an optional precomputed ``shaw_gather_index(Lq, Lk, ...)``.
    Returns (B, H, Lq, Lk), Lk = ``key_len`` (default Lq).
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    kmax = check_positive_int("max_relative_position", max_relative_position)
    Lk = Lq if key_len is None else check_positive_int("key_len", key_len)
    _check_shaw_table("rel_key", rel_key, kmax, d, q.dtype)
    _guard_dense("gather Shaw relative logits", B, H, Lq, Lk, q.dtype, "shaw", k=kmax, d=d)
    idx = check_shaw_index(index, Lq, Lk, kmax, q.device)  # (Lq, Lk)
    qa = q @ rel_key.transpose(0, 1)  # (B, H, Lq, 2k + 1): q_i against every clipped offset
    return torch.gather(qa, -1, idx.expand(B, H, Lq, Lk))  # (B, H, Lq, Lk)


def shaw_value_output(probs, rel_value, *, max_relative_position: int,
                      index: torch.Tensor | None = None) -> torch.Tensor:
    """sum_j probs_ij a_V[clip(j - i, -k, k) + k] without an [Lq, Lk, d] tensor.

    Sign convention: ``key_minus_query``. probs (B, H, Lq, Lk) attention weights,
    rel_value (2k + 1, d). The weights are scattered into their offset buckets
    (B, H, Lq, 2k + 1), then multiplied by the table. Returns (B, H, Lq, d).
    """
    check_tensor("probs", probs, ndim=4, floating=True)
    B, H, Lq, Lk = probs.shape
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_tensor("rel_value", rel_value, ndim=2, floating=True, dtype=probs.dtype)
    if rel_value.shape[0] != 2 * kmax + 1:
        raise ValueError(f"rel_value must have 2 * max_relative_position + 1 = {2 * kmax + 1} rows, "
                         f"got shape {tuple(rel_value.shape)}")
    idx = check_shaw_index(index, Lq, Lk, kmax, probs.device)  # (Lq, Lk)
    buckets = probs.new_zeros(B, H, Lq, 2 * kmax + 1)  # (B, H, Lq, 2k + 1)
    buckets = buckets.scatter_add(-1, idx.expand(B, H, Lq, Lk), probs)  # weight per offset bucket
    return buckets @ rel_value  # (B, H, Lq, d)


def shaw_attention(q, k, v, *, rel_key=None, rel_value=None, max_relative_position: int,
                   causal: bool = False) -> torch.Tensor:
    """Shaw attention (key and value terms) by the gather path; returns (B, H, Lq, d).

    Sign convention: ``key_minus_query``. Self-attention (Lq == Lk), scale 1/sqrt(d),
    causal masks j > i.
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_choice("causal", causal, (False, True))
    if Lq != Lk:
        raise ValueError(f"k must have the same length as q (self-attention, Lq == Lk = {Lq}), got Lk = {Lk}")
    if rel_value is not None:
        _check_shaw_table("rel_value", rel_value, kmax, d, q.dtype)
    scores = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    if rel_key is not None:
        scores = scores + shaw_key_logits(q, rel_key, max_relative_position=kmax)  # (B, H, Lq, Lk)
    scores = scores / math.sqrt(d)
    if causal:
        future = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1)  # (Lq, Lk) j > i
        scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, H, Lq, Lk)
    out = probs @ v  # (B, H, Lq, d)
    if rel_value is not None:
        out = out + shaw_value_output(probs, rel_value, max_relative_position=kmax)  # (B, H, Lq, d)
    return out


def t5_offset_table(table, query_len: int, key_len: int | None = None, *, bidirectional: bool = True,
                    max_distance: int = 128, clamped: bool = False) -> torch.Tensor:
    """Per-offset T5 bias: (H, Lq + Lk - 1), or (H, 2 max_distance + 1) when ``clamped``.

    Sign convention: ``key_minus_query``. Unclamped: column (j - i) + Lq - 1 holds
    table[bucket(j - i)] for every offset j - i in [-(Lq - 1), Lk - 1]. Clamped: column
    clamp(j - i, -M, M) + M (M = max_distance); exact, because every |offset| >= M is in
    the last bucket of its direction. table: (num_buckets, H). The buckets are computed
    for the offsets only (Lq + Lk - 1 values), never for every pair.
    """
    check_tensor("table", table, ndim=2, floating=True)
    Lq = check_positive_int("query_len", query_len)
    Lk = Lq if key_len is None else check_positive_int("key_len", key_len)
    M = check_positive_int("max_distance", max_distance)
    check_choice("clamped", clamped, (False, True))
    from relpos_core.schemes.t5 import t5_relative_bucket

    if clamped:
        offsets = torch.arange(-M, M + 1, device=table.device)  # (2M + 1,) offsets j - i
    else:
        offsets = torch.arange(-(Lq - 1), Lk, device=table.device)  # (Lq + Lk - 1,) offsets j - i
    buckets = t5_relative_bucket(offsets, bidirectional=bidirectional, num_buckets=table.shape[0],
                                 max_distance=M)  # (R,)
    return table[buckets].transpose(0, 1)  # (H, R)


def t5_bias(table, query_len: int, key_len: int | None = None, *, bidirectional: bool = True,
            max_distance: int = 128) -> torch.Tensor:
    """Dense (H, Lq, Lk) T5 bias gathered from the per-offset table (no [Lq, Lk] bucket ids).

    Sign convention: ``key_minus_query``: entry (h, i, j) = table[bucket(j - i), h].
    """
    check_tensor("table", table, ndim=2, floating=True)
    Lq = check_positive_int("query_len", query_len)
    Lk = Lq if key_len is None else check_positive_int("key_len", key_len)
    H = table.shape[1]
    _guard_dense("dense T5 bias", 1, H, Lq, Lk, table.dtype, "t5", k=max_distance)
    per_offset = t5_offset_table(table, Lq, Lk, bidirectional=bidirectional, max_distance=max_distance)  # (H, R)
    rows = torch.arange(Lq, device=table.device)[:, None]  # (Lq, 1)
    cols = torch.arange(Lk, device=table.device)[None, :] - rows + (Lq - 1)  # (Lq, Lk) column of j - i
    return per_offset[:, cols]  # (H, Lq, Lk)


def t5_attention(q, k, v, table, *, bidirectional: bool = True, max_distance: int = 128, scale=None) -> torch.Tensor:
    """Attention with the T5 bias gathered from the per-offset table; returns (B, H, Lq, d).

    Sign convention: ``key_minus_query``. T5 itself uses ``scale=1.0``; default 1/sqrt(d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("table", table, ndim=2, floating=True, dtype=q.dtype, shape={1: H})
    bias = t5_bias(table, Lq, Lk, bidirectional=bidirectional, max_distance=max_distance)  # (H, Lq, Lk)
    return attention_with_bias(q, k, v, bias, scale=scale)  # (B, H, Lq, d)
