"""The built book as a first-time reader gets it, in headless Chromium: light pages that
paint at once, and content that fits the column at a laptop's 1280 px and a phone's 390 px.

``test_page_weight`` (every page, both widths, a fresh browser context: nothing cached)

* the bytes of every response the page loads before the reader scrolls (uncompressed:
  the test server does not compress) stay within ``MAX_PAGE_BYTES`` (1.5 MB): figures
  below the screen load nothing (``_ext/relpos_book.py`` draws them when they come near);
* no script in ``<head>`` blocks the first paint (a ``src`` without ``defer``/``async``),
  bar Sphinx's few small ones (``SMALL_BLOCKING_BYTES``);
* the first contentful paint (Performance API) within ``MAX_FCP_MS``. The target is 1 s on
  an idle machine (measured 0.3-0.9 s at 1280 px when only this test ran; see the issue's
  closing note); the check allows ``MAX_FCP_MS`` because it runs beside other work on a
  2-core machine. The bytes and the blocking scripts are what the page itself controls.

``test_fit`` (all pages at one width, every figure scrolled into view and drawn)

* no table wider than the column at 1280 px; at 390 px at most one table in five scrolls
  sideways, and each one that does shows the cue (a "scroll" hint, the fade of
  ``.relpos-scrolls``) and keeps its first column in view (sticky);
* no code block, printed output included, cut at its right edge (they wrap);
* no page that scrolls sideways;
* on a phone, no figure whose legend is taller than ``MAX_LEGEND_SHARE`` of its plot;
* one colour per series name across every page (a scheme is drawn in one colour
  everywhere); ``KNOWN_COLOUR_CLASHES`` lists the names that do not yet (the goal is an
  empty set: a name that is fixed must be removed, a new clash fails).
"""
from __future__ import annotations

import pytest

from .conftest import HTML
from .test_book import DRAW_ALL, PAGES, VIEWPORT_HEIGHT, WIDTHS, redirect_target

MAX_PAGE_BYTES = 1_500_000
MAX_FCP_MS = 3_000
SMALL_BLOCKING_BYTES = 20_000
MAX_SCROLLING_TABLES = 0.2
MAX_LEGEND_SHARE = 0.5  # the figure script grows a phone figure to 0.45 (figures._plotly.LEGEND_SHARE)

#: (page, width) that load more than MAX_PAGE_BYTES before the reader scrolls, and why; the
#: goal is an empty set. The landing page shows its concept figure on the first screen at
#: 1280 px, so plotly.js (the basic bundle, 1.19 MB) loads with the page: 2.2 MB. Drawing
#: that diagram as SVG (it is boxes and arrows) would bring the page to about 1.0 MB.
KNOWN_HEAVY: set[tuple[str, int]] = set()

#: series names drawn in more than one colour across the book (issue 22, item 3): the
#: goal is an empty set
KNOWN_COLOUR_CLASHES: set[str] = set()

READ_PAGES = [p for p in PAGES if redirect_target(p) is None] if HTML.is_dir() else []

BLOCKING = """() => Array.from(document.head.querySelectorAll('script[src]'))
  .filter(s => !s.defer && !s.async && s.type !== 'module').map(s => s.src)"""


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
@pytest.mark.parametrize("page", READ_PAGES)
def test_page_weight(browser, book_url, page, width):
    context = browser.new_context(viewport={"width": width, "height": VIEWPORT_HEIGHT[width]})
    tab = context.new_page()
    finished = []
    tab.on("requestfinished", lambda request: finished.append(request))
    tab.goto(book_url + page, wait_until="load")
    tab.wait_for_load_state("networkidle")
    tab.wait_for_timeout(300)
    sizes = {}
    for request in finished:
        if request.url.startswith(book_url):
            sizes[request.url] = sizes.get(request.url, 0) + request.sizes()["responseBodySize"]
    total = sum(sizes.values())
    blocking = tab.evaluate(BLOCKING)
    fcp = tab.evaluate("() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null")
    context.close()
    heaviest = ", ".join(f"{u[len(book_url):].split('?')[0]} {s // 1000} kB"
                         for u, s in sorted(sizes.items(), key=lambda kv: -kv[1])[:4])
    if (page, width) in KNOWN_HEAVY:
        assert total > MAX_PAGE_BYTES, f"{page} at {width} px is light now: remove it from KNOWN_HEAVY"
    else:
        assert total <= MAX_PAGE_BYTES, (
            f"{page} at {width} px loads {total / 1e6:.2f} MB before the reader scrolls "
            f"(at most {MAX_PAGE_BYTES / 1e6:.1f} MB); heaviest: {heaviest}")
    big = [u for u in blocking if sizes.get(u, 0) > SMALL_BLOCKING_BYTES]
    assert not big, f"{page}: scripts in <head> that block the first paint: {big}"
    assert fcp is not None and fcp <= MAX_FCP_MS, f"{page} at {width} px: first contentful paint {fcp} ms"


