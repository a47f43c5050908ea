"""Labelled heatmaps for [Lq, Lk] matrices: offsets, bucket ids, biases, attention.

Rows are queries (i, top to bottom), columns are keys (j, left to right), the way
every chapter draws them. The defaults follow the book's figure rules:

* a sequential colour scale for data of one sign (indices, bytes, weights), a
  diverging one centred on zero only when the data has both signs;
* a colour bar titled with the quantity (``value_label``) and its unit, and hover
  text that names the quantity instead of saying "value";
* a tick label every 1, 2, 4, 8, 16, ... cells, as many as fit the rendered width;
  values written in the cells only when the cells are wide enough to read them
  (both re-checked in the browser for the real width, see ``_fit.py``);
* explicit axis ranges, so a slider over such figures never crops a frame.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .._validate import check_int
from . import _fit
from ._plotly import plotly_modules

SEQUENTIAL = "Viridis"
DIVERGING = "RdBu_r"


def _as_matrix(name: str, matrix) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        dtype = torch.float64 if matrix.is_floating_point() else torch.int64
        matrix = matrix.detach().cpu().to(dtype).numpy()
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [Lq, Lk] matrix, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(
            f"{name} must have at least one row and one column, got shape {array.shape}"
        )
    return array


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
):
    """One heatmap, or several side by side, as a plotly figure.

    ``matrices``: an [Lq, Lk] tensor/array, or a list of them (drawn side by side with
    a shared colour scale). ``x_ticks`` / ``y_ticks`` label the columns and rows
    (default: 0..Lk-1 and 0..Lq-1). Values are written in the cells when both sides
    are at most ``annotate_max`` and the cells are wide enough to read them.

    ``value_label`` names the quantity in the hover text ("offset j − i", "bucket",
    "bias"); ``colorbar_title`` (default: ``value_label``) titles the colour bar, unit
    included. ``colorscale=None`` picks a sequential scale for data of one sign and a
    diverging one, centred on ``zmid``, for data of both signs.
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

    n = len(arrays)
    spacing = 0.08 if n > 1 else 0.0
    fig = make_subplots(rows=1, cols=n, subplot_titles=titles, horizontal_spacing=spacing)
    size = max(max(a.shape) for a in arrays)
    height = height or int(min(660, 300 + 14 * size))
    top = (150 if title else 120) if any(titles) else (80 if title else 60)
    margin = dict(l=60, r=20, t=top, b=30)
    # the plot area at the nominal width: the colour bar takes about 90 px on the right
    panel_w = (_fit.NOMINAL_WIDTH - margin["l"] - 90) * (1 - spacing * (n - 1)) / n
    panel_h = height - top - margin["b"]
    colorbar = dict(
        title=dict(text=colorbar_title or value_label, side="right"),
        thickness=14,
        outlinewidth=0,
    )
    meta = {"axes": {}, "text": []}
    for col, array in enumerate(arrays, start=1):
        rows, cols = array.shape
        xs = [str(x) for x in (x_ticks if x_ticks is not None else range(cols))]
        ys = [str(y) for y in (y_ticks if y_ticks is not None else range(rows))]
        shown = np.where(np.isfinite(array), array, np.nan)
        values = array[np.isfinite(array)]
        integer = np.issubdtype(array.dtype, np.integer) or bool(np.all(np.mod(values, 1) == 0))
        fmt = value_format or ("%{z:d}" if integer else "%{z:.2f}")
        cell_need = _fit.text_px(_format_values(array, fmt))
        wants_text = 0 < max(rows, cols) <= annotate_max
        text_now = wants_text and _fit.text_fits(panel_w / cols, panel_h / rows, cell_need)
        custom = x_ticks is not None or y_ticks is not None
        hover_x = "%{customdata[0]}" if custom else "%{x}"
        hover_y = "%{customdata[1]}" if custom else "%{y}"
        trace = go.Heatmap(
            z=shown.tolist(),
            x=list(range(cols)),
            y=list(range(rows)),
            customdata=[[[x, y] for x in xs] for y in ys] if custom else None,
            colorscale=scale,
            zmid=centre,
            zmin=lo,
            zmax=hi,
            showscale=(col == n),
            colorbar=colorbar if col == n else None,
            texttemplate=fmt if text_now else "",
            textfont=dict(size=_fit.FONT_PX - 1),
            hovertemplate=(
                f"{y_label} {hover_y}<br>{x_label} {hover_x}<br>"
                f"{value_label} %{{z}}<extra></extra>"
            ),
        )
        fig.add_trace(trace, row=1, col=col)
        x_need = _fit.label_px(xs, horizontal=True)
        y_need = _fit.label_px(ys, horizontal=False)
        x_vals, x_text = _fit.ticks(xs, panel_w, x_need)
        y_vals, y_text = _fit.ticks(ys, panel_h, y_need)
        fig.update_xaxes(
            title_text=x_label, side="top", tickangle=0, tickmode="array", tickvals=x_vals,
            ticktext=x_text, range=[-0.5, cols - 0.5], autorange=False, showgrid=False,
            zeroline=False, ticks="outside", ticklen=3, row=1, col=col,
        )
        # rows are labelled once, on the left panel: side by side, the panels share them
        same_rows = col > 1 and rows == arrays[0].shape[0]
        fig.update_yaxes(
            title_text=y_label if col == 1 else None, tickmode="array", tickvals=y_vals,
            ticktext=y_text, range=[rows - 0.5, -0.5], autorange=False, showgrid=False,
            zeroline=False, ticks="outside", ticklen=3, showticklabels=not same_rows,
            row=1, col=col,
        )
        suffix = "" if col == 1 else str(col)
        meta["axes"][f"xaxis{suffix}"] = dict(labels=xs, need=x_need)
        if not same_rows:
            meta["axes"][f"yaxis{suffix}"] = dict(labels=ys, need=y_need)
        if wants_text:
            meta["text"].append(dict(trace=col - 1, template=fmt, need=cell_need))
    # subplot titles above the top axis labels; the browser wraps one that is wider than
    # its panel (meta "titles")
    meta["titles"] = []
    titled = [c for c, t in enumerate(titles, start=1) if t]  # make_subplots skips ""
    for index, (annotation, col) in enumerate(zip(fig.layout.annotations, titled)):
        annotation.update(yshift=54, font=dict(size=14))
        meta["titles"].append(
            dict(index=index, text=annotation.text, axis="xaxis" if col == 1 else f"xaxis{col}")
        )
    fig.update_layout(
        title=dict(text=title, y=0.98) if title else None,
        height=height,
        margin=margin,
        plot_bgcolor="white",  # masked (NaN) cells stay blank
        font=dict(size=_fit.FONT_PX),
        meta={"relpos": meta},
    )
    return fig
