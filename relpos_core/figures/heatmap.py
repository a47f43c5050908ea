"""Labelled heatmaps for [Lq, Lk] matrices: offsets, bucket ids, biases, attention.

Rows are queries (i, top to bottom), columns are keys (j, left to right), the way
every chapter draws them. The defaults follow the book's figure rules:

* a sequential colour scale for data of one sign (indices, bytes, weights), a
  diverging one centred on zero only when the data has both signs;
* a colour bar titled with the quantity (``value_label``) and its unit, with integer
  ticks for integer data, and hover text that names the quantity, rounds its value and
  says "masked" for a masked (NaN) cell;
* a tick label every 1, 2, 4, 8, 16, ... cells, as many as fit the rendered width;
  values written in the cells only when the cells are wide enough to read them
  (both re-checked in the browser for the real width, see ``_fit.py``);
* a layout for every width: at the book's column width (672 px at a 1280 px window)
  the panels sit side by side, or two per row when that is what lets their numbers
  show; in a container narrower than ``meta.relpos.narrow.below`` px (a phone) the
  figure script switches to the narrow layout, one panel per row with the colour bar
  below them, so each panel gets the whole width and keeps its numbers (panels without
  numbers, patterns, two per row and square);
* at most ``style.MAX_HEIGHT`` px tall with a slider's 80 px added, at the column
  width;
* explicit axis ranges, so a slider over such figures never crops a frame.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .._validate import check_int
from . import _fit
from ._plotly import plotly_modules
from .style import MAX_HEIGHT, readable

SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"

#: the container width (px) under which the narrow layout is used, unless the wide
#: one needs more room for its cell numbers
NARROW_BELOW = 600
#: the width (px) the narrow layout is planned for (the column at a 390 px phone)
NARROW_WIDTH = 342
#: how tall the stacked panels of the narrow layout may be together (px), so that a
#: slider below them is still on a phone's screen; panels that need more for their
#: numbers get it (they are read one after another, like separate figures)
NARROW_HEIGHT = 700
#: the slider control's height (px), kept free under MAX_HEIGHT (see slider.SLIDER_PX)
SLIDER_ROOM = 80
#: the narrowest panel (px) worth drawing side by side with another
MIN_PANEL_PX = 140
#: px above a panel's plot area: its top tick labels, the x-axis title and the panel
#: title (one line; each more line of a wrapped title adds TITLE_LINE_PX)
AXIS_BLOCK_PX = 54
TITLE_LINE_PX = 18
#: room the vertical colour bar takes right of the panels (px)
COLORBAR_PX = 90
#: room the horizontal colour bar of the narrow layout takes below the panels (px)
COLORBAR_ROW_PX = 76


MAX_HEATMAP_CELLS = 512 * 512  # cells of one matrix: a browser draws (and writes a hover text for) each one
MAX_HEATMAP_VALUE = 1e100  # finite values beyond it would overflow the colour range's arithmetic


def _as_matrix(name: str, matrix) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        if matrix.is_complex():
            raise ValueError(f"{name} must hold real numbers, got a {matrix.dtype} tensor")
        shape = tuple(matrix.shape)
        if len(shape) == 2 and shape[0] * shape[1] > MAX_HEATMAP_CELLS:
            raise ValueError(f"{name} must have at most {MAX_HEATMAP_CELLS} cells (512 x 512), got shape {shape}")
        dtype = torch.float64 if matrix.is_floating_point() else torch.int64
        matrix = matrix.detach().cpu().to(dtype).numpy()
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [Lq, Lk] matrix, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(
            f"{name} must have at least one row and one column, got shape {array.shape}"
        )
    if array.size > MAX_HEATMAP_CELLS:
        raise ValueError(f"{name} must have at most {MAX_HEATMAP_CELLS} cells (512 x 512), got shape {array.shape}")
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers (bool, integer or float), got dtype {array.dtype}")
    finite = array[np.isfinite(array)] if array.dtype.kind == "f" else array
    if finite.size and float(np.abs(finite.astype(np.float64)).max()) > MAX_HEATMAP_VALUE:
        raise ValueError(f"{name} must hold finite values within +-{MAX_HEATMAP_VALUE:g} (inf and nan are drawn "
                         f"as empty cells), got {float(np.abs(finite.astype(np.float64)).max()):g}")
    return array


def _check_range(zmin, zmax, zmid) -> None:
    for name, value in (("zmin", zmin), ("zmax", zmax), ("zmid", zmid)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
                math.isfinite(value) and abs(value) <= MAX_HEATMAP_VALUE):
            raise ValueError(f"{name} must be None or a finite number within +-{MAX_HEATMAP_VALUE:g}, got {value!r}")
    if zmin is not None and zmax is not None and not zmin < zmax:
        raise ValueError(f"zmin must be less than zmax, got zmin={zmin!r}, zmax={zmax!r}")


def _format_values(array: np.ndarray, fmt: str) -> list[str]:
    """The strings plotly will write in the cells (for the width they need)."""
    finite = array[np.isfinite(array)]
    if finite.size == 0:
        return [""]
    extremes = [finite.min(), finite.max()]
    if fmt == "%{z:d}":
        return [str(int(v)) for v in extremes]
    decimals = 2
    if fmt.startswith("%{z:.") and fmt.endswith("f}"):
        decimals = int(fmt[5:-2])
    return [f"{v:.{decimals}f}" for v in extremes]


def _hover_value(v: float, integer: bool) -> str:
    """A cell's value as the hover shows it: exact for integers, 3 significant digits
    otherwise, "masked" for a masked (NaN) cell."""
    if not math.isfinite(v):
        return "masked" if math.isnan(v) else ("+∞" if v > 0 else "−∞")
    if integer:
        text = str(int(v))
    elif v == 0:
        text = "0"
    elif abs(v) >= 1000:
        text = f"{v:,.0f}"
    else:
        text = f"{v:.3g}"
    return text.replace("-", "−")


def integer_ticks(lo: float, hi: float, most: int = 8) -> dict:
    """Colour-bar tick settings for integer data from ``lo`` to ``hi``: integer ticks
    only, every 1, 2, 5, 10, 20, ... cells' worth, so that at most ``most`` show."""
    span = max(hi - lo, 1)
    step = 1
    while span / step > most - 1:
        step = _next_step(step)
    return dict(tickmode="linear", tick0=0, dtick=step, tickformat="d")


