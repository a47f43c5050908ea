"""Numbered, captioned tables computed by a code cell.

``rp.figures.table(markdown, name="tbl-...", caption="...")`` returns an object whose
output bundle holds the table twice:

* ``text/markdown``: the table inside a MyST ``{table}`` directive with ``:name:`` and
  the caption, which the book (``_config.yml`` prefers markdown over HTML) parses into a
  numbered table that ``{numref}`` can link to;
* ``text/html``: a plain HTML table with the caption, for Jupyter and Colab, which do
  not know MyST directives.

A table written by hand in a chapter's markdown uses the same directive directly
(see CONTRIBUTING.md).
"""
from __future__ import annotations

import html
import re

__all__ = ["table", "NumberedTable"]

_NAME = re.compile(r"^tbl-[a-z0-9][a-z0-9-]*$")


def _rows(markdown: str) -> list[list[str]]:
    lines = [line.strip() for line in markdown.strip().splitlines() if line.strip()]
    if len(lines) < 2 or not all(line.startswith("|") and line.endswith("|") for line in lines):
        raise ValueError(
            "markdown must be a pipe table: a header row, a |---| separator row and body "
            f"rows, each starting and ending with '|'; got {markdown[:80]!r}"
        )
    cells = [[c.strip() for c in line[1:-1].split("|")] for line in lines]
    if not all(set(c) <= set("-: ") for c in cells[1]):
        raise ValueError(f"markdown's second row must be the |---| separator, got {lines[1]!r}")
    width = len(cells[0])
    bad = [n for n, row in enumerate(cells) if len(row) != width]
    if bad:
        raise ValueError(f"markdown rows {bad} do not have {width} columns like the header")
    return [cells[0]] + cells[2:]


class NumberedTable:
    """A pipe table with a name and a caption; see :func:`table`."""

    def __init__(self, markdown: str, *, name: str, caption: str):
        if not isinstance(markdown, str):
            raise ValueError(f"markdown must be a string (a pipe table), got {type(markdown).__name__}")
        self.rows = _rows(markdown)
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"name must look like 'tbl-<chapter>-<what>' (lower case, digits, '-'), got {name!r}"
            )
        if not isinstance(caption, str) or not caption.strip() or "\n" in caption:
            raise ValueError(f"caption must be one non-empty line of text, got {caption!r}")
        self.markdown = markdown.strip()
        self.name = name
        self.caption = caption.strip()

    def _repr_markdown_(self) -> str:
        return f":::{{table}} {self.caption}\n:name: {self.name}\n\n{self.markdown}\n:::\n"

    def _repr_html_(self) -> str:
        head, *body = self.rows
        th = "".join(f"<th>{html.escape(c)}</th>" for c in head)
        tr = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
        return (
            f'<table id="{self.name}"><caption>{html.escape(self.caption)}</caption>'
            f"<thead><tr>{th}</tr></thead><tbody>{tr}</tbody></table>"
        )

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {
            "text/markdown": self._repr_markdown_(),
            "text/html": self._repr_html_(),
            "text/plain": f"<table {self.name}: {self.caption}>",
        }


def table(markdown: str, *, name: str, caption: str) -> NumberedTable:
    """A markdown pipe table as a numbered table with a caption.

    ``name`` is the label ``{numref}`` uses (``tbl-<chapter>-<what>``); ``caption`` is one
    line that says what the table shows.
    """
    return NumberedTable(markdown, name=name, caption=caption)
