"""Figures for the book: labelled heatmaps and sliders that work live and in static HTML.

plotly and ipywidgets are imported on first use, not when relpos_core is imported.
"""
from .heatmap import heatmap
from .lines import line
from .slider import SliderFigure, slider

__all__ = ["heatmap", "line", "slider", "SliderFigure"]
