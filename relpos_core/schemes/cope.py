"""CoPE: contextual positions, counted by gates on q . k instead of tokens.

Paper: Olga Golovneva, Tianlu Wang, Jason Weston and Sainbayar Sukhbaatar (2024),
"Contextual Position Encoding: Learning to Count What's Important", arXiv:2405.18719.
Book: "What it costs" (chapters/11_what_it_costs.ipynb) tabulates its paths.

A token j counts for query i with the gate g_ij = sigmoid(q_i . k_j / sqrt(d)); the
position of j seen from i is the number of counted tokens from j to i, p_ij =
sum_{t = j .. i} g_it, a real number. Its embedding interpolates the two integer
positions around it, e[floor p] and e[ceil p], from a learned table of ``max_positions``
rows shared by the heads (p is clamped at the last row); the logit gains q_i . e(p_ij),
added to the scaled content logit as the paper's code does. Decoder only (the gates sum
over earlier keys). Sign convention: none (a position here is a count of gates, not an
offset; the causal mask is the library's, key_pos <= query_pos). The piece is ``relpos_core.pieces.contextual.ContextualPositions``:
naive eager and SDPA compute it, every other path refuses it with its reason.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_int, check_tensor
from relpos_core.pieces.contextual import ContextualPositions
from relpos_core.schemes.declaration import Distance, PositionModule, Scheme
from relpos_core.terms import PositionTerm, example_tensor

__all__ = ["position_term", "cope_logits", "CoPEOptions", "CoPEPosition", "SCHEME"]


def position_term(table: torch.Tensor) -> PositionTerm:
    """CoPE's term for ``rp.attend`` (causal calls only): ``table`` (npos, d) or (H, npos, d), e[0 .. npos - 1]."""
    check_tensor("table", table, ndim=(2, 3), floating=True)
    return PositionTerm(scheme="cope", convention="none", pieces=(ContextualPositions(table),),
                        causal_only=True)


def cope_logits(q: torch.Tensor, k: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """q_i . e(p_ij) for queries that are the last Lq of the keys, causal: (B, H, Lq, Lk)."""
    from relpos_core.positions import resolve_positions

    check_tensor("q", q, ndim=4, floating=True)
    check_tensor("k", k, ndim=4, floating=True, shape={0: q.shape[0], 1: q.shape[1], 3: q.shape[3]})
    pos = resolve_positions(q.shape[2], k.shape[2], device=q.device)
    return ContextualPositions(table).logits("naive", q, k, pos, q.dtype)


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """A random table of ``options.max_positions`` position embeddings shared by the heads."""
    return position_term(example_tensor(options.max_positions, head_dim, device=device, dtype=dtype,
                                        generator=generator, scale=0.3))


@dataclass(frozen=True)
class CoPEOptions:
    """``max_positions``: rows of the position table (counted positions beyond the last share it)."""

    max_positions: int = 16

    def __post_init__(self):
        check_int("max_positions", self.max_positions, min_value=1)


class CoPEPosition(PositionModule):
    """Per layer, one table of position embeddings (max_positions, d) shared by the heads (the paper's code)."""

    def __init__(self, shape, options: CoPEOptions):
        super().__init__(shape, options)
        self.table = nn.Parameter(torch.zeros(shape.num_layers, options.max_positions, shape.head_dim))

    def term(self, layer, attention):
        return position_term(self.table[layer])


SCHEME = Scheme(
    name="cope", color="#99bb00", short="CoPE", display="CoPE", paper="Golovneva et al. 2024",
    cite="golovneva2024cope", chapter=None, convention="none",
    formula=r"q_i \cdot e\big(\textstyle\sum_{t=j}^{i} \sigma(q_i \cdot k_t)\big)",
    code="relpos_core.schemes.cope.cope_logits", injects="vector on the logit",
    summary="positions counted by gates on q . k, read from an interpolated table",
    example=example, options=CoPEOptions, module=CoPEPosition, order=97, causal_only=True,
    distance=Distance("max_positions", "rows of the position table; larger counts share the last", small=4,
                      medium=16, large=64),
)
