"""Signed offset matrices, the common language of every relative scheme (chapter 1).

Two conventions appear in the literature and in code:

* ``"key_minus_query"``: entry (i, j) is j - i. Positive means the key comes *after*
  the query. Used by Shaw et al., T5 and the Music Transformer.
* ``"query_minus_key"``: entry (i, j) is i - j. Positive means the key comes *before*
  the query. Used by Transformer-XL and DeBERTa.

The two matrices are negatives (and transposes) of each other; each is antisymmetric.
"""
from __future__ import annotations

import torch

from ._validate import check_choice, check_int, check_positive_int, check_tensor
from .measure.guard import check_memory

CONVENTIONS = ("key_minus_query", "query_minus_key")


def relative_offsets(
    query_len: int,
    key_len: int | None = None,
    *,
    convention: str = "key_minus_query",
    query_offset: int = 0,
    key_positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Signed offsets between query positions (rows) and key positions (columns).

    Query i sits at absolute position ``query_offset + i`` and key j at position j, so
    ``query_offset = key_len - query_len`` places the queries at the end of the keys
    (a decoder step with a KV cache). ``key_positions`` (a 1-D integer tensor) puts key j
    at ``key_positions[j]`` instead: the keys a cache kept after evicting others, at their
    original positions. Returns a (query_len, key_len) int64 tensor.
    """
    query_len = check_positive_int("query_len", query_len)
    check_choice("convention", convention, CONVENTIONS)
    query_offset = check_int("query_offset", query_offset)
    if key_positions is not None:
        check_tensor("key_positions", key_positions, ndim=1, floating=False)
        if key_positions.numel() == 0 or (key_len is not None and key_len != key_positions.numel()):
            raise ValueError(
                f"key_positions must hold one position per key (key_len = {key_len}), got shape {tuple(key_positions.shape)}"
            )
        k_pos = key_positions.to(device=device, dtype=torch.int64)[None, :]  # (1, Lk)
    else:
        key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
        k_pos = torch.arange(key_len, device=device)[None, :]  # (1, Lk)
    check_memory(8 * query_len * k_pos.shape[1], what="relative_offsets", shape=(query_len, k_pos.shape[1]),
                 dtype=torch.int64)
    q_pos = torch.arange(query_len, device=device)[:, None] + query_offset  # (Lq, 1)
    key_minus_query = k_pos - q_pos  # (Lq, Lk)
    return key_minus_query if convention == "key_minus_query" else -key_minus_query
