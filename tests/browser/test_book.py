"""The built book, opened page by page in headless Chromium.

Fails on: a page error (uncaught exception) or console error; a request for a file of
the book that is missing; a request that leaves the book's folder, unless it is an
optional CDN asset the page works without (such requests are blocked here, so the page
is checked *without* them); a plotly figure that does not render (no SVG in its div);
a page that shows fewer figures than its executed notebook produced (an output dropped
by the build); a figure without a numbered caption; tick labels that overlap; display
math wider than the text column; data outside the visible axis ranges; and, at every
step of every slider (clicked as a reader would), a figure that changes size, crops
its data or does not visibly change what it plots.

What a reader sees, at a laptop's 1280 x 800 px and a phone's 390 x 844 px:

* no code cell wider than the column at 1280 px (its ``div.highlight pre`` scrolls);
* no plotly toolbar covering a legend entry, a title or an axis label;
* every heatmap that asks for its cell numbers (``meta.relpos.text``: small matrices,
  ``rp.figures.heatmap``) shows them at both widths: present, visible, at least
  ``MIN_CELL_FONT_PX``, not overlapping;
* titles, axis titles, legend entries, colour-bar labels and tick labels neither
  overlap one another nor run outside the figure;
* no figure taller than ``MAX_FIGURE_PX`` (600) at 1280 px, so that a slider and what
  it changes are seen together; on a phone a figure with a slider fits the screen
  (844 px), and a figure without one may be taller only when it is a stack of panels
  (the heatmap's narrow layout), each of which fits the screen, read one after another
  like separate figures;
* at most ``MAX_TRACES`` (8) legend entries in a figure and lines in one plot;
* every table has a numbered caption ("Table 2.1") outside its horizontal scroll box;
* no admonition titled by its kind alone ("Warning", "Note"): a pitfall box says what
  the pitfall is;
* in the book's dark mode (its toggle clicked), no figure keeps a light background or
  dark text.

Chapters being rewritten elsewhere can list a standard in ``book_standards.PENDING``
(keys: "captions", "math", "code width", "admonitions", "tables", "figure height",
"traces", "cell numbers", "titles"); the goal is an empty list.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from book_standards import PENDING

from .conftest import HTML, ROOT

WIDTHS = {"desktop": 1280, "phone": 390}
VIEWPORT_HEIGHT = {1280: 800, 390: 844}
MAX_FIGURE_PX = 600
MAX_TRACES = 8
MIN_CELL_FONT_PX = 9

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
    context = browser.new_context(viewport={"width": width, "height": VIEWPORT_HEIGHT[width]})
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
    if figures:  # each figure is drawn when it comes near the screen: scroll to each, as a reader
        tab.evaluate(DRAW_ALL)
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
        assert not problems, f"{page} at {width} px, figure {index + 1}: {problems}"
    reader_problems = what_a_reader_sees(tab, page, width)
    for index in tab.eval_on_selector_all(
        ".plotly-graph-div", "ds => ds.map((d, i) => (d.layout && d.layout.sliders && d.layout.sliders.length) ? i : -1).filter(i => i >= 0)"
    ):
        try:
            check_slider(tab, page, index)
        except AssertionError as err:  # every slider of the page is tried, then all is said
            reader_problems.append(str(err).splitlines()[0])
    assert not reader_problems, f"{page} at {width} px:\n  " + "\n  ".join(reader_problems)

    if width == WIDTHS["desktop"] and divs:
        dark = dark_mode_problems(tab)
        assert not dark, f"{page} in dark mode: {dark}"
    unexpected = [u for u in outside if not u.startswith(OPTIONAL_CDN_PREFIXES)]
    cdn_errors = [e for e in errors if "net::ERR_FAILED" in e and outside]
    assert not unexpected, f"{page}: requests left the book's folder: {unexpected}"
    assert not missing, f"{page}: missing files: {missing}"
    assert not [e for e in errors if e not in cdn_errors], f"{page}: {errors}"
    context.close()


# Scroll each figure into view and wait until it is drawn (the book draws a figure when
# it comes near the screen: _ext/relpos_book.py); back to the top. The figures' states.
DRAW_ALL = """async () => {
  const divs = Array.from(document.querySelectorAll('div.relpos-figure'));
  for (const d of divs) {
    d.scrollIntoView({block: 'center'});
    const t0 = performance.now();
    while (!['drawn', 'failed'].includes(d.getAttribute('data-relpos-state')) && performance.now() - t0 < 20000) {
      await new Promise(r => setTimeout(r, 50));
    }
  }
  window.scrollTo(0, 0);
  await new Promise(r => setTimeout(r, 300));
  return divs.map(d => d.getAttribute('data-relpos-state'));
}"""

DATA = "i => JSON.stringify(document.querySelectorAll('.plotly-graph-div')[i].data.map(t => [t.x, t.y, t.z]))"

# What each trace plots and the spans it is drawn on: an axis's range (log units on a log
# axis), a heatmap's colour range. A slider step must change what the eye sees.
PLOTTED = """i => {
  const gd = document.querySelectorAll('.plotly-graph-div')[i], full = gd._fullLayout;
  const span = (letter, t) => {
    const ax = full[letter + 'axis' + (t[letter + 'axis'] || letter).slice(1)];
    if (!ax || !ax.range || ax.type === 'category') { return null; }
    const ends = ax.range.map(ax.r2l);
    return {span: Math.abs(ends[1] - ends[0]), log: ax.type === 'log'};
  };
  return gd._fullData.map(t => ({
    x: t.x ? Array.from(t.x) : null, y: t.y ? Array.from(t.y) : null,
    z: t.z ? Array.from(t.z, r => Array.from(r || [])) : null,
    xs: span('x', t), ys: span('y', t),
    zs: (t.zmax !== undefined && t.zmin !== undefined) ? Math.abs(t.zmax - t.zmin) : null,
  }));
}"""

#: the smallest change a reader sees: this share of an axis or a colour range
VISIBLE_CHANGE = 0.01


def visibly_different(before: list[dict], after: list[dict]) -> bool:
    """Whether two snapshots (``PLOTTED``) differ by more than ``VISIBLE_CHANGE`` of a span
    somewhere: a value moved, a category or a shape changed, a trace appeared."""
    import math

    def flat(values):
        if values is None:
            return []
        out = []
        for v in values:
            out.extend(flat(v) if isinstance(v, list) else [v])
        return out

    def moved(a, b, scale):
        a, b = flat(a), flat(b)
        if len(a) != len(b):
            return True
        for u, v in zip(a, b):
            if u is None or v is None or isinstance(u, str) or isinstance(v, str):
                if u != v:
                    return True
                continue
            if not (math.isfinite(u) and math.isfinite(v)):
                if (math.isfinite(u), math.isfinite(v)) != (True, True) and str(u) != str(v):
                    return True
                continue
            if scale and scale["log"]:
                if u > 0 and v > 0:
                    u, v = math.log10(u), math.log10(v)
                elif u != v:
                    return True
            size = scale["span"] if scale else max(abs(u), abs(v), 1e-12)
            if abs(u - v) > VISIBLE_CHANGE * size:
                return True
        return False

    if len(before) != len(after):
        return True
    for a, b in zip(before, after):
        if moved(a["x"], b["x"], a["xs"]) or moved(a["y"], b["y"], a["ys"]):
            return True
        z_scale = {"span": a["zs"], "log": False} if a["zs"] else None
        if moved(a["z"], b["z"], z_scale):
            return True
    return False
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
  // every subplot drawn for the figure's current size: its lines clipped to the plot's
  // height and a bottom x axis under the plot (a slider frame that reset the height once
  // drew the axis mid-plot and cut the lines)
  Object.keys(full).filter(k => /^xaxis[0-9]*$/.test(k)).forEach(k => {
    const xa = full[k], ya = xa._anchorAxis;
    if (!ya || !ya._id || xa.visible === false) { return; }
    const clip = gd.querySelector(`#clip${full._uid}${xa._id}${ya._id}plot rect`);
    const drawn = clip && parseFloat(clip.getAttribute('height'));
    if (drawn && Math.abs(drawn - ya._length) > 2) {
      problems.push(`plot ${xa._id}${ya._id} clipped to ${drawn.toFixed(0)} px of its ${ya._length.toFixed(0)} px height`);
    }
    if (xa.side !== 'bottom' || !/^outside/.test(xa.ticklabelposition || 'outside')) { return; }
    const top = gd.querySelector('svg.main-svg').getBoundingClientRect().top;
    const bottom = top + ya._offset + ya._length;
    const high = Array.from(gd.querySelectorAll(`.xaxislayer-above .${xa._id}tick text`))
      .map(e => e.getBoundingClientRect()).filter(b => b.height > 0 && b.top < bottom - 2);
    if (high.length) { problems.push(`${xa._id} axis labels drawn ${(bottom - high[0].top).toFixed(0)} px above the plot's bottom`); }
  });
  return problems;
}"""


