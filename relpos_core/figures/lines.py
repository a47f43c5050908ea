"""Line charts: a quantity as a function of L, k, buckets (bytes, time, bucket ids)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch

from ._plotly import plotly_modules
from .style import SERIES_COLORS, known_schemes, readable, scheme_color, scheme_label


def series_color(name: str, schemes: Mapping[str, str] | None = None) -> str | None:
    """The book's colour for a series: its scheme's (``schemes`` maps series names to
    registry names; a series named exactly like a scheme, "RoPE" or "rope", needs no
    entry), or None for a series that is not a scheme."""
    if schemes and name in schemes:
        return scheme_color(schemes[name])
    for scheme in known_schemes():
        if name in (scheme, scheme_label(scheme)):
            return scheme_color(scheme)
    return None


def _as_list(name: str, values) -> list:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().tolist()
    values = list(np.asarray(values).tolist())
    if not values:
        raise ValueError(f"{name} must hold at least one value, got an empty sequence")
    return values


def line(
    x: Sequence,
    series: Mapping[str, Sequence],
    *,
    x_label: str,
    y_label: str,
    title: str | None = None,
    log_x: bool = False,
    log_y: bool = False,
    mode: str = "lines+markers",
    shape: str = "linear",
    height: int = 420,
    styles: Mapping[str, Mapping] | None = None,
    schemes: Mapping[str, str] | None = None,
):
    """One line per entry of ``series`` (name -> y values, one per x), as a plotly figure.

    ``shape="hv"`` draws steps (bucket functions); ``log_x`` / ``log_y`` use log axes (a
    log x axis with at most 12 points is labelled at exactly those points). ``styles``
    maps a series name to plotly trace settings, e.g.
    ``{"measured": dict(mode="markers", marker=dict(symbol="circle-open"))}``.

    A series that stands for a scheme takes the scheme's colour everywhere in the book
    (``style.scheme_color``): name it like the scheme ("RoPE", "ALiBi") or map its name
    to the registry name in ``schemes`` (``{"T5, FlexAttention": "t5"}``); a colour in
    ``styles`` wins. Other series take the book's colour-blind-safe series colours. A
    plot should show at most ``style.MAX_TRACES`` lines (the browser check counts them).
    Labels may use LaTeX-like sub- and superscripts (``θ_k``): they are written as text.
    """
    go, _ = plotly_modules()
    xs = _as_list("x", x)
    if not series:
        raise ValueError("series must name at least one line, got an empty mapping")
    unknown = set(schemes or {}) - set(series)
    if unknown:
        raise ValueError(f"schemes names series that do not exist: {sorted(unknown)}; series are {list(series)}")
    x_text, y_text = readable(x_label), readable(y_label)
    hover = f"{x_text} %{{x}}<br>{y_text} %{{y:.4~g}}<extra>%{{fullData.name}}</extra>"
    fig = go.Figure()
    colours = {str(name): series_color(str(name), schemes) for name in series}
    free = [c for c in SERIES_COLORS if c not in colours.values()]  # no colour twice
    for name in colours:
        if colours[name] is None:
            colours[name] = free.pop(0) if free else None
    for name, ys in series.items():
        ys = _as_list(f"series[{name!r}]", ys)
        if len(ys) != len(xs):
            raise ValueError(
                f"series[{name!r}] must have one value per x ({len(xs)}), got {len(ys)}"
            )
        colour = colours[str(name)]
        fig.add_trace(
            go.Scatter(
                x=xs, y=ys, name=readable(str(name)), mode=mode,
                line=dict(shape=shape, **({"color": colour} if colour else {})),
                marker=dict(color=colour) if colour else None,
                hovertemplate=hover,
            )
        )
        if styles and name in styles:
            fig.data[-1].update(**styles[name])
            trace = fig.data[-1]
            if trace.line.color is not None and _marker_colour(styles[name]) is None:
                trace.marker.color = trace.line.color  # a marker always has its line's colour
    unknown = set(styles or {}) - set(series)
    if unknown:
        raise ValueError(
            f"styles names series that do not exist: {sorted(unknown)}; "
            f"series are {list(series)}"
        )
    fig.update_layout(
        title=dict(text=readable(title), y=0.98) if title else None,
        height=height,
        xaxis=dict(title=x_text, type="log" if log_x else "linear"),
        yaxis=dict(title=y_text, type="log" if log_y else "linear"),
        margin=dict(l=70, r=20, t=90 if title else 50, b=60),
        # above the plot, starting at its left edge: a long legend wraps onto more rows
        # (the top margin grows with it) instead of squeezing the plot
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        showlegend=len(series) > 1,
    )
    # log axes: a few labelled ticks, never one at every minor step
    if log_x and len(xs) <= 12:
        fig.update_xaxes(tickvals=xs, ticktext=[str(x) for x in xs])
    elif log_x:
        fig.update_xaxes(**log_ticks(*_positive_extent(xs)))
    if log_y:
        fig.update_yaxes(**log_ticks(*_positive_extent([y for t in fig.data for y in t.y])))
    return fig


def _marker_colour(style: Mapping):
    """The marker colour a trace style sets, or None (either spelling: ``marker=dict(color=...)``
    or ``marker_color=...``)."""
    marker = style.get("marker") or {}
    return style.get("marker_color", marker.get("color") if isinstance(marker, Mapping) else None)


def log_ticks(low: float, high: float) -> dict:
    """Tick settings for a log axis showing ``low`` to ``high`` (data units): over up to
    three decades, labels at 1, 2 and 5 of each decade written out in full ("20", not
    plotly's bare "2"); up to eight decades one label per decade, beyond that every other
    one (a short axis over many decades otherwise smears its labels together)."""
    import math

    if not (low > 0 and high > low):
        return {}
    decades = math.log10(high / low)
    if decades > 8:
        return dict(dtick=2, tickvals=None)
    if decades > 3:
        return dict(dtick=1, tickvals=None)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    values = [m * 10.0**e for e in range(first, last + 1) for m in (1, 2, 5)]
    margin = 10 ** (0.1 * decades)  # ticks just outside the data still show after padding
    values = [v for v in values if low / margin <= v <= high * margin]
    return dict(tickvals=values, ticktext=[f"{v:,.0f}" if v >= 1 else f"{v:g}" for v in values])


def _positive_extent(values) -> tuple[float, float]:
    positive = [float(v) for v in values if v is not None and np.isfinite(float(v)) and float(v) > 0]
    return (min(positive), max(positive)) if positive else (1.0, 1.0)
