"""Sphinx extension for the relpos book: ship plotly.js once, from the plotly package.

Every figure output calls ``window.Plotly`` (see ``relpos_core/figures/_plotly.py``),
so the book loads ``_static/plotly.min.js`` on every page: one copy for the whole
book, the version that the executing plotly package expects, no CDN.
"""
from __future__ import annotations

import shutil
from pathlib import Path

PLOTLY_JS = "plotly.min.js"


def _plotly_js_source() -> Path:
    import plotly

    source = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: the plotly package should ship plotly.min.js")
    return source


def _copy_plotly_js(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_plotly_js_source(), static / PLOTLY_JS)


def setup(app):
    _plotly_js_source()  # fail at start-up, not with a blank figure, if plotly is absent
    app.add_js_file(PLOTLY_JS)
    app.connect("build-finished", _copy_plotly_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
