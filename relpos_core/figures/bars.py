"""Horizontal bar charts: one value per labelled recipe (ratios, milliseconds, bytes)."""
from __future__ import annotations

from typing import Mapping, Sequence

from ._plotly import plotly_modules
from .style import NEUTRAL, SERIES_COLORS, readable, scheme_color

__all__ = ["bars"]


def bars(
    values: Mapping[str, float],
    *,
    x_label: str,
    title: str | None = None,
    log_x: bool = False,
    colors: Sequence[str] | Mapping[str, str] | None = None,
    text: Mapping[str, str] | None = None,
    reference: float | None = None,
    reference_label: str | None = None,
    height: int | None = None,
    schemes: Mapping[str, str] | None = None,
):
    """One horizontal bar per entry of ``values`` (label -> value), top to bottom in order.

    ``text`` writes a label at the end of a bar (default: the value); ``reference``
    draws a dotted vertical line (e.g. 1 for "as fast as the baseline") with
    ``reference_label`` above it. ``colors``: one colour per bar (list or label -> colour);
    ``schemes`` maps a bar's label to the registry name of the scheme it stands for, and
    the bar takes that scheme's colour (``style.scheme_color``) where ``colors`` gives none.
    """
    go, _ = plotly_modules()
    if not values:
        raise ValueError("values must hold at least one bar, got an empty mapping")
    labels = list(values)
    unknown = set(schemes or {}) - set(labels)
    if unknown:
        raise ValueError(f"schemes names bars that do not exist: {sorted(unknown)}")
    by_scheme = {k: scheme_color(v) for k, v in (schemes or {}).items()}
    xs = [float(values[k]) for k in labels]
    if log_x and any(x <= 0 for x in xs):
        raise ValueError(f"log_x needs every value > 0, got {dict(zip(labels, xs))}")
    if isinstance(colors, Mapping):
        unknown = set(colors) - set(labels)
        if unknown:
            raise ValueError(f"colors names bars that do not exist: {sorted(unknown)}")
        colour_list = [colors.get(k, by_scheme.get(k, SERIES_COLORS[0])) for k in labels]
    elif colors is not None:
        colour_list = list(colors)
        if len(colour_list) != len(labels):
            raise ValueError(f"colors must have one entry per bar ({len(labels)}), got {len(colour_list)}")
    else:
        colour_list = [by_scheme.get(k, SERIES_COLORS[0]) for k in labels]
    shown = [text.get(k, f"{values[k]:.3g}") if text else f"{values[k]:.3g}" for k in labels]
    fig = go.Figure(go.Bar(x=xs, y=[readable(k) for k in labels], orientation="h", marker_color=colour_list, text=shown,
                           textposition="auto", insidetextanchor="end", cliponaxis=False,
                           hovertemplate="%{y}<br>%{x:.4g}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(title_text=readable(x_label), type="log" if log_x else "linear", automargin=True)
    if log_x:
        lo, hi = min(xs), max(xs)
        if reference is not None:
            lo, hi = min(lo, reference), max(hi, reference)
        import math

        fig.update_xaxes(range=[math.log10(lo) - 0.15, math.log10(hi) + 0.45], dtick=1)  # decades
    else:
        fig.update_xaxes(range=[0, max(xs + [reference or 0]) * 1.25])
    if reference is not None:
        fig.add_vline(x=reference, line=dict(dash="dot", color=NEUTRAL), annotation_text=reference_label,
                      annotation_position="top")
    fig.update_layout(title=readable(title), height=height or 90 + 34 * len(labels), showlegend=False,
                      margin=dict(l=10, r=20, t=60 if title or reference_label else 30, b=50))
    return fig
