"""Rotary maths: turn queries and keys by angles proportional to their positions.

Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb); the cache layouts
in "The KV cache" (chapters/08_the_kv_cache.ipynb). The scheme (what RoPE and
xPos are, their papers, their declarations) lives in ``relpos_core.schemes.rope`` and
``relpos_core.schemes.xpos``; this module is the kernel-level maths every path shares.

Pair k of the ``r`` rotated dimensions turns at frequency ``theta_k = base^(-2k / r)``
(a context-extension ``scaling`` may change these frequencies and multiply both q and k
by an ``attention_factor``). Rotating q_i by angle ``i theta`` and k_j by ``j theta``
gives ``q^T R((j - i) theta) k``: the score depends on j - i only (``key_minus_query``).
Two layouts pair the dimensions: ``rotate_half`` (k with k + r/2: GPT-NeoX, Hugging
Face) and ``interleaved`` (2k with 2k + 1: the paper, GPT-J, Meta's LLaMA code). With
``rotary_dim < d`` (partial rotary) the dimensions after the first r pass through; with
``keep_fraction`` p < 1 (p-RoPE) the lowest-frequency pairs get frequency 0 and pass
unrotated (``relpos_core.pieces.rotary.Rotary`` says how the two differ).

xPos (``decay``) also scales q_n by ``zeta^((n - c) / B)`` and k_m by ``zeta^(-(m - c) / B)``
with ``zeta_k = (2k / r + gamma) / (1 + gamma)``: q . k gains ``zeta^((n - m) / B)``. The
centre c cancels in every score. It is the middle of [first query, last key]: the largest
factor is then ``zeta_0^(-(last key - first query) / 2B)``, which is exactly 1 on a decode
step (one query after every key) at any length; keys far behind the query get factors
that shrink towards 0, as their float64 score does. A call whose largest factor would not
fit the input dtype (a float16 self-attention over about 6,800 positions) is refused with
a ValueError, not computed as inf or NaN (``xpos_limit``).

Angles (position x theta_k) and xPos exponents are formed in float64 from the integer
positions, and cos, sin and the scale are reduced there before the cast to the input
dtype, so a float16 or float32 input is rotated as exactly as its dtype can hold.
Positions beyond ``MAX_ROTARY_POSITION`` (2**32: the float64 angle is then within
5e-7 rad) are refused by name.
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_tensor
from relpos_core.compile_ops import computed_once
from relpos_core.kernels import memo
from relpos_core.terms import Rotary

__all__ = ["PAIRINGS", "inverse_frequencies", "rope_cos_sin", "rotate_half", "apply_rope", "rotate", "rotate_qk",
           "xpos_zeta", "xpos_limit", "MAX_ROTARY_POSITION", "check_rotary_positions"]

PAIRINGS = ("rotate_half", "interleaved")
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
# float64 holds integers exactly to 2**53; at 2**32 an angle position * theta_0 is within 2**32 * 2**-53 rad
MAX_ROTARY_POSITION = 2**32
ANGLE_DTYPE = torch.float64  # angles and xPos exponents, whatever the input dtype


def check_rotary_positions(name: str, lo: int, hi: int) -> None:
    """Refuse rotary positions outside [-MAX_ROTARY_POSITION, MAX_ROTARY_POSITION] (Python ints, no device read)."""
    if lo < -MAX_ROTARY_POSITION or hi > MAX_ROTARY_POSITION:
        raise ValueError(f"{name} must lie in [-2**32, 2**32] for a rotation (angles are formed in float64 and "
                         f"would lose their precision past it), got range [{lo}, {hi}]")


def xpos_limit(decay, rotary_dim: int, dtype: torch.dtype) -> int:
    """The longest span (last key - first query) whose largest xPos factor fits ``dtype``.

    The largest factor is zeta_0^(-span / 2B) (module docstring); it must stay below
    the dtype's largest finite value divided by 2**4 (room for q and k entries up to 16).
    """
    import math

    zeta0 = decay.gamma / (1.0 + decay.gamma)
    headroom = math.log(torch.finfo(dtype).max) - 4 * math.log(2)
    return int(2 * decay.scale_base * headroom / -math.log(zeta0))


def _rotary_dim(rotary, head_dim: int) -> int:
    r = head_dim if rotary.rotary_dim is None else rotary.rotary_dim
    if r > head_dim or r % 2:
        raise ValueError(f"rotary_dim must be an even number <= head_dim = {head_dim}, got {r}")
    return r


def inverse_frequencies(rotary, head_dim: int, *, seq_len: int | None = None, device=None,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """theta_k for the r / 2 rotated pairs: (r / 2,), in ``dtype``.

    ``base^(-2k / r)``, or what ``rotary.scaling`` makes of it (``seq_len``, the call's
    longest position + 1, matters only to a dynamic scaling).
    """
    r = _rotary_dim(rotary, head_dim)
    if rotary.scaling is not None:
        inv = rotary.scaling.inverse_frequencies(r, rotary.base, seq_len=seq_len, device=device).to(dtype)
    else:
        exponent = torch.arange(0, r, 2, dtype=torch.int64, device=device).to(torch.float64) / r
        inv = (1.0 / (rotary.base ** exponent)).to(dtype)  # (r/2,)
    kept = rotary.kept_pairs(head_dim)
    if kept < r // 2:  # p-RoPE: the lowest frequencies removed, those pairs pass unrotated (angle 0)
        if kept < 1:
            rotary.check(1, head_dim)  # raises, naming keep_fraction
        inv = torch.cat([inv[:kept], inv.new_zeros(r // 2 - kept)])  # (r/2,)
    return inv


def rope_cos_sin(positions: torch.Tensor, head_dim: int, *, base: float = 10000.0,
                 dtype: torch.dtype = torch.float32, inv_freq: torch.Tensor | None = None):
    """cos and sin of ``position * theta_k``, each (..., L, head_dim) in rotate-half layout
    (columns k and k + d/2 hold pair k). ``positions``: (L,) or (B, L) integers.

    Convention ``key_minus_query``: a query at i and a key at j end up with relative angle
    ``(j - i) theta_k``.
    """
    check_tensor("positions", positions, ndim=(1, 2), dtype=INT_DTYPES)
    check_choice("dtype", dtype, (torch.float16, torch.bfloat16, torch.float32, torch.float64))
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be an even integer >= 2 (dimensions are rotated in pairs), got {head_dim!r}")
    if positions.numel() and not positions.is_meta:
        lo, hi = torch.stack([positions.min(), positions.max()]).to(torch.int64).tolist()
        check_rotary_positions("positions", lo, hi)
    work = ANGLE_DTYPE
    if inv_freq is None:
        inv_freq = inverse_frequencies(Rotary(base=base), head_dim, device=positions.device, dtype=work)
    freqs = positions[..., None].to(work) * inv_freq.to(work)  # (..., L, d/2) angle of pair k, in float64
    emb = torch.cat((freqs, freqs), dim=-1)  # (..., L, d) rotate-half layout
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last dimension (no positions involved)."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., d)


def xpos_zeta(decay, rotary_dim: int, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """xPos's per-pair base zeta_k = (2k / r + gamma) / (1 + gamma): (r / 2,)."""
    two_k = torch.arange(0, rotary_dim, 2, device=device).to(dtype)  # (r/2,)
    return (two_k / rotary_dim + decay.gamma) / (1.0 + decay.gamma)


