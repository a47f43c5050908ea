"""Figures of the KV-cache chapter: cache bytes by kind, position bytes per token, decode speed.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb). plotly is imported on first use
(``relpos_core.figures``), so importing this module needs only torch.
"""
from __future__ import annotations

import functools

import torch

from relpos_core import schemes
from relpos_core._validate import check_choice, check_positive_int
from relpos_core.cache import POSITION_BYTES
from relpos_core.decoding import ledger
from relpos_core.decoding.model import SCHEMES
from relpos_core.figures.style import NEUTRAL, SERIES_COLORS

__all__ = ["COMPONENT_COLOURS", "CONTEXT_COLOURS", "label", "layout_rows", "position_bytes",
           "shared_bytes", "position_bytes_figure", "components_figure", "throughput_baseline", "throughput_figure"]

# one colour per kind of bytes (categories, not schemes: the book's series colours);
# keys and values in the two blues
COMPONENT_COLOURS = {
    "keys": SERIES_COLORS[0],
    "values": SERIES_COLORS[4],
    "position tables": SERIES_COLORS[1],
    "positions": SERIES_COLORS[2],
}
# one colour per context length of the throughput figure (a category, not a scheme)
CONTEXT_COLOURS = SERIES_COLORS


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


@functools.lru_cache(maxsize=4096)
def _state_bytes(scheme: str, num_layers: int, num_heads: int, head_dim: int, context: int, dtype) -> int:
    position = _position_options(scheme, context)
    return ledger.shared_position_bytes(scheme, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                                        context=context, dtype=dtype, position=position)


def shared_bytes(scheme: str, *, num_layers: int, num_heads: int, head_dim: int, context: int, dtype) -> int:
    """``ledger.shared_position_bytes`` of a decoder of ``num_layers`` layers, with the distance
    parameter a medium model gives the scheme, counted on one and two layers.

    Every layer holds the same tensors or shares them, so the bytes are a shared part plus
    one part per layer: ``b1 + (num_layers - 1) * (b2 - b1)``, without building every layer
    (tests/test_decoding.py checks it against the direct count for every scheme).
    """
    check_choice("scheme", scheme, SCHEMES)
    for name, value in (("num_layers", num_layers), ("num_heads", num_heads), ("head_dim", head_dim),
                        ("context", context)):
        check_positive_int(name, value)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    one = _state_bytes(scheme, 1, num_heads, head_dim, context, dtype)
    if num_layers == 1:
        return one
    return one + (num_layers - 1) * (_state_bytes(scheme, 2, num_heads, head_dim, context, dtype) - one)


KEPT_POSITION = "kept position (int64)"


def position_bytes(contexts, *, num_layers: int, num_heads: int, head_dim: int, dtype,
                   stage: str | None = None) -> dict[str, list[float]]:
    """Bytes of position state per cached token of one sequence, at each context length.

    For every scheme (not its variants) that holds position state while decoding: that
    state divided by the context (Transformer-XL's rows cover ``context`` distances), with
    the distance parameter a medium model gives it; and the int64 position a cache keeps
    per token. Schemes that hold none (RoPE, xPos, absolute, none) have no line.
    ``stage``: only the schemes with a piece of that stage ("vector": a vector per
    offset; "scalar": a scalar on the logit), read from their pieces.
    """
    from relpos_core.registry import stages

    if stage is not None:
        check_choice("stage", stage, ("vector", "scalar"))
    out = {}
    for scheme in schemes.SCHEMES:
        if scheme not in SCHEMES:
            continue
        if stage is not None and stage not in stages(scheme):
            continue
        per_token = [shared_bytes(scheme, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim,
                                  context=c, dtype=dtype) / c for c in contexts]
        if any(per_token):
            out[label(scheme)] = per_token
    out[KEPT_POSITION] = [float(POSITION_BYTES) for _ in contexts]
    return out


