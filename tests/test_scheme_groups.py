"""The pages' scheme groups are derived from the declarations: a new scheme joins them with
no page edit (intro.ipynb's entry-point figure, the sign-convention lists of
chapters/01_why_relative_positions.ipynb, chapter 10's schemes on the logits).

A temporary scheme (Sandwich's declaration under another name and the other sign
convention) is registered the way a new scheme file would be, and the pages' own check
cells are run with it: they must still pass, and it must be in the derived groups.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import relpos_core as rp
from relpos_core.schemes import Entry, conventions

ROOT = Path(__file__).resolve().parents[1]
NEW = "new_scheme"


@pytest.fixture
def new_scheme(monkeypatch):
    """Register ``NEW``: Sandwich's pieces, the key_minus_query convention."""
    base = rp.schemes.SCHEMES["sandwich"]
    scheme = replace(base, name=NEW, convention="key_minus_query", order=base.order + 1)
    monkeypatch.setitem(rp.schemes.SCHEMES, NEW, scheme)
    monkeypatch.setitem(rp.schemes._ENTRIES, NEW, Entry(NEW, scheme))
    monkeypatch.setattr(rp.schemes, "SIGN_CONVENTIONS", rp.schemes.SIGN_CONVENTIONS + [conventions.row(scheme)])
    return scheme


def _cell(page: str, containing: str) -> str:
    """The one code cell of ``page`` whose source holds ``containing`` (found by its text, so
    a page's edits that renumber or re-id its cells do not lose it)."""
    cells = json.loads((ROOT / page).read_text())["cells"]
    found = ["".join(c["source"]) for c in cells
             if c["cell_type"] == "code" and containing in "".join(c["source"])]
    assert len(found) == 1, f"{page}: {len(found)} code cells hold {containing!r}, expected 1"
    return found[0]


def _run(*sources: str) -> dict:
    namespace = {"rp": rp}
    for source in sources:
        exec(compile(source, "<page cell>", "exec"), namespace)
    return namespace


def test_a_new_scheme_is_in_the_landing_page_figure_and_its_check_still_passes(new_scheme):
    check = _cell("intro.ipynb", "position_entry_points().items()")
    assert "position_entry_points" in check  # the cell that checks the figure's caption
    ns = _run(check)
    assert NEW in ns["stages"]["scalar"]  # drawn where its pieces enter
    assert NEW in rp.figures.concepts.position_entry_points()


def test_a_new_scheme_is_in_the_sign_convention_groups_and_chapter_1_still_passes(new_scheme):
    ns = _run(_cell("chapters/01_why_relative_positions.ipynb", "L = 8\n# (L, L), entry (i, j) = j - i"),
              _cell("chapters/01_why_relative_positions.ipynb", "assert key_minus_query.numel() == L**2"))
    assert NEW in ns["sign"]["key_minus_query"]


def test_chapter_10_on_the_logits_group_follows_the_terms_pieces(new_scheme):
    source = _cell("chapters/14_experiments_length.ipynb", "ON_LOGITS = ")
    line = source.index("ON_LOGITS = ")
    expression = source[line:source.index("\nOTHERS", line)].split("=", 1)[1]
    names = list(rp.schemes.names())
    on_logits = eval(expression.replace("GAP", "names"), {"rp": rp, "names": names})
    assert NEW in on_logits  # a scalar on the logit, like Sandwich
    assert not {rp.schemes.baseline(), rp.schemes.tokens_baseline()} & set(on_logits)
    rotary = {s for s in names if "rotary" in {p.stage for p in rp.registry.example_term(
        s, num_heads=2, head_dim=8, device="meta").all_pieces}}
    assert rotary and not rotary & set(on_logits)  # rotations act on q and k, not the logits
