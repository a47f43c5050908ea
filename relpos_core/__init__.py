"""relpos_core: relative position encodings in transformers, the library behind the relpos book.

Import it as ``import relpos_core as rp``. Layers, from the ground up (CONTRIBUTING.md;
``tests/test_imports.py`` fails on any import that goes down a layer the wrong way or
closes a circle):

1. ``rp.budget`` (the memory budget), ``rp.positions`` (where queries and keys sit),
   ``rp.offsets``, ``rp.terms`` (the pieces a position term is made of);
2. ``rp.kernels``: how a term is computed (forms naive / gather / skew, backends eager /
   sdpa / flex, rotary maths, SDPA backend forcing, ``rp.attention`` written out);
3. ``rp.schemes``: what each scheme computes, one declared file per scheme; ``rp.oracles``:
   the Hugging Face-parity modules built around a scheme to check it (tests, chapters);
4. ``rp.registry`` (every path, what each call may ask of it) and ``rp.measure`` (bytes,
   time, the path guard, SDPA backend detection);
5. ``rp.attend``: the one entry point;
6. ``rp.models`` (one transformer for every scheme) and ``rp.cache`` (its KV cache);
   ``rp.layers`` (layers that differ: a per-layer scheme and sliding window);
   ``rp.mla`` (multi-head latent attention and its cache of latents,
   chapters/09_kv_cache_at_scale.ipynb);
7. on top: ``rp.decoding`` (chapters/08_the_kv_cache.ipynb), ``rp.lab``
   (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb), ``rp.lm``
   (the language-model lab, chapters/13_language_model.ipynb), ``rp.failures`` (chapters/12_failure_modes.ipynb),
   ``rp.figures`` (plotly and ipywidgets load lazily), ``rp.resources``
   (the committed data the chapters read, shipped with the package), ``relpos_core.bench``
   (the benchmark, imported on demand).
"""
from . import budget, offsets, outputs, positions, terms  # noqa: I001  (layer order)
from . import kernels, schemes
from . import oracles
from . import measure, registry
from .attend import attend
from . import cache, layers, mla, models
from . import decoding, failures, figures, lab, lm, resources
from .kernels.reference import attention, attention_weights
from .offsets import relative_offsets

__version__ = "0.1.0"
__all__ = ["attend", "attention", "attention_weights", "relative_offsets", "budget", "offsets", "outputs", "positions",
           "terms", "schemes", "oracles", "kernels", "registry", "measure", "models", "cache", "layers", "mla",
           "decoding", "failures", "lab", "lm", "figures", "resources"]
