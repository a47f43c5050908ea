"""The dense-bias SDPA path: the bias as ``attn_mask`` to scaled_dot_product_attention.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). Works for any
additive scheme (T5, ALiBi, the Shaw key term, DeBERTa's c2p + p2c, Transformer-XL's (b)
+ (d)), costs an [H, Lq, Lk] tensor, and changes which backend runs, so the backend is
*detected*, not assumed (``relpos_core.measure.backends``). On CPU (torch 2.13): a 4-D
float mask runs the fused ``_flash_attention_for_cpu`` kernel, a 3-D mask or a mask that
requires grad falls back to ``math``; that is why the bias is always passed here as 4-D
(1|B, H, Lq, Lk). On CUDA flash refuses any mask; cuDNN or memory-efficient take it.

It is also the path that trains: the bias is an ordinary tensor gathered from the
learnable table, so gradients flow on every device (FlexAttention has no backward on
CPU; ``relpos_core.kernels.flex`` falls back to this path there).

RoPE (Su et al., 2021) has no bias at all: ``rope_sdpa_attention`` rotates q and k first,
so the call runs on the fused backends unchanged.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from relpos_core._validate import check_choice, check_tensor
from relpos_core.kernels import gather, naive, skew
from relpos_core.kernels.naive import _guard_dense, check_qkv
from relpos_core.measure.backends import active_forced_backend, check_backend_supports, detect_sdpa_backend

__all__ = [
    "sdpa_attention",
    "sdpa_attention_with_backend",
    "t5_attention",
    "alibi_attention",
    "shaw_key_attention",
    "deberta_attention",
    "transformer_xl_attention",
    "rope_sdpa_attention",
]


def sdpa_attention(q, k, v, bias=None, *, causal: bool = False, scale=None) -> torch.Tensor:
    """F.scaled_dot_product_attention(q, k, v, attn_mask=bias as 4-D); returns (B, H, Lq, d).

    Sign convention: not applicable (``bias`` is already (query, key) laid out, shape
    (Lq, Lk), (H, Lq, Lk) or (B|1, H|1, Lq, Lk); -inf masks). ``causal`` places the Lq
    queries at the end of the Lk keys (a decoder step sees its whole cache), unlike
    torch's ``is_causal``, which aligns them to the first keys when Lq != Lk. Inside
    ``force_sdpa_backend(name)`` the inputs are checked against that backend first.
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("causal", causal, (False, True))
    scale = naive._scale(scale, d)
    if bias is not None:
        check_tensor("bias", bias, ndim=(2, 3, 4), floating=True, dtype=q.dtype, shape={-2: Lq, -1: Lk})
        if bias.dim() == 3:
            bias = bias.unsqueeze(0)  # (1, H, Lq, Lk): a 3-D mask would push CPU SDPA onto math
        if causal:
            raise ValueError("causal must be False when a bias is given: put -inf above the diagonal into the bias")
    if causal and Lq != Lk:
        # torch's is_causal aligns the queries to the *first* keys; here (as in rp.attention)
        # they sit at the end of the keys, the layout of a decoder step with a KV cache.
        future = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(Lk - Lq + 1)  # (Lq, Lk)
        bias = torch.zeros(1, 1, Lq, Lk, dtype=q.dtype, device=q.device).masked_fill(future, float("-inf"))
        causal = False
    forced = active_forced_backend()
    if forced is not None:
        check_backend_supports(forced, device=q.device, dtype=q.dtype,
                               mask_ndim=None if bias is None else bias.dim(),
                               mask_requires_grad=bias is not None and bias.requires_grad and torch.is_grad_enabled())
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal, scale=scale)  # (B, H, Lq, d)


def sdpa_attention_with_backend(q, k, v, bias=None, *, causal: bool = False, scale=None):
    """``sdpa_attention`` plus the backend that actually ran: returns (out, backend name)."""
    backend, out = detect_sdpa_backend(sdpa_attention, q, k, v, bias, causal=causal, scale=scale)
    return out, backend


def t5_attention(q, k, v, table, *, bidirectional: bool = True, max_distance: int = 128, scale=None) -> torch.Tensor:
    """T5: dense bias gathered from the (num_buckets, H) table, as attn_mask.

    Sign convention: ``key_minus_query``. Differentiable w.r.t. ``table`` on every device.
    T5 itself uses ``scale=1.0``; default 1/sqrt(d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("table", table, ndim=2, floating=True, dtype=q.dtype, shape={1: H})
    bias = gather.t5_bias(table, Lq, Lk, bidirectional=bidirectional, max_distance=max_distance)  # (H, Lq, Lk)
    return sdpa_attention(q, k, v, bias[None], scale=scale)  # (B, H, Lq, d)


def alibi_attention(q, k, v, *, causal: bool = True, scale=None) -> torch.Tensor:
    """ALiBi: the dense bias -m_h (i - j) (-inf for j > i when causal) as attn_mask.

    Sign convention: ``query_minus_key`` (distance i - j). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("causal", causal, (False, True))
    _guard_dense("dense ALiBi bias", 1, H, Lq, Lk, q.dtype, "alibi")
    from relpos_core.schemes.alibi import alibi_bias

    bias = alibi_bias(H, Lq, Lk, causal=causal, device=q.device).to(q.dtype)  # (H, Lq, Lk)
    return sdpa_attention(q, k, v, bias[None], scale=scale)  # (B, H, Lq, d)


