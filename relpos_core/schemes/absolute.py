"""Absolute position embeddings: the baseline every relative scheme is measured against.

Paper: Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser and Polosukhin (2017),
"Attention Is All You Need", NeurIPS 2017 (sinusoidal table); learned tables as in BERT/GPT.
Book: "Why relative positions" (chapters/01_why_relative_positions.ipynb).

Sign convention: ``none``. A position vector is added to each token before the projections;
no offset i - j or j - i appears anywhere, so the logit mixes content and position through
cross terms and the attention pattern changes when every position is shifted by the same
constant (``AbsoluteSelfAttention`` exists to show that contrast).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme, Variant

__all__ = [
    "sinusoidal_position_embeddings",
    "LearnedPositionEmbedding",
    "AbsoluteAttentionConfig",
    "AbsoluteSelfAttention",
    "AbsoluteOptions",
    "AbsolutePosition",
    "SCHEME",
]

INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)


def sinusoidal_position_embeddings(num_positions: int, dim: int) -> torch.Tensor:
    """(num_positions, dim) float32 table: PE[p, 2k] = sin(p / 10000^(2k/dim)), PE[p, 2k+1] = cos(same).

    Computed in float64, then rounded once. Convention ``none`` (absolute positions 0..N-1).
    """
    num_positions = check_positive_int("num_positions", num_positions)
    dim = check_positive_int("dim", dim)
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (N, 1)
    two_k = torch.arange(0, dim, 2, dtype=torch.float64)  # (ceil(dim/2),)
    angle = pos / 10000.0 ** (two_k / dim)  # (N, ceil(dim/2))
    pe = torch.empty(num_positions, dim, dtype=torch.float64)  # (N, dim)
    pe[:, 0::2] = angle.sin()
    pe[:, 1::2] = angle[:, : dim // 2].cos()
    return pe.float()


def _check_positions(positions, num_positions: int) -> torch.Tensor:
    check_tensor("positions", positions, dtype=INT_DTYPES)
    if positions.numel() and (positions.min() < 0 or positions.max() >= num_positions):
        raise ValueError(
            f"positions must lie in [0, {num_positions - 1}] (the table has {num_positions} rows), "
            f"got range [{int(positions.min())}, {int(positions.max())}]"
        )
    return positions


class LearnedPositionEmbedding(nn.Module):
    """A learned (num_positions, dim) table (BERT/GPT style), init N(0, 0.02). Convention ``none``."""

    def __init__(self, num_positions: int, dim: int):
        super().__init__()
        self.num_positions = check_positive_int("num_positions", num_positions)
        self.weight = nn.Parameter(torch.randn(num_positions, check_positive_int("dim", dim)) * 0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """positions (...) integers in [0, num_positions) -> (..., dim)."""
        return F.embedding(_check_positions(positions, self.num_positions), self.weight)


@dataclass
class AbsoluteAttentionConfig:
    d_model: int = 64
    num_heads: int = 4
    max_positions: int = 512
    position_embedding: str = "sinusoidal"  # or "learned"
    causal: bool = False

    def __post_init__(self):
        check_positive_int("d_model", self.d_model)
        check_positive_int("num_heads", self.num_heads)
        check_positive_int("max_positions", self.max_positions)
        check_choice("position_embedding", self.position_embedding, ("sinusoidal", "learned"))
        check_choice("causal", self.causal, (True, False))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model must be divisible by num_heads, got d_model={self.d_model}, num_heads={self.num_heads}"
            )


class AbsoluteSelfAttention(nn.Module):
    """Add a position vector to each token, then plain scaled dot-product attention.

    ``forward(x (B, L, d_model), positions (L,) | None)`` returns
    ``(output (B, L, d_model), attention (B, H, L, L))``. Convention ``none``: shifting every
    position by the same constant changes the attention, unlike any relative scheme.
    """

    def __init__(self, config: AbsoluteAttentionConfig):
        super().__init__()
        self.config = config
        if config.position_embedding == "learned":
            self.wpe = LearnedPositionEmbedding(config.max_positions, config.d_model)
        else:
            self.register_buffer("pe", sinusoidal_position_embeddings(config.max_positions, config.d_model),
                                 persistent=False)
        self.q = nn.Linear(config.d_model, config.d_model)
        self.k = nn.Linear(config.d_model, config.d_model)
        self.v = nn.Linear(config.d_model, config.d_model)
        self.o = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None):
        cfg = self.config
        check_tensor("x", x, ndim=3, floating=True, shape={-1: cfg.d_model})
        B, L, D = x.shape
        if positions is None:
            positions = torch.arange(L, device=x.device)  # (L,)
        check_tensor("positions", positions, ndim=1, shape={0: L})
        if cfg.position_embedding == "learned":
            p = self.wpe(positions)  # (L, D)
        else:
            p = self.pe[_check_positions(positions, cfg.max_positions)]  # (L, D)
        h = x + p.to(x.dtype)  # (B, L, D): position enters the token itself
        H, dh = cfg.num_heads, D // cfg.num_heads
        q = self.q(h).view(B, L, H, dh).transpose(1, 2)  # (B, H, L, dh)
        k = self.k(h).view(B, L, H, dh).transpose(1, 2)  # (B, H, L, dh)
        v = self.v(h).view(B, L, H, dh).transpose(1, 2)  # (B, H, L, dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, H, L, L)
        if cfg.causal:
            future = torch.ones(L, L, dtype=torch.bool, device=x.device).triu(1)  # (L, L) key after query
            scores = scores.masked_fill(future, float("-inf"))
        attn = scores.softmax(dim=-1)  # (B, H, L, L)
        out = (attn @ v).transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.o(out), attn


# ----------------------------------------------------------------------------- in a model


@dataclass(frozen=True)
class AbsoluteOptions:
    """``embedding``: "sinusoidal" (Vaswani et al.) or "learned" (BERT / GPT: one trained row per position)."""

    embedding: str = "sinusoidal"

    def __post_init__(self):
        check_choice("embedding", self.embedding, ("sinusoidal", "learned"))


class AbsolutePosition(PositionModule):
    """A (max_positions, d_model) table added to the token embeddings; no attention term.

    A learned table's rows beyond the training length never get a gradient: with Adam and
    no weight decay they keep their initial values (chapters/14_experiments_length.ipynb looks at that).
    """

    def __init__(self, shape, options: AbsoluteOptions):
        super().__init__(shape, options)
        if options.embedding == "learned":
            self.weight = nn.Parameter(torch.zeros(shape.max_positions, shape.d_model))  # (N, D)
        else:
            self.register_buffer("weight", sinusoidal_position_embeddings(shape.max_positions, shape.d_model),
                                 persistent=False)  # (N, D)

    def embed(self, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        rows = _check_positions(positions, self.shape.max_positions)
        return h + self.weight[rows].to(h.dtype)  # (B, n, D): the position enters the token itself

    def untrained_rows(self, train_length: int) -> range:
        return range(train_length, self.shape.max_positions) if self.options.embedding == "learned" else range(0)


def example(num_heads, head_dim, options, *, device=None, dtype=None, generator=None):
    """No attention term: the position is in the token embeddings."""
    return None


SCHEME = Scheme(
    name="absolute", color="#999933", short="sinusoidal", display="sinusoidal absolute", paper="Vaswani et al. 2017", cite="vaswani2017attention",
    chapter="01_why_relative_positions", convention="none", formula=r"x_i + p_i",
    code="relpos_core.schemes.absolute.sinusoidal_position_embeddings", injects="input", positions_in_tokens=True,
    summary="a fixed sinusoid added to each token",
    caches="keys and values with each token's position inside them",
    example=example, options=AbsoluteOptions, module=AbsolutePosition, order=10,
    variants=(Variant("learned", "learned absolute", dict(embedding="learned"),
                      "a trained vector per position added to each token (BERT, GPT-2)", model_only=True,
                      short="learned", color="#9966bb",
                      lab=Lab(("retrieval_gap",), book=True, language_model=("book", "tiny"))),),
    lab=Lab(("retrieval_gap",)), roles=("absolute positions",),
)
