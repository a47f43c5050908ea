"""Intuition figures: one picture before the proof, each a slider that works live and in
the static book (``rp.figures.slider``).

Book: chapters/02_shaw_and_skew.ipynb (the skew's read of flat memory),
chapters/06_rope_and_alibi.ipynb (two RoPE vectors at positions i and j) and
chapters/07_rope_context_extension.ipynb (one clock hand per rotary pair).

* :func:`rope_pair_scores` / :func:`rope_angle_slider`: one RoPE pair (head size 2, one
  radian per position) rotated at query position i and key position j
  (``rp.schemes.rope.apply_rope``); the score depends on j - i only
  (``key_minus_query``);
* :func:`skew_reads` / :func:`skew_read_slider`: which cells of the padded (L, L + 1)
  buffer, read as one strip of flat memory, become each row of the Music Transformer's
  skew (``rp.kernels.skew.skew``); entries are labelled by the distance ``j - i``
  (``key_minus_query``);
* :func:`clock_turns` / :func:`clock_hands_slider`: the angle i θ_p of a few rotary
  pairs as clock hands, against the arc each pair turned through in training
  (``rp.kernels.rope_scaling.default_inverse_frequencies``).

Every slider takes one parameter (``rp.figures.slider`` has one control): the RoPE figure
moves both positions at once by sliding over a list of (i, j) pairs. The figures use the
book's letters (chapters/notation.md: i, j the query and key positions, p the pair, θ_p
its frequency); the parameters keep their names (``m``, ``n``, ``k``).
plotly is imported on first use (``relpos_core.figures._plotly``).
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from .._validate import check_int, check_positive_int
from ._plotly import attach_narrow, plotly_modules
from .slider import slider
from .style import NEUTRAL, SERIES_COLORS

__all__ = ["rope_pair_scores", "rope_angle_slider", "skew_reads", "skew_read_slider",
           "SKEW_STEPS", "clock_turns", "clock_hands_slider"]

GREY = "#8c8c8c"  # guides and padding: visible on the light and the dark page
PAD_FILL = "rgba(140, 140, 140, 0.22)"
INK = "#222222"
# one colour per query row of the skew (a sequential scale: rows are ordered)
ROW_SHADES = ("#440154", "#31688e", "#35b779", "#b8de29", "#fde725", "#21918c", "#90d743",
              "#3b528b")
HIGHLIGHT = "#d55e00"  # the cells of the row being read


def _blank(fig, *, height: int, x_range, y_range, square: bool = False) -> None:
    """Axes without ticks, grid or zoom, on fixed ranges."""
    axis = dict(visible=False, fixedrange=True, showgrid=False, zeroline=False)
    fig.update_xaxes(range=list(x_range), **axis)
    fig.update_yaxes(range=list(y_range), **axis)
    if square:
        fig.update_yaxes(scaleanchor="x", scaleratio=1)
    fig.update_layout(height=height, plot_bgcolor="rgba(0,0,0,0)", paper_bgcolor="rgba(0,0,0,0)",
                      showlegend=False, font=dict(size=12), dragmode=False)


def _r(values) -> list[float]:
    """Coordinates rounded to 4 decimals: a drawing needs no more, and each slider frame
    ships its own copy in the page."""
    return [round(float(v), 4) for v in values]


def _minus(x) -> str:
    return str(x).replace("-", "−")


# ------------------------------------------------------------------- 06_rope_and_alibi
def _pairs(pairs) -> list[tuple[int, int]]:
    pairs = [(check_int("m", m, min_value=0), check_int("n", n, min_value=0)) for m, n in pairs]
    if not pairs:
        raise ValueError("pairs must hold at least one (m, n) pair of positions, got none")
    return pairs


def _unit(angle: float) -> torch.Tensor:
    return torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)  # (2,)


def _turned(v: torch.Tensor, position: int) -> torch.Tensor:
    """``v`` (2,) rotated by RoPE at ``position``: head size 2, so theta_0 = 1 rad."""
    from relpos_core.schemes.rope import apply_rope

    return apply_rope(v.view(1, 1, 1, 2), torch.tensor([position]))[0, 0, 0]  # (2,)


def rope_pair_scores(pairs: Sequence[tuple[int, int]], *, q_angle: float = 0.3,
                     k_angle: float = 1.1) -> list[float]:
    """The score ``R(m) q · R(n) k`` of one RoPE pair for every (m, n) of ``pairs``: q and
    k are unit vectors at ``q_angle`` and ``k_angle`` radians, rotated by
    ``rp.schemes.rope.apply_rope`` (head size 2, one radian per position). It equals
    ``cos(k_angle - q_angle + (n - m))``: equal offsets n - m give equal scores."""
    q, k = _unit(q_angle), _unit(k_angle)
    return [float(_turned(q, m) @ _turned(k, n)) for m, n in _pairs(pairs)]


def _rope_angle_figure(m: int, n: int, *, q_angle: float, k_angle: float, height: int):
    go, _ = plotly_modules()
    qm, kn = _turned(_unit(q_angle), m), _turned(_unit(k_angle), n)  # (2,) each
    score = float(qm @ kn)
    fig = go.Figure()
    circle = torch.linspace(0, 2 * math.pi, 61)
    fig.add_trace(go.Scatter(name="rotation: unit circle", x=_r(circle.cos()), y=_r(circle.sin()),
                             mode="lines", line=dict(color=GREY, width=1, dash="dot"), hoverinfo="skip"))
    start = math.atan2(qm[1], qm[0])
    gap = math.remainder(math.atan2(kn[1], kn[0]) - start, 2 * math.pi)  # (-pi, pi]
    arc = torch.linspace(start, start + gap, 40)
    fig.add_trace(go.Scatter(name="rotation: angle between", x=_r(0.3 * arc.cos()), y=_r(0.3 * arc.sin()),
                             mode="lines", line=dict(color=GREY, width=2), hoverinfo="skip"))
    # labels beyond the tips, spread apart when the arrows are close
    spread = max(0.0, 0.7 - abs(gap)) / 2 * (1 if gap >= 0 else -1)
    for vec, label, colour, nudge in ((qm, f"q at i = {m}", SERIES_COLORS[0], -spread),
                                      (kn, f"k at j = {n}", SERIES_COLORS[1], spread)):
        x, y = float(vec[0]), float(vec[1])
        fig.add_trace(go.Scatter(name=f"rotation: {label.split()[0]}", x=_r([0, x]), y=_r([0, y]),
                                 mode="lines+markers",
                                 line=dict(color=colour, width=3),
                                 marker=dict(color=colour, size=[0, 9]), hoverinfo="skip"))
        where = math.atan2(y, x) + nudge
        fig.add_annotation(x=1.3 * math.cos(where), y=1.18 * math.sin(where), showarrow=False,
                           text=label, font=dict(size=13, color=colour))
    _blank(fig, height=height, x_range=(-1.75, 1.75), y_range=(-1.35, 1.35), square=True)
    angle = f"{math.degrees(abs(gap)):.0f}°"
    fig.update_layout(title=dict(text=f"i = {m}, j = {n}: angle {angle}, q·k = {score:.3f}", x=0.5,
                                 xanchor="center", y=0.97, font=dict(size=14)),
                      margin=dict(l=4, r=4, t=40, b=4))
    return fig


def rope_angle_slider(pairs: Sequence[tuple[int, int]], *, q_angle: float = 0.3,
                      k_angle: float = 1.1, height: int = 360, initial=None):
    """A slider over (query position m, key position n) pairs: one RoPE pair (head size 2)
    drawn as the rotated query and key in the plane, the angle between them and, in the
    title, their score (:func:`rope_pair_scores`). One control moves both positions:
    ``rp.figures.slider`` has one parameter, so the pairs list says how m and n move
    together (a fixed offset, or a fixed m and a growing offset)."""
    pairs = _pairs(pairs)
    check_positive_int("height", height, max_value=600)
    return slider(lambda mn: _rope_angle_figure(*mn, q_angle=q_angle, k_angle=k_angle,
                                                height=height),
                  pairs, name="(i, j)", initial=initial)


# -------------------------------------------------------------------- 02_shaw_and_skew
#: the slider steps of :func:`skew_read_slider` before the per-row steps
SKEW_STEPS = ("1 pad", "2 flatten", "3 reshape", "4 slice")


def skew_reads(L: int) -> torch.Tensor:
    """(L, L) int64: the flat index, in the padded (L, L + 1) buffer, that entry (i, j) of
    ``rp.kernels.skew.skew`` reads: (i + 1) L + j, padded row i, column L + j - i.
    Checked against the library's skew on numbered entries (RuntimeError if they differ)."""
    from relpos_core.kernels import skew

    L = check_int("L", L, min_value=2, max_value=8)
    reads = (torch.arange(L)[:, None] + 1) * L + torch.arange(L)[None, :]  # (L, L)
    numbered = torch.arange(1, L * L + 1, dtype=torch.float64).reshape(L, L)  # (L, L)
    flat = torch.nn.functional.pad(numbered, (1, 0)).reshape(-1)  # (L (L + 1),)
    if not torch.equal(flat[reads], skew.skew(numbered)):
        raise RuntimeError("skew_reads disagrees with rp.kernels.skew.skew")
    return reads


