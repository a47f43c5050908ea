"""The book's own standards, checked on the sources of its pages.

Every chapter: no "seed"/"source text" (readers never saw our reference texts; the book
cites papers), a caption on every figure cell, a "Pitfalls" section with titled
admonitions and an "Exercises" section with 3-5 exercises and hidden solutions, code
lines of at most 88 characters and visible code of at most 80 (the column), the Colab
and import cells hidden, every table numbered and captioned, citations that resolve in
``references.bib``, display math that MyST can parse, and no chapter, figure or table
named by a typed number (the build numbers them: ``{doc}`` and ``{numref}`` links follow
when a chapter is inserted, "chapter 7" does not). Appendix pages
(``chapters/appendix_*.ipynb``) and the landing page meet every standard but the
Pitfalls and Exercises sections. Figures and captions in the built pages are checked by
``tests/browser/test_book.py``.

Chapters being rewritten elsewhere are listed in ``book_standards.PENDING``: their
checks are strict expected failures, so the day a chapter meets a standard the test
says so (XPASS fails) and the entry must go.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from book_standards import PENDING

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
CHAPTERS = [p for p in NOTEBOOKS if p.name[:1].isdigit()]  # numbered chapters
APPENDICES = [p for p in NOTEBOOKS if p not in CHAPTERS]
LANDING = ROOT / "intro.ipynb"
PAGES = sorted(p for p in ROOT.glob("*.md") if p.name not in ("README.md", "CONTRIBUTING.md"))

# the reviewer's pattern (shared/hooks/before-stop): "the seed" but not "the seed = 0"
SEED = re.compile(r"seed text|source text|the seed'?s?\b(?!\s*[=(0-9])", re.I)
CITE = re.compile(r"\{cite(?::[pt])?\}`([^`]+)`")
# a call that returns a figure: rp.figures.heatmap/line/slider/bars/bench.*, the lab's
# lab.figures.*, or any function named *_figure / *_slider (tables are not figures)
FIGURE_CALL = re.compile(r"\bfigures\.(?!table\b|NumberedTable\b|style\b)[\w.]+\(|\b\w+_(?:figure|slider)\(")
NOT_FIGURES = {"print", "Markdown", "HTML", "display"}
MAX_LINE = 88
# visible code: the column shows 83 characters of the 13 px code font at 1280 px (measured
# on the built page); 80, as issue 16 asks, keeps a margin for a wider fallback font
MAX_VISIBLE_LINE = 80
HIDDEN = {"remove-input", "remove-cell"}
# a directive that renders a generic title ("Warning", "Note") instead of its own
GENERIC_ADMONITION = re.compile(
    r"^\s*(:::+|```+)\{(warning|note|tip|caution|important|attention|danger|hint|seealso|error)\}",
    re.M)


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def source(cell: dict) -> str:
    return "".join(cell["source"])


def markdown(path: Path) -> str:
    if path.suffix == ".md":
        return path.read_text()
    return "\n\n".join(source(c) for c in cells(path) if c["cell_type"] == "markdown")


def figure_options(cell: dict) -> dict | None:
    return ((cell.get("metadata") or {}).get("mystnb") or {}).get("figure")


def every_chapter(check: str, paths: list[Path] | None = None) -> list:
    """One parameter per chapter (or per path of ``paths``); a strict xfail where
    ``check`` is pending."""
    return [
        pytest.param(
            path, id=path.name,
            marks=[pytest.mark.xfail(reason=f"{path.name}: being rewritten (kernel layer)",
                                     strict=True)] if check in PENDING.get(path.name, ()) else [],
        )
        for path in (CHAPTERS if paths is None else paths)
    ]


def every_page(check: str) -> list:
    """Chapters, appendices and the landing page: the standards every page meets."""
    return every_chapter(check, CHAPTERS + APPENDICES + [LANDING])


def test_pending_chapters_exist():
    names = {p.name for p in CHAPTERS}
    assert set(PENDING) <= names, f"PENDING names chapters that do not exist: {set(PENDING) - names}"


@pytest.mark.parametrize("path", every_page("seed"))
def test_no_seed_or_source_text_in_a_chapter(path):
    texts = [source(c) for c in cells(path)]
    texts += [json.dumps(figure_options(c) or {}, ensure_ascii=False) for c in cells(path)]
    hits = [m.group(0) for t in texts for m in SEED.finditer(t)]
    assert not hits, f"{path.name} speaks of {hits}: cite the paper or say where a number comes from"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_no_seed_or_source_text_on_a_page(path):
    hits = SEED.findall(path.read_text())
    assert not hits, f"{path.name} speaks of {hits}"


def draws_a_figure(cell: dict) -> bool:
    """A code cell whose displayed value (its last expression) is a plotly figure."""
    text = source(cell)
    if cell["cell_type"] != "code" or not FIGURE_CALL.search(text):
        return False
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("%", "!")))
    body = ast.parse(code).body
    if not body or not isinstance(body[-1], ast.Expr) or text.rstrip().endswith(";"):
        return False
    last = body[-1].value
    if isinstance(last, ast.Call):
        if getattr(last.func, "id", None) in NOT_FIGURES:  # text and tables are not figures
            return False
        if FIGURE_CALL.search(ast.get_source_segment(code, last) or ""):
            return True
        drawing = {f.name for f in body if isinstance(f, ast.FunctionDef)
                   and FIGURE_CALL.search(ast.get_source_segment(code, f) or "")}
        if getattr(last.func, "id", None) in drawing:  # a function of this cell draws it
            return True
        root = last.func  # a method of a figure made above: fig.update_traces(...)
        while isinstance(root, (ast.Attribute, ast.Call)):
            root = root.value if isinstance(root, ast.Attribute) else root.func
        return isinstance(root, ast.Name) and "fig" in root.id
    # a value shown at the end of a computing cell (a number, a tuple, a tensor) is not
    # a figure; a variable is one only when its name says so (``fig``)
    return isinstance(last, ast.Name) and "fig" in last.id


@pytest.mark.parametrize("path", every_page("captions"))
def test_every_figure_cell_has_a_name_and_a_caption(path):
    figure_cells = [c for c in cells(path) if draws_a_figure(c)]
    assert figure_cells, f"{path.name} draws no figure"
    for cell in figure_cells:
        options = figure_options(cell)
        first_line = source(cell).splitlines()[0]
        assert options, f"{path.name}: the figure cell starting {first_line!r} has no mystnb.figure metadata"
        assert re.fullmatch(r"fig-[a-z0-9-]+", options.get("name", "")), (
            f"{path.name}: figure name {options.get('name')!r} must look like fig-<chapter>-<what>"
        )
        caption = options.get("caption", "")
        assert len(caption.split()) >= 12, f"{path.name}: caption of {options['name']} is too short to say what to look at"
    names = [figure_options(c)["name"] for c in figure_cells]
    assert len(names) == len(set(names)), f"{path.name}: duplicate figure names {names}"


def test_figure_names_are_unique_across_the_book():
    names = [figure_options(c)["name"] for p in CHAPTERS + APPENDICES + [LANDING]
             for c in cells(p) if figure_options(c)]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("path", every_page("captions"))
def test_figures_are_referred_to_from_the_prose(path):
    text = markdown(path)
    names = [figure_options(c)["name"] for c in cells(path) if figure_options(c)]
    assert names, f"{path.name} has no captioned figure"
    for name in names:
        assert f"{{numref}}`{name}`" in text, f"{path.name}: no {{numref}} refers to {name}"


def sections(text: str) -> dict[str, str]:
    """Level-2 sections of a chapter's markdown, by title, in order."""
    parts = re.split(r"^## +(.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


@pytest.mark.parametrize("path", every_chapter("pitfalls"))
def test_chapter_ends_with_pitfalls_and_exercises(path):
    found = sections(markdown(path))
    titles = list(found)
    assert titles[-2:] == ["Pitfalls", "Exercises"], f"{path.name}: last sections are {titles[-2:]}"
    admonitions = re.findall(r"^:::\{(warning|note|caution|danger|attention|important|tip|admonition)\}",
                             found["Pitfalls"], re.M)
    assert len(admonitions) >= 2, f"{path.name}: Pitfalls has {len(admonitions)} admonitions"


@pytest.mark.parametrize("path", every_chapter("exercises"))
def test_exercises_have_hidden_solutions_and_one_asks_for_a_prediction(path):
    exercises = sections(markdown(path))["Exercises"]
    items = re.findall(r"^\d+\. (.+)$", exercises, re.M)
    assert 3 <= len(items) <= 5, f"{path.name}: {len(items)} exercises, the book wants 3 to 5"
    solutions = re.findall(r"^ *:::\{admonition\} Solution\n *:class: dropdown$", exercises, re.M)
    assert len(solutions) == len(items), f"{path.name}: {len(items)} exercises, {len(solutions)} solutions in a dropdown"
    blocks = re.split(r"^\d+\. ", exercises, flags=re.M)[1:]
    assert any(re.search(r"\bpredict", b, re.I) and re.search(r"\bchange|`[^`]+` to `", b, re.I) for b in blocks), (
        f"{path.name}: no exercise asks the reader to change code and predict a number"
    )


@pytest.mark.parametrize("path", every_page("line length"))
def test_code_lines_fit_the_column(path):
    # the first code cell is the Colab set-up, hidden and rendered from _config.yml
    code = [c for c in cells(path) if c["cell_type"] == "code"][1:]
    long = [line for c in code for line in source(c).splitlines() if len(line) > MAX_LINE]
    assert not long, f"{path.name}: {len(long)} code lines longer than {MAX_LINE} characters: {long[:2]}"


def tags(cell: dict) -> set[str]:
    return set((cell.get("metadata") or {}).get("tags", []))


@pytest.mark.parametrize("path", every_page("visible code"))
def test_visible_code_fits_the_column_without_scrolling(path):
    # code a reader sees (not removed from the page) is at most MAX_VISIBLE_LINE wide
    visible = [c for c in cells(path) if c["cell_type"] == "code" and not tags(c) & HIDDEN]
    long = [line for c in visible for line in source(c).splitlines() if len(line) > MAX_VISIBLE_LINE]
    assert not long, (f"{path.name}: {len(long)} visible code lines longer than {MAX_VISIBLE_LINE} "
                      f"characters (move checks into a remove-cell cell, or break the line): {long[:2]}")


@pytest.mark.parametrize("path", every_page("admonitions") + PAGES)
def test_admonitions_carry_their_own_title(path):
    # ":::{warning} Title" renders "Warning" and runs the title into the text; a bare
    # ":::{note}" renders "Note": use ":::{admonition} Title" with ":class: warning"
    found = [m.group(0).strip() for m in GENERIC_ADMONITION.finditer(markdown(path))]
    assert not found, f"{path.name}: admonitions with a generic title: {found[:3]}"


# "chapter 7", "Chapters 2 to 6", "Figure 8.2", "table 9.1", "Fig. 3": a number the build
# assigns, typed by hand. Not "table 2.4 times", "the learned table 0.61" (a value) or
# "Table 2 of {cite:t}`...`" (a paper's own table).
TYPED_NUMBER = re.compile(
    r"\b(?:chapters?|chap\.|ch\.|figures?|figs?\.|tables?|tbls?\.)\s+(?!0)\d+[a-z]?(?:\.\d+)?\b"
    r"(?!\.?\d|\s*(?:times\b|x\b|×|%))", re.I)
A_PAPERS = re.compile(r"\s*(?:of|in)\s+(?:\{cite|the paper|[A-Z][\w-]+ et al\.)")


def prose(text: str) -> str:
    """Markdown without code: fenced code blocks, ``{code-cell}`` blocks and inline code.
    A role's target is code too; the title a link shows is prose
    ({doc}`chapter 2 <02_shaw_and_skew>` reads "chapter 2")."""
    text = re.sub(r"^(```+|~~~+)(?!\{(?!code)).*?^\1\s*$", "", text, flags=re.M | re.S)
    text = re.sub(r"\{(?:doc|ref|numref)\}`([^`<]*)<[^`]*>`", r"\1", text)
    return re.sub(r"`[^`]*`", "``", text)


def typed_numbers(text: str) -> list[str]:
    text = prose(text)
    return [text[max(0, m.start() - 30):m.end() + 10].replace("\n", " ")
            for m in TYPED_NUMBER.finditer(text)
            if not A_PAPERS.match(text, m.end()) and "{cite" not in text[max(0, m.start() - 40):m.start()]]


def test_typed_numbers_are_found():
    assert typed_numbers("see chapter 7 and Figure 8.2, Chapters 2 to 6, table 9.1") == [
        "see chapter 7 and Figure 8.2, Chapters 2 to 6, table 9.1"[max(0, s - 30):e + 10]
        for s, e in ((4, 13), (18, 28), (30, 40), (47, 56))]
    assert not typed_numbers("T5's table 2.4 times; Table 2 of {cite:t}`press2022alibi`; "
                             "the learned absolute table 0.61; "
                             "`chapter 7` in code; {doc}`the KV cache <08_the_kv_cache>`")
    assert not typed_numbers("```python\n# chapter 7\n```\n")
    assert typed_numbers(":::{admonition} Note\nchapter 7\n:::")
    assert typed_numbers("{doc}`chapter 2 <02_shaw_and_skew>`")
    cell = {"cell_type": "code", "source": ['rp.figures.table(md, name="tbl-x", caption="As in "\n',
                                            '    f"Table {n}.1, chapter 3")']}
    assert code_captions(cell) == ["As in Table .1, chapter 3"] and typed_numbers(code_captions(cell)[0])


def code_captions(cell: dict) -> list[str]:
    """The text of every ``caption=`` a code cell passes (``rp.figures.table``): the
    string pieces of the argument, f-string parts included."""
    if cell["cell_type"] != "code":
        return []
    code = "\n".join(re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in source(cell).splitlines())
    return ["".join(s.value for s in ast.walk(k.value) if isinstance(s, ast.Constant) and isinstance(s.value, str))
            for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Call)
            for k in node.keywords if k.arg == "caption"]


