"""The language-model lab: byte-level causal models of CPython's standard-library source that
differ only in their position scheme, evaluated at 1x-16x their training length in bits per
byte and with a passkey probe, and the RoPE context-extension methods measured on them
("Evidence from a language model": chapters/13_language_model.ipynb).

``python -m relpos_core.lm --preset book`` trains a small run; ``--preset full`` is the
committed run (``relpos_core/data/lm-full.json``, read with ``results.load_committed()``).
Modules: ``corpus`` (the pinned file list, the split by file), ``presets``, ``train``
(training, evaluation, the passkey probe, the extension stage), ``results`` (JSON with
provenance, tables with t intervals across seeds).
"""
from . import corpus, presets, results, train
from .corpus import CorpusMismatch, load_corpus
from .presets import PRESETS, get_preset

__all__ = ["corpus", "presets", "results", "train", "CorpusMismatch", "load_corpus", "PRESETS", "get_preset"]
