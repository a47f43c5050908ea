"""The decoder of "The KV cache" (chapters/08_the_kv_cache.ipynb) is the library's one model,
``relpos_core.models.Transformer``.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb).

A decoder is ``Transformer(TransformerConfig(scheme, ...))`` (``causal=True`` is every
config's default); ``SCHEMES`` lists the registry names a decoder can use and
``NOT_DECODED`` why the others cannot, both read from the scheme declarations.
"""
from __future__ import annotations

from relpos_core import schemes
from relpos_core.models import decode_paths, kept_positions

__all__ = ["SCHEMES", "NOT_DECODED", "decode_paths", "kept_positions"]

SCHEMES: tuple[str, ...] = tuple(n for n in schemes.names() if schemes.lookup(n).scheme.not_decoded is None)
NOT_DECODED: dict[str, str] = {n: schemes.lookup(n).scheme.not_decoded for n in schemes.names()
                               if schemes.lookup(n).scheme.not_decoded is not None}
