"""The live half of rp.figures.slider: ipywidgets sliders in a running JupyterLab.

The static book (tests/browser) has no kernel; in Jupyter and Colab each slider is an
ipywidgets control whose moves call the figure function again in the kernel. Here a
JupyterLab server runs on 127.0.0.1 with a token; headless Chromium opens each chapter,
runs every cell, and drags every ipywidgets slider of the page with the mouse to its
right end and back to its left end. After each move the plotly figure under the slider
must show different data, the slider's readout must change with it, and the
page must show no error output (stderr, a traceback, a widget that failed to render)
and raise no page error.

plotly.js: the figures load it from the plotly CDN when the page has none (Colab and
JupyterLab reach the CDN). This machine has no internet, so the test answers that one
request with the plotly.js file of the installed plotly package, the same version.
Every other request that leaves 127.0.0.1 is refused, so nothing else is fetched.
"""
from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import copy_notebook

# Chapters with ipywidgets sliders (rp.figures.slider): two in chapter 1, two in chapter 2.
CHAPTERS = ["01_why_relative_positions.ipynb", "02_shaw_and_skew.ipynb"]
RUN_TIMEOUT_S = 300
SHOTS = Path(os.environ.get("RELPOS_LIVE_SCREENSHOTS", "")) if os.environ.get("RELPOS_LIVE_SCREENSHOTS") else None


ERRORS = """() => {
  const found = [];
  for (const el of document.querySelectorAll('.jp-Notebook [data-mime-type="application/vnd.jupyter.stderr"]'))
    found.push('stderr or traceback: ' + el.textContent.slice(0, 300));
  for (const el of document.querySelectorAll('.jp-Notebook .jp-OutputArea-output'))
    if (/Error displaying widget|Model not found|Failed to load model class/.test(el.textContent))
      found.push('widget: ' + el.textContent.slice(0, 300));
  return found;
}"""


def _plotly_js() -> bytes:
    import plotly

    return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()


