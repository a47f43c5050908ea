"""Concept figures: one idea per figure, drawn from the library's own computations.

Book: the landing page (intro.ipynb) and the scheme chapters
(chapters/02_shaw_and_skew.ipynb, chapters/04_transformer_xl.ipynb,
chapters/05_deberta.ipynb, chapters/06_rope_and_alibi.ipynb).

Each function returns a static plotly figure (no slider, no zoom) laid out for the book's
column and still readable on a phone: panels are narrow enough to stand side by side at
390 px, text is at least 11 px, and nothing depends on hovering.

* :func:`position_entry_points`: where each scheme puts its position signal into one
  attention layer, read from the schemes' position terms (``rp.registry``);
  :func:`entry_points_html` draws it as plain HTML boxes that wrap on a phone (the landing
  page: no plotly.js to load), :func:`entry_points_figure` as a plotly figure;
* :func:`rope_rotation`: one RoPE pair in the plane, turned at two pairs of positions
  with the same offset (``rp.schemes.rope.apply_rope``);
* :func:`skew_steps`: the Music Transformer's skew, step by step, on labelled entries
  (``rp.kernels.skew.skew``);
* :func:`memory_reach`: which earlier positions a Transformer-XL layer stack can reach
  through its segment memory (``rp.schemes.transformer_xl.transformer_xl_causal_mask``);
* :func:`emd_flow`: the data flow of DeBERTa's Enhanced Mask Decoder
  (``rp.schemes.deberta.EnhancedMaskDecoder``).

Sign conventions: :func:`skew_steps` labels entries by the offset ``j - i``
(``key_minus_query``); :func:`memory_reach` works with positions only.
plotly is imported on first use (``relpos_core.figures._plotly``).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

import torch

from relpos_core import schemes

from .._validate import check_int, check_positive_int
from ._plotly import plotly_modules

__all__ = ["STAGES", "position_entry_points", "entry_points_html", "entry_points_figure", "rope_rotation", "skew_steps",
           "memory_reach", "memory_reach_figure", "emd_flow"]

FONT = dict(size=12)  # the colour comes from the book's theme (light or dark mode)
GREY = "#8c8c8c"  # outlines, arrows and guides: visible on both themes
PANEL = "rgba(140, 140, 140, 0.14)"  # a box's fill, light enough for both themes
EMPTY = "rgba(140, 140, 140, 0.22)"  # a cell that holds nothing of interest
INK = "#222222"  # text on a light fill

#: the places in one attention layer where a position signal can enter, in data-flow
#: order: (key, what happens there, what the position adds)
STAGES = (
    ("input", "input: x + P", "P: a vector per position"),
    ("rotary", "rotate q and k", "the angle grows with position"),
    ("vector", "logit: q·k + q·a", "a: a vector per offset"),
    ("scalar", "logit: q·k + b", "b: a scalar per offset"),
    ("output", "output: Σ α (v + a)", "a: a vector per offset"),
)

#: each scheme's compact label (its declaration's ``short``)
LABELS = {name: schemes.lookup(name).short for name in schemes.names()}


def _colour(scheme: str) -> str:
    """The book's colour for ``scheme`` (``relpos_core.figures.style``)."""
    from .style import scheme_color

    return scheme_color(scheme)


def _role_colour(role: str) -> str:
    """The colour of the scheme whose declaration stands for ``role`` (``Scheme.roles``: the
    rotation, the segment memory, the relative table, the absolute positions)."""
    return _colour(schemes.with_role(role))