def _skew_cell(value: int, L: int) -> tuple[str, str, str]:
    """(text, fill, text colour) of a buffer cell: ``value`` is an entry id i L + r of
    Q Eᵀ, or -1 for the padding."""
    if value < 0:
        return "0", PAD_FILL, None
    row, r = divmod(value, L)
    fill = ROW_SHADES[row % len(ROW_SHADES)]
    rgb = [int(fill[i:i + 2], 16) for i in (1, 3, 5)]
    ink = INK if 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 150 else "white"
    return _minus(r - (L - 1)), fill, ink


def _skew_figure(step: str, L: int, *, height: int):
    go, _ = plotly_modules()
    reads = skew_reads(L)  # (L, L)
    ids = torch.arange(L * L).reshape(L, L)  # (L, L): entry i L + r of Q E^T
    padded = torch.nn.functional.pad(ids, (1, 0), value=-1)  # (L, L + 1), -1 = padding
    flat = padded.reshape(-1).tolist()  # the buffer, in memory order
    size = len(flat)
    steps = list(SKEW_STEPS) + [f"row {i}" for i in range(L)]
    s = steps.index(step)
    row = s - len(SKEW_STEPS) if s >= len(SKEW_STEPS) else None
    fig = go.Figure()
    shapes, notes = [], []  # set once at the end: one add_shape per cell is slow
    numbers = {"x": [], "y": [], "text": [], "color": []}  # each cell's number: one text trace
    lit_at = {"x": [], "y": []}  # the cells the current row reads: one marker trace

    def cell(x, y, value, *, faded=False, outline=None, w=1.0):
        text, fill, ink = _skew_cell(value, L)
        shapes.append(dict(type="rect", x0=x, x1=x + w, y0=y, y1=y + 1, fillcolor=fill,
                           opacity=0.3 if faded else 1.0, layer="below",
                           line=dict(color=GREY, width=1)))
        numbers["x"].append(x + w / 2)
        numbers["y"].append(y + 0.5)
        numbers["text"].append(text)
        numbers["color"].append("rgba(0, 0, 0, 0.3)" if faded else (ink or "#222222"))
        if outline:
            lit_at["x"].append(x + w / 2)
            lit_at["y"].append(y + 0.5)

    # the strip of flat memory, and the runs of it each step calls a row
    lit = set(reads[row].tolist()) if row is not None else set()
    for c, value in enumerate(flat):
        cell(c, 0, value, faded=s >= 3 and c < L, outline=HIGHLIGHT if c in lit else None)
    if s >= 1:  # flat indices under the strip
        for c in range(size):
            notes.append(dict(x=c + 0.5, y=-0.35, text=str(c), showarrow=False,
                              font=dict(size=9, color=GREY)))
    run = L + 1 if s == 0 else L
    runs = [] if s == 1 else [(a, min(a + run, size)) for a in range(0, size, run)]
    for n, (a, b) in enumerate(runs):
        label = (f"row {n}" if s <= 2 else "drop" if n == 0 else f"out {n - 1}")
        bold = row is not None and n == row + 1
        shapes.append(dict(type="line", x0=a + 0.1, x1=b - 0.1, y0=1.25, y1=1.25,
                           line=dict(color=HIGHLIGHT if bold else GREY,
                                     width=3 if bold else 1.5)))
        notes.append(dict(x=(a + b) / 2, y=1.65, text=f"<b>{label}</b>" if bold else label,
                          showarrow=False, font=dict(size=11)))
    # the 2-D view the step gives the same memory
    grids = {0: padded, 2: padded.reshape(L + 1, L), 3: padded.reshape(L + 1, L)[1:]}
    grid = grids.get(min(s, 3))
    if grid is not None:
        rows, cols = grid.shape
        x0 = (size - cols) / 2
        for i in range(rows):
            for j in range(cols):
                junk = s >= 3 and j > i
                outline = HIGHLIGHT if row is not None and i == row else None
                cell(x0 + j, -2.2 - i, int(grid[i, j]), faded=junk, outline=outline)
    titles = {0: f"pad a zero column: ({L}, {L + 1})", 1: f"flatten: {size} cells, no rows",
              2: f"reshape: rows of {L}, ({L + 1}, {L})", 3: f"drop row 0: ({L}, {L})"}
    if row is not None:
        first = int(reads[row, 0])
        titles[s] = f"row {row} reads cells {first}–{first + L - 1}"
    fig.add_trace(go.Scatter(name="skew: cell values", x=numbers["x"], y=numbers["y"],
                             text=numbers["text"], mode="text", hoverinfo="skip",
                             textfont=dict(size=11, color=numbers["color"])))
    fig.add_trace(go.Scatter(name="skew: cells the row reads", x=lit_at["x"], y=lit_at["y"],
                             mode="markers", hoverinfo="skip",
                             marker=dict(symbol="square-open", size=20, color=HIGHLIGHT,
                                         line=dict(width=3, color=HIGHLIGHT))))
    fig.update_layout(shapes=shapes, annotations=notes, showlegend=False)
    _blank(fig, height=height, x_range=(-0.3, size + 0.3), y_range=(-2.4 - (L + 1), 2.0))
    # side margins: the slider's first and last labels ("1 pad", "row 3") stay inside
    fig.update_layout(title=dict(text=titles[s], x=0.5, xanchor="center", y=0.97,
                                 font=dict(size=14)), margin=dict(l=30, r=30, t=40, b=4))
    return attach_narrow(fig, _skew_narrow(fig, size), below=SKEW_NARROW_BELOW)