def _next_step(step: int) -> int:
    """1, 2, 5, 10, 20, 50, ..."""
    digits = str(step)
    lead, zeros = int(digits[0]), len(digits) - 1
    return {1: 2, 2: 5, 5: 10}[lead] * 10**zeros


@dataclass
class _Panel:
    array: np.ndarray
    title: str
    xs: list[str]
    ys: list[str]
    fmt: str
    integer: bool
    cell_need: float  # px a cell needs for its number
    wants_text: bool
    labels: list[list[str]] | None = None  # cell_text: words written instead of the values

    def need(self, font: int) -> float:
        """px a cell needs for its number at ``font`` px (``cell_need`` is at 11 px)."""
        return (self.cell_need - 5) * font / (_fit.FONT_PX - 1) + 5

    @property
    def rows(self) -> int:
        return self.array.shape[0]

    @property
    def cols(self) -> int:
        return self.array.shape[1]


@dataclass
class _Plan:
    """Where the panels go for one container width: ``columns`` panels per row."""

    columns: int
    width: float  # the container width planned for (px)
    narrow: bool
    left: float
    right: float
    top: float
    bottom: float
    panel_w: float
    panel_h: list[float]  # per row of panels
    header: list[float]  # px above each row of panels (its titles and top ticks)
    gap_x: float
    text: list[bool]  # per panel: numbers fit
    font: int = _fit.FONT_PX - 1  # px of the cell numbers

    @property
    def height(self) -> int:
        return int(round(self.top + sum(self.panel_h) + sum(self.header[1:]) + self.bottom))