def _wait(page, predicate_js: str, timeout_s: float, what: str, arg=None):
    """Poll ``predicate_js`` until it is truthy; fail at once when the page shows an error."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = page.evaluate(predicate_js, arg)
        if value:
            return value
        errors = page.evaluate(ERRORS)
        if errors:
            pytest.fail(f"error output while waiting for {what}: {errors}")
        page.wait_for_timeout(250)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


NOTEBOOK_STATE = """() => {
  const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.sessionContext || !panel.sessionContext.session) return null;
  const kernel = panel.sessionContext.session.kernel;
  const cells = panel.content.widgets.filter(w => w.model.type === 'code');
  return {path: panel.context.path, status: kernel ? kernel.status : 'none', cells: cells.length,
          run: cells.filter(w => w.model.executionCount !== null).length};
}"""

SLIDERS = """() => Array.from(document.querySelectorAll('.jp-Notebook .widget-vbox')).filter(
  box => box.querySelector(':scope > .widget-slider') && box.querySelector(':scope > .widget-output')
).length"""

FIGURE_DATA = """(i) => {
  const box = Array.from(document.querySelectorAll('.jp-Notebook .widget-vbox')).filter(
    b => b.querySelector(':scope > .widget-slider') && b.querySelector(':scope > .widget-output'))[i];
  const gd = box.querySelector('.widget-output .js-plotly-plot');
  const readout = box.querySelector('.widget-readout');
  if (!gd || !gd.data || !gd.querySelector('svg')) return null;
  // a move may change the traces or only the layout (outlined cells, labels, the title)
  const layout = gd.layout || {};
  const title = layout.title && (layout.title.text || layout.title);
  return {data: JSON.stringify([gd.data.map(t => [t.x, t.y, t.z, t.text]), layout.shapes || [],
                                (layout.annotations || []).map(a => [a.text, a.x, a.y]), title || null]),
          readout: readout ? (readout.value || readout.textContent).trim() : null};
}"""




def _shut_down_kernels(base: str, token: str) -> None:
    headers = {"Authorization": f"token {token}"}
    with urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels", headers=headers)) as r:
        kernels = json.load(r)
    for kernel in kernels:
        urllib.request.urlopen(urllib.request.Request(f"{base}/api/kernels/{kernel['id']}", method="DELETE",
                                                      headers=headers))


def _drag_to(page, index: int, end: str):
    """Drag slider ``index``'s handle with the mouse past the ``end`` ("right"/"left") of its track."""
    box = page.locator(".jp-Notebook .widget-vbox:has(> .widget-slider):has(> .widget-output)").nth(index)
    box.scroll_into_view_if_needed()
    handle = box.locator(".noUi-handle").first
    track = box.locator(".noUi-target, .slider").first
    h, t = handle.bounding_box(), track.bounding_box()
    assert h and t, "the slider has no visible handle or track"
    y = h["y"] + h["height"] / 2
    page.mouse.move(h["x"] + h["width"] / 2, y)
    page.mouse.down()
    target = t["x"] + t["width"] + 40 if end == "right" else t["x"] - 40
    page.mouse.move(target, y, steps=12)
    page.mouse.up()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_live_slider_moves_its_figure(jupyter, browser, chapter):
    base, token, root = jupyter
    copy_notebook(root, chapter)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page_errors = []
    page.on("pageerror", lambda err: page_errors.append(str(err)))
    plotly_js = _plotly_js()

    def route(r):
        url = r.request.url
        if url.startswith(base) or url.startswith(("data:", "blob:")):
            return r.continue_()
        if re.match(r"https://cdn\.plot\.ly/plotly-[\d.]+\.min\.js$", url):  # the CDN stand-in
            return r.fulfill(status=200, content_type="application/javascript", body=plotly_js)
        return r.abort()

    page.route("**/*", route)
    try:
        # a workspace of its own, reset: only this notebook open (JupyterLab restores layouts)
        url = f"{base}/lab/workspaces/{Path(chapter).stem}/tree/{chapter}?token={token}&reset"
        page.goto(url, wait_until="domcontentloaded", timeout=120_000)
        mine = f"s && s.path === {json.dumps(chapter)}"
        _wait(page, "() => { const s = (" + NOTEBOOK_STATE + ")(); return " + mine + " && s.status === 'idle'; }",
              120, "the notebook and an idle kernel")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        _wait(page, "() => { const s = (" + NOTEBOOK_STATE + ")(); "
                    "return " + mine + " && s.run === s.cells && s.status === 'idle'; }",
              RUN_TIMEOUT_S, f"every cell of {chapter} to run")
        n = _wait(page, SLIDERS, 60, "the ipywidgets sliders to render")
        assert n >= 1, f"{chapter}: no live slider rendered"
        for i in range(n):
            state = _wait(page, FIGURE_DATA, 60, f"slider {i}'s figure to draw", i)
            at_end = {}
            for end in ("right", "left"):
                _drag_to(page, i, end)
                page.wait_for_timeout(500)  # the readout follows the handle at once
                readout = page.evaluate(FIGURE_DATA, i)["readout"]
                if readout != state["readout"]:  # it moved: the kernel must redraw the figure
                    state = _wait(page, "(a) => { const f = (" + FIGURE_DATA + ")(a[0]); "
                                        "return f && f.data !== a[1] ? f : null; }",
                                  60, f"slider {i}'s figure to change after a drag to the {end}", [i, state["data"]])
                at_end[end] = state  # (a slider that started at this end stays there)
                if SHOTS:
                    SHOTS.mkdir(parents=True, exist_ok=True)
                    box = page.locator(".jp-Notebook .widget-vbox:has(> .widget-slider):has(> .widget-output)").nth(i)
                    box.screenshot(path=str(SHOTS / f"{Path(chapter).stem}-slider{i}-{end}.png"))
            right, left = at_end["right"], at_end["left"]
            assert right["readout"] and left["readout"] and right["readout"] != left["readout"], (
                f"{chapter} slider {i}: the drags did not reach two different ends ({right['readout']!r}, "
                f"{left['readout']!r})")
            assert right["data"] != left["data"], f"{chapter} slider {i}: both ends show the same figure"
        errors = page.evaluate(ERRORS)
        assert not errors, f"{chapter}: error output on the page: {errors}"
        assert not page_errors, f"{chapter}: page errors: {page_errors}"
    finally:
        page.close()
        _shut_down_kernels(base, token)  # the next page gets the CPU to itself
