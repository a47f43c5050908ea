"""Decoding with a KV cache: the model, its cache, its bytes, its speed.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb).

* ``model``: ``SCHEMES`` (every scheme a decoder can use, from the declarations),
  ``decode_paths``, ``kept_positions`` (the sink + window rule); the decoder itself is the
  library's one model, ``relpos_core.models.Transformer``;
* ``KVCache`` (``relpos_core.cache``): keys and values with sink + window eviction in the
  cache's own position frame (StreamingLLM) or at original positions;
* ``ledger``: bytes per cached token and per-step work, derived from each scheme's
  position term and checked against the real tensors;
* ``bench``: decode throughput per scheme and path in one run,
  ``python -m relpos_core.decoding --bench --out FILE``;
* ``plots``: the chapter's figures (plotly, imported lazily on first use);
* ``scale`` (chapters/09_kv_cache_at_scale.ipynb): bytes per token of MHA, MQA, GQA and MLA
with published
  configurations as presets, and a decode-step timing of each cache layout,
  ``python -m relpos_core.decoding --scale --out FILE``;
* ``designs`` (chapters/10_position_in_current_models.ipynb): the cache of hybrid layer
  patterns, partial RoPE, quantised caches and tensor-parallel replication, with the
  layer patterns of published models as presets.

Only torch is imported here.
"""
from relpos_core.cache import KVCache

from . import bench, designs, ledger, model, plots, scale
from .ledger import bytes_per_token, cache_bytes, shared_position_bytes, step_work
from .model import NOT_DECODED, SCHEMES, decode_paths, kept_positions

__all__ = ["model", "ledger", "bench", "plots", "scale", "designs", "KVCache", "SCHEMES",
           "NOT_DECODED", "decode_paths", "kept_positions", "cache_bytes", "shared_position_bytes",
           "bytes_per_token", "step_work"]