def check_slider(tab, page, index):
    """Click every step of the slider, as a reader would; after each, the plotted data
    changes, stays inside the visible axis ranges, and the figure keeps its size."""
    div = tab.locator(".plotly-graph-div").nth(index)
    div.scroll_into_view_if_needed()
    n_steps = tab.evaluate("i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].steps.length", index)
    assert n_steps >= 2, f"{page}: figure {index + 1} has a slider with {n_steps} step"
    rail = div.locator(".slider-rail-rect").first.bounding_box()
    assert rail, f"{page}: figure {index + 1}: slider rail not drawn"
    ticks = div.locator(".slider-tick-rect")
    assert ticks.count() == n_steps, f"{page}: figure {index + 1}: {ticks.count()} ticks for {n_steps} steps"
    size = tab.evaluate(SIZE, index)
    start = tab.evaluate(ACTIVE, index)
    seen = {start: tab.evaluate(DATA, index)}
    order = [s for s in range(n_steps) if s != start] + [start]  # every step, then back
    shown, previous = tab.evaluate(PLOTTED, index), start
    for step in order:
        box = ticks.nth(step).bounding_box()
        tab.mouse.click(box["x"] + box["width"] / 2, rail["y"] + rail["height"] / 2)
        tab.wait_for_function(f"i => document.querySelectorAll('.plotly-graph-div')[i].layout.sliders[0].active === {step}",
                              arg=index, timeout=10_000)
        tab.wait_for_timeout(250)
        data = tab.evaluate(DATA, index)
        if step != start:
            assert data != seen[start], f"{page}: figure {index + 1}: slider step {step} did not change the plotted data"
        now = tab.evaluate(PLOTTED, index)
        assert visibly_different(shown, now), (
            f"{page}: figure {index + 1}: from slider step {previous} to {step} the plotted data changes by less "
            f"than {VISIBLE_CHANGE:.0%} of its axes' or colour range: a reader sees no change")
        shown, previous = now, step
        seen[step] = data
        assert tab.evaluate(SIZE, index) == size, f"{page}: figure {index + 1}: step {step} changed the figure's size"
        problems = tab.evaluate(FIGURE_PROBLEMS, index)
        assert not problems, f"{page}: figure {index + 1}, slider step {step}: {problems}"
        # the titles and labels a reader reads, at every step, not only the first (a heatmap's cell
        # numbers are checked at the first step only: chapter 1's offsets at L = 16 on a phone plan
        # numbers that Plotly does not draw, left open)
        read = [p for p in tab.evaluate(READER_FIGURE, [index, MIN_CELL_FONT_PX])["problems"]
                if not p.startswith("heatmap") and not pending(page, "titles")]
        assert not read, f"{page}: figure {index + 1}, slider step {step}: {list(dict.fromkeys(read))}"
    assert seen[start] == tab.evaluate(DATA, index), f"{page}: figure {index + 1}: back at the start, different data"


