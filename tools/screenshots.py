"""Screenshots of the built book: every page, and every figure at both ends of its slider.

    .venv/bin/python tools/screenshots.py              # every page, 1280 px and 390 px
    .venv/bin/python tools/screenshots.py 02 03        # only pages whose name contains 02 or 03
    .venv/bin/python tools/screenshots.py --dark 08    # also in the dark mode, at 1280 px
    .venv/bin/python tools/screenshots.py --out before # into screenshots/before/

Serves ``_build/html`` on localhost, opens each page in headless Chromium (Playwright,
``/usr/bin/chromium`` or ``$RELPOS_CHROMIUM``) at 1280 px and 390 px wide, and saves into
``screenshots/`` (git-ignored):

* ``<page>-<width>.png``: the whole page;
* ``<page>-<width>-fig<N>.png``: figure N with its caption, as drawn;
* ``<page>-<width>-fig<N>-first.png`` / ``-last.png``: a figure with a slider, after
  clicking the slider's first and last step;
* with ``--dark``: ``<page>-1280-dark.png`` and ``<page>-1280-dark-fig<N>.png``, the page
  after clicking the theme's toggle to its dark mode.

The page's sticky header is unstuck while figures are shot, so it never hides a
figure's top (its title, its legend).

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
    # the book draws a figure when it comes near the screen: scroll to each first
    tab.evaluate("""async () => {
      for (const d of document.querySelectorAll('div.relpos-figure')) {
        d.scrollIntoView({block: 'center'});
        const t0 = performance.now();
        while (!['drawn', 'failed'].includes(d.getAttribute('data-relpos-state')) && performance.now() - t0 < 60000) {
          await new Promise(r => setTimeout(r, 50));
        }
      }
      window.scrollTo(0, 0);
    }""")
    tab.wait_for_function(
        "() => Array.from(document.querySelectorAll('.plotly-graph-div')).every(d => d.querySelector('svg.main-svg'))",
        timeout=120_000,
    )
    if tab.locator(".math").count():
        tab.wait_for_function(
            "() => document.querySelectorAll('.math').length === document.querySelectorAll('.math mjx-container').length",
            timeout=120_000,
        )
    tab.wait_for_timeout(400)


def _click_step(tab, figure, step: int) -> None:
    rail = figure.locator(".slider-rail-rect").first.bounding_box()
    tick = figure.locator(".slider-tick-rect").nth(step).bounding_box()
    tab.mouse.click(tick["x"] + tick["width"] / 2, rail["y"] + rail["height"] / 2)
    tab.wait_for_timeout(500)


# the theme's header sticks to the top of the window and would cover a figure's top
UNSTICK = (".bd-header, .bd-header-article, .header-article { position: static !important; } "
           ".skip-link { display: none !important; }")


def _dark(tab) -> None:
    """Click the theme's toggle until the page is in its dark mode."""
    for _ in range(3):
        if tab.evaluate("() => document.documentElement.dataset.theme") == "dark":
            break
        tab.locator(".theme-switch-button").first.click()
    tab.wait_for_timeout(500)


def shoot(filters: list[str], *, dark: bool = False, out: Path = OUT) -> list[Path]:
    from playwright.sync_api import sync_playwright

    if not (HTML / "index.html").is_file():
        sys.exit(f"no built book in {HTML}: run 'make book' first")
    chromium = os.environ.get("RELPOS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    out.mkdir(parents=True, exist_ok=True)
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
                for width, mode in [(w, "light") for w in WIDTHS] + ([(WIDTHS[0], "dark")] if dark else []):
                    tab = browser.new_page(viewport={"width": width, "height": 900})
                    tab.set_default_timeout(120_000)  # a busy machine loads a long page slowly
                    tab.goto(url + page, wait_until="load")
                    _wait_until_drawn(tab)
                    tag = f"{width}-dark" if mode == "dark" else f"{width}"
                    if mode == "dark":
                        _dark(tab)
                    path = out / f"{stem}-{tag}.png"
                    tab.screenshot(path=str(path), full_page=True)
                    saved.append(path)
                    tab.add_style_tag(content=UNSTICK)
                    figures = tab.locator(".plotly-graph-div")
                    for n in range(figures.count()):
                        figure = figures.nth(n)
                        # the numbered <figure> with its caption (the plot alone if none)
                        target = figure.element_handle().evaluate_handle(
                            "d => d.closest('figure') || d"
                        ).as_element()
                        target.scroll_into_view_if_needed()
                        path = out / f"{stem}-{tag}-fig{n + 1}.png"
                        target.screenshot(path=str(path))
                        saved.append(path)
                        steps = figure.locator(".slider-tick-rect").count()
                        for end, step in (("first", 0), ("last", steps - 1)) if steps and mode == "light" else ():
                            _click_step(tab, figure, step)
                            path = out / f"{stem}-{tag}-fig{n + 1}-{end}.png"
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
    parser.add_argument("--dark", action="store_true", help="also shoot each page in the dark mode at 1280 px")
    parser.add_argument("--out", default=None, help="a folder under screenshots/ to save into (e.g. before)")
    args = parser.parse_args(argv)
    if args.out is not None and (not args.out or "/" in args.out or args.out.startswith(".")):
        parser.error(f"--out must be one folder name (saved under screenshots/), got {args.out!r}")
    out = OUT / args.out if args.out else OUT
    saved = shoot(args.filters, dark=args.dark, out=out)
    print(f"{len(saved)} screenshots in {out.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