def _title_lines(text: str, width_px: float) -> int:
    """Lines ``text`` wraps into at ``width_px`` (the rule of ``_plotly.FIT_JS``)."""
    if not text:
        return 0
    per_line = max(8, int(width_px // 7.8))
    lines, line = 1, ""
    for word in text.split(" "):
        if line and len(line + " " + word) > per_line:
            lines, line = lines + 1, word
        else:
            line = f"{line} {word}" if line else word
    return lines


def _plan(panels: list[_Panel], *, columns: int, width: float, narrow: bool, left: float,
          title: bool, height: int | None, font: int = _fit.FONT_PX - 1, bar_px: float = 0) -> _Plan:
    """Where the panels go: ``columns`` per row in a container ``width`` px wide, cell
    numbers at ``font`` px, and at least ``bar_px`` of plot height for a vertical colour
    bar's title (cells grow taller than wide rather than the title run off the figure)."""
    n = len(panels)
    rows_of_panels = -(-n // columns)
    same_rows = all(p.rows == panels[0].rows for p in panels)
    gap_x = 28 if same_rows else left
    right = 16 if narrow else COLORBAR_PX
    panel_w = (width - left - right - gap_x * (columns - 1)) / columns
    top_extra = 34 if title else 0
    bottom = COLORBAR_ROW_PX if narrow else 24
    header = []
    for r in range(rows_of_panels):
        row = panels[r * columns:(r + 1) * columns]
        lines = max([_title_lines(p.title, panel_w) for p in row] + [0])
        # the first row's header is the top margin; the others are gaps between rows
        header.append((AXIS_BLOCK_PX + TITLE_LINE_PX * lines if lines else 40) + (8 if r == 0 else 16))
    top = header[0] + top_extra
    if height is not None:
        budget = height - top - bottom - sum(header[1:])
    elif narrow:
        budget = NARROW_HEIGHT - top - bottom - sum(header[1:])
    else:
        budget = MAX_HEIGHT - SLIDER_ROOM - top - bottom - sum(header[1:])
    share = max(budget / rows_of_panels, 80.0)
    panel_h, text = [], []
    for r in range(rows_of_panels):
        row = panels[r * columns:(r + 1) * columns]
        tallest = max(p.rows for p in row)
        widest = max(p.cols for p in row)
        square = panel_w / widest * tallest
        if height is not None:
            h = share
        else:
            # numbers that fit across get rows tall enough to read them (on a phone
            # even beyond the height budget)
            fits_across = any(p.wants_text and panel_w / p.cols >= p.need(font) for p in row)
            legible = tallest * (_fit.LINE_PX + 2) if fits_across else 0  # the least that reads
            # on a phone beyond the height budget if the numbers need it (read panel by panel)
            h = min(square, max(share, legible)) if narrow else min(square, share)
            h = max(h, min(square, 80.0))
        panel_h.append(h)
    short = bar_px - sum(panel_h) - sum(header[1:]) if not narrow and height is None else 0
    if short > 0:
        panel_h = [h + short / rows_of_panels for h in panel_h]
    for r in range(rows_of_panels):
        row = panels[r * columns:(r + 1) * columns]
        tallest = max(p.rows for p in row)
        text += [p.wants_text and _fit.text_fits(panel_w / p.cols, panel_h[r] / tallest, p.need(font))
                 for p in row]
    return _Plan(columns, width, narrow, left, right, top, bottom, panel_w, panel_h, header,
                 gap_x, text, font)


def _choose_wide(panels, *, width, left, title, height, bar_px=0) -> _Plan:
    """Side by side if the numbers fit (or none are wanted), else fewer panels per row:
    the most panels per row that still shows every panel's numbers."""
    n = len(panels)
    counts = sorted({-(-n // rows) for rows in range(1, n + 1)}, reverse=True)  # 4 -> 4, 2, 1
    plans = [_plan(panels, columns=c, width=width, narrow=False, left=left, title=title,
                   height=height, bar_px=bar_px) for c in counts]
    wanted = [p.wants_text for p in panels]
    for plan in plans:
        if plan.text == wanted and (plan.panel_w >= MIN_PANEL_PX or plan.columns == 1):
            return plan
    for plan in plans:  # the numbers fit nowhere: the most per row that stays readable
        if plan.panel_w >= MIN_PANEL_PX:
            return plan
    return plans[-1]


def _below(panels, wide: _Plan, *, left, title, height, bar_px=0) -> int:
    """The container width under which the narrow layout replaces ``wide``: 600 px, or
    more when ``wide`` needs more to show its numbers or to keep its panels readable."""
    for w in range(NARROW_BELOW, int(wide.width) + 1, 8):
        plan = _plan(panels, columns=wide.columns, width=w, narrow=False, left=left, title=title,
                     height=height, bar_px=bar_px)
        if plan.text == wide.text and (plan.panel_w >= MIN_PANEL_PX or plan.columns == 1):
            return w
    return int(wide.width)


def _figure(go, make_subplots, panels, plan: _Plan, *, style: dict):
    """The plotly figure of ``panels`` laid out by ``plan``."""
    n = len(panels)
    c = plan.columns
    r_count = -(-n // c)
    fig = make_subplots(rows=r_count, cols=c, subplot_titles=[p.title for p in panels]
                        + [""] * (r_count * c - n))
    total_w = plan.width - plan.left - plan.right
    total_h = plan.height - plan.top - plan.bottom
    colorbar = dict(title=dict(text=style["colorbar_title"], side="top" if plan.narrow else "right"),
                    thickness=12 if plan.narrow else 14, outlinewidth=0, **style["ticks"])
    if plan.narrow:  # across the bottom, under the last panel (a slider goes below it)
        colorbar.update(orientation="h", x=0.5, xanchor="center", len=1.0, lenmode="fraction",
                        y=-14 / total_h, yanchor="top", ypad=0)
    meta = {"axes": {}, "text": [], "titles": []}
    y_cursor = 0.0  # px from the top of the plot area
    domains = []
    for r in range(r_count):
        if r > 0:
            y_cursor += plan.header[r]
        top_px, bottom_px = y_cursor, y_cursor + plan.panel_h[r]
        y_cursor = bottom_px
        domains.append([1 - bottom_px / total_h, 1 - top_px / total_h])
    for k, panel in enumerate(panels):
        r, col = divmod(k, c)
        x0 = col * (plan.panel_w + plan.gap_x) / total_w
        x_domain = [max(0.0, x0), min(1.0, x0 + plan.panel_w / total_w)]
        y_domain = [max(0.0, domains[r][0]), min(1.0, domains[r][1])]
        shown = np.where(np.isfinite(panel.array), panel.array, np.nan)
        hover = [[[x, y, _hover_value(float(v), panel.integer)] for x, v in zip(panel.xs, row)]
                 for y, row in zip(panel.ys, panel.array.astype(float))]
        last = k == n - 1
        fig.add_trace(go.Heatmap(
            z=shown.tolist(), x=list(range(panel.cols)), y=list(range(panel.rows)), customdata=hover,
            colorscale=style["scale"], zmid=style["centre"], zmin=style["lo"], zmax=style["hi"],
            showscale=last, colorbar=colorbar if last else None,
            text=panel.labels, texttemplate=panel.fmt if plan.text[k] else "",
            textfont=dict(size=plan.font),
            hovertemplate=(f"{style['y_label']} %{{customdata[1]}}<br>{style['x_label']} %{{customdata[0]}}"
                           f"<br>{style['value_label']} %{{customdata[2]}}<extra></extra>"),
        ), row=r + 1, col=col + 1)
        x_need = _fit.label_px(panel.xs, horizontal=True)
        y_need = _fit.label_px(panel.ys, horizontal=False)
        x_vals, x_text = _fit.ticks(panel.xs, plan.panel_w, x_need)
        y_vals, y_text = _fit.ticks(panel.ys, plan.panel_h[r], y_need)
        # rows are labelled once per row of panels when the panels share them
        shares_rows = col > 0 and panel.rows == panels[k - col].rows
        fig.update_xaxes(
            title_text=style["x_label"], side="top", tickangle=0, tickmode="array", tickvals=x_vals,
            ticktext=x_text, range=[-0.5, panel.cols - 0.5], autorange=False, showgrid=False,
            zeroline=False, ticks="outside", ticklen=3, domain=x_domain, automargin=False,
            title_standoff=6, row=r + 1, col=col + 1,
        )
        fig.update_yaxes(
            title_text=style["y_label"] if col == 0 else None, tickmode="array", tickvals=y_vals,
            ticktext=y_text, range=[panel.rows - 0.5, -0.5], autorange=False, showgrid=False,
            zeroline=False, ticks="outside", ticklen=3, showticklabels=not shares_rows,
            automargin=True, domain=y_domain, row=r + 1, col=col + 1,
        )
        suffix = "" if k == 0 else str(k + 1)
        meta["axes"][f"xaxis{suffix}"] = dict(labels=panel.xs, need=x_need)
        if not shares_rows:
            meta["axes"][f"yaxis{suffix}"] = dict(labels=panel.ys, need=y_need)
        if panel.wants_text:
            meta["text"].append(dict(trace=k, template=panel.fmt, need=panel.need(plan.font)))
    for k in range(n, r_count * c):  # an empty cell of the grid (3 panels, 2 per row)
        r, col = divmod(k, c)
        fig.update_xaxes(visible=False, row=r + 1, col=col + 1)
        fig.update_yaxes(visible=False, row=r + 1, col=col + 1)
    # panel titles above their top axis labels, centred on their panel; the browser
    # wraps one that is wider than its panel (meta "titles")
    titled = [k for k, p in enumerate(panels) if p.title]  # make_subplots skips ""
    for index, (annotation, k) in enumerate(zip(fig.layout.annotations, titled)):
        suffix = "" if k == 0 else str(k + 1)
        x_domain = fig.layout[f"xaxis{suffix}"].domain
        y_domain = fig.layout[f"yaxis{suffix}"].domain
        annotation.update(x=(x_domain[0] + x_domain[1]) / 2, y=y_domain[1], yanchor="bottom",
                          yshift=AXIS_BLOCK_PX, font=dict(size=14))
        meta["titles"].append(dict(index=index, text=annotation.text, axis=f"xaxis{suffix}"))
    fig.update_layout(
        title=dict(text=style["title"], y=1, yref="container", yanchor="top", pad=dict(t=8),
                   font=dict(size=15))
        if style["title"] else None,
        height=plan.height,
        margin=dict(l=plan.left, r=20 if not plan.narrow else plan.right, t=plan.top, b=plan.bottom),
        plot_bgcolor="white",  # masked (NaN) cells stay blank (the page's own colour in dark mode)
        font=dict(size=_fit.FONT_PX),
        meta={"relpos": meta},
    )
    return fig


def _cell_text(cell_text, arrays, many) -> list:
    """``cell_text`` as one list of row lists of strings per matrix (None: the values)."""
    if cell_text is None:
        return [None] * len(arrays)
    per_matrix = list(cell_text) if many else [cell_text]
    if len(per_matrix) != len(arrays):
        raise ValueError(f"cell_text must have one entry per matrix ({len(arrays)}), got {len(per_matrix)}")
    out = []
    for n, (words, array) in enumerate(zip(per_matrix, arrays)):
        rows = [list(row) for row in words]
        if [len(row) for row in rows] != [array.shape[1]] * array.shape[0] or \
                not all(isinstance(w, str) for row in rows for w in row):
            raise ValueError(f"cell_text[{n}] must be {array.shape[0]} rows of {array.shape[1]} strings, "
                             f"one per cell of its {array.shape} matrix")
        out.append(rows)
    return out


def heatmap(
    matrices,
    *,
    titles: Sequence[str] | str | None = None,
    title: str | None = None,
    x_label: str = "key j",
    y_label: str = "query i",
    x_ticks: Sequence | None = None,
    y_ticks: Sequence | None = None,
    colorscale: str | None = None,
    zmid: float | None = 0.0,
    zmin: float | None = None,
    zmax: float | None = None,
    value_format: str | None = None,
    annotate_max: int = 16,
    height: int | None = None,
    value_label: str = "value",
    colorbar_title: str | None = None,
    cell_text=None,
):
    """One heatmap, or several side by side, as a plotly figure.

    ``matrices``: an [Lq, Lk] tensor/array, or a list of them (drawn side by side with
    a shared colour scale; one per row on a phone). ``x_ticks`` / ``y_ticks`` label the
    columns and rows (default: 0..Lk-1 and 0..Lq-1). Values are written in the cells
    when both sides are at most ``annotate_max`` and the cells are wide enough to read
    them.

    ``value_label`` names the quantity in the hover text ("offset j − i", "bucket",
    "bias"); ``colorbar_title`` (default: ``value_label``) titles the colour bar, unit
    included. ``cell_text``: a label per cell (rows of strings, one such list per matrix
    when there are several) written in the cells instead of the values, e.g. which
    scheme a cell stands for while the colour shows a quantity. ``colorscale=None`` picks
    a sequential scale for data of one sign and a diverging one, centred on ``zmid``,
    for data of both signs. Labels and titles may
    use LaTeX-like sub- and superscripts (``θ_k``, ``R_p``): they are written as text
    (``style.readable``). ``height`` fixes the height at the column width (px); by
    default it follows the data, at most ``style.MAX_HEIGHT`` less a slider's room.
    """
    go, _ = plotly_modules()
    from plotly.subplots import make_subplots

    many = isinstance(matrices, (list, tuple))
    if many and not matrices:
        raise ValueError("matrices must hold at least one matrix, got an empty list")
    arrays = (
        [_as_matrix(f"matrices[{n}]", m) for n, m in enumerate(matrices)]
        if many
        else [_as_matrix("matrix", matrices)]
    )
    annotate_max = check_int("annotate_max", annotate_max, min_value=0)
    labels = _cell_text(cell_text, arrays, many)
    _check_range(zmin, zmax, zmid)
    if height is not None:
        height = check_int("height", height, min_value=100, max_value=4000)
    if not isinstance(value_label, str) or not value_label:
        raise ValueError(f"value_label must be a non-empty string, got {value_label!r}")
    if isinstance(titles, str):
        titles = [titles]
    titles = list(titles) if titles is not None else [""] * len(arrays)
    if len(titles) != len(arrays):
        raise ValueError(
            f"titles must have one entry per matrix ({len(arrays)}), got {len(titles)}"
        )
    for array in arrays:
        rows, cols = array.shape
        for name, ticks, n in (("x_ticks", x_ticks, cols), ("y_ticks", y_ticks, rows)):
            if ticks is not None and len(ticks) != n:
                raise ValueError(
                    f"{name} must have one label per {'column' if name[0] == 'x' else 'row'} "
                    f"({n}) for a {array.shape} matrix, got {len(ticks)}"
                )

    finite = [a[np.isfinite(a)] for a in arrays]
    lo = zmin if zmin is not None else min((float(f.min()) for f in finite if f.size), default=0.0)
    hi = zmax if zmax is not None else max((float(f.max()) for f in finite if f.size), default=1.0)
    diverging = lo < 0 < hi if colorscale is None else None
    scale = colorscale or (DIVERGING if diverging else SEQUENTIAL)
    centre = zmid if (zmid is not None and zmin is None and zmax is None and lo < 0 < hi) else None
    every = np.concatenate([f.ravel() for f in finite]) if any(f.size for f in finite) else np.zeros(0)
    integer_data = all(np.issubdtype(a.dtype, np.integer) for a in arrays) or bool(
        np.all(np.mod(every, 1) == 0))
    integer_bar = integer_data and float(lo).is_integer() and float(hi).is_integer()

    panels = []
    for array, panel_title, words in zip(arrays, titles, labels):
        rows, cols = array.shape
        values = array[np.isfinite(array)]
        integer = np.issubdtype(array.dtype, np.integer) or bool(np.all(np.mod(values, 1) == 0))
        fmt = "%{text}" if words is not None else value_format or ("%{z:d}" if integer else "%{z:.2f}")
        panels.append(_Panel(
            array=array, title=readable(panel_title) or "",
            xs=[readable(x) for x in (x_ticks if x_ticks is not None else range(cols))],
            ys=[readable(y) for y in (y_ticks if y_ticks is not None else range(rows))],
            fmt=fmt, integer=bool(integer),
            cell_need=_fit.text_px(_format_values(array, fmt) if words is None else
                                   [w for row in words for w in row]),
            wants_text=0 < max(rows, cols) <= annotate_max, labels=words,
        ))
    y_title = readable(y_label)
    widest_y = max(len(_fit.plain(y)) for p in panels for y in p.ys)
    left = max(50, 24 + widest_y * _fit.CHAR_PX + 10) if y_title else max(36, widest_y * _fit.CHAR_PX + 14)
    style = dict(
        scale=scale, centre=centre, lo=lo, hi=hi, x_label=readable(x_label), y_label=y_title,
        value_label=readable(value_label), title=readable(title),
        colorbar_title=readable(colorbar_title or value_label),
        ticks=integer_ticks(lo, hi) if integer_bar else {},
    )
    has_title = bool(title)
    bar_px = len(_fit.plain(style["colorbar_title"])) * _fit.CHAR_PX + 40  # its rotated title
    wide = _choose_wide(panels, width=_fit.NOMINAL_WIDTH, left=left, title=has_title, height=height,
                        bar_px=bar_px)
    fig = _figure(go, make_subplots, panels, wide, style=style)
    # on a phone: one panel per row; numbers a size smaller if that is what lets them show
    # panels without numbers (patterns) two per row, square, rather than squeezed flat
    columns = 2 if len(panels) > 1 and not any(p.wants_text for p in panels) else 1
    narrow_plan = max((_plan(panels, columns=columns, width=NARROW_WIDTH, narrow=True, left=left,
                             title=has_title, height=None, font=font)
                       for font in (_fit.FONT_PX - 1, _fit.FONT_PX - 2)),
                      key=lambda plan: (sum(plan.text), plan.font))
    narrow = _figure(go, make_subplots, panels, narrow_plan, style=style)
    patch = narrow.layout.to_plotly_json()
    patch.pop("template", None)  # its meta: the tick and cell-number plan for its width
    fig.layout.meta["relpos"]["narrow"] = dict(
        below=_below(panels, wide, left=left, title=has_title, height=height, bar_px=bar_px),
        layout=patch,
        data=[dict(colorbar=t.colorbar.to_plotly_json() if t.showscale else None,
                   texttemplate=t.texttemplate, textfont=t.textfont.to_plotly_json()) for t in narrow.data],
    )
    return fig
