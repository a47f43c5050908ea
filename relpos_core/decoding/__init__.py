"""Decoding with a KV cache: a small decoder per scheme, the cache, its bytes, its speed.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

* ``model``: ``DecoderConfig`` and ``Decoder`` (absolute, Shaw, T5, ALiBi, RoPE,
  Transformer-XL), whose attention is ``rp.attend``; ``decode_paths`` lists the kernel
  paths each scheme decodes on; ``kept_positions`` is the sink + window rule.
* ``cache``: ``KVCache``, keys and values (or Transformer-XL's memory) with sink +
  window eviction at original or renumbered positions.
* ``ledger``: bytes per cached token and per-step work, as formulas checked against
  the real tensors.
* ``bench``: decode throughput per scheme and path in one run,
  ``python -m relpos_core.decoding --bench``.
* ``plots``: the chapter's figures (plotly, imported lazily on first use).

Only torch is imported here.
"""
from . import bench, cache, ledger, model, plots
from .cache import KVCache
from .ledger import bytes_per_token, cache_bytes, shared_position_bytes, step_work
from .model import NOT_DECODED, SCHEMES, Decoder, DecoderConfig, decode_paths, kept_positions

__all__ = ["model", "cache", "ledger", "bench", "plots", "Decoder", "DecoderConfig", "KVCache", "SCHEMES",
           "NOT_DECODED", "decode_paths", "kept_positions", "cache_bytes", "shared_position_bytes",
           "bytes_per_token", "step_work"]
