"""Figures for the book: labelled heatmaps, line charts, sliders that work live and in
static HTML, and numbered tables.

plotly and ipywidgets are imported on first use, not when relpos_core is imported.
``rp.figures.bench`` draws the benchmark's results (chapters/11_what_it_costs.ipynb and
the benchmark's own page, chapters/appendix_benchmark.ipynb), ``rp.figures.peers`` its
run against other implementations;
``rp.figures.concepts`` draws the concept figures of the landing page and the
scheme chapters (chapters/02_shaw_and_skew.ipynb to 06_rope_and_alibi.ipynb);
``rp.figures.intuition`` draws the intuition sliders of chapters/02_shaw_and_skew.ipynb,
chapters/06_rope_and_alibi.ipynb and chapters/07_rope_context_extension.ipynb;
``rp.figures.flowchart`` draws the decision guide of chapters/16_choosing_a_scheme.ipynb.
"""
from . import bench, concepts, intuition, peers, style
from .bars import bars
from .flowchart import flowchart
from .heatmap import heatmap
from .lines import line
from .slider import SliderFigure, slider
from .table import NumberedTable, table

__all__ = ["style", "heatmap", "line", "slider", "SliderFigure", "table", "NumberedTable", "bars", "flowchart", "bench",
           "concepts", "intuition", "peers"]