@pytest.mark.parametrize("path", every_page("typed numbers"))
def test_chapters_figures_and_tables_are_links_not_typed_numbers(path):
    # inserting a chapter renumbers every chapter, figure and table after it: refer by
    # {doc}`08_the_kv_cache` / {doc}`the KV-cache chapter <08_the_kv_cache>` and {numref}
    texts = [markdown(path)] + [figure_options(c).get("caption", "") for c in cells(path)
                                if figure_options(c)]
    texts += [text for c in cells(path) for text in code_captions(c)]
    found = [hit for text in texts for hit in typed_numbers(text)]
    assert not found, f"{path.name}: a typed chapter/figure/table number (use {{doc}}/{{numref}}): {found[:4]}"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_pages_link_chapters_instead_of_typing_numbers(path):
    found = typed_numbers(path.read_text())
    assert not found, f"{path.name}: a typed chapter/figure/table number (use {{doc}}/{{numref}}): {found[:4]}"


def pipe_table_blocks(text: str) -> list[tuple[int, list[str]]]:
    """Runs of markdown lines that form a pipe table: (index of the first line, lines)."""
    lines, blocks, n = text.splitlines(), [], 0
    while n < len(lines):
        if lines[n].lstrip().startswith("|") and n + 1 < len(lines) and re.match(
                r"^\s*\|[\s:|-]+\|\s*$", lines[n + 1]):
            start = n
            while n < len(lines) and lines[n].lstrip().startswith("|"):
                n += 1
            blocks.append((start, lines[start:n]))
        n += 1
    return blocks