#: below this container width the strip's cells are under 24 px wide
SKEW_NARROW_BELOW = 560


def _skew_narrow(fig, size: int):
    """The phone layout of a skew step: the strip's cells are about 16 px wide at 390 px,
    so its numbers, outlines and labels shrink with them, the flat index is written under
    every other cell, the side margins narrow (the slider labels still fit) and the figure grows to keep the grid legible."""
    go, _ = plotly_modules()
    narrow = go.Figure(fig)
    narrow.update_traces(textfont_size=9, selector=dict(mode="text"))
    narrow.update_traces(marker=dict(size=12, line=dict(width=2)), selector=dict(mode="markers"))
    notes = []
    for note in fig.layout.annotations:
        flat_index = note.y == -0.35
        if flat_index and int(note.text) % 2:
            continue
        notes.append(go.layout.Annotation(note).update(font_size=8 if flat_index else 10))
    narrow.layout.annotations = notes  # replaced, not merged by index
    narrow.update_layout(margin=dict(l=20, r=20, t=40, b=4),
                         height=int(fig.layout.height * 1.1))
    return narrow


def skew_read_slider(L: int = 4, *, height: int = 380, initial=None):
    """The skew of ``rp.kernels.skew.skew`` on flat memory: the padded (L, L + 1) buffer
    as one strip of L (L + 1) cells (labelled by distance ``j - i``, coloured by query
    row, padding grey), above the 2-D view each step gives it. A slider walks the steps
    (pad, flatten, reshape, slice), then each output row i, outlining the L cells it
    reads (:func:`skew_reads`)."""
    L = check_int("L", L, min_value=2, max_value=8)
    check_positive_int("height", height, max_value=600)
    steps = list(SKEW_STEPS) + [f"row {i}" for i in range(L)]
    return slider(lambda step: _skew_figure(step, L, height=height), steps, name="step",
                  initial=initial)


