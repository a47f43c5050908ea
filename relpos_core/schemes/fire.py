"""FIRE: functional interpolation for relative positions, a learned function of the normalised distance.

Paper: Shanda Li, Chong You, Guru Guruganesh, Joshua Ainslie, Santiago Ontanon, Manzil
Zaheer, Sumit Sanghai, Yiming Yang, Sanjiv Kumar and Srinadh Bhojanapalli (2024),
"Functional Interpolation for Relative Positions Improves Long Context Transformers",
ICLR 2024 (arXiv:2310.04418). Book: the experiments
(chapters/14_experiments_length.ipynb).

Sign convention: ``query_minus_key``. The bias of query i and key j is

    b_ij = f_theta( psi(|i - j|) / psi(max(L, i)) ),   psi(x) = log(c x + 1),

with f_theta a small MLP (1 -> width -> H, ReLU) giving one value per head, c > 0 a learned
scale of the log transform and L a learned threshold (``|L_multiplier| * init_L``). The
normaliser psi(max(L, i)) depends on the *query's position*, not only on the offset
("progressive interpolation": every distance a query can see maps into [0, 1]), so the
bias is not a function of i - j alone: there is no per-offset table, and only the naive
form (one value per pair) computes it, on every backend (``terms.PairScalar``). The
paper's setting is a causal decoder (i >= j); the absolute value keeps the formula
defined for keys after the query, which a causal mask removes anyway.

Constants as in the paper's reference code: MLP width 32, c initialised at 0.1,
init_L = 512, eps = 1e-6 added to the normaliser. One FIRE module per attention layer here.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from relpos_core._validate import check_int, check_tensor
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme
from relpos_core.terms import PairScalar, PositionTerm, example_tensor

__all__ = ["fire_bias", "position_term", "FireOptions", "FirePosition", "SCHEME", "EPS"]

EPS = 1e-6


def _fire(params: dict):
    """fn(query_positions (Lq,), key_positions (Lk,), dtype) -> (H, Lq, Lk)."""
    w1, b1, w2, b2, c, L = (params[k] for k in ("w1", "b1", "w2", "b2", "c", "L"))

    def fn(query_positions: torch.Tensor, key_positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # |i - j| in int64 (exact), the log transform and the MLP in float32 at least (float64 for float64):
        # a bf16 position 1000 cannot tell 998 from 1000, and float16 overflows past 65504. The bias is
        # reduced there and cast to ``dtype`` last, clamped to its finite range.
        work = torch.promote_types(dtype, torch.float32)
        distance = (query_positions.to(torch.int64)[:, None] - key_positions.to(torch.int64)[None, :]).abs_()
        qp = query_positions.to(work)[:, None]  # (Lq, 1)
        cc = c.to(work).abs()
        normaliser = torch.log1p(cc * torch.maximum(qp, L.to(work).abs())) + EPS  # (Lq, 1) psi(max(L, i))
        x = torch.log1p(cc * distance.to(work)).div_(normaliser)  # (Lq, Lk) in [0, 1] for keys at or before the query
        del distance  # freed before the hidden layer, the peak
        hidden = (x[..., None] * w1.to(work)).add_(b1.to(work)).relu_()  # (Lq, Lk, width), one tensor
        out = hidden @ w2.to(work).t() + b2.to(work)  # (Lq, Lk, H)
        if work != dtype:
            big = torch.finfo(dtype).max
            out = out.clamp(-big, big)  # a key after the query with threshold 0 can reach 1e6: finite, not inf
        return out.permute(2, 0, 1).to(dtype)  # (H, Lq, Lk)

    return fn


def _check_params(params: dict) -> int:
    for name, ndim in (("w1", 1), ("b1", 1), ("w2", 2), ("b2", 1), ("c", 0), ("L", 0)):
        if name not in params:
            raise ValueError(f"params must hold w1 (width,), b1 (width,), w2 (H, width), b2 (H,), c () and L (); "
                             f"{name} is missing")
        check_tensor(f"params[{name!r}]", params[name], ndim=ndim, floating=True)
    width, H = params["w1"].shape[0], params["w2"].shape[0]
    check_tensor("params['b1']", params["b1"], shape={0: width})
    check_tensor("params['w2']", params["w2"], shape={1: width})
    check_tensor("params['b2']", params["b2"], shape={0: H})
    return H


def fire_bias(params: dict, query_positions: torch.Tensor, key_positions: torch.Tensor, *,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """FIRE's bias for every pair: (H, Lq, Lk). ``params``: the MLP (w1, b1, w2, b2), c and L (module docstring)."""
    _check_params(params)
    check_tensor("query_positions", query_positions, ndim=1, floating=False)
    check_tensor("key_positions", key_positions, ndim=1, floating=False)
    return _fire(params)(query_positions, key_positions, dtype)