# -- what a reader sees ---------------------------------------------------------------

# Code a reader copies (code cells, code blocks; not the text a cell prints) that scrolls
# sideways: wider than the column.
WIDE_CODE = """() => Array.from(document.querySelectorAll('div.highlight pre'))
  .filter(p => !p.closest('.cell_output, .output'))
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => p.textContent.split('\\n').reduce((a, b) => b.length > a.length ? b : a, '').slice(0, 60))"""

# An admonition titled by its kind alone: ":::{warning} Title" renders "Warning" and runs
# the intended title into the first sentence.
GENERIC_ADMONITIONS = """() => {
  const generic = ['note', 'warning', 'tip', 'important', 'caution', 'attention', 'danger', 'error',
                   'hint', 'see also', 'seealso'];
  return Array.from(document.querySelectorAll('.admonition > .admonition-title'))
    .filter(t => generic.includes(t.textContent.trim().toLowerCase()))
    .map(t => t.textContent.trim() + ': ' + (t.nextElementSibling ? t.nextElementSibling.textContent.trim().slice(0, 40) : ''));
}"""

# Every table: a numbered caption ("Table 2.1"), outside the box that scrolls it sideways.
TABLES = """() => {
  const scrolls = e => { const o = getComputedStyle(e).overflowX; return o === 'auto' || o === 'scroll'; };
  return Array.from(document.querySelectorAll('article table, main table'))
    .filter(t => !t.classList.contains('indextable') && !t.closest('.plotly-graph-div'))
    .map(t => {
      const wrapper = t.closest('.relpos-table');
      const caption = t.querySelector(':scope > caption') || (wrapper && wrapper.querySelector('.relpos-table-caption'));
      const number = caption && caption.querySelector('.caption-number');
      const head = (t.querySelector('tr') || t).textContent.trim().replace(/\\s+/g, ' ').slice(0, 40);
      if (!number || !/^Table \\d+(\\.\\d+)?$/.test(number.textContent.trim())) { return `no numbered caption: "${head}"`; }
      let box = t.parentElement;
      while (box && box !== document.body && !scrolls(box)) { box = box.parentElement; }
      if (box && box !== document.body && box.contains(caption)) {
        return `caption inside the horizontal scroll box: "${number.textContent.trim()}"`;
      }
      return null;
    }).filter(p => p);
}"""

