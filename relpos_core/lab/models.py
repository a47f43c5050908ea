"""The lab's tiny transformer family: the position scheme is the only difference.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb). Schemes and papers:
absolute sinusoidal (Vaswani et al., 2017) and learned positions, Shaw et al. (2018) with
key and value or key-only tables, T5 buckets (Raffel et al., 2020), DeBERTa's c2p + p2c
(He et al., 2021) with and without its Enhanced Mask Decoder, ALiBi (Press et al., 2022)
and RoPE (Su et al., 2021). Every position computation goes through ``lab/attention.py``.

One model: token embedding (plus an absolute table for the two absolute schemes), then
``num_layers`` pre-LayerNorm blocks (multi-head attention, GELU MLP), a final LayerNorm
and a linear head that gives logits at every position. ``causal`` masks keys after the
query (a decoder); otherwise attention is bidirectional (an encoder).

Learned absolute positions: the table has ``max_positions`` rows (enough for 8x the
training length) but training only ever shows rows ``0 .. train_length - 1``. The other
rows keep their initial values (the optimiser is Adam without weight decay, so a row
that gets no gradient does not move); ``LabModel.untrained_position_rows`` names them.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor

from . import attention as adapter

__all__ = ["SCHEMES", "LabModelConfig", "LabBlock", "LabModel", "build_model"]

SCHEMES = (
    "none", "sinusoidal", "learned", "shaw_kv", "shaw_k", "t5", "deberta", "deberta_emd", "alibi", "rope",
)
SHAW_INITS = ("random", "sinusoidal")
_KERNEL = {  # scheme -> the adapter function its attention uses
    "none": "plain", "sinusoidal": "plain", "learned": "plain", "shaw_kv": "shaw", "shaw_k": "shaw",
    "t5": "t5", "deberta": "deberta", "deberta_emd": "deberta", "alibi": "alibi", "rope": "rope",
}


@dataclass
class LabModelConfig:
    """One member of the family. Only ``scheme`` (and its own knobs) differ between members."""

    scheme: str
    vocab_size: int
    num_classes: int
    train_length: int
    max_positions: int
    causal: bool = False
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    d_ff: int = 128
    shaw_k: int = 8  # Shaw clip k: table rows for offsets -k .. k
    shaw_init: str = "random"  # "random" (N(0, 0.02), as ShawSelfAttention) or "sinusoidal"
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    deberta_span: int = 16  # DeBERTa S: offsets clipped to [-S, S - 1], table of 2S rows

    def __post_init__(self):
        check_choice("scheme", self.scheme, SCHEMES)
        for name in ("vocab_size", "num_classes", "train_length", "max_positions", "d_model", "num_layers",
                     "num_heads", "d_ff", "shaw_k", "t5_num_buckets", "t5_max_distance", "deberta_span"):
            check_positive_int(name, getattr(self, name))
        check_choice("causal", self.causal, (False, True))
        check_choice("shaw_init", self.shaw_init, SHAW_INITS)
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads must divide d_model, got num_heads={self.num_heads}, d_model={self.d_model}")
        if self.head_dim % 2:
            raise ValueError(f"d_model / num_heads must be even (RoPE rotates pairs), got {self.head_dim}")
        if self.max_positions < self.train_length:
            raise ValueError(
                f"max_positions must be >= train_length = {self.train_length}, got {self.max_positions}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def to_dict(self) -> dict:
        return asdict(self)


def _shaw_table(rows: int, head_dim: int, init: str) -> nn.Parameter:
    """A Shaw table (2k + 1, d): N(0, 0.02) as ``ShawSelfAttention``, or the sinusoidal table of
    positions 0 .. 2k (row r + k for offset r) rescaled to the same expected row norm."""
    random = torch.randn(rows, head_dim) * 0.02  # (2k + 1, d)
    if init == "random":
        return nn.Parameter(random)
    table = adapter.sinusoidal_table(rows, head_dim)  # (2k + 1, d), rows of norm sqrt(d / 2)
    return nn.Parameter(table * (0.02 * math.sqrt(2.0)))  # row norm 0.02 sqrt(d), like the random rows


class LabBlock(nn.Module):
    """Pre-LN block: x + attn(LN(x)), then + MLP(LN(.)).

    ``forward(hidden (B, L, D), attention_mask=None, rel_embeddings=None, *, query_states=None,
    relative_pos=None)`` has the signature of DeBERTa's layer, so ``EnhancedMaskDecoder`` can
    drive it: with ``query_states`` the queries (and the residual) come from them and the
    keys and values from ``hidden``. ``rel_embeddings`` is the model's shared position tensor
    (T5's bucket table or DeBERTa's relative table), None for the other schemes.
    """

    def __init__(self, config: LabModelConfig):
        super().__init__()
        self.config = config
        D = config.d_model
        self.ln_attn = nn.LayerNorm(D)
        self.q_proj = nn.Linear(D, D)
        self.k_proj = nn.Linear(D, D)
        self.v_proj = nn.Linear(D, D)
        self.o_proj = nn.Linear(D, D)
        self.ln_mlp = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, D))
        self.attend = adapter.ATTENTION[_KERNEL[config.scheme]]
        if config.scheme in ("shaw_kv", "shaw_k"):
            rows = 2 * config.shaw_k + 1
            self.rel_key = _shaw_table(rows, config.head_dim, config.shaw_init)
            with_value = config.scheme == "shaw_kv"
            self.rel_value = _shaw_table(rows, config.head_dim, config.shaw_init) if with_value else None

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (..., L, D) -> (..., H, L, d)
        x = x.view(*x.shape[:-1], self.config.num_heads, self.config.head_dim)  # (..., L, H, d)
        return x.transpose(-2, -3)  # (..., H, L, d)

    def _tables(self, shared: torch.Tensor | None) -> dict:
        cfg = self.config
        if cfg.scheme in ("shaw_kv", "shaw_k"):
            return {"rel_key": self.rel_key, "rel_value": self.rel_value, "k": cfg.shaw_k}
        if cfg.scheme == "t5":
            return {"table": shared, "max_distance": cfg.t5_max_distance}
        if cfg.scheme in ("deberta", "deberta_emd"):
            return {
                "pos_key": self._heads(self.k_proj(shared)),  # (H, 2S, d)
                "pos_query": self._heads(self.q_proj(shared)),  # (H, 2S, d)
                "span": cfg.deberta_span,
            }
        return {}

    def forward(self, hidden_states, attention_mask=None, rel_embeddings=None, *, query_states=None,
                relative_pos=None):
        if attention_mask is not None or relative_pos is not None:
            raise ValueError("attention_mask and relative_pos must be None: the lab's sequences have no padding")
        residual = hidden_states if query_states is None else query_states  # (B, L, D)
        kv_in = self.ln_attn(hidden_states)  # (B, L, D)
        q_in = kv_in if query_states is None else self.ln_attn(query_states)  # (B, L, D)
        q = self._heads(self.q_proj(q_in))  # (B, H, L, d)
        k = self._heads(self.k_proj(kv_in))  # (B, H, L, d)
        v = self._heads(self.v_proj(kv_in))  # (B, H, L, d)
        y = self.attend(q, k, v, self._tables(rel_embeddings), causal=self.config.causal)  # (B, H, L, d)
        y = y.transpose(1, 2).reshape(residual.shape)  # (B, L, D)
        x = residual + self.o_proj(y)  # (B, L, D)
        return x + self.mlp(self.ln_mlp(x))  # (B, L, D)


class LabModel(nn.Module):
    """tokens (B, L) int64 -> logits (B, L, num_classes). See the module docstring."""

    def __init__(self, config: LabModelConfig):
        super().__init__()
        self.config = config
        D = config.d_model
        self.token_embedding = nn.Embedding(config.vocab_size, D)  # N(0, 1)
        if config.scheme == "sinusoidal":
            self.register_buffer("sinusoidal", adapter.sinusoidal_table(config.max_positions, D), persistent=False)
        if config.scheme == "learned":
            self.position_embedding = adapter.learned_position_table(config.max_positions, D)  # N(0, 0.02)
        if config.scheme == "t5":  # one (num_buckets, H) table, shared by every layer as in T5
            self.t5_table = nn.Parameter(torch.randn(config.t5_num_buckets, config.num_heads) * D ** -0.5)
        if config.scheme in ("deberta", "deberta_emd"):
            self.deberta_config = adapter.deberta_config(D, config.num_heads, config.deberta_span,
                                                         config.max_positions)
            self.relative_table = adapter.deberta_relative_table(self.deberta_config)  # shared (2S, D)
        self.blocks = nn.ModuleList(LabBlock(config) for _ in range(config.num_layers))
        if config.scheme == "deberta_emd":  # absolute positions added at the output, last block reused
            self.emd = adapter.enhanced_mask_decoder(self.deberta_config, self.blocks[-1])
        self.final_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, config.num_classes)

    @property
    def untrained_position_rows(self) -> range:
        """Rows of the learned absolute table that training at ``train_length`` never reaches."""
        if self.config.scheme != "learned":
            return range(0)
        return range(self.config.train_length, self.config.max_positions)

    def _shared_position(self) -> torch.Tensor | None:
        if self.config.scheme == "t5":
            return self.t5_table  # (num_buckets, H)
        if self.config.scheme in ("deberta", "deberta_emd"):
            return self.relative_table()  # (2S, D)
        return None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cfg = self.config
        check_tensor("tokens", tokens, ndim=2, floating=False)
        B, L = tokens.shape
        if L > cfg.max_positions:
            raise ValueError(f"tokens must have at most max_positions = {cfg.max_positions} columns, got {L}")
        x = self.token_embedding(tokens)  # (B, L, D)
        positions = torch.arange(L, device=tokens.device)  # (L,)
        if cfg.scheme == "sinusoidal":
            x = x + self.sinusoidal[:L]  # (B, L, D)
        if cfg.scheme == "learned":
            x = x + self.position_embedding(positions)  # (B, L, D); rows >= train_length never trained
        shared = self._shared_position()
        for block in self.blocks:
            x = block(x, None, shared)  # (B, L, D)
        if cfg.scheme == "deberta_emd":
            x = self.emd(x, None, shared, position_ids=positions[None])  # (B, L, D)
        return self.head(self.final_norm(x))  # (B, L, num_classes)


def build_model(config: LabModelConfig, *, seed: int) -> LabModel:
    """The model for ``config`` with parameters drawn from ``torch.manual_seed(seed)``."""
    if not isinstance(config, LabModelConfig):
        raise ValueError(f"config must be a LabModelConfig, got {type(config).__name__}")
    seed = check_int("seed", seed, min_value=0, max_value=2**63 - 1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LabModel(config)