def _text_colour(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (a #rrggbb colour)."""
    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return INK if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


def _blank(fig, *, height: int, x_range, y_range, row=None, col=None) -> None:
    """Axes without ticks, grid or zoom, on fixed ranges."""
    axis = dict(visible=False, fixedrange=True, showgrid=False, zeroline=False)
    fig.update_xaxes(range=list(x_range), **axis, row=row, col=col)
    fig.update_yaxes(range=list(y_range), **axis, row=row, col=col)
    fig.update_layout(height=height, plot_bgcolor="rgba(0,0,0,0)", paper_bgcolor="rgba(0,0,0,0)",
                      showlegend=False, font=FONT, dragmode=False)


def _box(fig, x0, x1, y0, y1, *, fill, line=GREY, dash="solid", xref="x", yref="y") -> None:
    fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, xref=xref, yref=yref, fillcolor=fill,
                  line=dict(color=line, width=1, dash=dash), layer="below")


def _arrow(fig, x0, y0, x1, y1, *, xref="x", yref="y", colour=GREY) -> None:
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref=xref, yref=yref, axref=xref, ayref=yref,
                       showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1.5, arrowcolor=colour,
                       text="")


# ------------------------------------------------------------------------------- landing


def position_entry_points() -> dict[str, list[str]]:
    """Scheme -> the stages of :data:`STAGES` where its position signal enters.

    Read from the position term of each declared scheme (``relpos_core.schemes``; its
    pieces, each of which names its own ``stage``); a scheme whose positions are added to the
    tokens (``Scheme.positions_in_tokens``: absolute) has no term and enters at the input; a
    scheme with no positions (``Scheme.has_positions`` False) enters nowhere and is left out.
    Variants (``shaw_key``, ``kerple_power``, ...) are left out: each enters where its scheme does.
    """
    from relpos_core import registry

    entries = {}
    for scheme, declared in schemes.SCHEMES.items():
        if not declared.has_positions:
            continue
        if declared.positions_in_tokens:
            entries[scheme] = ["input"]
            continue
        entries[scheme] = list(registry.stages(scheme))  # in order, once each
    return entries


class HtmlFigure(str):
    """Markup that Jupyter, Colab and the book show as HTML (``_repr_html_``): a figure
    that needs no script, so a page that shows only such figures loads no plotly.js."""

    def _repr_html_(self) -> str:
        return str(self)


def _html_stage(title: str, detail: str, here: Sequence[str]) -> str:
    """One stage: its box, and a chip in each entering scheme's colour beside it (the
    chips wrap below the box when the column is narrow)."""
    from html import escape

    chips = "".join(
        f'<span style="background:{_colour(s)};color:{_text_colour(_colour(s))};'
        f'border-radius:4px;padding:0.15em 0.5em;white-space:nowrap" data-scheme="{s}">'
        f"{escape(LABELS.get(s, s))}</span>" for s in here)
    box = (f'<div style="flex:0 1 14em;min-width:11em;background:{PANEL};border:1px solid {GREY};'
           f'border-radius:4px;padding:0.3em 0.6em"><b>{escape(title)}</b><br>'
           f'<span style="font-size:0.85em">{escape(detail)}</span></div>')
    return (f'<div style="display:flex;flex-wrap:wrap;align-items:center;gap:0.4em 0.8em">{box}'
            f'<div style="flex:1 1 12em;display:flex;flex-wrap:wrap;gap:0.3em">{chips}</div></div>')


def entry_points_html(entries: Mapping[str, Sequence[str]] | None = None) -> HtmlFigure:
    """Where each scheme puts position into one attention layer, as HTML: the stages of
    :data:`STAGES` top to bottom in data-flow order, an arrow between them, and beside
    each stage a chip in the scheme's colour for every scheme whose signal enters there
    (``entries``, default :func:`position_entry_points`). The same content as
    :func:`entry_points_figure`, drawn without a script: the text keeps its size at any
    width and the chips wrap under their stage on a phone."""
    entries = position_entry_points() if entries is None else {k: list(v) for k, v in entries.items()}
    keys = [key for key, _, _ in STAGES]
    unknown = {s for stages in entries.values() for s in stages} - set(keys)
    if unknown:
        raise ValueError(f"entries name stages that do not exist: {sorted(unknown)}; stages are {keys}")
    # the arrow under the middle of a stage's box (14 em at the diagram's font size)
    arrow = f'<div style="margin:0.1em 0 0.1em 6.2em;color:{GREY}" aria-hidden="true">&#8595;</div>'
    stages = [_html_stage(title, detail, [s for s, st in entries.items() if key in st])
              for key, title, detail in STAGES]
    # left-aligned: a book figure centres its content, which would move the arrows
    return HtmlFigure('<div class="relpos-entry-points" style="font-size:0.9em;line-height:1.35;'
                      'margin:0.5em 0;text-align:left">' + arrow.join(stages) + "</div>")