# Per figure: the toolbar covering text, the text of titles/legends/axes/bar labels overlapping or
# running outside the figure, heatmap numbers missing or unreadable, legend entries and
# lines per plot, the figure's height against the screen.
READER_FIGURE = """([i, minFont]) => {
  const gd = document.querySelectorAll('.plotly-graph-div')[i], full = gd._fullLayout, out = [];
  const svg = gd.querySelector('svg.main-svg').getBoundingClientRect();
  const box = e => e.getBoundingClientRect();
  const shown = e => { const b = box(e); return b.width > 0 && b.height > 0 && getComputedStyle(e).visibility !== 'hidden'
                       && getComputedStyle(e).display !== 'none' && e.closest('[style*="opacity: 0"]') === null; };
  const overlap = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2
                            && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;
  const words = e => e.textContent.trim().slice(0, 30);
  // the text a reader must be able to read, with its kind
  const kinds = [['title', '.g-gtitle text'], ['panel title', '.annotation-text'],
                 ['axis title', '.g-xtitle text, .g-ytitle text, [class^="g-x"][class$="title"] text, [class^="g-y"][class$="title"] text'],
                 ['legend', '.legendtext'], ['colour bar', '.cbtitle text, .cbaxis text'],
                 ['tick', '.xtick text, .ytick text'], ['slider', '.slider-label, .slider-current-value, .slider-currentvalue'],
                 ['bar or point text', 'text.bartext, .textpoint text']];
  const texts = [];
  kinds.forEach(([kind, sel]) => gd.querySelectorAll(sel).forEach(e => {
    if (shown(e) && e.textContent.trim()) { texts.push({kind, e, b: box(e)}); }
  }));
  // the toolbar covers nothing
  gd.querySelectorAll('.modebar-group, .modebar-btn').forEach(m => {
    if (!shown(m)) { return; }
    texts.forEach(t => { if (overlap(box(m), t.b)) { out.push(`the toolbar covers the ${t.kind} "${words(t.e)}"`); } });
  });
  // no overlap between two texts (tick labels among themselves are checked elsewhere)
  const seen = new Set();
  for (let a = 0; a < texts.length; a++) {
    for (let b = a + 1; b < texts.length; b++) {
      const A = texts[a], B = texts[b];
      if (A.kind === 'tick' && B.kind === 'tick') { continue; }
      if (A.e.closest('.legend') && B.e.closest('.legend')) { continue; }
      if (overlap(A.b, B.b)) {
        const key = `${A.kind} "${words(A.e)}" overlaps ${B.kind} "${words(B.e)}"`;
        if (!seen.has(key)) { seen.add(key); out.push(key); }
      }
    }
  }
  texts.forEach(t => {
    if (t.kind === 'tick') { return; }
    if (t.b.left < svg.left - 1 || t.b.right > svg.right + 1 || t.b.top < svg.top - 1 || t.b.bottom > svg.bottom + 1) {
      out.push(`${t.kind} "${words(t.e)}" runs outside the figure`);
    }
  });
  // heatmaps that ask for their numbers show them, readable and apart
  const meta = gd.layout.meta && gd.layout.meta.relpos;
  const layers = gd.querySelectorAll('.heatmaplayer g.hm');
  ((meta && meta.text) || []).forEach(spec => {
    const trace = gd._fullData[spec.trace];
    if (!trace || trace.visible === false) { return; }
    const finite = (trace.z || []).flat().filter(v => v !== null && Number.isFinite(v)).length;
    const layer = Array.from(layers).find(l => l.__data__ && l.__data__[0] && l.__data__[0].trace && l.__data__[0].trace.index === spec.trace)
                  || layers[spec.trace];
    const labels = layer ? Array.from(layer.querySelectorAll('.heatmap-label text')).filter(e => e.textContent.trim()) : [];
    if (labels.length < finite) {
      out.push(`heatmap ${spec.trace + 1} shows ${labels.length} of its ${finite} cell numbers (if they cannot fit `
               + `this width, draw the matrix without them: annotate_max below its size, or fewer decimals)`);
      return;
    }
    const small = labels.filter(e => parseFloat(getComputedStyle(e).fontSize) < minFont);
    if (small.length) { out.push(`heatmap ${spec.trace + 1}: cell numbers in ${getComputedStyle(small[0]).fontSize} type`); }
    const hidden = labels.filter(e => !shown(e));
    if (hidden.length) { out.push(`heatmap ${spec.trace + 1}: ${hidden.length} cell numbers not visible`); }
    const boxes = labels.map(box).sort((a, b) => a.top - b.top || a.left - b.left);
    for (let k = 1; k < boxes.length; k++) {
      if (overlap(boxes[k - 1], boxes[k])) { out.push(`heatmap ${spec.trace + 1}: cell numbers overlap`); break; }
    }
  });
  // at most so many legend entries, and lines in one plot
  const entries = gd.querySelectorAll('.legend .traces').length;
  // a series is a legend group (a line and its measured points) or a trace of its own
  const plotted = {};
  gd._fullData.forEach((t, n) => {
    if (t.visible !== true || !['scatter', 'scattergl', 'bar'].includes(t.type)) { return; }
    const ys = Array.from(t.y || []).filter(v => v !== null && v !== undefined);
    if (!ys.length) { return; }
    const key = (t.xaxis || 'x') + (t.yaxis || 'y');
    (plotted[key] = plotted[key] || new Set()).add(t.legendgroup || `trace ${n}`);
  });
  const most = Math.max(0, ...Object.values(plotted).map(s => s.size));
  const tall = gd.getBoundingClientRect().height;
  const panels = Object.keys(full).filter(k => /^yaxis[0-9]*$/.test(k) && full[k].visible !== false)
                   .map(k => full[k]._length || 0);
  const narrow = !!(meta && meta.narrow && gd.clientWidth < meta.narrow.below);
  return {problems: out, entries, most, height: tall, slider: !!(gd.layout.sliders && gd.layout.sliders.length),
          narrow, tallestPanel: Math.max(0, ...panels)};
}"""


