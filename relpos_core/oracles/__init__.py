"""Test oracles: modules built around a scheme to check it against Hugging Face transformers.

A scheme file (``relpos_core/schemes/<name>.py``) holds one scheme: its maths, its
position term, its module inside a model and its declaration. What is built *around*
a scheme to check it lives here, one file per scheme that has one: modules whose
parameter names match Hugging Face's (so a ``state_dict`` loads strictly), dense forms of
a scheme's bias written without the kernels, and the benchmark's Hugging Face module
(``benchmark_module``, which a declaration names by its dotted path). The chapters use
them to show a scheme equals the released code: ``oracles.t5`` in
chapters/03_t5_buckets.ipynb and chapters/12_failure_modes.ipynb, ``oracles.deberta`` in
chapters/05_deberta.ipynb; ``oracles.hybrid`` reads the layer patterns of Hugging Face's
hybrid models (SmolLM3, Gemma 3, Cohere 2, Llama 4). Nothing below the applications imports them but the tests.
"""
from . import deberta, hybrid, t5

__all__ = ["t5", "deberta", "hybrid"]
