"""The decoder of "The KV cache" (chapters/07_the_kv_cache.ipynb) is the library's one model,
``relpos_core.models.Transformer``.

Book: "The KV cache" (chapters/07_the_kv_cache.ipynb).

``Decoder`` and ``DecoderConfig`` are its names here (``DecoderConfig`` defaults to
``causal=True``, as every config does); ``SCHEMES`` lists the registry names a decoder can
use and ``NOT_DECODED`` why the others cannot, both read from the scheme declarations.
"""
from __future__ import annotations

from relpos_core import schemes
from relpos_core.models import Transformer, TransformerConfig, decode_paths, kept_positions

__all__ = ["Decoder", "DecoderConfig", "SCHEMES", "NOT_DECODED", "decode_paths", "kept_positions"]

Decoder = Transformer
DecoderConfig = TransformerConfig
SCHEMES: tuple[str, ...] = tuple(n for n in schemes.names() if schemes.lookup(n).scheme.not_decoded is None)
NOT_DECODED: dict[str, str] = {n: schemes.lookup(n).scheme.not_decoded for n in schemes.names()
                               if schemes.lookup(n).scheme.not_decoded is not None}