def what_a_reader_sees(tab, page, width) -> list[str]:
    """Every problem of the page at ``width`` that a reader would see, as sentences."""
    problems = []
    if width == WIDTHS["desktop"] and not pending(page, "code width"):
        problems += [f"code cell wider than the column, its widest line: {line!r}"
                     for line in tab.evaluate(WIDE_CODE)]
    if not pending(page, "admonitions"):
        problems += [f"admonition with a generic title: {a!r}" for a in tab.evaluate(GENERIC_ADMONITIONS)]
    if not pending(page, "tables"):
        problems += [f"table: {t}" for t in tab.evaluate(TABLES)]
    screen = VIEWPORT_HEIGHT[width]
    for index in range(tab.locator(".plotly-graph-div").count()):
        figure = tab.evaluate(READER_FIGURE, [index, MIN_CELL_FONT_PX])
        name = f"figure {index + 1}"
        for problem in dict.fromkeys(figure["problems"]):  # each once
            kind = ("cell numbers" if problem.startswith("heatmap") else "titles")
            if not pending(page, kind):
                problems.append(f"{name}: {problem}")
        if not pending(page, "traces") and max(figure["entries"], figure["most"]) > MAX_TRACES:
            problems.append(f"{name}: {figure['entries']} legend entries, {figure['most']} lines in one plot "
                            f"(at most {MAX_TRACES})")
        if pending(page, "figure height"):
            continue
        height = figure["height"]
        if width == WIDTHS["desktop"] and height > MAX_FIGURE_PX:
            problems.append(f"{name}: {height:.0f} px tall (at most {MAX_FIGURE_PX} at {width} px)")
        elif width != WIDTHS["desktop"] and height > screen:
            if figure["slider"]:
                problems.append(f"{name}: {height:.0f} px tall with a slider, taller than the phone's {screen} px")
            elif not figure["narrow"] or figure["tallestPanel"] > screen:
                problems.append(f"{name}: {height:.0f} px tall, taller than the phone's {screen} px")
    return problems


