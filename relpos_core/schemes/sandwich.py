"""Sandwich: the inner product of two sinusoidal position embeddings as a bias, one scale per head.

Paper: Ta-Chung Chi, Ting-Han Fan, Alexander I. Rudnicky and Peter J. Ramadge (2023),
"Dissecting Transformer Length Extrapolation via the Lens of Receptive Field Analysis",
ACL 2023. Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb), whose ALiBi it
explains; "What it costs" (chapters/11_what_it_costs.ipynb) tabulates its paths.

With sinusoidal embeddings p of ``dims`` dimensions (frequencies w_k = 10000^(-2k / dims),
k = 1 .. dims / 2), p_i . p_j = sum_k cos((i - j) w_k): a function of the offset alone,
largest (dims / 2) at distance 0 and decaying with it. Sandwich shifts it to 0 at distance
0 and scales head h (1 .. H) by H / (8 h), as ALiBi's slopes do:

    b_h(i - j) = H / (8 h) (sum_k cos((i - j) w_k) - dims / 2)

No learned parameter. Sign convention: ``query_minus_key`` (the bias is even in i - j).
It is a ``ScalarFunction`` of the offset: every form that handles scalar terms computes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core._validate import check_int
from relpos_core.schemes.declaration import PositionModule, Scheme
from relpos_core.terms import PositionTerm, ScalarFunction

__all__ = ["sandwich_bias", "position_term", "SandwichOptions", "SandwichPosition", "SCHEME"]


def _bias(num_heads: int, dims: int):
    """fn(offsets, dtype) -> (H, *offsets.shape): Sandwich's bias of each offset."""

    def fn(offsets: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        distance = offsets.to(dtype)  # the bias is even: the sign of the offset does not matter
        inner = torch.zeros_like(distance)
        for k in range(1, dims // 2 + 1):  # one frequency at a time: no (n, dims / 2) tensor
            inner += torch.cos(distance * 10000.0 ** (-2 * k / dims))
        heads = torch.arange(1, num_heads + 1, device=offsets.device, dtype=dtype)  # (H,)
        scale = (num_heads / (8 * heads)).reshape((-1,) + (1,) * offsets.dim())  # (H, 1, ...)
        return scale * (inner - dims / 2)  # (H, ...)

    return fn


def sandwich_bias(num_heads: int, offsets: torch.Tensor, *, dims: int = 128,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Sandwich's bias of ``offsets`` (any shape, integers): (H, *offsets.shape)."""
    check_int("num_heads", num_heads, min_value=1)
    check_int("dims", dims, min_value=2)
    return _bias(num_heads, dims)(offsets, dtype)


def position_term(num_heads: int, *, dims: int = 128) -> PositionTerm:
    """Sandwich's term for ``rp.attend``: a fixed bias per head and offset, added to the scaled logit."""
    check_int("num_heads", num_heads, min_value=1)
    check_int("dims", dims, min_value=2)
    piece = ScalarFunction(_bias(num_heads, dims), (), num_heads, name="Sandwich bias",
                           working=4)  # the distances, the sum, one cosine and the result
    return PositionTerm(scheme="sandwich", convention="query_minus_key", scalars=(piece,), notes=dict(dims=dims))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """The fixed term (nothing random: Sandwich learns nothing)."""
    return position_term(num_heads, dims=options.dims)


@dataclass(frozen=True)
class SandwichOptions:
    """``dims``: the dimension of the sinusoidal embeddings whose inner product is the bias."""

    dims: int = 128

    def __post_init__(self):
        check_int("dims", self.dims, min_value=2)


class SandwichPosition(PositionModule):
    """No parameters: every layer gets the same fixed bias."""

    def term(self, layer, attention):
        return position_term(self.shape.num_heads, dims=self.options.dims)


SCHEME = Scheme(
    name="sandwich", color="#885577", short="Sandwich", display="Sandwich", paper="Chi et al. 2023",
    cite="chi2023sandwich", chapter=None, convention="query_minus_key",
    formula=r"\tfrac{H}{8h}\big(\textstyle\sum_{k} \cos((i - j)\,\omega_k) - \tfrac{d'}{2}\big)",
    code="relpos_core.schemes.sandwich.sandwich_bias", injects="scalar on the logit",
    summary="the inner product of sinusoidal embeddings, shifted and scaled per head",
    example=example, options=SandwichOptions, module=SandwichPosition, order=82,
)
