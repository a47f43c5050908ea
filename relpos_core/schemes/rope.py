"""RoPE: rotary position embeddings, queries and keys rotated by angles proportional to position.

Paper: Su, Lu, Pan, Murtadha, Wen and Liu (2021), "RoFormer: Enhanced Transformer with
Rotary Position Embedding", arXiv:2104.09864.
Book: chapter 6, "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb); RoPE in a KV
cache (rotated or unrotated keys) in chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

Sign convention: ``key_minus_query``. Rotating q_i by angle i*theta and k_j by j*theta gives
``(R_i q)^T (R_j k) = q^T R((j - i) theta) k``: the score depends only on ``j - i``
(positive when the key comes after the query). Nothing is added to the scores, so RoPE
runs inside any attention kernel and any KV cache.

Two layouts pair the head dimensions differently (same maths, different order):

* ``"rotate_half"`` (GPT-NeoX, Hugging Face's models): dimension k pairs with k + d/2.
* ``"interleaved"`` (the paper, GPT-J, Meta's LLaMA reference code): dimension 2k pairs
  with 2k + 1. Hugging Face's LLaMA is rotate-half: its conversion script permutes the
  rows of W_q and W_k so that the scores stay the same.

Pair k turns at frequency ``theta_k = base^(-2k/d)``. Angles are computed in float32 as
Llama does (float64 when asked for float64), then cast to the input's dtype.
"""
from __future__ import annotations

import numbers

import torch

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.terms import PositionTerm, Rotary

__all__ = ["rope_cos_sin", "rotate_half", "apply_rope", "position_term", "example_term", "EXAMPLES", "PAIRINGS"]

PAIRINGS = ("rotate_half", "interleaved")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64)


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
        raise ValueError(f"base must be a real number > 1, got {base!r}")
    return float(base)


def _check_head_dim(head_dim) -> int:
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (dimensions are rotated in pairs), got {head_dim}")
    return head_dim


def rope_cos_sin(
    positions: torch.Tensor,
    head_dim: int,
    *,
    base: float = 10000.0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles ``position * theta_k``, each (L, head_dim) (or (B, L, head_dim)
    for (B, L) positions) in rotate-half layout: columns k and k + d/2 hold pair k.

    Convention ``key_minus_query``: a query at i and key at j end up with relative angle
    ``(j - i) theta_k``.
    """
    check_tensor("positions", positions, ndim=(1, 2), dtype=INT_DTYPES)
    head_dim = _check_head_dim(head_dim)
    base = _check_base(base)
    check_choice("dtype", dtype, FLOAT_DTYPES)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).to(work) / head_dim
    inv_freq = 1.0 / (base ** exponent)  # (d/2,) theta_k
    freqs = positions[..., None].to(work) * inv_freq  # (L, d/2) angle of pair k
    emb = torch.cat((freqs, freqs), dim=-1)  # (L, d) rotate-half layout
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension (no positions involved)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., d)


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    pairing: str = "rotate_half",
) -> torch.Tensor:
    """Rotate every pair of x (B, H, L, d) by ``position * theta_k``; returns (B, H, L, d).

    ``positions``: (L,) or (B, L) integers, default ``arange(L)``. Apply to queries and keys
    alike: their dot product then depends on ``j - i`` only (``key_minus_query``).
    """
    check_tensor("x", x, ndim=4, floating=True)
    check_choice("pairing", pairing, PAIRINGS)
    base = _check_base(base)
    B, H, L, d = x.shape
    if d % 2:
        raise ValueError(f"x must have an even head_dim (last dimension), got shape {tuple(x.shape)}")
    if positions is None:
        positions = torch.arange(L, device=x.device)  # (L,)
    else:
        check_tensor("positions", positions, ndim=(1, 2), dtype=INT_DTYPES, shape={-1: L})
        if positions.dim() == 2 and positions.shape[0] not in (1, B):
            raise ValueError(f"positions of shape (B, L) must have B = 1 or {B}, got {tuple(positions.shape)}")
    work = torch.float64 if x.dtype == torch.float64 else torch.float32
    cos, sin = rope_cos_sin(positions, d, base=base, dtype=work)  # (L, d) or (B, L, d)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if positions.dim() == 2:
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, d)
    if pairing == "rotate_half":
        return x * cos + rotate_half(x) * sin  # (B, H, L, d)
    c, s = cos[..., : d // 2], sin[..., : d // 2]  # (L, d/2): angle of pair k
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (B, H, L, d/2) pair k = (2k, 2k+1)
    out = torch.stack((x_even * c - x_odd * s, x_even * s + x_odd * c), dim=-1)  # (B, H, L, d/2, 2)
    return out.flatten(-2)  # (B, H, L, d)


def position_term(*, base: float = 10000.0, pairing: str = "rotate_half") -> PositionTerm:
    """RoPE's position term for ``rp.attend``: q and k rotated by their positions, nothing added.

    Convention ``key_minus_query``. Every backend rotates q by the call's query positions
    and k by its key positions (``relpos_core.positions``), then runs unchanged: RoPE
    needs no form (naive, gather, skew) and keeps the fused kernels.
    """
    return PositionTerm(scheme="rope", convention="key_minus_query",
                        rotary=Rotary(base=_check_base(base), pairing=check_choice("pairing", pairing, PAIRINGS)))


def example_term(num_heads: int, head_dim: int, k: int, *, device=None, dtype=torch.float32,
                 generator=None) -> PositionTerm:
    """RoPE with the default base (no table: the arguments only fix the shapes it is used with)."""
    return position_term()


EXAMPLES = {"rope": example_term}
K_NAMES = {"rope": None}
