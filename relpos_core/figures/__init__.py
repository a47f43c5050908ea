"""Figures for the book: labelled heatmaps, line charts, sliders that work live and in
static HTML, and numbered tables.

plotly and ipywidgets are imported on first use, not when relpos_core is imported.
``rp.figures.bench`` draws the benchmark's results (chapter 8 and the benchmark's own page);
``rp.figures.concepts`` draws the concept figures of the landing page and chapters 2 to 6.
"""
from . import bench, concepts, style
from .bars import bars
from .heatmap import heatmap
from .lines import line
from .slider import SliderFigure, slider
from .table import NumberedTable, table

__all__ = ["style", "heatmap", "line", "slider", "SliderFigure", "table", "NumberedTable", "bars", "bench", "concepts"]