def position_term(params: dict) -> PositionTerm:
    """FIRE's position term for ``rp.attend``: a learned function of both positions, added to the logit.

    Convention ``query_minus_key``. Naive form only (the bias depends on the query's
    position through the normaliser); gradients reach every parameter.
    """
    H = _check_params(params)
    width = params["w1"].shape[0]

    piece = PairScalar(_fire(params), tuple(params[k] for k in ("w1", "b1", "w2", "b2", "c", "L")), H,
                       name="FIRE",
                       working=3 + width + 2 * H,  # positions, distances, the hidden layer (built in place), the result
                       pair_work=("the MLP at every kept key's normalised distance",
                                  width + width * H))  # its MLP, 1 -> width -> H, at each pair
    return PositionTerm(scheme="fire", convention="query_minus_key", scalars=(piece,))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """A FIRE with random MLP weights, c = 0.1 and L = 512 (the paper's initial values)."""
    w = options.mlp_width

    def rnd(*shape, scale=0.5):
        return example_tensor(*shape, device=device, dtype=dtype, generator=generator, scale=scale)

    params = dict(w1=rnd(w), b1=rnd(w), w2=rnd(num_heads, w), b2=rnd(num_heads),
                  c=torch.full((), options.init_c, device=device, dtype=dtype),
                  L=torch.full((), options.init_L, device=device, dtype=dtype))
    return position_term(params)


@dataclass(frozen=True)
class FireOptions:
    """``mlp_width`` (32 in the paper), ``init_c`` (0.1), ``init_L`` (512: the threshold below which
    the normaliser stays fixed, so short prefixes are not stretched)."""

    mlp_width: int = 32
    init_c: float = 0.1
    init_L: float = 512.0

    def __post_init__(self):
        check_int("mlp_width", self.mlp_width, min_value=1)
        for name in ("init_c", "init_L"):
            if not float(getattr(self, name)) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")


class FirePosition(PositionModule):
    """Per layer: the MLP (1 -> width -> H), c, and the threshold's multiplier (L = |m| init_L)."""

    def __init__(self, shape, options: FireOptions):
        super().__init__(shape, options)
        n, H, w = shape.num_layers, shape.num_heads, options.mlp_width
        self.w1 = nn.Parameter(torch.zeros(n, w))
        self.b1 = nn.Parameter(torch.zeros(n, w))
        self.w2 = nn.Parameter(torch.zeros(n, H, w))
        self.b2 = nn.Parameter(torch.zeros(n, H))
        self.c = nn.Parameter(torch.full((n,), options.init_c))
        self.L_multiplier = nn.Parameter(torch.ones(n))

    def term(self, layer, attention):
        params = dict(w1=self.w1[layer], b1=self.b1[layer], w2=self.w2[layer], b2=self.b2[layer], c=self.c[layer],
                      L=self.L_multiplier[layer] * self.options.init_L)
        return position_term(params)

    @torch.no_grad()
    def init_parameters(self, generator):
        w = self.options.mlp_width
        self.w1.copy_(torch.rand(self.w1.shape, generator=generator) * 2 - 1)  # fan-in 1, as nn.Linear(1, w)
        self.b1.copy_(torch.rand(self.b1.shape, generator=generator) * 2 - 1)
        bound = w ** -0.5
        self.w2.copy_((torch.rand(self.w2.shape, generator=generator) * 2 - 1) * bound)  # as nn.Linear(w, H)
        self.b2.copy_((torch.rand(self.b2.shape, generator=generator) * 2 - 1) * bound)
        self.c.fill_(self.options.init_c)
        self.L_multiplier.fill_(1.0)


SCHEME = Scheme(
    name="fire", color="#bb3399", display="FIRE", paper="Li et al. 2024", cite="li2024fire", chapter=None,
    convention="query_minus_key",
    formula=r"f_\theta\big(\psi(\lvert i - j \rvert) / \psi(\max(L, i))\big)",
    code="relpos_core.schemes.fire.fire_bias", injects="scalar on the logit",
    summary="a learned MLP of the log distance, normalised by the query's position",
    example=example, options=FireOptions, module=FirePosition, order=85,
    lab=Lab(("retrieval_gap",), language_model=()),
)
