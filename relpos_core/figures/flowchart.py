"""A decision flowchart drawn with plotly shapes and annotations, for a laptop and a phone.

Book: "Choosing a scheme" (chapters/16_choosing_a_scheme.ipynb).

Each question leads to its answer (the branch label on the arrow), and the other answer
runs on to the next question; the last one ends in ``end``. In a column of
``NARROW_BELOW`` px or more the questions stand in a left column with their answers
beside them, short enough for the book's 600 px limit on a figure's height; below it
(a phone) the same boxes stack in one column, each answer under its question and the
onward path down the left edge (``relpos_core.figures._plotly.attach_narrow``). The
text keeps its size at every width, so :func:`flowchart` refuses a line longer than
``max_chars`` characters (at 12 px about 6.5 px a character: 40 fit the 270 px a
column of the two-column layout has at 600 px, and a phone's 330 px).
Positions are pixels from the top (y) and fractions of the width (x).
"""
from __future__ import annotations

import re
from typing import Sequence

from ._plotly import attach_narrow, plotly_modules
from .concepts import FONT, PANEL, _arrow, _blank, _box

__all__ = ["flowchart", "MAX_CHARS", "NARROW_BELOW"]

MAX_CHARS = 40  # characters per line that fit a column at 12 px
NARROW_BELOW = 600  # px: below this the chart stacks in one column
LINE_PX = 17  # one line of 12 px text, with plotly's line spacing
PAD_PX = 7  # inside a box, above and below the text
GAP_PX = 24  # between a box and the next one (room for an arrow and its label)
INDENT = 0.1  # one column: answers sit right of the onward path
SPLIT = (0.45, 0.53)  # two columns: questions end, answers start
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


def _height(text: str) -> int:
    return len(_lines(text)) * LINE_PX + 2 * PAD_PX


def _label(fig, x, y, text, anchor="left") -> None:
    fig.add_annotation(x=x, y=y, text=f"<i>{text}</i>", showarrow=False, xanchor=anchor,
                       font=FONT)


def _draw(fig, boxes, height: int, accent: str):
    """The boxes ``(x0, x1, y0, y1, text, kind)`` with their text, on px axes."""
    for x0, x1, y0, y1, text, kind in boxes:
        if kind == "question":
            _box(fig, x0, x1, y0, y1, fill=PANEL)
        else:
            _box(fig, x0, x1, y0, y1, fill=ANSWER, line=accent)
        fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=text, showarrow=False,
                           align="center", xanchor="center", yanchor="middle", font=FONT)
    _blank(fig, height=height, x_range=(0, 1), y_range=(height, 0))
    fig.update_layout(margin=dict(l=2, r=2, t=2, b=2), hovermode=False)
    return fig


def _one_column(go, steps, end, accent):
    fig, boxes = go.Figure(), []
    y, left = 4, INDENT / 2
    for question, branch, answer, onward in steps:
        q_bottom = y + _height(question)
        boxes.append((0.0, 1.0, y, q_bottom, question, "question"))
        y = q_bottom + GAP_PX
        _arrow(fig, 0.55, q_bottom, 0.55, y)
        _label(fig, 0.57, q_bottom + GAP_PX / 2, branch)
        boxes.append((INDENT, 1.0, y, y + _height(answer), answer, "answer"))
        y += _height(answer) + GAP_PX
        _arrow(fig, left, q_bottom, left, y)
        _label(fig, left + 0.01, y - GAP_PX / 2, onward)
    boxes.append((0.0, 1.0, y, y + _height(end), end, "answer"))
    return _draw(fig, boxes, int(y + _height(end) + 4), accent)


def _two_columns(go, steps, end, accent):
    fig, boxes = go.Figure(), []
    (q1, a0), y, mid = SPLIT, 4, SPLIT[0] / 2
    for question, branch, answer, onward in steps:
        row, hq = max(_height(question), _height(answer)), _height(question)
        boxes.append((0.0, q1, y, y + hq, question, "question"))
        boxes.append((a0, 1.0, y, y + row, answer, "answer"))
        _arrow(fig, q1, y + hq / 2, a0, y + hq / 2)
        _label(fig, (q1 + a0) / 2, y + hq / 2 - 9, branch, anchor="center")
        q_bottom, y = y + hq, y + row + GAP_PX
        _arrow(fig, mid, q_bottom, mid, y)
        _label(fig, mid + 0.01, y - GAP_PX / 2, onward)
    boxes.append((0.0, q1, y, y + _height(end), end, "answer"))
    return _draw(fig, boxes, int(y + _height(end) + 4), accent)


def flowchart(steps: Sequence[tuple[str, str, str, str]], end: str, *,
              max_chars: int = MAX_CHARS, accent: str = "#4477aa"):
    """A decision ladder: two columns at ``NARROW_BELOW`` px and wider, one below.

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
    wide = _two_columns(go, steps, end, accent)
    return attach_narrow(wide, _one_column(go, steps, end, accent), below=NARROW_BELOW)
