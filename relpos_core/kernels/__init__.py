"""How each scheme is computed: one module per kernel path (see CONTRIBUTING.md).

``naive`` materialises the [L, L, d] relative tensor or the dense bias; ``gather`` scores
against the few distinct offsets and indexes; ``skew`` is the Music Transformer reshape;
``sdpa_bias`` hands a dense bias to ``scaled_dot_product_attention`` and reports the
backend that ran; ``flex`` computes the bias inside FlexAttention's tile loop.
"""
from . import flex, gather, naive, sdpa_bias, skew

__all__ = ["naive", "gather", "skew", "sdpa_bias", "flex"]