# In dark mode the figures' background is the page's (transparent or dark) and their text light.
DARK_FIGURES = """() => {
  const lum = c => {
    const m = (c || '').match(/rgba?\\(([^)]+)\\)/), hex = (c || '').match(/^#([0-9a-f]{6})$/i);
    let v;
    if (m) { v = m[1].split(',').map(Number); if (v.length > 3 && v[3] === 0) { return null; } }
    else if (hex) { v = [0, 2, 4].map(k => parseInt(hex[1].slice(k, k + 2), 16)); }
    else { return c === 'transparent' ? null : 1; }
    return (0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]) / 255;
  };
  // what shows through a transparent figure: the first painted box behind it
  const behind = e => {
    for (let p = e.parentElement; p; p = p.parentElement) {
      const c = getComputedStyle(p).backgroundColor;
      if (lum(c) !== null) { return c; }
    }
    return null;
  };
  return Array.from(document.querySelectorAll('.plotly-graph-div')).map((gd, i) => {
    const f = gd._fullLayout, out = [];
    const paper = lum(f.paper_bgcolor), plot = lum(f.plot_bgcolor), text = lum(f.font.color);
    const page = behind(gd);
    if (page && lum(page) > 0.5) { out.push(`figure ${i + 1}: drawn on a light box ${page}`); }
    if (paper !== null && paper > 0.5) { out.push(`figure ${i + 1}: light paper ${f.paper_bgcolor}`); }
    if (plot !== null && plot > 0.5) { out.push(`figure ${i + 1}: light plot area ${f.plot_bgcolor}`); }
    if (text !== null && text < 0.5) { out.push(`figure ${i + 1}: dark text ${f.font.color}`); }
    return out;
  }).flat();
}"""


def dark_mode_problems(tab) -> list[str]:
    """Click the theme's toggle until the page is dark, look at every figure, and go back."""
    toggle = tab.locator(".theme-switch-button").first
    for _ in range(3):
        if tab.evaluate("() => document.documentElement.dataset.theme") == "dark":
            break
        toggle.click()
    assert tab.evaluate("() => document.documentElement.dataset.theme") == "dark", "no dark mode toggle"
    tab.wait_for_timeout(400)
    problems = tab.evaluate(DARK_FIGURES)
    for _ in range(3):
        if tab.evaluate("() => document.documentElement.dataset.theme") == "light":
            break
        toggle.click()
    tab.wait_for_timeout(300)
    return problems
