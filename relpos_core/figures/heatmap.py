"""Labelled heatmaps for [Lq, Lk] matrices: offsets, bucket ids, biases, attention.

Rows are queries (i, top to bottom), columns are keys (j, left to right), the way
every chapter draws them. Small matrices (at most ``annotate_max`` on a side) show
their values in the cells.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .._validate import check_int
from ._plotly import plotly_modules


def _as_matrix(name: str, matrix) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().to(torch.float64 if matrix.is_floating_point() else torch.int64).numpy()
    array = np.asarray(matrix)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [Lq, Lk] matrix, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{name} must have at least one row and one column, got shape {array.shape}")
    return array


def heatmap(
    matrices,
    *,
    titles: Sequence[str] | str | None = None,
    title: str | None = None,
    x_label: str = "key j",
    y_label: str = "query i",
    x_ticks: Sequence | None = None,
    y_ticks: Sequence | None = None,
    colorscale: str = "RdBu_r",
    zmid: float | None = 0.0,
    zmin: float | None = None,
    zmax: float | None = None,
    value_format: str | None = None,
    annotate_max: int = 16,
    height: int | None = None,
):
    """One heatmap, or several side by side, as a plotly figure.

    ``matrices``: an [Lq, Lk] tensor/array, or a list of them (drawn side by side with
    a shared colour scale). ``x_ticks`` / ``y_ticks`` label the columns and rows
    (default: 0..Lk-1 and 0..Lq-1). Values are written in the cells when both sides
    are at most ``annotate_max``.
    """
    go, _ = plotly_modules()
    from plotly.subplots import make_subplots

    many = isinstance(matrices, (list, tuple))
    arrays = [_as_matrix(f"matrices[{n}]", m) for n, m in enumerate(matrices)] if many else [_as_matrix("matrix", matrices)]
    if many and not arrays:
        raise ValueError("matrices must hold at least one matrix, got an empty list")
    annotate_max = check_int("annotate_max", annotate_max, min_value=0)
    if isinstance(titles, str):
        titles = [titles]
    titles = list(titles) if titles is not None else [""] * len(arrays)
    if len(titles) != len(arrays):
        raise ValueError(f"titles must have one entry per matrix ({len(arrays)}), got {len(titles)}")

    finite = [a[np.isfinite(a)] for a in arrays]
    lo = zmin if zmin is not None else min((float(f.min()) for f in finite if f.size), default=0.0)
    hi = zmax if zmax is not None else max((float(f.max()) for f in finite if f.size), default=1.0)

    fig = make_subplots(rows=1, cols=len(arrays), subplot_titles=titles, horizontal_spacing=0.08)
    for col, array in enumerate(arrays, start=1):
        rows, cols = array.shape
        xs = list(x_ticks) if x_ticks is not None else list(range(cols))
        ys = list(y_ticks) if y_ticks is not None else list(range(rows))
        if len(xs) != cols or len(ys) != rows:
            raise ValueError(f"x_ticks/y_ticks must have {cols}/{rows} entries for a {array.shape} matrix, got {len(xs)}/{len(ys)}")
        shown = np.where(np.isfinite(array), array, np.nan)
        integer = np.issubdtype(array.dtype, np.integer) or bool(np.all(np.equal(np.mod(array[np.isfinite(array)], 1), 0)))
        fmt = value_format or ("%{z:d}" if integer else "%{z:.2f}")
        trace = go.Heatmap(
            z=shown.tolist(),
            x=[str(x) for x in xs],
            y=[str(y) for y in ys],
            colorscale=colorscale,
            zmid=zmid if (zmin is None and zmax is None and lo < 0 < hi) else None,
            zmin=lo,
            zmax=hi,
            showscale=(col == len(arrays)),
            texttemplate=fmt if max(rows, cols) <= annotate_max else None,
            hovertemplate=f"{y_label} %{{y}}<br>{x_label} %{{x}}<br>value %{{z}}<extra></extra>",
        )
        fig.add_trace(trace, row=1, col=col)
        every_x, every_y = -(-cols // 16), -(-rows // 16)  # at most ~16 tick labels a side, never rotated
        fig.update_xaxes(title_text=x_label, type="category", side="top", tickangle=0,
                         tickmode="linear", tick0=0, dtick=every_x, row=1, col=col)
        fig.update_yaxes(title_text=y_label if col == 1 else None, type="category", autorange="reversed",
                         tickmode="linear", tick0=0, dtick=every_y, row=1, col=col)
    for annotation in fig.layout.annotations:  # subplot titles above the top axis labels
        annotation.update(yshift=48, font=dict(size=14))
    size = max(max(a.shape) for a in arrays)
    fig.update_layout(
        title=dict(text=title, y=0.98) if title else None,
        height=height or int(min(660, 300 + 14 * size)),
        margin=dict(l=60, r=20, t=150 if title else 120, b=30),
    )
    return fig
