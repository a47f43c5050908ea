"""Tick spacing and cell labels sized to the rendered figure.

A heatmap of L cells per side is drawn in whatever width the page gives it: about 700
px in the book's column, about 350 px on a phone. Its tick labels and the numbers
written in its cells must stay legible at both. So each heatmap stores in
``layout.meta["relpos"]`` what it would like to show:

* ``axes``: for each axis, the label of every cell and the pixels one label needs;
* ``text``: for each trace, the cell text template and the pixels a cell needs for it.

Python applies it once for :data:`NOMINAL_WIDTH` (so the figure is right even where no
script runs), and the figure's script (``_plotly.FIT_JS``) applies the same rule again
for the width the browser actually gives it, after every redraw, resize and slider step.
The rule: label every ``step``-th cell, ``step`` the smallest of 1, 2, 4, 8, 16, ...
that leaves each label its pixels; write cell text only when a cell has room for it.
"""
from __future__ import annotations

from typing import Sequence

#: the figure width assumed before the browser reports the real one (the book's column
#: at a 1280 px window)
NOMINAL_WIDTH = 672

#: font size of tick labels and cell text (px)
FONT_PX = 12
#: average width of one character of the tick and cell font (px)
CHAR_PX = 7.0
#: height of one line of tick text (px)
LINE_PX = 15


def label_px(labels: Sequence[str], *, horizontal: bool) -> float:
    """Pixels one tick label needs along its axis (x: its width plus a gap; y: a line)."""
    if not horizontal:
        return LINE_PX + 2
    widest = max((len(plain(label)) for label in labels), default=1)
    return widest * CHAR_PX + 10


def tick_step(n_cells: int, length_px: float, need_px: float) -> int:
    """Smallest power of two ``step`` with ``step`` cells at least ``need_px`` wide."""
    step = 1
    cell = length_px / max(n_cells, 1)
    while step * cell < need_px and step < n_cells:
        step *= 2
    return step


def ticks(labels: Sequence[str], length_px: float, need_px: float) -> tuple[list[int], list[str]]:
    """Tick positions (cell indices) and their labels, every ``tick_step``-th cell."""
    step = tick_step(len(labels), length_px, need_px)
    positions = list(range(0, len(labels), step))
    return positions, [str(labels[p]) for p in positions]


def text_fits(cell_w: float, cell_h: float, need_w: float) -> bool:
    """Whether a cell of ``cell_w`` x ``cell_h`` px can hold its text legibly."""
    return cell_w >= need_w and cell_h >= LINE_PX + 1


#: average width of one character of the cell font (11 px: digits, minus, point)
CELL_CHAR_PX = 6.2


def text_px(values: Sequence[str]) -> float:
    """Width a cell needs for the longest of ``values`` at the cell font, with a gap."""
    widest = max((len(v) for v in values), default=1)
    return widest * CELL_CHAR_PX + 5


def plain(text: str) -> str:
    """``text`` without its markup tags (``θ<sub>k</sub>`` -> ``θk``), to measure it."""
    import re

    return re.sub(r"<[^>]*>", "", str(text))
