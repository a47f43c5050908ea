"""Figures of chapter 7: cache bytes by component, position bytes per token, decode speed.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb). plotly is imported on
first use (``relpos_core.figures``), so importing this module needs only torch.
"""
from __future__ import annotations

from relpos_core import schemes
from relpos_core.cache import POSITION_BYTES
from relpos_core.decoding import ledger
from relpos_core.decoding.model import SCHEMES

__all__ = ["COMPONENT_COLOURS", "label", "layout_rows", "position_bytes", "position_bytes_figure",
           "components_figure", "throughput_figure"]

# one colour per kind of bytes (categories, not a scale); keys and values in two blues
COMPONENT_COLOURS = {
    "keys": "#4c78a8",
    "values": "#9ecae9",
    "position tables": "#e45756",
    "positions": "#54a24b",
}


def _position_options(scheme: str, context: int) -> dict:
    """The distance parameter a medium-sized model gives the scheme (its declaration says), for the figures."""
    distance = schemes.lookup(scheme).scheme.distance
    if distance is None or distance.follows_length:
        return {}
    return {distance.name: distance.for_preset("medium", context)}


def label(scheme: str, layout: str | None = None) -> str:
    """A scheme's display name, and its cache layout when it has two."""
    name = schemes.lookup(scheme).display
    return f"{name}, {layout} keys" if layout is not None and len(ledger.layouts(scheme)) > 1 else name


def layout_rows() -> list[tuple[str, str | None]]:
    """(scheme, layout) for every scheme a decoder can use and every cache layout it decodes with."""
    return [(s, lay) for s in SCHEMES for lay in ledger.layouts(s)]


def position_bytes(contexts, *, num_layers: int, num_heads: int, head_dim: int, dtype) -> dict[str, list[float]]:
    """Bytes of position state per cached token of one sequence, at each context length.

    For every scheme (not its variants) that holds position state while decoding: that
    state divided by the context (Transformer-XL's rows cover ``context`` distances), with
    the distance parameter a medium model gives it; and the int64 position a cache keeps
    per token. Schemes that hold none (RoPE, xPos, absolute, none) have no line.
    """
    out = {}
    for scheme in schemes.SCHEMES:
        if scheme not in SCHEMES:
            continue
        per_token = [ledger.shared_position_bytes(scheme, num_layers=num_layers, num_heads=num_heads,
                                                  head_dim=head_dim, context=c, dtype=dtype,
                                                  position=_position_options(scheme, c)) / c for c in contexts]
        if any(per_token):
            out[label(scheme)] = per_token
    out["kept position (int64)"] = [float(POSITION_BYTES) for _ in contexts]
    return out


def position_bytes_figure(series: dict, contexts, *, y_range: tuple[float, float], height: int = 440):
    """Log-log lines of ``position_bytes`` output; ``y_range`` (bytes) is fixed for sliders."""
    import math

    from relpos_core.figures.lines import line, log_ticks

    dashes = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
    styles = {name: dict(line=dict(dash=dashes[i % len(dashes)])) for i, name in enumerate(series)}
    fig = line(contexts, series, x_label="context length (tokens)", y_label="bytes per cached token",
               log_x=True, log_y=True, height=height, styles=styles)
    fig.update_yaxes(range=[math.log10(y_range[0]), math.log10(y_range[1])], exponentformat="power",
                     **log_ticks(*y_range))
    fig.update_xaxes(tickvals=list(contexts), ticktext=[_short(c) for c in contexts])
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, xanchor="left"),
                      margin=dict(t=80))
    return fig


def _short(n: int) -> str:
    """16, 256, 1k, 64k: tick labels that fit a phone's width."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def components_figure(context: int, *, num_layers: int, num_heads: int, head_dim: int, dtype, batch: int = 1,
                      height: int = 520):
    """Stacked horizontal bars: bytes per cached token of one sequence, by kind, for every
    scheme and layout (the long labels read on a phone).

    Values from ``ledger.bytes_per_token`` in KiB; the value axis is fixed by the largest
    total at ``context = 1`` so that a slider over the context never rescales it.
    """
    from relpos_core.figures._plotly import plotly_modules

    go, _ = plotly_modules()
    sizes = dict(batch=batch, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim, dtype=dtype)

    def per_token(scheme, c):
        return ledger.bytes_per_token(scheme, context=c, position=_position_options(scheme, c), **sizes)

    rows = {(s, lay): per_token(s, context) for s, lay in layout_rows()}
    ceiling = max(sum(per_token(s, 1).values()) for s, _ in rows)
    names = [label(s, lay) for s, lay in rows]
    fig = go.Figure()
    for kind, colour in COMPONENT_COLOURS.items():  # one bar per scheme, its parts stacked
        fig.add_trace(go.Bar(y=names, x=[rows[s][kind] / 1024 for s in rows], orientation="h", name=kind,
                             marker_color=colour,
                             hovertemplate="%{y}<br>" + kind + ": %{x:.4g} KiB per token<extra></extra>"))
    fig.update_layout(barmode="stack", height=height, margin=dict(l=10, r=20, t=40, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0, traceorder="normal"),
                      xaxis=dict(title="KiB per cached token", range=[0, 1.05 * ceiling / 1024]),
                      yaxis=dict(autorange="reversed", automargin=True))
    return fig


def throughput_figure(result: dict, *, height: int = 720):
    """Dot plot: each path's decode tokens/s divided by no position on SDPA's, one marker per context."""
    from relpos_core.decoding.bench import throughput_ratios
    from relpos_core.figures._plotly import plotly_modules

    go, _ = plotly_modules()
    ratios = throughput_ratios(result)
    labels = list(dict.fromkeys(label for label, _ in ratios))
    contexts = sorted({c for _, c in ratios})
    symbols = ["circle", "diamond", "square", "triangle-up", "x"]
    colours = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2"]  # one per context length
    fig = go.Figure()
    for i, c in enumerate(contexts):
        ys = [lab for lab in labels if (lab, c) in ratios]
        fig.add_trace(go.Scatter(
            x=[ratios[(lab, c)] for lab in ys], y=ys, mode="markers", name=f"context {c}",
            marker=dict(size=9, symbol=symbols[i % len(symbols)], color=colours[i % len(colours)]),
            hovertemplate="%{y}<br>%{x:.2f} x the speed of no position on SDPA<extra>context " + str(c) + "</extra>"))
    fig.add_vline(x=1.0, line=dict(color="grey", dash="dot"))
    every = list(ratios.values())
    ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if min(every) / 2 <= t <= max(every) * 2]
    fig.update_layout(height=height, margin=dict(l=10, r=20, t=40, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0),
                      xaxis=dict(title="tokens/s ÷ no position on SDPA", type="log", tickvals=ticks,
                                 ticktext=[f"{t:g}×" for t in ticks]),
                      yaxis=dict(autorange="reversed", automargin=True, categoryorder="array",
                                 categoryarray=labels))
    return fig