# ------------------------------------------------------- 07_rope_context_extension
def clock_turns(positions: Sequence[int], pairs: Sequence[int], *, head_dim: int,
                base: float) -> torch.Tensor:
    """(P, K) float64: the turns m θ_k / 2π that pair k of RoPE (θ_k = base^(-2k/d),
    ``rp.kernels.rope_scaling.default_inverse_frequencies``) has made at position m, for
    every m of ``positions`` and k of ``pairs``."""
    from relpos_core.kernels.rope_scaling import default_inverse_frequencies

    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {head_dim}")
    pairs = [check_int("pair", k, min_value=0, max_value=head_dim // 2 - 1) for k in pairs]
    positions = [check_int("position", m, min_value=0) for m in positions]
    if not pairs or not positions:
        raise ValueError("positions and pairs must each hold at least one value")
    theta = default_inverse_frequencies(head_dim, base).double()[pairs]  # (K,)
    m = torch.tensor(positions, dtype=torch.float64)  # (P,)
    return m[:, None] * theta[None, :] / (2 * math.pi)  # (P, K)


def _clock_figure(m: int, pairs, *, head_dim: int, base: float, train_length: int,
                  height: int):
    go, _ = plotly_modules()
    turns = clock_turns([m], pairs, head_dim=head_dim, base=base)[0]  # (K,)
    trained = clock_turns([train_length - 1], pairs, head_dim=head_dim, base=base)[0]
    fig = go.Figure()
    circle = torch.linspace(0, 2 * math.pi, 61)
    columns = 2 if len(pairs) > 1 else 1
    faces, arcs = {"x": [], "y": []}, {"x": [], "y": []}  # every clock's face and arc: one trace each
    for c, k in enumerate(pairs):
        cx, cy = (c % columns) * 2.7, -(c // columns) * 3.1
        colour = SERIES_COLORS[c % len(SERIES_COLORS)]
        # clock convention: 12 o'clock is angle 0, hands turn clockwise
        faces["x"] += _r(cx + circle.sin()) + [None]
        faces["y"] += _r(cy + circle.cos()) + [None]
        seen = min(float(trained[c]), 1.0) * 2 * math.pi  # the arc met in training
        arc = torch.linspace(0, seen, 61)
        arcs["x"] += _r(cx + arc.sin()) + [None]
        arcs["y"] += _r(cy + arc.cos()) + [None]
        angle = 2 * math.pi * float(turns[c])
        fig.add_trace(go.Scatter(name=f"clock: pair {k}'s hand", x=_r([cx, cx + 0.92 * math.sin(angle)]),
                                 y=_r([cy, cy + 0.92 * math.cos(angle)]), mode="lines+markers",
                                 line=dict(color=colour, width=3),
                                 marker=dict(color=colour, size=[6, 9]), hoverinfo="skip"))
        wave = 2 * math.pi * base ** (2 * k / head_dim)
        fig.add_annotation(x=cx, y=cy + 1.45, showarrow=False, font=dict(size=12, color=colour),
                           text=f"<b>pair {k}</b>, λ = {wave:,.0f}" if wave >= 100 else
                           f"<b>pair {k}</b>, λ = {wave:.1f}")
        t = float(turns[c])
        # off the arc: the hand points where no training position put it (a slow pair that
        # completes its turn comes back onto angles it has seen)
        outside = m > train_length - 1 and float(trained[c]) < 1 and t % 1 > float(trained[c])
        note = (f"{t:,.1f}" if t >= 100 else f"{t:.3g}") + " turns"
        note += "<br>off its arc" if outside else ""
        fig.add_annotation(x=cx, y=cy - 1.35, showarrow=False, font=dict(size=11), text=note)
    fig.add_trace(go.Scatter(name="clock: faces", mode="lines", hoverinfo="skip",
                             line=dict(color=GREY, width=1, dash="dot"), **faces))
    fig.add_trace(go.Scatter(name="clock: arcs turned in training", mode="lines", hoverinfo="skip",
                             line=dict(color=NEUTRAL, width=7), opacity=0.45, **arcs))
    rows = math.ceil(len(pairs) / columns)
    _blank(fig, height=height, x_range=(-1.35, (columns - 1) * 2.7 + 1.35),
           y_range=(-(rows - 1) * 3.1 - 1.8, 1.75), square=True)
    times = "L − 1" if m == train_length - 1 else f"{m / train_length:.2g} L"
    fig.update_layout(title=dict(text=f"position i = {m:,} ({times})", x=0.5,
                                 xanchor="center", y=0.98, font=dict(size=14)),
                      margin=dict(l=30, r=40, t=36, b=4))  # room for the slider's end labels
    return fig


def clock_hands_slider(pairs: Sequence[int] = (0, 32, 48, 63),
                       positions: Sequence[int] = (0, 1024, 2048, 4095, 8192, 16384, 32768),
                       *, head_dim: int = 128, base: float = 10000.0,
                       train_length: int = 4096, height: int = 520, initial=None):
    """One clock per rotary pair k of ``pairs``: its hand at the angle m θ_k (12 o'clock
    is 0, clockwise), the grey arc it turned through over positions 0 .. L - 1 of training
    (``train_length``; the whole circle for a pair that completed a turn), and the turns
    made so far (:func:`clock_turns`). A slider moves the position m over ``positions``;
    past the training length a slow pair's hand leaves its arc, and is marked "off its arc"
    while it points outside it (once its turn completes it sweeps the arc again)."""
    pairs = [check_int("pair", k, min_value=0, max_value=head_dim // 2 - 1) for k in pairs]
    if not 1 <= len(pairs) <= 4:
        raise ValueError(f"pairs must hold 1 to 4 pair indices (one clock each), got {len(pairs)}")
    check_positive_int("train_length", train_length)
    check_positive_int("height", height, max_value=600)
    clock_turns(positions, pairs, head_dim=head_dim, base=base)  # validates the rest
    return slider(lambda m: _clock_figure(m, pairs, head_dim=head_dim, base=base,
                                          train_length=train_length, height=height),
                  list(positions), name="i", initial=initial)
