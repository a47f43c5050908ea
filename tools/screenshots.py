"""Screenshots of the built book: every page, and every figure at both ends of its slider.

    .venv/bin/python tools/screenshots.py              # every page, 1280 px and 390 px
    .venv/bin/python tools/screenshots.py 02 03        # only pages whose name contains 02 or 03

Serves ``_build/html`` on localhost, opens each page in headless Chromium (Playwright,
``/usr/bin/chromium`` or ``$RELPOS_CHROMIUM``) at 1280 px and 390 px wide, and saves into
``screenshots/`` (git-ignored):

* ``<page>-<width>.png``: the whole page;
* ``<page>-<width>-fig<N>.png``: figure N with its caption, as drawn;
* ``<page>-<width>-fig<N>-first.png`` / ``-last.png``: a figure with a slider, after
  clicking the slider's first and last step.

Look at them: a test can say that a figure rendered, not that it reads well.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
OUT = ROOT / "screenshots"
WIDTHS = (1280, 390)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _serve() -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _pages(filters: list[str]) -> list[str]:
    pages = sorted(
        p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
        if not p.relative_to(HTML).parts[0].startswith("_") and p.name not in ("genindex.html", "search.html")
    )
    pages = [p for p in pages if "Refresh" not in (HTML / p).read_text()[:2000]]  # redirects
    return [p for p in pages if not filters or any(f in p for f in filters)]


def _wait_until_drawn(tab) -> None:
    tab.wait_for_function(
        "() => Array.from(document.querySelectorAll('.plotly-graph-div')).every(d => d.querySelector('svg.main-svg'))",
        timeout=30_000,
    )
    if tab.locator(".math").count():
        tab.wait_for_function(
            "() => document.querySelectorAll('.math').length === document.querySelectorAll('.math mjx-container').length",
            timeout=30_000,
        )
    tab.wait_for_timeout(400)


def _click_step(tab, figure, step: int) -> None:
    rail = figure.locator(".slider-rail-rect").first.bounding_box()
    tick = figure.locator(".slider-tick-rect").nth(step).bounding_box()
    tab.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)
    tab.wait_for_timeout(500)


def shoot(filters: list[str]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    if not (HTML / "index.html").is_file():
        sys.exit(f"no built book in {HTML}: run 'make book' first")
    chromium = os.environ.get("RELPOS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    OUT.mkdir(exist_ok=True)
    saved: list[Path] = []
    server, url = _serve()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True,
                args=["--no-sandbox", "--disable-background-networking"],
            )
            for page in _pages(filters):
                stem = page.replace("/", "_").removesuffix(".html")
                for width in WIDTHS:
                    tab = browser.new_page(viewport={"width": width, "height": 900})
                    tab.goto(url + page, wait_until="load")
                    _wait_until_drawn(tab)
                    path = OUT / f"{stem}-{width}.png"
                    tab.screenshot(path=str(path), full_page=True)
                    saved.append(path)
                    figures = tab.locator(".plotly-graph-div")
                    for n in range(figures.count()):
                        figure = figures.nth(n)
                        # the numbered <figure> with its caption (the plot alone if none)
                        target = figure.element_handle().evaluate_handle(
                            "d => d.closest('figure') || d"
                        ).as_element()
                        target.scroll_into_view_if_needed()
                        path = OUT / f"{stem}-{width}-fig{n + 1}.png"
                        target.screenshot(path=str(path))
                        saved.append(path)
                        steps = figure.locator(".slider-tick-rect").count()
                        for end, step in (("first", 0), ("last", steps - 1)) if steps else ():
                            _click_step(tab, figure, step)
                            path = OUT / f"{stem}-{width}-fig{n + 1}-{end}.png"
                            target.screenshot(path=str(path))
                            saved.append(path)
                    tab.close()
            browser.close()
    finally:
        server.shutdown()
    return saved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("filters", nargs="*", help="only pages whose path contains one of these")
    args = parser.parse_args(argv)
    saved = shoot(args.filters)
    print(f"{len(saved)} screenshots in {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
