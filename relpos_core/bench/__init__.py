"""The benchmark, as a package: which kernel path, and how does its cost grow with L, in one run.

Book: "What it costs" (chapters/11_what_it_costs.ipynb), which plots a committed
CPU run with the figure code of ``relpos_core.figures.bench``.

* ``presets``: quick (tests), cpu, gpu; a preset's size picks each scheme's distance
  parameter through its declaration;
* ``cases``: every path of ``relpos_core.registry`` and the declared Hugging Face modules;
* ``run``: preparation, interleaved timing (``relpos_core.measure.timing``, shared with the
  decode benchmark), memory from one profiler session per length
  (``relpos_core.measure.profile``), ratios and growth exponents;
* ``stats``: the arithmetic (spread, exponents, ratios, monotonicity);
* ``report``: the text table and the HTML figure page;
* ``python -m relpos_core.bench``: the command line (``relpos_core.bench.__main__``).
"""
from . import cases, presets, report, run, stats
from .presets import MAX_LENGTH, PRESETS, SCHEMA, resolve_preset
from .report import format_table
from .run import run_benchmark

__all__ = ["cases", "presets", "report", "run", "stats", "PRESETS", "SCHEMA", "MAX_LENGTH", "resolve_preset",
           "format_table", "run_benchmark"]
