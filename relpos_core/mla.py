"""Multi-head latent attention (MLA) with DeepSeek-V2's decoupled RoPE, and its cache of latents.

Paper: DeepSeek-AI (2024), "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts
Language Model", arXiv:2405.04434, section 2.1. Book: "The KV cache at the scale
of real models" (chapters/09_kv_cache_at_scale.ipynb).

Per token, MLA caches one latent ``c`` of ``kv_lora_rank`` = d_c numbers (shared by all heads)
and one rotated key ``k^R`` of ``qk_rope_head_dim`` = d_R numbers (also shared), instead of
2 H d_h numbers of keys and values:

    c_j   = RMSNorm(W_DKV x_j)                       (d_c,)   cached
    k^R_j = RoPE_j(W_KR x_j)                         (d_R,)   cached, rotated once
    k^C_jh = W_UK,h c_j,   v_jh = W_UV,h c_j         (d_h,), (d_v,) per head, never cached
    q_ih  = [q^C_ih ; RoPE_i(q^R_ih)]                (d_h + d_R,)
    score_ihj = (q^C_ih . k^C_jh + RoPE_i(q^R_ih) . k^R_j) * scale

Why the rotary part is decoupled: without RoPE, ``q^C . (W_UK c_j) = (W_UK^T q^C) . c_j``,
so W_UK is absorbed into the query once per step and attention runs on the latents
(``absorbed=True``). RoPE on k^C would put a rotation R_j between W_UK and c_j; the score
``q^T R_i^T R_j W_UK c_j = q^T R_(j-i) W_UK c_j`` then needs a different matrix for every
distance, and nothing can be absorbed. The small shared k^R carries the position instead.

The weights are named as Hugging Face's ``DeepseekV2Attention`` (``q_proj`` or ``q_a_proj``,
``q_a_layernorm``, ``q_b_proj``; ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``,
``o_proj``), so its state dict loads here; RoPE pairs interleaved dimensions (2k, 2k + 1),
as that model does, and a context-extension ``scaling`` (DeepSeek's YaRN) is RoPE's
(``relpos_core.kernels.rope_scaling``); with DeepSeek's ``mscale_all_dim`` the softmax
scale is multiplied by ``yarn_mscale(factor, mscale_all_dim)^2``, as Hugging Face does.
Positions follow the library's rule (queries are the last of the keys); offsets in RoPE are
``key_minus_query``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.cache import weights_identity
from relpos_core.kernels import rope_scaling
from relpos_core.kernels.rotary import rotate
from relpos_core.terms import Rotary

__all__ = ["MLAConfig", "MLAttention", "LatentCache", "RMSNorm", "latent_bytes_per_token"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class MLAConfig:
    """Sizes of an ``MLAttention`` (the paper's symbols in brackets).

    ``d_model``; ``num_heads`` [n_h]; ``kv_lora_rank`` [d_c]: the cached latent;
    ``qk_nope_head_dim`` [d_h]: the content part of q and k per head; ``qk_rope_head_dim``
    [d_R]: the rotary part (per head for q, one shared key); ``v_head_dim``; ``q_lora_rank``
    [d_c']: a low-rank query (None: one projection); ``base`` and ``scaling``: RoPE's.
    """

    d_model: int
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None
    base: float = 10000.0
    scaling: object | None = None
    rms_eps: float = 1e-6

    def __post_init__(self):
        for name in ("d_model", "num_heads", "kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
            check_positive_int(name, getattr(self, name))
        check_int("qk_rope_head_dim", self.qk_rope_head_dim, min_value=2)
        if self.qk_rope_head_dim % 2:
            raise ValueError(f"qk_rope_head_dim must be even (dimensions are rotated in pairs), got "
                             f"{self.qk_rope_head_dim}")
        if self.q_lora_rank is not None:
            check_positive_int("q_lora_rank", self.q_lora_rank)
        if isinstance(self.base, bool) or not isinstance(self.base, (int, float)) or not self.base > 1:
            raise ValueError(f"base must be a real number > 1, got {self.base!r}")
        if not (isinstance(self.rms_eps, float) and 0 < self.rms_eps < 1):
            raise ValueError(f"rms_eps must be a float in (0, 1), got {self.rms_eps!r}")
        scaling = rope_scaling.from_config(self.scaling)
        if scaling is not None and scaling.dynamic:
            raise ValueError(f"scaling must not be dynamic ({scaling.rope_type}): the latent cache keeps the shared "
                             f"rotary key rotated once, which a frequency that follows the sequence would make stale")
        object.__setattr__(self, "scaling", scaling)
        if scaling is not None:
            scaling.inverse_frequencies(self.qk_rope_head_dim, self.base)  # sizes it cannot serve fail here

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """1 / sqrt(d_h + d_R), times yarn_mscale(factor, mscale_all_dim)^2 with DeepSeek's YaRN."""
        scale = self.qk_head_dim ** -0.5
        mscale_all_dim = getattr(self.scaling, "mscale_all_dim", None)
        if mscale_all_dim:
            scale *= rope_scaling.yarn_mscale(self.scaling.factor, mscale_all_dim) ** 2
        return scale


def latent_bytes_per_token(config: MLAConfig, *, num_layers: int = 1, dtype=torch.bfloat16) -> int:
    """What the latent cache holds per token: num_layers (d_c + d_R) elements of ``dtype``."""
    check_positive_int("num_layers", num_layers)
    check_choice("dtype", dtype, _DTYPES)
    return num_layers * (config.kv_lora_rank + config.qk_rope_head_dim) * torch.empty(0, dtype=dtype).element_size()


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 at least (DeepSeek's, Hugging Face's)."""

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        work = torch.promote_types(x.dtype, torch.float32)
        h = x.to(work)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class LatentCache:
    """The latents c (B, K, d_c) and rotated shared keys k^R (B, K, d_R) of every layer.

    Positions are 0 .. K - 1 (no eviction): the next token comes at K. Each layer records
    the MLA layer that first wrote it (its weights: ``relpos_core.cache.weights_identity``);
    ``MLAttention.forward`` refuses a cache layer written by another layer or model, or
    held in another kv_lora_rank, rotary size or dtype, by name.
    """

    def __init__(self, num_layers: int):
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.latents: list[torch.Tensor | None] = [None] * self.num_layers  # (B, K, d_c) each
        self.rope_keys: list[torch.Tensor | None] = [None] * self.num_layers  # (B, K, d_R) each
        self.writers: list[tuple | None] = [None] * self.num_layers  # weights_identity of each layer's writer

    def check(self, layer: int, attention: "MLAttention", batch: int, dtype: torch.dtype) -> None:
        """Refuse a layer of this cache that ``attention`` did not write, or of another shape or dtype."""
        layer = check_int("layer", layer, min_value=0, max_value=self.num_layers - 1)
        held = self.latents[layer]
        if held is None:
            return
        c = attention.config
        if held.shape[-1] != c.kv_lora_rank or self.rope_keys[layer].shape[-1] != c.qk_rope_head_dim:
            raise ValueError(f"cache layer {layer} holds latents of kv_lora_rank {held.shape[-1]} and rotary keys of "
                             f"qk_rope_head_dim {self.rope_keys[layer].shape[-1]}, this layer has {c.kv_lora_rank} "
                             f"and {c.qk_rope_head_dim}: the cache was made for another model")
        if held.dtype != dtype:
            raise ValueError(f"cache layer {layer} holds {held.dtype} latents, this layer computes {dtype}: "
                             f"the cache was made for another dtype")
        if held.shape[0] != batch:
            raise ValueError(f"x must have the cache's batch size {held.shape[0]}, got {batch}")
        if self.writers[layer] != weights_identity(attention):
            raise ValueError(f"cache layer {layer} was written by another MLA layer (other weights, or these "
                             f"weights changed in place since): the cache was made for another model")

    def length(self, layer: int) -> int:
        held = self.latents[check_int("layer", layer, min_value=0, max_value=self.num_layers - 1)]
        return 0 if held is None else held.shape[1]

    def __len__(self) -> int:
        return self.length(0)

    def append(self, layer: int, latent: torch.Tensor, rope_key: torch.Tensor):
        """Append (B, n, d_c) latents and (B, n, d_R) rotated keys; returns the layer's (B, K + n, .) pair."""
        if self.latents[layer] is not None:
            latent = torch.cat([self.latents[layer], latent], dim=1)  # (B, K + n, d_c)
            rope_key = torch.cat([self.rope_keys[layer], rope_key], dim=1)  # (B, K + n, d_R)
        self.latents[layer], self.rope_keys[layer] = latent, rope_key
        return latent, rope_key

    def record_writer(self, layer: int, attention: "MLAttention") -> None:
        if self.writers[layer] is None:
            self.writers[layer] = weights_identity(attention)

    def nbytes(self) -> dict[str, int]:
        """Bytes held, by kind: latents and rotary keys."""
        def total(tensors):
            return sum(t.numel() * t.element_size() for t in tensors if t is not None)

        return dict(latents=total(self.latents), rope_keys=total(self.rope_keys))

    def __repr__(self) -> str:
        return f"LatentCache({self.num_layers} layers, {len(self)} tokens)"


class MLAttention(nn.Module):
    """One MLA layer (module docstring); ``forward(x, cache=None, layer=0, absorbed=False)``."""

    def __init__(self, config: MLAConfig):
        super().__init__()
        if not isinstance(config, MLAConfig):
            raise ValueError(f"config must be an MLAConfig, got {type(config).__name__}")
        self.config = c = config
        H, D = c.num_heads, c.d_model
        if c.q_lora_rank is None:
            self.q_proj = nn.Linear(D, H * c.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(D, c.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(c.q_lora_rank, c.rms_eps)
            self.q_b_proj = nn.Linear(c.q_lora_rank, H * c.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(D, c.kv_lora_rank + c.qk_rope_head_dim, bias=False)  # W_DKV ; W_KR
        self.kv_a_layernorm = RMSNorm(c.kv_lora_rank, c.rms_eps)
        self.kv_b_proj = nn.Linear(c.kv_lora_rank, H * (c.qk_nope_head_dim + c.v_head_dim), bias=False)  # W_UK ; W_UV
        self.o_proj = nn.Linear(H * c.v_head_dim, D, bias=False)
        self.rotary = Rotary(base=float(c.base), pairing="interleaved", scaling=c.scaling)

    # -- the pieces ----------------------------------------------------------------------
    def queries(self, x: torch.Tensor, positions: torch.Tensor):
        """q^C (B, H, n, d_h) and the rotated q^R (B, H, n, d_R) of x (B, n, D) at ``positions`` (n,)."""
        c = self.config
        B, n, _ = x.shape
        q = self.q_proj(x) if c.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(B, n, c.num_heads, c.qk_head_dim).transpose(1, 2)  # (B, H, n, d_h + d_R)
        q_nope, q_rope = q.split([c.qk_nope_head_dim, c.qk_rope_head_dim], dim=-1)
        return q_nope, rotate(q_rope, positions, self.rotary)

    def latents(self, x: torch.Tensor, positions: torch.Tensor):
        """What the cache keeps: c (B, n, d_c) and the rotated shared key k^R (B, n, d_R)."""
        c = self.config
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([c.kv_lora_rank, c.qk_rope_head_dim], dim=-1)
        k_rope = rotate(k_rope[:, None], positions, self.rotary)[:, 0]  # (B, n, d_R), rotated once
        return self.kv_a_layernorm(latent), k_rope

    def up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W_UK (H, d_h, d_c) and W_UV (H, d_v, d_c), views of ``kv_b_proj.weight``."""
        c = self.config
        w = self.kv_b_proj.weight.view(c.num_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
        return w[:, : c.qk_nope_head_dim], w[:, c.qk_nope_head_dim:]

    # -- attention ------------------------------------------------------------------------
    def forward(self, x: torch.Tensor, cache: LatentCache | None = None, layer: int = 0, *,
                absorbed: bool = False) -> torch.Tensor:
        """x (B, n, D) -> (B, n, D). With a cache: the n tokens come after its K tokens and are appended.

        ``absorbed=False`` expands every cached latent into per-head keys and values (what
        training does); ``absorbed=True`` folds W_UK into the queries and W_UV after the
        attention, so the step reads only the latents and the shared rotary keys.
        """
        check_tensor("x", x, ndim=3, floating=True, shape={2: self.config.d_model})
        check_choice("absorbed", absorbed, (False, True))
        c = self.config
        B, n, _ = x.shape
        if cache is not None:
            if not isinstance(cache, LatentCache):
                raise ValueError(f"cache must be a LatentCache or None, got {type(cache).__name__}")
            cache.check(layer, self, B, x.dtype)
        past = 0 if cache is None else cache.length(layer)
        positions = torch.arange(past, past + n, device=x.device)  # (n,) the new tokens, last of the keys
        q_nope, q_rope = self.queries(x, positions)  # (B, H, n, d_h), (B, H, n, d_R)
        latent, k_rope = self.latents(x, positions)  # (B, n, d_c), (B, n, d_R)
        if cache is not None:
            latent, k_rope = cache.append(layer, latent, k_rope)  # (B, K + n, .)
            cache.record_writer(layer, self)
        visible = torch.arange(latent.shape[1], device=x.device)[None, :] <= positions[:, None]  # (n, Lk) causal
        out = self.attend(q_nope, q_rope, latent, k_rope, visible, absorbed=absorbed)  # (B, H, n, d_v)
        return self.o_proj(out.transpose(1, 2).reshape(B, n, c.num_heads * c.v_head_dim))  # (B, n, D)

    def attend(self, q_nope: torch.Tensor, q_rope: torch.Tensor, latent: torch.Tensor, k_rope: torch.Tensor,
               visible: torch.Tensor | None = None, *, absorbed: bool = False) -> torch.Tensor:
        """Attention of q^C (B, H, n, d_h) and rotated q^R (B, H, n, d_R) over the cached latents
        (B, Lk, d_c) and shared rotated keys (B, Lk, d_R); ``visible`` (n, Lk) bool or None (all).

        Returns (B, H, n, d_v), before ``o_proj``. Expanded: every latent up-projected into
        per-head keys and values, then SDPA. Absorbed: W_UK folded into the queries and W_UV
        applied after the weighted sum of latents.
        """
        c = self.config
        B, H, _, _ = q_nope.shape
        Lk = latent.shape[1]
        w_uk, w_uv = self.up_projections()
        if absorbed:
            q_latent = torch.einsum("bhnd,hdc->bhnc", q_nope, w_uk)  # (B, H, n, d_c): W_UK^T q^C
            scores = q_latent @ latent[:, None].transpose(-1, -2)  # (B, H, n, Lk)
            scores = scores + q_rope @ k_rope[:, None].transpose(-1, -2)  # + q^R . k^R, one shared key
            scores = scores * c.softmax_scale
            if visible is not None:
                scores = scores.masked_fill(~visible, float("-inf"))
            return torch.einsum("bhnc,hvc->bhnv", scores.softmax(-1) @ latent[:, None], w_uv)  # (B, H, n, d_v)
        k_nope = torch.einsum("bkc,hdc->bhkd", latent, w_uk)  # (B, H, Lk, d_h)
        v = torch.einsum("bkc,hvc->bhkv", latent, w_uv)  # (B, H, Lk, d_v)
        k = torch.cat([k_nope, k_rope[:, None].expand(B, H, Lk, c.qk_rope_head_dim)], dim=-1)
        q = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, n, d_h + d_R)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=c.softmax_scale)

    def extra_repr(self) -> str:
        c = self.config
        return (f"heads={c.num_heads}, d_c={c.kv_lora_rank}, d_h={c.qk_nope_head_dim}, d_R={c.qk_rope_head_dim}, "
                f"d_v={c.v_head_dim}, q_lora_rank={c.q_lora_rank}")
