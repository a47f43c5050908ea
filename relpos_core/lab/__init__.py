"""The experiments lab: tiny transformers that differ only in their position scheme, trained
on synthetic tasks on a CPU until they solve them (or a cap), evaluated up to 512 tokens
("Synthetic tasks": chapters/14_experiments_length.ipynb and
chapters/15_experiments_marker.ipynb).

``python -m relpos_core.lab --preset book`` runs the chapter's experiments on a reduced
grid; ``--preset full`` is what the chapter reads (committed as
``relpos_core/data/lab-full.json``); in Python, ``run_preset(get_preset("tiny"))``
returns the same records. Modules: ``tasks`` (seeded generators), ``models`` (the
family: the library's one transformer, ``relpos_core.models``), ``train`` (training
to a solve criterion, evaluation), ``presets``, ``results`` (JSON with provenance,
paired statistics, claim verdicts), ``guide`` (levels and
comparisons over every run, for the decision guide), ``figures`` (plotly for the book, PNGs for the
CLI). Only torch is imported here; plotly, matplotlib and tqdm load when first used.
"""
from . import figures, guide, models, presets, results, tasks, train
from .models import SCHEMES, build_model, lab_config
from .presets import PRESETS, get_preset
from .results import build_results, committed_path, load_committed, load_results, save_results
from .train import evaluate, run_preset, train_run

__all__ = [
    "guide", "models", "presets", "results", "tasks", "train", "figures",
    "SCHEMES", "lab_config", "build_model", "PRESETS", "get_preset",
    "build_results", "committed_path", "load_committed", "load_results", "save_results", "evaluate", "run_preset",
    "train_run",
]
