"""x-transformers (Phil Wang, github.com/lucidrains/x-transformers) as a contender in the peer benchmark.

Its T5 bias (``RelativePositionBias``, Raffel et al. 2020), its ALiBi (``AlibiPositionalBias``,
Press et al. 2022) and its rotary embedding (``RotaryEmbedding``, Su et al. 2021; interleaved
pairing), each with its ``Attend`` in both modes: ``flash=True`` (``F.scaled_dot_product_attention``
with the bias as a mask) and ``flash=False`` (its eager einsum and softmax). The bias modules get
the row's own table and slopes copied in, so every contender computes the same numbers.
Imports happen inside the functions: relpos_core imports without x-transformers.
"""
from __future__ import annotations

from relpos_core.bench.peers.common import Built, Contender

__all__ = ["contenders"]

LIBRARY = "x-transformers"


def _attend(flash: bool, causal: bool, scale: float | None):
    from x_transformers.attend import Attend

    return Attend(flash=flash, causal=causal, scale=scale)


def _t5(flash: bool):
    def build(row):
        import torch
        from x_transformers.x_transformers import RelativePositionBias

        H = row.H
        bias = RelativePositionBias(scale=1.0, causal=False, num_buckets=row.t5_table.shape[0],
                                    max_distance=row.max_distance, heads=H)
        with torch.no_grad():
            bias.relative_attention_bias.weight.copy_(row.t5_table)  # (num_buckets, H), the row's table
        attend = _attend(flash, causal=False, scale=1.0)  # T5: no 1/sqrt(d)

        def fn(q, k, v):  # (B, H, L, d) each
            L = q.shape[-2]
            out, _ = attend(q, k, v, attn_bias=bias(L, L))  # bias (H, L, L)
            return out  # (B, H, L, d)
        return Built(fn, list(bias.parameters()))
    return build


def _alibi(flash: bool):
    def build(row):
        from x_transformers.x_transformers import AlibiPositionalBias

        bias = AlibiPositionalBias(heads=row.H)
        bias.slopes = row.alibi_slopes.clone().reshape(-1, 1, 1)  # (H, 1, 1), the row's slopes
        attend = _attend(flash, causal=True, scale=None)
        L = row.L
        bias(L, L)  # x-transformers caches the (H, L, L) bias once and slices it afterwards, as a model does

        def fn(q, k, v):
            out, _ = attend(q, k, v, attn_bias=bias(q.shape[-2], k.shape[-2]))
            return out  # (B, H, L, d)
        return Built(fn, [])
    return build


def _rope(flash: bool):
    def build(row):
        from x_transformers.x_transformers import RotaryEmbedding, apply_rotary_pos_emb

        rotary = RotaryEmbedding(row.d, base=row.rope_base).to(row.device)
        attend = _attend(flash, causal=True, scale=None)

        def fn(q, k, v):
            freqs, _ = rotary.forward_from_seq_len(k.shape[-2])  # (1, L, d)
            q, k = apply_rotary_pos_emb(q, freqs), apply_rotary_pos_emb(k, freqs)
            out, _ = attend(q, k, v)
            return out  # (B, H, L, d)
        return Built(fn, [])
    return build


def contenders() -> list[Contender]:
    """x-transformers' contenders, one per (scheme, Attend mode); raises ImportError when not installed."""
    import x_transformers  # noqa: F401

    out = []
    for flash in (True, False):
        mode = "flash" if flash else "eager"
        out += [
            Contender(f"x-transformers RelativePositionBias + Attend ({mode})", LIBRARY, "t5", "kernel", _t5(flash)),
            Contender(f"x-transformers AlibiPositionalBias (cached) + Attend ({mode})", LIBRARY, "alibi", "kernel",
                      _alibi(flash)),
            Contender(f"x-transformers RotaryEmbedding + Attend ({mode})", LIBRARY, "rope", "kernel", _rope(flash),
                      pairing="interleaved"),
        ]
    return out
