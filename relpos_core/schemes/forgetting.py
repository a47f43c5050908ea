"""Forgetting attention (FoX): a learned forget gate whose cumulative log adds to the logits.

Paper: Zhixuan Lin, Evgenii Nikishin, Xu Owen He and Aaron Courville (2025), "Forgetting
Transformer: Softmax Attention with a Forget Gate", ICLR 2025, arXiv:2503.02130.
Book: "What it costs" (chapters/11_what_it_costs.ipynb) tabulates its paths.

Each token t has, per head, a forget gate f_t = sigmoid(w^T x_t + b) in (0, 1); the logit
of query i and key j gains D_ij = sum_{l = j+1}^{i} log f_l (eq. 3-4 of the paper), added
to q_i . k_j / sqrt(d): each token between the key and the query (the query included)
multiplies the key's weight by its gate, a data-dependent ALiBi (a gate fixed at
exp(-m) gives ALiBi's slope m). The paper uses no other position signal; decoder only.

**Gate input: the key, not the layer input.** The paper's gate reads the layer input
x_t (D numbers); the library's pieces receive q and k, not x, so here the gate reads the
head's key k_t = W_k x_t: f_t = sigmoid(w_h . k_t + b_h), ``w`` (H, d). That is the
paper's gate with w_f restricted to W_k's row space of the head (w_f = W_k^T w_h): a
sub-family, not the same parameterisation, and with this choice the protocol needs no
change (a KV cache keeps the keys, so the gates of every kept token are known at each
step; the cumulative sums are recomputed from them, O(K) per head and step, beside the
O(K d) of q . k). The piece is ``relpos_core.pieces.forget.ForgetGate``: naive eager,
SDPA and FlexAttention compute it (flex reads the cumulative sums at the key and at the
query, O(L) tables captured by its score_mod); gather and skew refuse it (no per-offset
table).

Sign convention: none (the bias is a sum over the tokens in between, not a function of
the offset; the causal mask is the library's, key_pos <= query_pos).

**Why not PaTH** (Yang et al. 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations", arXiv:2505.16381). PaTH replaces RoPE's rotation by a
data-dependent one: logit_ij = q_i^T (prod_{l = j+1}^{i} H_l) k_j with H_l = I - beta_l
w_l w_l^T, a Householder-like matrix made from token l. It fits none of the protocol's
kinds: (1) it is no additive logit term (no ``logits``: the transform sits between q and
k); (2) it is no rotation of q and k by their own positions (the ``rotary`` stage): the
matrix applied to k_j depends on every token from j + 1 to i, so it differs for each
(query, key) pair and cannot be applied once to k before the kernel; (3) it has no
per-offset row and no score_mod (a score_mod sees one pair's score, not q, k and the
product of i - j matrices); (4) a KV cache cannot keep transformed keys once: every new token t
multiplies every earlier key by its H_t (k_j <- H_t k_j: a cache that rewrites all its
keys each step), or each step forms products of up to L matrices. Its efficient form is a blockwise UT-transform algorithm of its
own (the paper's FlashAttention-style kernel). Expressing it would take a new kernel
path, not a piece, so it is left out.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_tensor
from relpos_core.pieces.forget import ForgetGate
from relpos_core.schemes.declaration import PositionModule, Scheme
from relpos_core.terms import PositionTerm, example_tensor

__all__ = ["position_term", "forgetting_bias", "ForgettingOptions", "ForgettingPosition", "SCHEME"]


def position_term(weight: torch.Tensor, bias: torch.Tensor) -> PositionTerm:
    """Forgetting attention's term for ``rp.attend`` (causal calls only): gate weights (H, d), biases (H,)."""
    check_tensor("weight", weight, ndim=2, floating=True)
    check_tensor("bias", bias, ndim=1, floating=True, shape={0: weight.shape[0]})
    return PositionTerm(scheme="forgetting", convention="none", pieces=(ForgetGate(weight, bias),),
                        causal_only=True)


def forgetting_bias(k: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, query_len: int) -> torch.Tensor:
    """D_ij = sum_{l = j+1}^{i} log f_l for queries that are the last ``query_len`` of the keys k (B, H, Lk, d):
    (B, H, Lq, Lk), meaningful where key j <= query i (the causal mask hides the rest)."""
    from relpos_core.positions import resolve_positions

    check_tensor("k", k, ndim=4, floating=True)
    pos = resolve_positions(query_len, k.shape[2], device=k.device)
    return ForgetGate(weight, bias).logits("naive", None, k, pos, k.dtype)


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """Random gate weights (H, d) and biases (H,) around ``options.bias_init``."""
    weight = example_tensor(num_heads, head_dim, device=device, dtype=dtype, generator=generator, scale=0.3)
    bias = example_tensor(num_heads, device=device, dtype=dtype, generator=generator, scale=0.5)
    return position_term(weight, bias if bias.is_meta else bias + options.bias_init)


@dataclass(frozen=True)
class ForgettingOptions:
    """``bias_init``: the gates' bias b at initialisation (sigmoid(b) the starting gate: 0 gives 1/2, a
    strong decay; larger keeps more of the past). The library's choice of default, not the paper's."""

    bias_init: float = 2.0

    def __post_init__(self):
        b = self.bias_init
        if isinstance(b, bool) or not isinstance(b, numbers.Real) or not abs(float(b)) < float("inf"):
            raise ValueError(f"bias_init must be a finite real number, got {b!r}")


class ForgettingPosition(PositionModule):
    """Per layer, gate weights (H, d) reading each head's key and a bias per head."""

    def __init__(self, shape, options: ForgettingOptions):
        super().__init__(shape, options)
        self.weight = nn.Parameter(torch.zeros(shape.num_layers, shape.num_heads, shape.head_dim))
        self.bias = nn.Parameter(torch.full((shape.num_layers, shape.num_heads), float(options.bias_init)))

    @torch.no_grad()
    def init_parameters(self, generator):
        self.weight.copy_(torch.randn(self.weight.shape, generator=generator) * 0.02)
        self.bias.fill_(float(self.options.bias_init))

    def term(self, layer, attention):
        return position_term(self.weight[layer], self.bias[layer])


SCHEME = Scheme(
    name="forgetting", color="#de77ae", short="FoX", display="Forgetting attention (FoX)", paper="Lin et al. 2025",
    cite="lin2025forgetting", chapter=None, convention="none",
    formula=r"\textstyle\sum_{l=j+1}^{i} \log \sigma(w^\top k_l + b)",
    code="relpos_core.schemes.forgetting.forgetting_bias", injects="scalar on the logit",
    summary="a learned forget gate per token; its cumulative log is added to the logits",
    example=example, options=ForgettingOptions, module=ForgettingPosition, order=98, causal_only=True,
)
