"""Contextual positions (CoPE): positions counted by gates on q . k, then read from an embedding table.

Paper: Olga Golovneva, Tianlu Wang, Jason Weston and Sainbayar Sukhbaatar (2024),
"Contextual Position Encoding: Learning to Count What's Important", arXiv:2405.18719.
Book: "What it costs" (chapters/11_what_it_costs.ipynb), where its paths are tabulated.

For a causal query i and a visible key j (eqs. 3-5 and the paper's code):

    g_ij = sigmoid(scale q_i . k_j)              # does token j count?
    p_ij = sum_{t = j .. i} g_it                  # how many counted tokens from j to i
    e(p) = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]   # p clamped at npos - 1
    logit_ij += q_i . e(p_ij)                     # unscaled, added to the scaled logit

The position depends on q and k, not on the offset: no per-offset table exists and a
score_mod, which sees one (query, key) pair at a time, cannot sum gates over keys. So only
the naive form on the eager and SDPA backends computes it; every other path refuses it
with the reasons below. Keys are summed in their order, which is the order of their
positions (a KV cache and its evictions keep it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from relpos_core._validate import check_tensor
from relpos_core.pieces.base import DENSE_BACKENDS, Alloc, Piece

__all__ = ["ContextualPositions"]


@dataclass(frozen=True)
class ContextualPositions(Piece):
    """logit_ij += q_i . e(p_ij), p_ij the sum of the gates sigmoid(scale q_i . k_t) over keys t from j to i.

    ``table``: (npos, d) position embeddings e[0 .. npos - 1] shared by the heads, or
    (H, npos, d) per head. ``gate_scale``: the scale of q . k inside the gate (None: 1/sqrt(d),
    the paper's code, which gates the scaled logit).
    """

    table: torch.Tensor
    gate_scale: float | None = None
    name: str = "CoPE positions"
    kind: ClassVar[str] = "contextual_positions"
    stage: ClassVar[str] = "vector"
    scaled: ClassVar[bool] = False
    batched: ClassVar[bool] = True
    offset_only: ClassVar[bool] = False
    computes: ClassVar = {"naive": DENSE_BACKENDS}

    def __post_init__(self):
        check_tensor("table", self.table, ndim=(2, 3), floating=True)

    @property
    def num_positions(self) -> int:
        return self.table.shape[-2]

    def refusal(self, form, backend):
        if backend == "flex":
            return (f"{self.name} are sums of sigmoid(q . k) gates over the keys from j to i: a score_mod sees one "
                    f"(query, key) pair at a time and cannot sum over keys; use backend 'eager' or 'sdpa' with "
                    f"form 'naive'")
        return (f"{self.name} depend on q and k (counted by gates), not on the offset, so no per-offset table "
                f"exists: use form 'naive'")

    def check(self, num_heads, head_dim):
        if self.table.shape[-1] != head_dim:
            raise ValueError(f"the term's {self.name} table has head size {self.table.shape[-1]}, q has d = {head_dim}")
        if self.table.dim() == 3 and self.table.shape[0] != num_heads:
            raise ValueError(f"the term's {self.name} table has {self.table.shape[0]} heads, q has H = {num_heads}")

    @property
    def heads(self):
        return self.table.shape[0] if self.table.dim() == 3 else None

    def tensors(self):
        return [(f"{self.name} table", self.table)]

    def decode_step_work(self, context, num_heads, head_dim, layout=None):
        """Per head, for the new query: a gate sigmoid(q . k) per kept key (d + 1), their running sum (1),
        q . e for every table row (d each), and per kept key the interpolation of two reads (2)."""
        npos = self.num_positions
        return (f"the gates sigmoid(q . k) of every kept key and their running sum, q . e for the {npos} table rows, "
                f"and the interpolation between two rows for every kept key",
                num_heads * (context * (head_dim + 1 + 1 + 2) + npos * head_dim))

    def logits(self, form, q, k, pos, dtype):
        scale = q.shape[-1] ** -0.5 if self.gate_scale is None else self.gate_scale
        gates = torch.sigmoid((q @ k.transpose(-2, -1)).mul_(scale))  # (B, H, Lq, Lk)
        gates = gates.masked_fill(~pos.visible(), 0.0)  # later keys do not count
        p = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.num_positions - 1)  # (B, H, Lq, Lk): p_ij
        del gates
        per_position = q @ self.table.to(q.dtype).transpose(-2, -1)  # (B, H, Lq, npos): q_i . e[n]
        low = p.detach().floor()  # (B, H, Lq, Lk)
        w = p - low  # the fraction past floor(p)
        low = low.long()
        high = torch.where(w > 0, low + 1, low)  # ceil(p)
        return per_position.gather(-1, high) * w + per_position.gather(-1, low) * (1 - w)  # (B, H, Lq, Lk)

    def allocations(self, form, backend, s):
        pair = (s.B, s.H, s.Lq, s.Lk)
        return [Alloc("gates sigmoid(q . k)", pair, s.dtype), Alloc("the causal mask and its negation", (2, s.Lq, s.Lk),
                                                                    torch.bool),
                Alloc("positions p (flipped, summed)", (2, *pair), s.dtype),
                Alloc("q . e for every position", (s.B, s.H, s.Lq, self.num_positions), s.dtype),
                Alloc("floor p", pair, s.dtype), Alloc("floor and ceil of p", (2, *pair), torch.int64),
                Alloc("w = p - floor p, 1 - w and w > 0", (2, *pair), s.dtype), Alloc("w > 0", pair, torch.bool),
                Alloc("the two interpolated reads and their products", (4, *pair), s.dtype)]