def entry_points_figure(entries: Mapping[str, Sequence[str]] | None = None, *, height: int = 440):
    """Where each scheme puts position into one attention layer: a top-to-bottom flow.

    Left, the stages of :data:`STAGES` in data-flow order; right of each stage, a chip in
    the scheme's colour for every scheme whose signal enters there (``entries``, default
    :func:`position_entry_points`).
    """
    go, _ = plotly_modules()
    entries = position_entry_points() if entries is None else {k: list(v) for k, v in entries.items()}
    keys = [key for key, _, _ in STAGES]
    unknown = {s for stages in entries.values() for s in stages} - set(keys)
    if unknown:
        raise ValueError(f"entries name stages that do not exist: {sorted(unknown)}; stages are {keys}")
    height = check_int("height", height, min_value=300, max_value=1200)
    fig = go.Figure()
    n = len(STAGES)
    row_h, box_h = 1.0, 0.72
    for r, (key, title, detail) in enumerate(STAGES):
        top = n - r * row_h
        y0, y1 = top - box_h, top
        _box(fig, 0.0, 0.56, y0, y1, fill=PANEL)
        fig.add_annotation(x=0.02, y=(y0 + y1) / 2, xanchor="left", showarrow=False, align="left",
                           text=f"<b>{title}</b><br><span style='font-size:11px'>{detail}</span>")
        if r < n - 1:
            _arrow(fig, 0.28, y0, 0.28, top - row_h)
        here = [s for s, stages in entries.items() if key in stages]
        columns = 1 if len(here) <= 4 else 2  # more than four chips: two columns, so each stays legible
        rows = -(-len(here) // columns)
        chip_h = min(0.22, (box_h - 0.04) / max(rows, 1) - 0.02)
        first = (y0 + y1) / 2 + (rows * (chip_h + 0.02) - 0.02) / 2  # centred on the box
        if here:
            fig.add_shape(type="line", x0=0.56, x1=0.62, y0=(y0 + y1) / 2, y1=(y0 + y1) / 2,
                          line=dict(color=GREY, width=1))
        width = (0.99 - 0.62 - 0.01 * (columns - 1)) / columns
        for c, scheme in enumerate(here):
            cy1 = first - (c // columns) * (chip_h + 0.02)
            x0 = 0.62 + (c % columns) * (width + 0.01)
            fill = _colour(scheme)
            _box(fig, x0, x0 + width, cy1 - chip_h, cy1, fill=fill, line=fill)
            fig.add_annotation(x=x0 + width / 2, y=cy1 - chip_h / 2, showarrow=False,
                               text=LABELS.get(scheme, scheme),
                               font=dict(size=12 if columns == 1 else 11, color=_text_colour(fill)))
    _blank(fig, height=height, x_range=(-0.01, 1.0), y_range=(n - (n - 1) * row_h - box_h - 0.05, n + 0.05))
    fig.update_layout(margin=dict(l=4, r=4, t=8, b=8))
    return fig


# ---------------------------------------------------------------------- 06_rope_and_alibi


def rope_rotation(pairs: Sequence[tuple[int, int]] = ((1, 3), (6, 8)), *, q_angle: float = 0.3,
                  k_angle: float = 1.1, height: int = 300):
    """One RoPE pair (head size 2, one radian per position) in the plane.

    For each (query position m, key position n) of ``pairs``, a panel shows the query's
    pair turned by m radians and the key's by n radians (``rp.schemes.rope.apply_rope``)
    and the angle between them. Pairs with the same offset n - m (``key_minus_query``)
    leave the same angle, and so the same score q · k: the panel titles print both.
    """
    from plotly.subplots import make_subplots

    from relpos_core.schemes.rope import apply_rope

    go, _ = plotly_modules()
    pairs = [(check_int("m", m, min_value=0), check_int("n", n, min_value=0)) for m, n in pairs]
    if not pairs:
        raise ValueError("pairs must hold at least one (m, n) pair, got none")
    q = torch.tensor([math.cos(q_angle), math.sin(q_angle)], dtype=torch.float64)  # (2,)
    k = torch.tensor([math.cos(k_angle), math.sin(k_angle)], dtype=torch.float64)  # (2,)

    def turned(v, position):  # (2,) rotated at ``position``; pair 0 has theta = 1
        return apply_rope(v.view(1, 1, 1, 2), torch.tensor([position]))[0, 0, 0]  # (2,)

    titles = []
    panels = []
    for m, n in pairs:
        qm, kn = turned(q, m), turned(k, n)
        gap = math.degrees(math.atan2(kn[1], kn[0]) - math.atan2(qm[1], qm[0])) % 360
        panels.append((m, n, qm, kn, gap))
        titles.append(f"m = {m}, n = {n}<br>angle {gap:.0f}°, q·k = {float(qm @ kn):.3f}")
    fig = make_subplots(rows=1, cols=len(pairs), subplot_titles=titles, horizontal_spacing=0.06)
    circle = torch.linspace(0, 2 * math.pi, 121)
    for c, (m, n, qm, kn, gap) in enumerate(panels, start=1):
        fig.add_trace(go.Scatter(x=circle.cos().tolist(), y=circle.sin().tolist(), mode="lines",
                                 line=dict(color=GREY, width=1, dash="dot"), hoverinfo="skip"), row=1, col=c)
        start = math.atan2(qm[1], qm[0])
        arc = torch.linspace(start, start + math.radians(gap), 40)
        fig.add_trace(go.Scatter(x=(0.35 * arc.cos()).tolist(), y=(0.35 * arc.sin()).tolist(),
                                 mode="lines", line=dict(color=GREY, width=2), hoverinfo="skip"),
                      row=1, col=c)
        suffix = "" if c == 1 else str(c)
        for vec, label, colour in ((qm, f"q at {m}", GREY), (kn, f"k at {n}", _role_colour("rotation"))):
            x, y = float(vec[0]), float(vec[1])
            fig.add_annotation(x=x, y=y, ax=0, ay=0, xref=f"x{suffix}", yref=f"y{suffix}",
                               axref=f"x{suffix}", ayref=f"y{suffix}", showarrow=True, arrowhead=2,
                               arrowwidth=2.5, arrowcolor=colour, text="")
            fig.add_annotation(x=1.22 * x, y=1.22 * y, xref=f"x{suffix}", yref=f"y{suffix}",
                               showarrow=False, text=label, font=dict(size=12, color=colour))
        _blank(fig, height=height, x_range=(-1.6, 1.6), y_range=(-1.4, 1.4), row=1, col=c)
        fig.update_yaxes(scaleanchor=f"x{suffix}", scaleratio=1, row=1, col=c)
    for title in titles:
        fig.update_annotations(selector=dict(text=title), font=dict(size=12))
    fig.update_layout(margin=dict(l=4, r=4, t=44, b=4))
    return fig


# ----------------------------------------------------------------------- 02_shaw_and_skew


def skew_steps(L: int = 4, *, height: int = 440):
    """The Music Transformer's skew (pad, reshape, drop a row) on labelled entries.

    Entry (i, r) of Q Eᵀ, query i against distance r - (L - 1), is followed through
    the three steps; ``rp.kernels.skew.skew`` does the moving. Each cell shows the
    distance (offset ``j - i``, ``key_minus_query``) and is coloured by the query row it
    came from; the padding is grey. In the last panel every cell on and below the
    diagonal holds query i against distance j - i; above it is junk.
    """
    from plotly.subplots import make_subplots

    from relpos_core.kernels import skew

    go, _ = plotly_modules()
    L = check_int("L", L, min_value=2, max_value=8)
    ids = torch.arange(L * L, dtype=torch.float64).reshape(L, L)  # (L, L): i * L + r
    padded = torch.nn.functional.pad(ids, (1, 0), value=-1.0)  # (L, L + 1), -1 = padding
    reshaped = padded.reshape(L + 1, L)  # (L + 1, L): the same memory
    skewed = skew.skew(ids + 1.0) - 1.0  # (L, L): the library's three steps (pad value 0 -> -1)
    if not torch.equal(skewed, reshaped[1:]):
        raise RuntimeError("skew moved entries differently from pad + reshape + drop")
    steps = [("1. Q Eᵀ", ids), ("2. pad a column", padded), ("3. reshape", reshaped),
             ("4. drop row 0", skewed)]
    shades = ["#440154", "#31688e", "#35b779", "#b8de29", "#fde725", "#21918c", "#90d743", "#3b528b"]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[t for t, _ in steps], horizontal_spacing=0.05,
                        vertical_spacing=0.1)
    for s, (_, grid) in enumerate(steps):
        row, col = divmod(s, 2)
        suffix = "" if s == 0 else str(s + 1)
        rows, cols = grid.shape
        for i in range(rows):
            for j in range(cols):
                value = int(grid[i, j])
                pad = value < 0
                origin, r = divmod(value, L) if not pad else (None, None)
                fill = EMPTY if pad else shades[origin % len(shades)]
                junk = s == 3 and j > i
                _box(fig, j, j + 1, -i - 1, -i, fill=fill, line=GREY, xref=f"x{suffix}",
                     yref=f"y{suffix}")
                text = "0" if pad else f"{r - (L - 1)}".replace("-", "−")
                font = dict(size=12) if pad else dict(size=12, color=_text_colour(fill))
                fig.add_annotation(x=j + 0.5, y=-i - 0.5, xref=f"x{suffix}", yref=f"y{suffix}",
                                   showarrow=False, text=f"<i>{text}</i>" if junk else text,
                                   font=font, opacity=0.45 if junk else 1.0)
        if s == 3:  # the diagonal: distance 0 for every query
            fig.add_shape(type="line", x0=0, y0=0, x1=L, y1=-L, xref=f"x{suffix}", yref=f"y{suffix}",
                          line=dict(color=GREY, width=1.5, dash="dot"))
        _blank(fig, height=height, x_range=(-0.1, L + 1.1), y_range=(-(L + 1) - 0.1, 0.1), row=row + 1,
               col=col + 1)
        fig.update_yaxes(scaleanchor=f"x{suffix}", scaleratio=1, row=row + 1, col=col + 1)
    fig.update_layout(margin=dict(l=4, r=4, t=30, b=4))
    return fig


# ---------------------------------------------------------------------- 04_transformer_xl


MAX_REACH_POSITIONS = 4096  # memory_reach's figure: one cell per position (a (T, T) bool table is 16 MiB)
MAX_REACH_PAIRS = 2**22  # query-slot pairs memory_reach visits one by one (a few seconds)


def memory_reach(*, num_layers: int, segment: int, memory: int, segments: int) -> torch.Tensor:
    """(num_layers + 1, T) bool: which states the last token's top-layer output depends on.

    Tokens are processed in ``segments`` segments of ``segment`` tokens (T = their
    product); each layer's queries see the layer's ``memory`` cached input states of the
    previous segments and their own segment causally
    (``rp.schemes.transformer_xl.transformer_xl_causal_mask``). Row 0 is the input
    embeddings, row ``num_layers`` the top layer; entry (l, t) is True when the state of
    position t entering layer l + 1 (row l) reaches the last token's output.
    """
    from relpos_core.schemes.transformer_xl import transformer_xl_causal_mask

    num_layers = check_positive_int("num_layers", num_layers)
    segment = check_positive_int("segment", segment)
    memory = check_int("memory", memory, min_value=0)
    segments = check_positive_int("segments", segments)
    T = segment * segments
    if T > MAX_REACH_POSITIONS:  # a (T, T) table and a Python loop over T (memory + segment) pairs
        raise ValueError(f"segment * segments (the positions drawn) must be <= {MAX_REACH_POSITIONS}, got "
                         f"{segment} * {segments} = {T}")
    if T * (memory + segment) > MAX_REACH_PAIRS:  # the pairs the loop below visits
        raise ValueError(f"memory must keep segment * segments * (memory + segment) <= {MAX_REACH_PAIRS} "
                         f"(pairs of a Python loop), got {T} * ({memory} + {segment})")
    if num_layers > MAX_REACH_POSITIONS:
        raise ValueError(f"num_layers must be <= {MAX_REACH_POSITIONS}, got {num_layers}")
    sees = torch.zeros(T, T, dtype=torch.bool)  # (T, T): query t sees key j in one layer
    local = transformer_xl_causal_mask(segment, memory + segment)  # (segment, M + segment)
    for s in range(segments):
        first_key = s * segment - memory  # the first memory slot's position (may be < 0)
        for i in range(segment):
            for slot in range(memory + segment):
                j = first_key + slot
                if j >= 0 and local[i, slot]:
                    sees[s * segment + i, j] = True
    reach = torch.zeros(num_layers + 1, T, dtype=torch.bool)
    reach[num_layers, T - 1] = True
    for layer in range(num_layers, 0, -1):  # one layer down: every key a reached query sees
        reach[layer - 1] = sees[reach[layer]].any(dim=0)
    return reach


def memory_reach_figure(reach: torch.Tensor, *, segment: int, height: int | None = None):
    """Draw :func:`memory_reach`: one row per layer (top layer on top), one cell per position.

    Filled cells are the states the last token's output depends on; dotted lines mark
    the segments; each row says how many positions back it reaches.
    """
    go, _ = plotly_modules()
    if not isinstance(reach, torch.Tensor) or reach.dim() != 2 or reach.dtype != torch.bool:
        raise ValueError("reach must be the (num_layers + 1, T) bool tensor of memory_reach")
    segment = check_positive_int("segment", segment)
    rows, T = reach.shape
    if T % segment:
        raise ValueError(f"segment must divide the {T} positions of reach, got {segment}")
    height = height or 90 + 44 * rows
    fill = _role_colour("segment memory")
    fig = go.Figure()
    for layer in range(rows):
        y = layer
        for t in range(T):
            hit = bool(reach[layer, t])
            query = layer == rows - 1 and t == T - 1
            _box(fig, t + 0.06, t + 0.94, y + 0.1, y + 0.9, fill=fill if hit else EMPTY,
                 line=GREY if query else (fill if hit else "rgba(0,0,0,0)"))
            if query:
                fig.add_annotation(x=t + 0.5, y=y + 0.5, showarrow=False, text="<b>q</b>",
                                   font=dict(size=12, color=_text_colour(fill)))
        back = T - 1 - int(reach[layer].nonzero().min())
        name = "input" if layer == 0 else f"layer {layer}"
        fig.add_annotation(x=-0.3, y=y + 0.5, xanchor="right", showarrow=False, text=name)
        if layer < rows - 1:
            fig.add_annotation(x=T + 0.3, y=y + 0.5, xanchor="left", showarrow=False,
                               text=f"{back} back")
    for boundary in range(segment, T, segment):
        fig.add_shape(type="line", x0=boundary, x1=boundary, y0=-0.2, y1=rows, line=dict(color=GREY, dash="dot"))
    for s in range(T // segment):
        fig.add_annotation(x=s * segment + segment / 2, y=-0.45, showarrow=False, text=f"segment {s + 1}",
                           font=dict(size=11))
    _blank(fig, height=height, x_range=(-3.4, T + 3.8), y_range=(-0.8, rows + 0.05))
    fig.update_layout(margin=dict(l=4, r=4, t=8, b=4))
    return fig


# ----------------------------------------------------------------------------- 05_deberta


def emd_flow(emd, last_layer, *, height: int = 560):
    """The data flow of DeBERTa's Enhanced Mask Decoder, from the module itself.

    ``emd`` is a ``rp.schemes.deberta.EnhancedMaskDecoder`` and ``last_layer`` the
    encoder's last layer. The figure reads ``emd.num_steps`` and whether the EMD re-runs
    that very layer (shared weights). Left column: fine-tuning, where the encoder's last
    layer gives the output. Right column: pre-training, where the EMD replaces that pass
    and adds absolute positions to its queries.
    """
    go, _ = plotly_modules()
    steps = int(emd.num_steps)
    shared = emd.layer is last_layer
    rel, absolute = _role_colour("relative table"), _role_colour("absolute positions")
    fig = go.Figure()
    top = 2 * steps + 4.0

    def node(x0, x1, y, text, *, fill=PANEL, line=GREY, dash="solid", colour=None):
        _box(fig, x0, x1, y - 0.34, y + 0.34, fill=fill, line=line, dash=dash)
        font = dict(size=12) if colour is None else dict(size=12, color=colour)
        fig.add_annotation(x=(x0 + x1) / 2, y=y, showarrow=False, text=text, font=font)

    node(0.0, 1.0, top, "layers 1 … N−1 (relative positions only)")
    node(0.2, 0.8, top - 1.2, "H<sup>(N−1)</sup>")
    _arrow(fig, 0.5, top - 0.34, 0.5, top - 0.86)
    # left: the encoder's own last pass (fine-tuning)
    bottom = top - 2.6 - 2 * steps  # the row of the EMD's last output
    node(0.0, 0.46, top - 2.6, "layer N")
    node(0.0, 0.46, bottom, "H<sup>(N)</sup>")
    _arrow(fig, 0.35, top - 1.54, 0.23, top - 2.26)
    _arrow(fig, 0.23, top - 2.94, 0.23, bottom + 0.34)
    fig.add_annotation(x=0.23, y=bottom - 0.65, showarrow=False, text="<b>task head (fine-tuning)</b>")
    # right: the EMD (pre-training)
    y = top - 2.6
    node(0.54, 1.0, y, "I<sub>0</sub> = H<sup>(N−1)</sup> + P", fill=absolute, line=absolute,
         colour=_text_colour(absolute))
    _arrow(fig, 0.65, top - 1.54, 0.77, y + 0.34)
    for t in range(steps):
        y_layer = y - 1.0
        label = "layer N, same weights" if shared else "layer N (own weights)"
        node(0.54, 1.0, y_layer, f"{label}<br><span style='font-size:11px'>K, V = H<sup>(N−1)</sup></span>",
             fill="rgba(0,0,0,0)", line=rel)
        _arrow(fig, 0.77, y - 0.34, 0.77, y_layer + 0.34)
        y = y_layer - 1.0
        node(0.54, 1.0, y, f"I<sub>{t + 1}</sub>")
        _arrow(fig, 0.77, y_layer - 0.34, 0.77, y + 0.34)
    fig.add_annotation(x=0.77, y=y - 0.65, showarrow=False, text="<b>MLM head (pre-training)</b>")
    _blank(fig, height=height, x_range=(-0.02, 1.02), y_range=(y - 1.0, top + 0.4))
    fig.update_layout(margin=dict(l=4, r=4, t=8, b=4))
    return fig