def shaw_key_attention(q, k, v, *, rel_key, max_relative_position: int, causal: bool = False) -> torch.Tensor:
    """Shaw key term as a dense (B, H, L, L) mask: gather path logits * 1/sqrt(d).

    Sign convention: ``key_minus_query``. Self-attention; returns (B, H, L, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("causal", causal, (False, True))
    if Lq != Lk:
        raise ValueError(f"k must have the same length as q (self-attention, Lq == Lk = {Lq}), got Lk = {Lk}")
    scale = 1.0 / math.sqrt(d)
    bias = gather.shaw_key_logits(q, rel_key, max_relative_position=max_relative_position) * scale  # (B, H, L, L)
    if causal:
        future = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).triu(1)  # (L, L) j > i
        bias = bias.masked_fill(future, float("-inf"))
    return sdpa_attention(q, k, v, bias, scale=scale)  # (B, H, L, d)


def deberta_attention(q, k, v, pos_key, pos_query, *, att_span: int, relative_pos=None) -> torch.Tensor:
    """DeBERTa: (c2p + p2c) / sqrt(3d) as a dense mask, SDPA scale 1/sqrt(3d).

    Sign convention: ``query_minus_key`` (relative_pos holds i - j). pos_key, pos_query:
    (H, 2S, d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    scale = 1.0 / math.sqrt(3 * d)
    bias = naive.deberta_bias(q, k, pos_key, pos_query, att_span=att_span, relative_pos=relative_pos) * scale
    return sdpa_attention(q, k, v, bias, scale=scale)  # (B, H, Lq, d)


def transformer_xl_attention(q, k, v, r_k, u, v_bias) -> torch.Tensor:
    """Transformer-XL: SDPA(q + u, k, v) with ((b) + (d)) / sqrt(d) as a causal dense mask.

    Sign convention: ``query_minus_key``. (a) + (c) = (q + u) . k_j is the SDPA content
    score; (b) + (d) = (q + v) . r_{i-j} comes from the skew (rel_shift). r_k (H, Lk, d)
    rows for distances Lk-1 .. 0; u, v_bias (H, d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("u", u, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    scale = 1.0 / math.sqrt(d)
    bias = skew.transformer_xl_position_logits(q, r_k, v_bias) * scale  # (B, H, Lq, Lk)
    from relpos_core.schemes.transformer_xl import transformer_xl_causal_mask

    visible = transformer_xl_causal_mask(Lq, Lk, device=q.device)  # (Lq, Lk)
    bias = bias.masked_fill(~visible, float("-inf"))
    return sdpa_attention(q + u[None, :, None, :], k, v, bias, scale=scale)  # (B, H, Lq, d)


def rope_sdpa_attention(q, k, v, *, positions=None, base: float = 10000.0, causal: bool = False,
                        scale=None) -> torch.Tensor:
    """RoPE then plain SDPA (no mask): runs on the fused backends. Returns (B, H, Lq, d).

    Sign convention: ``key_minus_query`` (the rotated dot product depends on j - i only).
    ``positions`` are the keys' positions, (Lk,) or (B, Lk), default arange(Lk); the Lq
    queries are the last Lq of them, so a decoder step (Lq = 1) against a cache of Lk
    keys rotates its query to position ``positions[-1]``. q and k are rotated with
    ``relpos_core.schemes.rope.apply_rope``.
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    if Lq > Lk:
        raise ValueError(f"q must not be longer than k (the queries are the last Lq keys), got Lq = {Lq}, Lk = {Lk}")
    from relpos_core.schemes.rope import apply_rope

    if positions is None:
        positions = torch.arange(Lk, device=q.device)  # (Lk,)
    kr = apply_rope(k, positions, base=base)  # (B, H, Lk, d); validates positions against Lk
    qr = apply_rope(q, positions[..., Lk - Lq:], base=base)  # (B, H, Lq, d): the last Lq positions
    return sdpa_attention(qr, kr, v, causal=causal, scale=scale)  # (B, H, Lq, d)