# cos and sin of a rotation at consecutive positions, per (rotation, start, length, device, dtype, mode):
# a model's layers and steps rotate at the same positions every call
_TABLES = memo.LRU(64)


def _table_key(x, positions, rotary, r, seq_len, decay_sign, centre, attention_factor, start):
    if start is None or positions.dim() != 1 or type(centre) is not int or memo.bypassed():
        return None
    try:
        rot = memo.signature(rotary, identity=True)  # a scaling's tables by storage and version
    except memo.Unhashable:
        return None
    return (rot, start, positions.shape[0], r, x.shape[-1], seq_len, decay_sign, centre, attention_factor, x.device, x.dtype,
            memo.mode_key())


def _cos_sin(x, positions, rotary, r, seq_len, decay_sign, centre, attention_factor, start):
    """cos and sin (L, r/2) or (B, 1, L, r/2) in x's dtype, the attention factor and xPos's scale in."""
    key = _table_key(x, positions, rotary, r, seq_len, decay_sign, centre, attention_factor, start)
    cached = None if key is None else _TABLES.get(key)
    if cached is not None:
        return cached
    d = x.shape[-1]
    work = ANGLE_DTYPE  # float64 angles, reduced (cos, sin, scale) before the cast to x's dtype
    inv_freq = inverse_frequencies(rotary, d, seq_len=seq_len, device=x.device, dtype=work)  # (r/2,)
    angle = positions[..., None].to(work) * inv_freq  # (L, r/2) or (B, L, r/2)
    cos, sin = angle.cos(), angle.sin()
    factor = float(getattr(rotary.scaling, "attention_factor", 1.0) or 1.0) if attention_factor else 1.0
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    if rotary.decay is not None and decay_sign != 0:
        zeta = xpos_zeta(rotary.decay, r, device=x.device, dtype=work)  # (r/2,)
        power = (positions.to(work) - centre)[..., None] * (decay_sign / rotary.decay.scale_base)  # (.., L, 1)
        scale = zeta ** power  # (..., L, r/2)
        cos, sin = cos * scale, sin * scale
    if positions.dim() == 2:
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, r/2)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if key is not None:
        _TABLES.put(key, (cos, sin))
    return cos, sin


