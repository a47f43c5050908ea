"""ALiBi: attention with linear biases, a fixed slope per head times the distance.

Paper: Press, Smith and Lewis (2022), "Train Short, Test Long: Attention with Linear
Biases Enables Input Length Extrapolation", ICLR 2022. Book: chapter 6, "RoPE and ALiBi"
(chapters/06_rope_and_alibi.ipynb); ALiBi as T5 without the table in chapter 3, "T5: one
scalar per head, looked up by bucket" (chapters/03_t5_buckets.ipynb); ALiBi in a KV cache
in chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

Sign convention: ``query_minus_key``. The distance is ``i - j`` (query position minus key
position), positive when the key comes *before* the query, and the bias is
``-m_h * (i - j)``: the further back a key, the larger the penalty. No parameters and no
maximum distance; the slopes ``m_h`` are a geometric sequence fixed per head.

BLOOM (and the paper's fairseq code) add ``m_h * j`` instead, which differs from
``-m_h * (i - j)`` by ``m_h * i``, a constant along each query row, so softmax gives the
same attention. We build the bias as the paper writes it.
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int
from relpos_core.measure.guard import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.terms import PositionTerm, ScalarSlopes

__all__ = ["alibi_slopes", "alibi_bias", "position_term", "example_term", "EXAMPLES", "MAX_HEADS"]

MAX_HEADS = 4096  # far beyond any model; bounds the Python loop that builds the slopes


def _slopes(n: int) -> list[float]:
    """The paper's ``get_slopes``: geometric for a power of two, interleaved otherwise (float64)."""
    if n & (n - 1) == 0:  # power of two: start = ratio = 2^(-8/n)
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    closest = 1 << (n.bit_length() - 1)  # closest power of two below n
    # the closest power's slopes, then every other slope of twice that count
    return _slopes(closest) + _slopes(2 * closest)[0::2][: n - closest]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """(H,) float32 slopes m_h. 8 heads: 1/2, 1/4, ..., 1/256. Other counts: the paper's
    interleaving rule (closest power of two below, then every other slope of twice that count).
    Slopes carry no sign convention; the bias they make is ``-m_h * (i - j)``."""
    num_heads = check_positive_int("num_heads", num_heads, max_value=MAX_HEADS)
    return torch.tensor(_slopes(num_heads), dtype=torch.float64).float()  # (H,)


def alibi_bias(
    num_heads: int,
    query_len: int,
    key_len: int | None = None,
    *,
    causal: bool = True,
    query_offset: int = 0,
    key_positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(H, Lq, Lk) float32 ALiBi bias, convention ``query_minus_key`` (distance i - j).

    causal: ``-m_h * (i - j)`` for keys at or before the query (i - j >= 0), ``-inf`` for keys
    after it. Bidirectional (``causal=False``): the symmetric ``-m_h * |i - j|``.
    Query i sits at position ``query_offset + i``, key j at position j, or at
    ``key_positions[j]`` when given (the keys a KV cache kept, at their original positions).
    """
    num_heads = check_positive_int("num_heads", num_heads)
    query_len = check_positive_int("query_len", query_len)
    if key_positions is None:
        key_len = query_len if key_len is None else check_positive_int("key_len", key_len)
    check_choice("causal", causal, (True, False))
    query_offset = check_int("query_offset", query_offset)
    n_keys = key_len if key_positions is None else key_positions.numel()
    check_memory(4 * num_heads * query_len * n_keys + 8 * query_len * n_keys, what="alibi_bias",
                 shape=(num_heads, query_len, n_keys), dtype=torch.float32,
                 alternative="rp.attend with rp.schemes.alibi.position_term and backend='flex' (no dense bias)")
    distance = relative_offsets(query_len, key_len, convention="query_minus_key", query_offset=query_offset,
                                key_positions=key_positions, device=device)  # (Lq, Lk) i - j
    slopes = alibi_slopes(num_heads).to(device)[:, None, None]  # (H, 1, 1)
    if not causal:
        return slopes * -distance.abs()  # (H, Lq, Lk) -m_h * |i - j|
    bias = slopes * -distance  # (H, Lq, Lk) -m_h * (i - j), +0.0 on the diagonal
    return bias.masked_fill(distance < 0, float("-inf"))  # keys after the query are masked


def position_term(num_heads: int, *, symmetric: bool = False, device: torch.device | str | None = None) -> PositionTerm:
    """ALiBi's position term for ``rp.attend``: ``-m_h (i - j)`` added to the scaled logit.

    Convention ``query_minus_key`` (distance i - j); in the kernels' offset j - i it is
    ``m_h * (j - i)``. Pair it with ``causal=True`` (the paper's decoder): the mask, not
    the bias, removes the keys after the query. ``symmetric=True`` gives the
    bidirectional variant ``-m_h |i - j|``. No parameters: the slopes are fixed.
    """
    check_choice("symmetric", symmetric, (False, True))
    slopes = alibi_slopes(num_heads).to(device)  # (H,)
    return PositionTerm(scheme="alibi", convention="query_minus_key",
                        scalars=(ScalarSlopes(slopes, symmetric=symmetric, name="ALiBi slopes"),),
                        notes=dict(symmetric=symmetric))


def example_term(num_heads: int, head_dim: int, k: int, *, device=None, dtype=torch.float32,
                 generator=None) -> PositionTerm:
    """ALiBi for ``num_heads`` heads (``k``, ``dtype`` unused: ALiBi has no table)."""
    if torch.device(device or "cpu").type == "meta":
        return PositionTerm(scheme="alibi", convention="query_minus_key",
                            scalars=(ScalarSlopes(torch.empty(num_heads, device="meta"), name="ALiBi slopes"),))
    return position_term(num_heads, device=device)


EXAMPLES = {"alibi": example_term}
K_NAMES = {"alibi": None}
