"""rotary-embedding-torch (Phil Wang, github.com/lucidrains/rotary-embedding-torch) in the peer benchmark.

``RotaryEmbedding(dim).rotate_queries_or_keys`` (Su et al. 2021, interleaved pairing, its
frequency cache on) on q and k, then ``F.scaled_dot_product_attention`` with ``is_causal``:
how its README runs attention. Imports happen inside the functions.
"""
from __future__ import annotations

from relpos_core.bench.peers.common import Built, Contender

__all__ = ["contenders"]


def _rope(row):
    import torch.nn.functional as F
    from rotary_embedding_torch import RotaryEmbedding

    rotary = RotaryEmbedding(dim=row.d, theta=row.rope_base).to(row.device)

    def fn(q, k, v):  # (B, H, L, d) each
        q, k = rotary.rotate_queries_or_keys(q), rotary.rotate_queries_or_keys(k)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, d)
    return Built(fn, [])


def contenders() -> list[Contender]:
    """Its one contender (RoPE); raises ImportError when not installed."""
    import rotary_embedding_torch  # noqa: F401

    return [Contender("rotary-embedding-torch + SDPA", "rotary-embedding-torch", "rope", "kernel", _rope,
                      pairing="interleaved")]
