"""relpos_core: relative position encodings in transformers, the library behind the relpos book.

Import it as ``import relpos_core as rp``. Layers (see CONTRIBUTING.md):
``rp.schemes`` (what each method computes: each scheme's ``position_term``),
``rp.terms`` (the pieces a term is made of), ``rp.positions`` (where queries and keys
sit), ``rp.kernels`` (how: forms and backends), ``rp.attend`` (the one entry point),
``rp.registry`` (which paths exist), ``rp.measure`` (bytes and time), ``rp.figures``
(heatmaps and sliders; plotly and ipywidgets load lazily, on first use),
``rp.decoding`` (a small decoder per scheme, its KV cache, eviction, bytes and speed),
``rp.failures`` (the checks that catch each failure mode of chapter 9),
``rp.resources`` (the committed data the chapters read, shipped with the package).
"""
from . import failures, figures, kernels, lab, measure, offsets, positions, registry, resources, schemes, terms
from .attend import attend
from . import decoding  # noqa: E402  (uses attend and the schemes)
from .attention import attention, attention_weights
from .offsets import relative_offsets

__version__ = "0.1.0"
__all__ = ["attend", "attention", "attention_weights", "relative_offsets", "offsets", "positions", "terms",
           "schemes", "kernels", "registry", "measure", "decoding", "failures", "lab", "figures", "resources"]
