"""The built book, opened page by page in headless Chromium.

Fails on: a page error (uncaught exception) or console error; a request for a file of
the book that is missing; a request that leaves the book's folder, unless it is an
optional CDN asset the page works without (such requests are blocked here, so the page
is checked *without* them); a plotly figure that does not render (no SVG in its div);
a page that shows fewer figures than its executed notebook produced (an output dropped
by the build); a figure without a numbered caption; tick labels that overlap; display
math wider than the text column; data outside the visible axis ranges; and, at every
step of every slider (clicked as a reader would), a figure that changes size, crops
its data or does not change at all. Each page is checked at a desktop width (1300 px)
and at a phone width (390 px).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from book_standards import PENDING

from .conftest import HTML, ROOT

WIDTHS = {"desktop": 1300, "phone": 390}

# Optional assets from CDNs: blocked during the check, so the page must work without them.
# None at present: plotly.js and MathJax ship with the book (_ext/relpos_book.py).
OPTIONAL_CDN_PREFIXES: tuple[str, ...] = ()

PAGES = sorted(
    p.relative_to(HTML).as_posix()
    for p in HTML.rglob("*.html")
    if not p.relative_to(HTML).parts[0].startswith("_")
) if HTML.is_dir() else []


def executed_cells(page: str) -> list[dict]:
    """The cells, with outputs, of the executed notebook behind ``page`` ([] for markdown).

    myst-nb writes ``_build/jupyter_execute/<page>.ipynb`` without outputs when it took
    them from its execution cache (a markdown-only edit), so the cache is asked first.
    """
    source = ROOT / Path(page).with_suffix(".ipynb")
    if not source.is_file():
        return []
    cache_dir = ROOT / "_build" / ".jupyter_cache"
    if cache_dir.is_dir():
        import nbformat
        from jupyter_cache import get_cache

        try:
            _, merged = get_cache(str(cache_dir)).merge_match_into_notebook(nbformat.read(source, 4))
            return json.loads(nbformat.writes(merged))["cells"]
        except KeyError:  # not in the cache: executed without it
            pass
    executed = ROOT / "_build" / "jupyter_execute" / Path(page).with_suffix(".ipynb")
    return json.loads(executed.read_text())["cells"] if executed.is_file() else []


def expected_figures(page: str) -> int:
    """Plotly figures in the executed notebook behind ``page`` (0 for a markdown page)."""
    count = 0
    for cell in executed_cells(page):
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html", "")
            count += "".join(html).count('class="plotly-graph-div')
    return count


def test_book_has_pages():
    assert "index.html" in PAGES and any(p.startswith("chapters/") for p in PAGES), PAGES


def redirect_target(page: str) -> str | None:
    match = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', (HTML / page).read_text(), re.I)
    return match.group(1) if match else None


def pending(page: str, standard: str) -> bool:
    return standard in PENDING.get(Path(page).with_suffix(".ipynb").name, ())


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
@pytest.mark.parametrize("page", PAGES)
def test_page(browser, book_url, page, width):
    target = redirect_target(page)
    if target is not None:  # Jupyter Book's index.html only redirects to the root page
        assert target in PAGES, f"{page} redirects to {target}, which was not built"
        return
    context = browser.new_context(viewport={"width": width, "height": 1000})
    tab = context.new_page()
    errors, outside, missing = [], [], []
    tab.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    tab.on("console", lambda msg: msg.type == "error" and errors.append(f"console error: {msg.text}"))

    def route(request_route):
        url = request_route.request.url
        if url.startswith(book_url) or url.startswith("data:"):
            request_route.continue_()
        else:
            outside.append(url)
            request_route.abort()

    tab.route("**/*", route)
    tab.on("response", lambda r: r.status >= 400 and r.url.startswith(book_url) and missing.append(f"{r.status} {r.url}"))
    tab.goto(book_url + page, wait_until="load")

    figures = expected_figures(page)
    if figures:
        tab.wait_for_function(
            "n => document.querySelectorAll('.plotly-graph-div .main-svg').length >= n && "
            "Array.from(document.querySelectorAll('.plotly-graph-div')).every(d => d.querySelector('svg.main-svg'))",
            arg=figures,
            timeout=30_000,
        )
    if tab.locator(".math").count():  # MathJax (shipped in _static) typesets every formula
        tab.wait_for_function(
            "() => document.querySelectorAll('.math').length === document.querySelectorAll('.math mjx-container').length",
            timeout=30_000,
        )
    divs = tab.eval_on_selector_all(".plotly-graph-div", "ds => ds.map(d => !!d.querySelector('svg.main-svg'))")
    assert len(divs) == figures, f"{page}: {len(divs)} plotly figures on the page, the executed notebook made {figures}"
    assert all(divs), f"{page}: a plotly figure did not render (no SVG in its div)"

    tab.wait_for_timeout(300)  # the figures' tick fitting (one relayout) settles
    if not pending(page, "captions"):
        uncaptioned = tab.evaluate(UNCAPTIONED)
        assert not uncaptioned, f"{page}: figures {uncaptioned} have no numbered caption"
    wide = [] if pending(page, "math") else tab.evaluate(WIDE_MATH)
    assert not wide, f"{page} at {width} px: display math wider than the column: {wide}"
    for index in range(len(divs)):
        problems = tab.evaluate(FIGURE_PROBLEMS, index)
        assert not problems, f"{page} at {width} px, figure {index}: {problems}"
    for index in tab.eval_on_selector_all(
        ".plotly-graph-div", "ds => ds.map((d, i) => (d.layout && d.layout.sliders && d.layout.sliders.length) ? i : -1).filter(i => i >= 0)"
    ):
        check_slider(tab, f"{page} at {width} px", index)

    unexpected = [u for u in outside if not u.startswith(OPTIONAL_CDN_PREFIXES)]
    cdn_errors = [e for e in errors if "net::ERR_FAILED" in e and outside]
    assert not unexpected, f"{page}: requests left the book's folder: {unexpected}"
    assert not missing, f"{page}: missing files: {missing}"
    assert not [e for e in errors if e not in cdn_errors], f"{page}: {errors}"
    context.close()


DATA = "i => JSON.stringify(document.querySelectorAll('.plotly-graph-div')[i].data.map(t => [t.x, t.y, t.z]))"
ACTIVE = "i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].active"
SIZE = """i => {
  const gd = document.querySelectorAll('.plotly-graph-div')[i], box = gd.getBoundingClientRect();
  return [Math.round(box.width), Math.round(box.height), gd._fullLayout.width, gd._fullLayout.height];
}"""

# Every plotly figure sits in a <figure> whose caption is numbered: "Figure 2.3" in a
# chapter, "Figure 1" on the landing page (outside the numbered parts).
UNCAPTIONED = """() => Array.from(document.querySelectorAll('.plotly-graph-div')).map((d, i) => {
  const figure = d.closest('figure');
  const number = figure && figure.querySelector('figcaption .caption-number');
  return number && /^Figure \\d+(\\.\\d+)?$/.test(number.textContent.trim()) ? -1 : i;
}).filter(i => i >= 0)"""

# Display equations must fit the text column (MathJax does not break lines).
WIDE_MATH = """() => Array.from(document.querySelectorAll('div.math mjx-container, mjx-container[display="true"]'))
  .filter(m => m.scrollWidth > m.clientWidth + 2
               || m.getBoundingClientRect().width > m.parentElement.getBoundingClientRect().width + 2)
  .map(m => m.textContent.slice(0, 40))"""

# What a reader would not print: data outside the visible axis ranges, overlapping tick
# labels (the "0369121518" smear).
FIGURE_PROBLEMS = """i => {
  const gd = document.querySelectorAll('.plotly-graph-div')[i], full = gd._fullLayout;
  const problems = [];
  gd._fullData.forEach((t, n) => {
    if (t.visible === false) { return; }
    ['x', 'y'].forEach(letter => {
      const ax = full[letter + 'axis' + (t[letter + 'axis'] || letter).slice(1)];
      if (!ax || !ax.range) { return; }
      const ends = ax.range.map(ax.r2l), lo = Math.min(...ends), hi = Math.max(...ends);
      let values;
      if (t.type === 'heatmap') {
        const count = letter === 'x' ? (t.z[0] || []).length : t.z.length;
        const coords = (t[letter] && t[letter].length) ? Array.from(t[letter]) : [...Array(count).keys()];
        if (coords.length !== count) { problems.push(`trace ${n}: ${coords.length} ${letter} labels for ${count} cells`); }
        const at = coords.map(v => ax.d2l(v));
        values = [Math.min(...at) - 0.5, Math.max(...at) + 0.5];
      } else {
        values = Array.from(t[letter] || []).map(v => ax.d2l(v)).filter(Number.isFinite);
      }
      const slack = 1e-6 * (hi - lo);
      const outside = values.filter(v => v < lo - slack || v > hi + slack);
      if (outside.length) { problems.push(`trace ${n}: ${outside.length} ${letter} values outside [${lo}, ${hi}]`); }
    });
  });
  gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above').forEach(layer => {
    const horizontal = layer.classList.contains('xaxislayer-above');
    const boxes = Array.from(layer.querySelectorAll('.xtick text, .ytick text'))
      .map(e => e.getBoundingClientRect()).filter(b => b.width > 0)
      .sort((a, b) => horizontal ? a.left - b.left : a.top - b.top);
    for (let k = 1; k < boxes.length; k++) {
      const overlap = horizontal ? boxes[k - 1].right - boxes[k].left : boxes[k - 1].bottom - boxes[k].top;
      // a text box is taller than its glyphs: a few px of vertical box overlap is not a smear
      if (overlap > (horizontal ? 1 : 4)) { problems.push(`tick labels overlap by ${overlap.toFixed(0)} px`); break; }
    }
  });
  return problems;
}"""


def check_slider(tab, page, index):
    """Click every step of the slider, as a reader would; after each, the plotted data
    changes, stays inside the visible axis ranges, and the figure keeps its size."""
    div = tab.locator(".plotly-graph-div").nth(index)
    div.scroll_into_view_if_needed()
    n_steps = tab.evaluate("i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].steps.length", index)
    assert n_steps >= 2, f"{page}: figure {index} has a slider with {n_steps} step"
    rail = div.locator(".slider-rail-rect").first.bounding_box()
    assert rail, f"{page}: figure {index}: slider rail not drawn"
    ticks = div.locator(".slider-tick-rect")
    assert ticks.count() == n_steps, f"{page}: figure {index}: {ticks.count()} ticks for {n_steps} steps"
    size = tab.evaluate(SIZE, index)
    start = tab.evaluate(ACTIVE, index)
    seen = {start: tab.evaluate(DATA, index)}
    order = [s for s in range(n_steps) if s != start] + [start]  # every step, then back
    for step in order:
        box = ticks.nth(step).bounding_box()
        tab.mouse.click(box["x"] + box["width"] / 2, rail["y"] + rail["height"] / 2)
        tab.wait_for_function(f"i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].active === {step}",
                              arg=index, timeout=10_000)
        tab.wait_for_timeout(250)
        data = tab.evaluate(DATA, index)
        if step != start:
            assert data != seen[start], f"{page}: figure {index}: slider step {step} did not change the plotted data"
        seen[step] = data
        assert tab.evaluate(SIZE, index) == size, f"{page}: figure {index}: step {step} changed the figure's size"
        problems = tab.evaluate(FIGURE_PROBLEMS, index)
        assert not problems, f"{page}: figure {index}, slider step {step}: {problems}"
    assert seen[start] == tab.evaluate(DATA, index), f"{page}: figure {index}: back at the start, different data"
