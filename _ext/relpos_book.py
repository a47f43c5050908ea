"""Sphinx extension for the relpos book: ship plotly.js and MathJax with the book, and
label the bibliography by author and year.

* Every figure output calls ``window.Plotly`` (see ``relpos_core/figures/_plotly.py``),
  so the book loads ``_static/plotly.min.js`` on every page: one copy for the whole
  book, the version that the executing plotly package expects, no CDN.
* Math is typeset by MathJax 3 from ``_static/mathjax/`` (copied from the pinned
  ``django-static-mathjax`` wheel, which is only a carrier of MathJax's files), so the
  book reads the same offline. Without that package the build warns and falls back
  to Sphinx's default MathJax from a CDN.
* The bibliography (``bibliography.md``, sphinxcontrib-bibtex) lists each paper under
  the label the text cites it by, "Vaswani et al., 2017", instead of pybtex's
  alphabetic "VSP+17": the pybtex style ``relpos`` (``bibtex_default_style``).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

PLOTLY_JS = "plotly.min.js"
MATHJAX_DIR = "mathjax"
MATHJAX_ENTRY = "tex-chtml.js"
# MathJax's es5 tree minus what a tex-chtml page never loads (speech maps, other bundles)
MATHJAX_SKIP = ("sre", "tex-svg", "tex-mml", "mml-", "tex-chtml-full", "output/svg")


def _plotly_js_source() -> Path:
    import plotly

    source = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not source.is_file():
        raise FileNotFoundError(f"{source} is missing: the plotly package should ship plotly.min.js")
    return source


def _mathjax_source() -> Path | None:
    try:
        import mathjax  # the django-static-mathjax distribution
    except ImportError:
        return None
    source = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return source if (source / MATHJAX_ENTRY).is_file() else None


def _use_local_mathjax(app, config) -> None:
    if _mathjax_source() is None:
        logger.warning(
            "django-static-mathjax is not installed: math is typeset by MathJax from a CDN "
            "(pip install -r requirements.txt ships it with the book)"
        )
        return
    config.mathjax_path = f"{MATHJAX_DIR}/{MATHJAX_ENTRY}"


def _copy_assets(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_plotly_js_source(), static / PLOTLY_JS)
    source = _mathjax_source()
    if source is not None:
        for path in source.rglob("*"):
            relative = path.relative_to(source).as_posix()
            if path.is_file() and not relative.startswith(MATHJAX_SKIP):
                target = static / MATHJAX_DIR / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)


def _register_bibliography_style() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.unsrt import Style as UnsrtStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        """"Vaswani et al., 2017"; the same authors in the same year get 2024a, 2024b, ...
        (in the bibliography's order), so that no two entries share a label."""

        def format_labels(self, sorted_entries):
            labels = []
            for entry in sorted_entries:
                authors = entry.persons.get("author", [])
                names = [" ".join(p.last_names or p.first_names).strip("{}") for p in authors]
                who = names[0] if len(names) == 1 else (
                    f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
                )
                labels.append(f"{who}, {entry.fields.get('year', 'n.d.')}")
            seen = {}
            for label in labels:
                if labels.count(label) == 1:
                    yield label
                else:
                    seen[label] = seen.get(label, 0) + 1
                    yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]

    class AuthorYearStyle(UnsrtStyle):
        default_label_style = AuthorYearLabels
        default_sorting_style = "author_year_title"

    register_plugin("pybtex.style.formatting", "relpos", AuthorYearStyle, force=True)


def setup(app):
    _plotly_js_source()  # fail at start-up, not with a blank figure, if plotly is absent
    _register_bibliography_style()
    app.add_js_file(PLOTLY_JS)
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
