"""Signed offset matrices, the common language of every relative scheme ("Why relative positions").

Two conventions appear in the literature and in code:

* ``"key_minus_query"``: entry (i, j) is j - i. Positive means the key comes *after*
  the query. Used by Shaw et al., T5 and the Music Transformer.
* ``"query_minus_key"``: entry (i, j) is i - j. Positive means the key comes *before*
  the query. Used by Transformer-XL and DeBERTa.

The two matrices are negatives (and transposes) of each other; each is antisymmetric.
Queries and keys sit where ``rp.attend`` puts them (``relpos_core.positions``): key j at
position j and the queries the *last* ``query_len`` keys, unless ``query_offset`` or
``key_positions`` says otherwise.
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_positive_int
from relpos_core.budget import check_memory
from relpos_core.positions import query_key_positions

CONVENTIONS = ("key_minus_query", "query_minus_key")


def relative_offsets(
    query_len: int,
    key_len: int | None = None,
    *,
    convention: str = "key_minus_query",
    query_offset: int | None = None,
    key_positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Signed offsets between query positions (rows) and key positions (columns).

    Key j sits at position j (or at ``key_positions[j]``, a 1-D integer tensor: the keys
    a cache kept after evicting others) and the queries are the last ``query_len`` keys,
    as in ``rp.attend``: ``relative_offsets(2, 5)`` puts the queries at 3 and 4.
    ``query_offset=o`` puts query i at ``o + i`` instead (``query_offset=0``: the
    queries at the start). ``key_len`` defaults to ``query_len``. Returns a
    (query_len, key_len) int64 tensor.
    """
    query_len = check_positive_int("query_len", query_len)
    check_choice("convention", convention, CONVENTIONS)
    if key_len is not None:
        key_len = check_positive_int("key_len", key_len)
    n_keys = key_positions.numel() if key_positions is not None else (key_len or query_len)
    check_memory(8 * query_len * n_keys, what="relative_offsets", shape=(query_len, n_keys), dtype=torch.int64)
    pos = query_key_positions(query_len, key_len, query_offset=query_offset, key_positions=key_positions,
                              device=device)
    key_minus_query = pos.offsets()  # (Lq, Lk)
    return key_minus_query if convention == "key_minus_query" else key_minus_query.neg_()
