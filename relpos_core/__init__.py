"""relpos_core: relative position encodings in transformers, the library behind the relpos book.

Import it as ``import relpos_core as rp``. Layers (see CONTRIBUTING.md):
``rp.schemes`` (what each method computes), ``rp.kernels`` (how), ``rp.measure``
(bytes and time), ``rp.figures`` (heatmaps and sliders; plotly and ipywidgets load
lazily, on first use).
"""
from . import figures, kernels, lab, measure, offsets, schemes
from .attention import attention, attention_weights
from .offsets import relative_offsets

__version__ = "0.1.0"
__all__ = ["attention", "attention_weights", "relative_offsets", "offsets", "schemes", "kernels", "measure", "figures", "lab"]
