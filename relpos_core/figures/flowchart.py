"""A decision flowchart drawn with plotly shapes and annotations, one column for any width.

Book: "Choosing a scheme" (chapters/11_choosing_a_scheme.ipynb).

The chart is a ladder: each question box leads to its answer box below (the branch
label on the arrow), and the other answer runs down the left edge to the next question;
the last one ends in ``end``. Everything stacks vertically, so the same figure reads at
1280 px and on a 390 px phone: the boxes stretch with the column, the text keeps its
size, and :func:`flowchart` refuses a line longer than ``max_chars`` characters (at 12 px
about 7 px a character, 40 characters fit the 330 px a phone's column leaves).
Positions are pixels from the top (y) and fractions of the width (x).
"""
from __future__ import annotations

import re
from typing import Sequence

from ._plotly import plotly_modules
from .concepts import FONT, GREY, PANEL, _arrow, _blank, _box

__all__ = ["flowchart", "MAX_CHARS"]

MAX_CHARS = 40  # characters per line that fit a 390 px phone at 12 px
LINE_PX = 17  # one line of 12 px text, with plotly's line spacing
PAD_PX = 9  # inside a box, above and below the text
GAP_PX = 30  # between a box and the next one (room for an arrow and its label)
INDENT = 0.1  # answers sit right of the left edge, where the onward path runs
ANSWER = "rgba(140, 140, 140, 0.06)"  # an answer box: lighter than a question


def _lines(text: str) -> list[str]:
    return text.split("<br>")


def _visible(line: str) -> str:
    return re.sub(r"<[^>]+>", "", line)


def _check(name: str, text: str, max_chars: int) -> int:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a non-empty string, got {text!r}")
    for line in _lines(text):
        if len(_visible(line)) > max_chars:
            raise ValueError(f"{name} must have lines of at most {max_chars} characters "
                             f"(break them with <br>), got {len(_visible(line))}: {line!r}")
    return len(_lines(text))


def flowchart(steps: Sequence[tuple[str, str, str, str]], end: str, *,
              max_chars: int = MAX_CHARS, accent: str = "#4477aa"):
    """A vertical decision ladder.

    ``steps``: ``(question, branch, answer, onward)`` per question: the arrow labelled
    ``branch`` leads to ``answer``; the path labelled ``onward`` leads to the next
    question, or to ``end`` after the last. Texts break lines with ``<br>``; each line
    (tags not counted) must be at most ``max_chars`` characters. ``accent`` outlines
    the answer boxes."""
    if not steps:
        raise ValueError("steps must hold at least one (question, branch, answer, onward)")
    if not isinstance(max_chars, int) or max_chars < 10:
        raise ValueError(f"max_chars must be an integer >= 10, got {max_chars!r}")
    for i, step in enumerate(steps):
        if len(step) != 4:
            raise ValueError(f"steps[{i}] must be (question, branch, answer, onward), got {step!r}")
        for name, text in zip(("question", "branch", "answer", "onward"), step):
            _check(f"steps[{i}] {name}", text, max_chars)
    _check("end", end, max_chars)

    go, _ = plotly_modules()
    fig = go.Figure()
    boxes = []  # (x0, y0, y1, text, kind), y in px from the top
    y, left = 4, INDENT / 2
    for question, branch, answer, onward in steps:
        h = len(_lines(question)) * LINE_PX + 2 * PAD_PX
        boxes.append((0.0, y, y + h, question, "question"))
        q_bottom = y + h
        y = q_bottom + GAP_PX
        _arrow(fig, 0.55, q_bottom, 0.55, y)
        fig.add_annotation(x=0.57, y=q_bottom + GAP_PX / 2, text=f"<i>{branch}</i>",
                           showarrow=False, xanchor="left", font=FONT)
        h = len(_lines(answer)) * LINE_PX + 2 * PAD_PX
        boxes.append((INDENT, y, y + h, answer, "answer"))
        y += h + GAP_PX
        _arrow(fig, left, q_bottom, left, y)
        fig.add_annotation(x=left + 0.01, y=y - GAP_PX / 2, text=f"<i>{onward}</i>",
                           showarrow=False, xanchor="left", font=FONT)
    h = len(_lines(end)) * LINE_PX + 2 * PAD_PX
    boxes.append((0.0, y, y + h, end, "answer"))
    height = int(y + h + 4)

    for x0, y0, y1, text, kind in boxes:
        if kind == "question":
            _box(fig, x0, 1.0, y0, y1, fill=PANEL)
        else:
            _box(fig, x0, 1.0, y0, y1, fill=ANSWER, line=accent)
        fig.add_annotation(x=(x0 + 1.0) / 2, y=(y0 + y1) / 2, text=text, showarrow=False,
                           align="center", xanchor="center", yanchor="middle", font=FONT)
    _blank(fig, height=height, x_range=(0, 1), y_range=(height, 0))
    fig.update_layout(margin=dict(l=2, r=2, t=2, b=2), hovermode=False)
    return fig