FIT = """() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main');
  const column = article.getBoundingClientRect();
  const tables = Array.from(article.querySelectorAll('table'))
    .filter(t => !t.closest('.plotly-graph-div') && t.getBoundingClientRect().width > 0)
    .map(t => {
      const box = t.closest('.pst-scrollable-table-container');
      const scrolls = box ? box.scrollWidth > box.clientWidth + 1 : t.getBoundingClientRect().right > column.right + 1;
      const first = t.querySelector('tr > :first-child');
      const hint = box && box.previousElementSibling && box.previousElementSibling.classList.contains('relpos-scroll-hint');
      return {head: (t.querySelector('tr') || t).textContent.trim().replace(/\\s+/g, ' ').slice(0, 50),
              wider: t.getBoundingClientRect().width > column.width + 1, scrolls,
              cue: !!(box && box.classList.contains('relpos-scrolls') && hint),
              sticky: !!(first && getComputedStyle(first).position === 'sticky')};
    });
  const code = Array.from(article.querySelectorAll('pre'))
    .filter(p => p.getBoundingClientRect().width > 0 && p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '').slice(0, 60));
  const sideways = document.documentElement.scrollWidth > window.innerWidth + 1;
  const figures = Array.from(document.querySelectorAll('.plotly-graph-div')).map((gd, i) => {
    const full = gd._fullLayout;
    if (!full) { return null; }
    const legend = gd.querySelector('.legend');
    const series = (gd._fullData || []).filter(t => t.visible === true && t.showlegend !== false && t.name)
      .map(t => {
        const line = t.line && typeof t.line.color === 'string' ? t.line.color : null;
        const marker = t.marker && typeof t.marker.color === 'string' ? t.marker.color : null;
        return {name: t.name.replace(/<[^>]*>/g, '').trim(), colour: (t.type === 'bar' ? marker : line || marker)};
      }).filter(s => s.colour);
    return {index: i + 1, legend: legend ? legend.getBoundingClientRect().height : 0,
            plot: full._size ? full._size.h : 0, series};
  }).filter(f => f);
  return {tables, code, sideways, figures};
}"""


def _colour(value: str) -> str:
    value = value.strip().lower()
    if value.startswith("rgb"):
        parts = [float(x) for x in value[value.index("(") + 1:value.index(")")].split(",")[:3]]
        return "#" + "".join(f"{round(v):02x}" for v in parts)
    return value


