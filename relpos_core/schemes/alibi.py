"""ALiBi: attention with linear biases, a fixed slope per head times the distance.

Paper: Press, Smith and Lewis (2022), "Train Short, Test Long: Attention with Linear
Biases Enables Input Length Extrapolation", ICLR 2022. Book: "RoPE and ALiBi"
(chapters/06_rope_and_alibi.ipynb); ALiBi as T5 without the table in "T5: one
scalar per head, looked up by bucket" (chapters/03_t5_buckets.ipynb); ALiBi in a KV cache
in "The KV cache" (chapters/08_the_kv_cache.ipynb).

Sign convention: ``query_minus_key``. The distance is ``i - j`` (query position minus key
position), positive when the key comes *before* the query, and the bias is
``-m_h * (i - j)``: the further back a key, the larger the penalty. No parameters and no
maximum distance; the slopes ``m_h`` are a geometric sequence fixed per head.

BLOOM (and the paper's fairseq code) add ``m_h * j`` instead, which differs from
``-m_h * (i - j)`` by ``m_h * i``, a constant along each query row, so softmax gives the
same attention. We build the bias as the paper writes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core._validate import check_choice, check_positive_int
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import Bench, Lab, PositionModule, Scheme
from relpos_core.terms import PositionTerm, ScalarSlopes

__all__ = ["alibi_slopes", "alibi_bias", "position_term", "ALiBiOptions", "ALiBiPosition", "SCHEME", "MAX_HEADS"]

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
    symmetric: bool = False,
    query_offset: int | None = None,
    key_positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """(H, Lq, Lk) float32 ALiBi bias, convention ``query_minus_key`` (distance i - j).

    ``-m_h * (i - j)`` for every pair, as the paper writes it (keys after the query get a
    positive value here: causality is the attention mask, never part of the bias, so
    pass ``causal=True`` to ``rp.attention`` or ``rp.attend``). ``symmetric=True``: the
    bidirectional ``-m_h * |i - j|``. Key j sits at position j (or ``key_positions[j]``,
    the keys a KV cache kept, at their positions) and the queries are the last
    ``query_len`` keys unless ``query_offset`` places them.
    """
    num_heads = check_positive_int("num_heads", num_heads)
    query_len = check_positive_int("query_len", query_len)
    check_choice("symmetric", symmetric, (False, True))
    n_keys = key_positions.numel() if key_positions is not None else (key_len or query_len)
    check_memory(4 * num_heads * query_len * n_keys + 8 * query_len * n_keys, what="alibi_bias",
                 shape=(num_heads, query_len, n_keys), dtype=torch.float32,
                 alternative="rp.attend with rp.schemes.alibi.position_term and backend='flex' (no dense bias)")
    distance = relative_offsets(query_len, key_len, convention="query_minus_key", query_offset=query_offset,
                                key_positions=key_positions, device=device)  # (Lq, Lk) i - j
    slopes = alibi_slopes(num_heads).to(distance.device)[:, None, None]  # (H, 1, 1)
    return slopes * -(distance.abs() if symmetric else distance)  # (H, Lq, Lk)


def position_term(num_heads: int, *, symmetric: bool = False, device: torch.device | str | None = None,
                  slopes: torch.Tensor | None = None) -> PositionTerm:
    """ALiBi's position term for ``rp.attend``: ``-m_h (i - j)`` added to the scaled logit.

    Convention ``query_minus_key`` (distance i - j); in the kernels' offset j - i it is
    ``m_h * (j - i)``. Pair it with ``causal=True`` (the paper's decoder): the mask, not
    the bias, removes the keys after the query. ``symmetric=True`` gives the
    bidirectional variant ``-m_h |i - j|``. No parameters: the slopes are fixed.
    """
    check_choice("symmetric", symmetric, (False, True))
    slopes = alibi_slopes(num_heads).to(device) if slopes is None else slopes  # (H,): ``slopes`` shares a buffer
    return PositionTerm(scheme="alibi", convention="query_minus_key",
                        scalars=(ScalarSlopes(slopes, symmetric=symmetric, name="ALiBi slopes"),),
                        notes=dict(symmetric=symmetric))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """ALiBi for ``num_heads`` heads (no table: the head size and dtype do not matter)."""
    symmetric = bool(options.symmetric)
    if torch.device(device or "cpu").type == "meta":
        return PositionTerm(scheme="alibi", convention="query_minus_key",
                            scalars=(ScalarSlopes(torch.empty(num_heads, device="meta"), symmetric=symmetric,
                                                  name="ALiBi slopes"),))
    return position_term(num_heads, symmetric=symmetric, device=device)


@dataclass(frozen=True)
class ALiBiOptions:
    """``symmetric``: the bidirectional -m |i - j| (None follows the model: one-sided in a decoder)."""

    symmetric: bool | None = None

    def __post_init__(self):
        check_choice("symmetric", self.symmetric, (None, False, True))


class ALiBiPosition(PositionModule):
    """No parameters: one buffer of fixed slopes (float32), the same in every layer."""

    def __init__(self, shape, options: ALiBiOptions):
        super().__init__(shape, options)
        self.register_buffer("slopes", alibi_slopes(shape.num_heads), persistent=False)  # (H,)

    def _apply(self, fn, *args, **kwargs):  # moved with the model, but kept in float32 whatever its dtype
        super()._apply(fn, *args, **kwargs)
        self.slopes = alibi_slopes(self.shape.num_heads).to(self.slopes.device)
        return self

    def term(self, layer, attention):
        symmetric = (not self.shape.causal) if self.options.symmetric is None else self.options.symmetric
        return position_term(self.shape.num_heads, symmetric=symmetric, slopes=self.slopes)


SCHEME = Scheme(
    name="alibi", color="#117733", display="ALiBi", paper="Press et al. 2022", cite="press2022alibi", chapter="06_rope_and_alibi",
    convention="query_minus_key", formula=r"-m_h\,(i - j)", code="relpos_core.schemes.alibi.alibi_bias",
    injects="scalar on the logit", summary="a fixed slope per head times the distance",
    example=example, options=ALiBiOptions, module=ALiBiPosition, order=60,
    lab=Lab(("marker", "marker_causal", "retrieval_gap"), book=True, tiny=("marker_causal",),
            language_model=("book",)),
    bench=Bench(block_skip=("medium", "large")),
)