def rotate(x: torch.Tensor, positions: torch.Tensor, rotary, *, seq_len: int | None = None,
           decay_sign: int = 0, centre=0, attention_factor: bool = True, start: int | None = None) -> torch.Tensor:
    """Rotate x (B, H, L, d) by ``positions`` ((L,) or (B, L) integers) as ``rotary`` says.

    ``decay_sign``: +1 for queries, -1 for keys, 0 for no xPos scale; ``centre`` the xPos
    centre (an int or a 0-d tensor). ``attention_factor=False``: a pure rotation, without
    a scaling's factor (re-rotating keys that already carry it). ``start``: the caller knows
    that ``positions`` is ``start, start + 1, ...`` (no device read): cos and sin are then
    cached per (rotation, start, length, device, dtype) (``_TABLES``). Returns (B, H, L, d) in
    x's dtype.
    """
    B, H, L, d = x.shape
    r = _rotary_dim(rotary, d)
    cos, sin = _cos_sin(x, positions, rotary, r, seq_len, decay_sign, centre, attention_factor, start)
    cos, sin = computed_once(cos), computed_once(sin)  # compiled: once per position
    xr, rest = x[..., :r], x[..., r:]
    if rotary.pairing == "rotate_half":
        x1, x2 = xr[..., : r // 2], xr[..., r // 2:]  # (B, H, L, r/2) pair k = (k, k + r/2)
        out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, L, r)
    else:
        x_even, x_odd = xr[..., 0::2], xr[..., 1::2]  # (B, H, L, r/2) pair k = (2k, 2k+1)
        out = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1).flatten(-2)
    return out if r == d else torch.cat((out, rest), dim=-1)  # (B, H, L, d)


def rotate_qk(q: torch.Tensor, k: torch.Tensor, rotary, pos) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, H, Lq, d) and k (B, H, Lk, d) rotated at the call's positions (``relpos_core.positions``)."""
    check_rotary_positions("query and key positions", min(pos.min_query, pos.min_key), max(pos.max_query, pos.max_key))
    # a dynamic scaling sees the sequence as long as its furthest position (Hugging Face: largest position + 1)
    seq_len = max(pos.max_key, pos.max_query) + 1 if rotary.dynamic else None
    centre = 0
    if rotary.decay is not None:
        span = pos.max_key - pos.min_query  # the largest factor is zeta_0^(-span / 2B) (module docstring)
        limit = xpos_limit(rotary.decay, _rotary_dim(rotary, q.shape[-1]), q.dtype)
        if span > limit:
            raise ValueError(f"xPos cannot scale this call in {q.dtype}: the last key is {span} positions after the "
                             f"first query, and past {limit} the largest factor zeta^(span / 2B) overflows "
                             f"{q.dtype}; use a wider dtype or shorter calls (a decode step is fine at any length)")
        centre = (pos.min_query + pos.max_key) // 2
    q = rotate(q, pos.query, rotary, seq_len=seq_len, decay_sign=1, centre=centre, start=pos.query_start)
    k = rotate(k, pos.key, rotary, seq_len=seq_len, decay_sign=-1, centre=centre, start=pos.key_start)
    return q, k


def apply_rope(x: torch.Tensor, positions: torch.Tensor | None = None, *, base: float = 10000.0,
               pairing: str = "rotate_half") -> torch.Tensor:
    """Rotate every pair of x (B, H, L, d) by ``position * theta_k``; returns (B, H, L, d).

    ``positions``: (L,) or (B, L) integers, default ``arange(L)``. Apply to queries and keys
    alike: their dot product then depends on ``j - i`` only (``key_minus_query``).
    """
    check_tensor("x", x, ndim=4, floating=True)
    check_choice("pairing", pairing, PAIRINGS)
    rotary = Rotary(base=base, pairing=pairing)
    B, H, L, d = x.shape
    if d % 2:
        raise ValueError(f"x must have an even head_dim (last dimension), got shape {tuple(x.shape)}")
    if positions is None:
        positions = torch.arange(L, device=x.device)  # (L,)
    else:
        check_tensor("positions", positions, ndim=(1, 2), dtype=INT_DTYPES, shape={-1: L})
        if positions.dim() == 2 and positions.shape[0] not in (1, B):
            raise ValueError(f"positions of shape (B, L) must have B = 1 or {B}, got {tuple(positions.shape)}")
        if positions.numel() and not positions.is_meta:  # one device read, as rope_cos_sin
            lo, hi = torch.stack([positions.min(), positions.max()]).to(torch.int64).tolist()
            check_rotary_positions("positions", lo, hi)
    return rotate(x, positions, rotary)
