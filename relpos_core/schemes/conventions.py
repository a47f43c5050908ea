"""The sign-convention table: which offset each scheme uses, and what a positive value means.

Book: "Why relative positions" (chapters/01_why_relative_positions.ipynb) (and the
failure mode "sign convention flipped" in "Failure modes", chapters/12_failure_modes.ipynb).
The two conventions are defined in
``relpos_core.offsets``:

* ``key_minus_query``: the offset is ``j - i``; positive means the key comes *after* the query.
* ``query_minus_key``: the offset is ``i - j``; positive means the key comes *before* the query.
* ``none``: no offset is ever formed (absolute positions, or no position at all).

Mixing them up swaps past and future (T5's buckets for keys after the query, Transformer-XL's
R(i - j)). The rows are built from the schemes' declarations (``relpos_core.schemes.SIGN_CONVENTIONS``);
every scheme's tests include a two-token sign test against its row.
"""
from __future__ import annotations

__all__ = ["POSITIVE_MEANS", "FIELDS", "row", "table_markdown"]

POSITIVE_MEANS = {
    "key_minus_query": "key after the query",
    "query_minus_key": "key before the query",
    "none": "no offset",
}
FIELDS = ("scheme", "paper", "convention", "formula", "positive_means", "code")


def row(scheme) -> dict:
    """One declaration's row of the table."""
    return dict(scheme=scheme.name, paper=scheme.paper, convention=scheme.convention, formula=scheme.formula,
                positive_means=POSITIVE_MEANS[scheme.convention], code=scheme.code)


def table_markdown(rows: list[dict]) -> str:
    """Rows as a Markdown table; formulas as maths, code and conventions as code."""
    header = ["scheme", "paper", "convention", "formula", "positive means", "code"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        formula = r["formula"].replace("|", r"\vert ")  # a bare | would end the table cell
        cells = [r["scheme"], r["paper"], f"`{r['convention']}`", f"${formula}$", r["positive_means"],
                 f"`{r['code']}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