@pytest.mark.parametrize("width", WIDTHS.values(), ids=WIDTHS.keys())
def test_fit(browser, book_url, width):
    context = browser.new_context(viewport={"width": width, "height": VIEWPORT_HEIGHT[width]})
    tab = context.new_page()
    problems, tables, colours = [], [], {}
    for page in READ_PAGES:
        tab.goto(book_url + page, wait_until="load")
        states = tab.evaluate(DRAW_ALL)
        if any(s != "drawn" for s in states):
            problems.append(f"{page}: figures not drawn: {states}")
        got = tab.evaluate(FIT)
        tables += [(page, t) for t in got["tables"]]
        problems += [f"{page}: code cut at the right edge, its widest line {line!r}" for line in got["code"]]
        if got["sideways"]:
            problems.append(f"{page}: the page scrolls sideways")
        for figure in got["figures"]:
            if width == WIDTHS["phone"] and figure["plot"] and figure["legend"] > MAX_LEGEND_SHARE * figure["plot"]:
                problems.append(f"{page}, figure {figure['index']}: legend {figure['legend']:.0f} px tall on a "
                                f"{figure['plot']:.0f} px plot")
            for series in figure["series"]:
                colours.setdefault(series["name"], {}).setdefault(_colour(series["colour"]), set()).add(page)
    context.close()
    if width == WIDTHS["desktop"]:
        problems += [f"{page}: table wider than the column: {t['head']!r}" for page, t in tables if t["wider"]]
    scrolling = [(page, t) for page, t in tables if t["scrolls"]]
    if len(scrolling) > MAX_SCROLLING_TABLES * len(tables):
        problems.append(f"{len(scrolling)} of {len(tables)} tables scroll sideways at {width} px "
                        f"(at most {MAX_SCROLLING_TABLES:.0%}): " + "; ".join(f"{p}: {t['head']!r}" for p, t in scrolling))
    problems += [f"{page}: table scrolls without a cue or sticky first column: {t['head']!r}"
                 for page, t in scrolling if not (t["cue"] and t["sticky"])]
    clashes = {name: seen for name, seen in colours.items() if len(seen) > 1}
    problems += [f"series {name!r} in {len(seen)} colours: " + "; ".join(f"{c} on {sorted(p)[:2]}" for c, p in seen.items())
                 for name, seen in clashes.items() if name not in KNOWN_COLOUR_CLASHES]
    fixed = KNOWN_COLOUR_CLASHES - set(clashes)
    problems += [f"series {name!r} has one colour now: remove it from KNOWN_COLOUR_CLASHES" for name in sorted(fixed)]
    assert not problems, f"at {width} px:\n  " + "\n  ".join(problems)


# Every figure's drawn width against its div's, after the article column narrows without
# the window resizing (as when the page's styles arrive after the figures were drawn on a
# busy machine): a figure drawn for the wider column was cut at its right edge.
FIGURE_WIDTHS = """() => Array.from(document.querySelectorAll('.plotly-graph-div'))
  .map(gd => [gd.clientWidth, gd._fullLayout ? gd._fullLayout.width : null])"""


def test_a_figure_follows_its_column_when_the_column_narrows(browser, book_url):
    context = browser.new_context(viewport={"width": WIDTHS["desktop"], "height": VIEWPORT_HEIGHT[WIDTHS["desktop"]]})
    tab = context.new_page()
    page = "chapters/13_language_model.html"  # plain line figures, their legends under the plot
    tab.goto(book_url + page, wait_until="load")
    assert all(s == "drawn" for s in tab.evaluate(DRAW_ALL))
    before = tab.evaluate(FIGURE_WIDTHS)
    tab.evaluate("() => { document.querySelector('article').style.maxWidth = '620px'; }")
    tab.wait_for_function(f"() => Array.from(document.querySelectorAll('.plotly-graph-div'))"
                          f".every(gd => gd.clientWidth < {min(w for w, _ in before)})", timeout=5_000)
    tab.wait_for_timeout(1_500)  # the resize observer, then Plotly's redraw
    after = tab.evaluate(FIGURE_WIDTHS)
    context.close()
    cut = [(i + 1, round(drawn), div) for i, (div, drawn) in enumerate(after) if drawn is None or abs(drawn - div) > 2]
    assert not cut, f"{page}: figures (number, drawn px, column px) not redrawn for the narrower column: {cut}"


def test_no_page_carries_widget_state_nothing_reads():
    """The live sliders' widget state (a copy of each figure inside its Output widget) is
    read only by a widget manager, which the book does not load: it is dropped at build."""
    state = "application/vnd.jupyter.widget-state+json"
    heavy = [p for p in READ_PAGES if state in (HTML / p).read_text(encoding="utf-8")]
    assert not heavy, f"pages with widget state in their HTML: {heavy}"
