"""Analytic byte counts: what each kernel path materialises for the position term.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). The count is the
*extra* memory of a path: tensors it allocates for the relative term beyond q, k, v and
the attention output. Paths that form the relative logits explicitly (naive, gather,
skew, dense bias) include those (B, H, Lq, Lk) logits, so the figures line up with the
H200 anchors (naive Shaw, one head, fp32, L = 4096, d = 64: 4096 MiB for the [L, L, d]
gather + 64 MiB of logits = 4160 MiB; the gather path: 64 MiB + [L, 2k + 1] = 66 MiB).
Both gather by an int64 [Lq, Lk] index (``kernels.gather.shaw_gather_index``, 128 MiB at
L = 4096). It depends only on (L, k), so a model builds it once per forward pass and
shares it across batch, heads and layers; the Shaw paths take it precomputed
(``index=``), as the anchors' recipe does, and it is not counted here. A call that
builds its own index pays 8 Lq Lk bytes more (``SHAW_INDEX_BYTES_PER_PAIR``).

``k`` is the scheme's distance parameter: Shaw's clip distance ``max_relative_position``,
DeBERTa's ``att_span`` (tables of 2k rows), T5's ``max_distance`` (the clamped table has
2k + 1 entries). Integer index tensors are int64 (8 bytes); tables a FlexAttention
score_mod reads are fp32 (4 bytes) whatever ``dtype`` is.
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_positive_int

__all__ = ["PATHS", "SCHEMES", "SUPPORTED", "analytic_bytes", "dtype_size"]

PATHS = ("naive", "gather", "skew", "sdpa", "sdpa_bias", "flex")
SCHEMES = ("none", "rope", "t5", "t5_clamped", "t5_bucket_ids", "alibi", "shaw", "deberta", "transformer_xl")

_INT = 8  # int64 index tensors
SHAW_INDEX_BYTES_PER_PAIR = _INT  # the shared Shaw gather index, when a call builds its own


def dtype_size(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def _counts(B, H, Lq, Lk, d, k, es):
    BH, LL, R = B * H, Lq * Lk, Lq + Lk - 1  # R: number of distinct offsets
    return {
        ("sdpa", "none"): 0,
        ("flex", "none"): 0,
        ("sdpa", "rope"): 2 * BH * max(Lq, Lk) * d * es,  # rotated copies of q and k
        # Shaw key term
        ("naive", "shaw"): (LL * d + BH * LL) * es,  # a_K gathered to [Lq, Lk, d], logits (index shared)
        ("gather", "shaw"): (BH * Lq * (2 * k + 1) + BH * LL) * es,  # q @ a_K^T, logits (index shared)
        ("skew", "shaw"): (R * d + BH * Lq * R + BH * Lq * (R + 1)) * es,  # E (2L-1, d), qe, padded qe
        ("sdpa_bias", "shaw"): (BH * Lq * (2 * k + 1) + BH * LL) * es + LL * _INT,  # gathered logits as attn_mask
        ("flex", "shaw"): BH * Lq * (2 * k + 1) * 4,  # only q @ a_K^T, fp32
        # T5 buckets
        ("naive", "t5"): LL * _INT + H * LL * es,  # [Lq, Lk] bucket ids + dense bias
        ("gather", "t5"): R * _INT + H * R * es + H * LL * es,  # per-offset ids and table, dense bias
        ("sdpa_bias", "t5"): R * _INT + H * R * es + H * LL * es,
        ("flex", "t5"): R * _INT + H * R * 4,  # fp32 per-offset table [H, Lq + Lk - 1]
        ("flex", "t5_clamped"): (2 * k + 1) * _INT + H * (2 * k + 1) * 4,  # [H, 2 max_distance + 1]
        ("flex", "t5_bucket_ids"): LL * _INT,  # the seed's [L, L] bucket-id tensor
        # ALiBi
        ("naive", "alibi"): LL * _INT + H * LL * es,
        ("sdpa_bias", "alibi"): LL * _INT + H * LL * es,
        ("flex", "alibi"): H * 4,
        # DeBERTa c2p + p2c
        ("naive", "deberta"): BH * (Lq + Lk) * 2 * k * es + LL * _INT + 2 * BH * LL * es,
        ("sdpa_bias", "deberta"): BH * (Lq + Lk) * 2 * k * es + LL * _INT + 3 * BH * LL * es,
        ("flex", "deberta"): BH * (Lq + Lk) * 2 * k * 4 + R * _INT,  # fp32 c2p / p2c tables
        # Transformer-XL terms (b) + (d)
        ("naive", "transformer_xl"): 4 * BH * LL * es,  # q @ r^T, v @ r^T and their rel_shift pads
        ("sdpa_bias", "transformer_xl"): 3 * BH * LL * es,  # (q + v) @ r^T, its shift, the masked bias
        ("flex", "transformer_xl"): BH * LL * 4,  # per-query, per-relative-row fp32 table (q + v) @ r^T
    }


SUPPORTED = tuple(_counts(1, 1, 1, 1, 1, 1, 1).keys())


def analytic_bytes(path: str, scheme: str, B: int, H: int, Lq: int, Lk: int, d: int, k: int,
                   dtype: torch.dtype = torch.float32) -> int:
    """Extra bytes path ``path`` materialises for scheme ``scheme`` (see module docstring).

    Sign convention: not applicable (counts only). Raises ``ValueError`` for an unknown
    path or scheme, or a (path, scheme) pair that has no implementation.
    """
    check_choice("path", path, PATHS)
    check_choice("scheme", scheme, SCHEMES)
    for name, value in (("B", B), ("H", H), ("Lq", Lq), ("Lk", Lk), ("d", d), ("k", k)):
        check_positive_int(name, value)
    es = dtype_size(dtype)
    table = _counts(B, H, Lq, Lk, d, k, es)
    if (path, scheme) not in table:
        have = sorted(p for p, s in table if s == scheme)
        raise ValueError(f"path {path!r} has no implementation for scheme {scheme!r}; paths for it: {have}")
    return int(table[(path, scheme)])
