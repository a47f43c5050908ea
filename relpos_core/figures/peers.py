"""The peer benchmark's figure: relpos_core's fastest path against the fastest other
implementation, row by row (``python -m relpos_core.bench --preset peers``).

Book: "What it costs" (chapters/11_what_it_costs.ipynb). It reads the result dict the
peers preset writes (``relpos_core.bench.peers.run``, schema ``relpos-bench-peers/1``);
nothing is re-measured.

* ``peers_figure``: one row per (scheme, kernel or module, forward or forward + backward)
  at one length, two points per row: relpos_core's fastest path and the fastest peer, as
  time over the row's fastest contender (1 = the fastest of all);
* ``peers_slider``: the same with a slider over the run's lengths.
"""
from __future__ import annotations

import math

from ._plotly import attach_narrow, plotly_modules
from .style import NEUTRAL, SERIES_COLORS, scheme_label

__all__ = ["row_label", "short_row_label", "peers_figure", "peers_slider", "PEERS_SCHEMA"]

PEERS_SCHEMA = "relpos-bench-peers/1"
_MODE = {"forward": "forward", "train": "forward + backward"}
OURS, PEER = SERIES_COLORS[0], SERIES_COLORS[1]


def _check(result: dict) -> list[int]:
    if not isinstance(result, dict) or result.get("schema") != PEERS_SCHEMA:
        got = result.get("schema") if isinstance(result, dict) else type(result).__name__
        raise ValueError(f"result must be a peers run (schema {PEERS_SCHEMA!r}), got {got!r}")
    return sorted({s["L"] for s in result["summary"]})


def row_label(s: dict) -> str:
    """'T5 buckets, forward', '... forward + backward', or '..., a whole layer' for a module row."""
    what = "whole layer, forward" if s["kind"] == "module" else _MODE[s["mode"]]
    return f"{scheme_label(s['scheme'])}, {what}"


def short_row_label(s: dict) -> str:
    """A phone's label: 'T5 buckets, fwd + bwd', 'T5 buckets, layer'."""
    what = "layer" if s["kind"] == "module" else {"forward": "fwd", "train": "fwd + bwd"}[s["mode"]]
    return f"{scheme_label(s['scheme'])}, {what}"


def peers_figure(result: dict, L: int, *, height: int | None = None):
    """relpos_core's fastest path and the fastest peer per row at length ``L``."""
    lengths = _check(result)
    if L not in lengths:
        raise ValueError(f"L must be one of the run's lengths {lengths}, got {L!r}")
    go, _ = plotly_modules()
    rows = [s for s in result["summary"] if s["L"] == L]
    labels = [row_label(s) for s in rows]
    fig, narrow = go.Figure(), go.Figure()
    for side, name, colour, symbol in (("relpos_core", "relpos_core, its fastest path", OURS, "circle"),
                                       ("peer", "the fastest other implementation", PEER, "diamond-open")):
        xs = [s.get(f"{side}_x") for s in rows]
        text = [s.get(f"{side}_best", "none ran") for s in rows]
        for figure, ys in ((fig, labels), (narrow, [short_row_label(s) for s in rows])):
            figure.add_trace(go.Scatter(
                x=xs, y=ys, mode="markers", name=name, text=text,
                marker=dict(color=colour, symbol=symbol, size=11, line=dict(color=colour, width=2)),
                hovertemplate="%{text}<br>%{x:.2f}x the fastest<extra></extra>"))
    worst = max(max(s.get("relpos_core_x", 1.0), s.get("peer_x", 1.0)) for s in result["summary"])
    height = height or 150 + 34 * len(rows)
    for figure, title in ((fig, "time over the row's fastest contender (1 = fastest)"),
                          (narrow, "time over the row's fastest")):
        figure.add_vline(x=1.05, line=dict(dash="dot", color=NEUTRAL, width=1))  # the caption names it
        figure.update_xaxes(title_text=title, type="log", range=[-0.02, 0.02 + math.log10(worst * 1.08)],
                            zeroline=False)
        figure.update_yaxes(autorange="reversed", type="category", automargin=True, zeroline=False)
        figure.update_layout(height=height, margin=dict(l=10, r=20, t=60, b=60),
                             legend=dict(orientation="h", yref="container", y=1, yanchor="top", x=0,
                                         xanchor="left"))
    narrow.update_layout(height=height + 20, margin=dict(t=80, l=4, r=8))  # the legend takes two rows
    return attach_narrow(fig, narrow)


def peers_slider(result: dict):
    """``peers_figure`` with a slider over the run's lengths (the same axes at every L)."""
    from .slider import slider

    lengths = _check(result)
    rows = max(sum(s["L"] == L for s in result["summary"]) for L in lengths)
    height = 150 + 34 * rows
    return slider(lambda L: peers_figure(result, L, height=height), lengths, name="L")
