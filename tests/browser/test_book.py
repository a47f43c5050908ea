"""The built book, opened page by page in headless Chromium.

Fails on: a page error (uncaught exception) or console error; a request for a file of
the book that is missing; a request that leaves the book's folder, unless it is an
optional CDN asset the page works without (such requests are blocked here, so the page
is checked *without* them); a plotly figure that does not render (no SVG in its div);
a page that shows fewer figures than its executed notebook produced (an output dropped
by the build); a slider that does not change the plotted data when moved.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import HTML, ROOT

# Optional assets from CDNs: blocked during the check, so the page must work without them.
# None at present: plotly.js and MathJax ship with the book (_ext/relpos_book.py).
OPTIONAL_CDN_PREFIXES: tuple[str, ...] = ()

PAGES = sorted(
    p.relative_to(HTML).as_posix()
    for p in HTML.rglob("*.html")
    if not p.relative_to(HTML).parts[0].startswith("_")
) if HTML.is_dir() else []


def expected_figures(page: str) -> int:
    """Plotly figures in the executed notebook behind ``page`` (0 for a markdown page)."""
    executed = ROOT / "_build" / "jupyter_execute" / Path(page).with_suffix(".ipynb")
    if not executed.is_file():
        return 0
    count = 0
    for cell in json.loads(executed.read_text())["cells"]:
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html", "")
            count += "".join(html).count('class="plotly-graph-div')
    return count


def test_book_has_pages():
    assert "index.html" in PAGES and any(p.startswith("chapters/") for p in PAGES), PAGES


def redirect_target(page: str) -> str | None:
    match = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', (HTML / page).read_text(), re.I)
    return match.group(1) if match else None


@pytest.mark.parametrize("page", PAGES)
def test_page(browser, book_url, page):
    target = redirect_target(page)
    if target is not None:  # Jupyter Book's index.html only redirects to the root page
        assert target in PAGES, f"{page} redirects to {target}, which was not built"
        return
    context = browser.new_context(viewport={"width": 1300, "height": 1000})
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

    for index in tab.eval_on_selector_all(
        ".plotly-graph-div", "ds => ds.map((d, i) => (d.layout && d.layout.sliders && d.layout.sliders.length) ? i : -1).filter(i => i >= 0)"
    ):
        check_slider(tab, page, index)

    unexpected = [u for u in outside if not u.startswith(OPTIONAL_CDN_PREFIXES)]
    cdn_errors = [e for e in errors if "net::ERR_FAILED" in e and outside]
    assert not unexpected, f"{page}: requests left the book's folder: {unexpected}"
    assert not missing, f"{page}: missing files: {missing}"
    assert not [e for e in errors if e not in cdn_errors], f"{page}: {errors}"
    context.close()


DATA = "i => JSON.stringify(document.querySelectorAll('.plotly-graph-div')[i].data.map(t => [t.x, t.y, t.z]))"
ACTIVE = "i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].active"


def check_slider(tab, page, index):
    """Click the far end of the slider's rail, as a reader would, and compare the data."""
    div = tab.locator(".plotly-graph-div").nth(index)
    div.scroll_into_view_if_needed()
    before, active_before = tab.evaluate(DATA, index), tab.evaluate(ACTIVE, index)
    n_steps = tab.evaluate("i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].steps.length", index)
    assert n_steps >= 2, f"{page}: figure {index} has a slider with {n_steps} step"
    rail = div.locator(".slider-rail-rect").first
    box = rail.bounding_box()
    assert box, f"{page}: figure {index}: slider rail not drawn"
    target_right = active_before < n_steps - 1
    x = box["x"] + (box["width"] - 3 if target_right else 3)
    tab.mouse.click(x, box["y"] + box["height"] / 2)
    tab.wait_for_function(f"i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].active !== {active_before}", arg=index, timeout=10_000)
    tab.wait_for_timeout(300)
    after = tab.evaluate(DATA, index)
    assert after != before, f"{page}: figure {index}: moving the slider did not change the plotted data"