@pytest.mark.parametrize("path", every_page("tables"))
def test_every_table_is_numbered_and_captioned(path):
    # a table in markdown sits in a {table} directive with a :name:; a table a cell
    # computes goes through rp.figures.table (never Markdown(...) of a pipe table)
    text = markdown(path)
    lines = text.splitlines()
    for start, _ in pipe_table_blocks(text):
        before = "\n".join(lines[max(0, start - 4):start])
        assert re.search(r"\{table\}", before) and ":name: tbl-" in before, (
            f"{path.name}: the table at {lines[start][:40]!r} has no numbered caption")
    for cell in cells(path):
        code = source(cell)
        if cell["cell_type"] == "code" and re.search(r"\bMarkdown\(", code):
            assert not re.search(r"\|-{3}|---\|", code), (
                f"{path.name}: a cell shows a pipe table through Markdown(); use rp.figures.table "
                f"so it is numbered and captioned: {code.splitlines()[0]!r}")


@pytest.mark.parametrize("path", every_page("opener"))
def test_no_boilerplate_opener(path):
    # every number is checked by a cell: the book says so once, on the landing page
    text = markdown(path) if path != LANDING else ""
    assert not re.search(r"every number (stated )?on this page is computed", text, re.I), (
        f"{path.name} repeats the 'every number is asserted' opener")