def position_bytes_figure(series: dict, contexts, *, y_range: tuple[float, float], height: int = 440):
    """Log-log lines of ``position_bytes`` output; ``y_range`` (bytes) is fixed for sliders."""
    import math

    from relpos_core.figures.lines import line, log_ticks

    series = dict(series)
    kept = series.pop(KEPT_POSITION, None)  # the same for every scheme: a reference line, not a legend entry
    dashes = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]
    styles = {name: dict(line=dict(dash=dashes[i % len(dashes)])) for i, name in enumerate(series)}
    fig = line(contexts, series, x_label="context length (tokens)", y_label="bytes per cached token",
               log_x=True, log_y=True, height=height, styles=styles)
    if kept is not None:
        fig.add_hline(y=kept[0], line=dict(color="#888888", dash="dot", width=1))
        # on a log axis an annotation's y is the exponent (a shape's is the value)
        fig.add_annotation(text=KEPT_POSITION, x=1, xref="x domain", xanchor="right", y=math.log10(kept[0]),
                           yref="y", yanchor="top", showarrow=False, font=dict(size=11, color="#555555"),
                           bgcolor="rgba(255, 255, 255, 0.85)")  # legible where lines cross it
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

    Values as ``ledger.bytes_per_token`` gives them (``shared_bytes``), in KiB; the value axis is fixed by the largest
    total at ``context = 1`` so that a slider over the context never rescales it.
    """
    from relpos_core.figures._plotly import plotly_modules

    go, _ = plotly_modules()
    batch = check_positive_int("batch", batch)

    def per_token(scheme, c):  # ledger.bytes_per_token, its shared part counted by shared_bytes
        cache = ledger.cache_bytes(scheme, tokens=c, batch=1, num_layers=num_layers, num_heads=num_heads,
                                   head_dim=head_dim, dtype=dtype)
        out = {kind: n / c for kind, n in cache.items()}
        out["position tables"] = shared_bytes(scheme, num_layers=num_layers, num_heads=num_heads,
                                              head_dim=head_dim, context=c, dtype=dtype) / (c * batch)
        return out

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
                      yaxis=dict(autorange="reversed", automargin=True, dtick=1,
                                 tickfont=dict(size=11)))  # every row named, on a phone too
    return fig


def throughput_baseline(result: dict) -> tuple[str, str | None, str, str]:
    """(scheme, layout, form, backend) the throughput figure divides by: no position term on
    SDPA (``bench.BASELINE``), or absolute positions on SDPA in a run made before the
    ``none`` scheme existed; ValueError when the run has neither."""
    from relpos_core.decoding.bench import BASELINE

    ok = {(r["scheme"], r["layout"], r["form"], r["backend"]) for r in result["results"] if r["status"] == "ok"}
    from relpos_core import schemes

    for base in (BASELINE, (schemes.tokens_baseline(), None, "none", "sdpa")):
        if base in ok:
            return base
    raise ValueError("result must contain a timed step of no position (or absolute positions) on SDPA, the "
                     "figure's baseline; this run has neither")


def throughput_figure(result: dict, *, height: int = 720):
    """Dot plot: each path's decode tokens/s divided by the baseline's (``throughput_baseline``: no
    position on SDPA), one marker per context."""
    from relpos_core.figures._plotly import plotly_modules

    go, _ = plotly_modules()
    base = throughput_baseline(result)
    rows = [r for r in result["results"] if r["status"] == "ok" and "tokens_per_s" in r]
    at = {r["context"]: r["tokens_per_s"] for r in rows if (r["scheme"], r["layout"], r["form"], r["backend"]) == base}
    ratios = {(r["label"], r["context"]): r["tokens_per_s"] / at[r["context"]] for r in rows if r["context"] in at}
    base_name = f"{schemes.lookup(base[0]).display.lower()} on SDPA"
    labels = list(dict.fromkeys(label for label, _ in ratios))
    contexts = sorted({c for _, c in ratios})
    symbols = ["circle", "diamond", "square", "triangle-up", "x"]
    fig = go.Figure()
    for i, c in enumerate(contexts):
        ys = [lab for lab in labels if (lab, c) in ratios]
        fig.add_trace(go.Scatter(
            x=[ratios[(lab, c)] for lab in ys], y=ys, mode="markers", name=f"context {c}",
            marker=dict(size=9, symbol=symbols[i % len(symbols)], color=CONTEXT_COLOURS[i % len(CONTEXT_COLOURS)]),
            hovertemplate="%{y}<br>%{x:.2f} x the speed of " + base_name + "<extra>context " + str(c) + "</extra>"))
    fig.add_vline(x=1.0, line=dict(color=NEUTRAL, dash="dot"))
    every = list(ratios.values())
    ticks = [t for t in (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10) if min(every) / 2 <= t <= max(every) * 2]
    fig.update_layout(height=height, margin=dict(l=10, r=20, t=40, b=60),
                      legend=dict(orientation="h", yanchor="bottom", y=1.01, x=0),
                      xaxis=dict(title=f"tokens/s relative to<br>{base_name}", type="log", tickvals=ticks,
                                 ticktext=[f"{t:g}×" for t in ticks]),
                      yaxis=dict(autorange="reversed", automargin=True, categoryorder="array",
                                 categoryarray=labels, dtick=1, tickfont=dict(size=11)))  # every path named
    return fig