@pytest.mark.parametrize("path", every_chapter("hidden set-up", CHAPTERS + APPENDICES))
def test_colab_and_import_cells_are_hidden(path):
    code = [c for c in cells(path) if c["cell_type"] == "code"]
    for cell in code[:2]:
        tags = (cell.get("metadata") or {}).get("tags", [])
        assert "remove-input" in tags, f"{path.name}: {source(cell).splitlines()[0]!r} is not tagged remove-input"


def bib_keys() -> dict:
    from pybtex.database import parse_file

    return parse_file(str(ROOT / "references.bib")).entries


def test_bibliography_entries_are_complete():
    entries = bib_keys()
    assert entries, "references.bib is empty"
    for key, entry in entries.items():
        assert entry.persons.get("author"), f"{key}: no author"
        for field in ("title", "year", "url"):
            assert entry.fields.get(field), f"{key}: no {field}"
    assert "{bibliography}" in (ROOT / "bibliography.md").read_text()


@pytest.mark.parametrize("path", CHAPTERS + APPENDICES + [LANDING] + PAGES, ids=lambda p: p.name)
def test_citations_resolve(path):
    keys = set(bib_keys())
    cited = {k.strip() for group in CITE.findall(markdown(path)) for k in group.split(",")}
    assert cited <= keys, f"{path.name} cites keys missing from references.bib: {sorted(cited - keys)}"


@pytest.mark.parametrize("path", [c for c in CHAPTERS if c.name[:2] in {"02", "03", "04", "05"}],
                         ids=lambda p: p.name)
def test_scheme_chapters_cite_their_paper_in_the_opening(path):
    opening = source(cells(path)[0])
    assert CITE.search(opening), f"{path.name}: the first paragraph cites no paper"


@pytest.mark.parametrize("path", CHAPTERS + APPENDICES + [LANDING] + PAGES, ids=lambda p: p.name)
def test_display_math_starts_a_block(path):
    # "$$" right after a text line (e.g. inside a list item) is rendered as raw text
    lines = markdown(path).splitlines()
    opening = True
    for n, line in enumerate(lines):
        if line.strip() == "$$":
            if opening:
                assert n == 0 or not lines[n - 1].strip(), (
                    f"{path.name}: '$$' after {lines[n - 1].strip()!r} needs a blank line before it"
                )
            opening = not opening
