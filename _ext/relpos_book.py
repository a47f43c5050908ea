"""Sphinx extension for the relpos book: light pages (figures drawn on demand from the
smallest plotly.js bundle, figure specs and slider frames in files of their own, no icon font), MathJax
shipped with the book, and the bibliography labelled by author and year.

* A figure output of a notebook (``relpos_core/figures/_plotly.py``) is a div and a
  script that holds the figure's spec and draws it at once (loading plotly.js from a CDN
  outside the book). In the book, each such output is rewritten into the div and its
  spec goes to a file of its own, ``_static/relpos-figures/<id>.json`` (slider frames
  included: 0.4 MB for one figure of chapter 3). The page loads ``relpos-figures.js``
  (deferred; built from the same drawing code, ``figure_js()``), which draws a figure when
  it scrolls near the screen (IntersectionObserver): only then are plotly.js and the
  spec fetched. plotly.js is the smallest bundle that has every trace type of the page
  (``assets/vendor/plotly``: basic, cartesian; the plotly package's full plotly.min.js
  otherwise), the version the executing plotly package expects, no CDN. A page without
  figures loads none of this.
* The theme's icon font script (Font Awesome, 1.5 MB of JavaScript for a dozen icons)
  is not loaded: ``assets/relpos-icons.css`` draws the icons the theme's pages use as
  CSS masks of the same SVG paths, and the build fails when a page uses an icon that
  file does not draw.
* Math is typeset by MathJax 3 (the pinned ``django-static-mathjax`` wheel, which is
  only a carrier of MathJax's files) at build time: ``_ext/mathjax_render.js`` (Node.js)
  turns each formula of a page into MathJax's CommonHTML, and the page loads no MathJax
  script (1.2 MB) at all, only the CSS those formulas need and MathJax's fonts from
  ``_static/mathjax/``. Without Node.js the build warns and the pages typeset their math
  in the browser with MathJax from ``_static/mathjax/``; without the wheel, from a CDN.
* The bibliography (``bibliography.md``, sphinxcontrib-bibtex) lists each paper under
  the label the text cites it by, "Vaswani et al., 2017", instead of pybtex's
  alphabetic "VSP+17": the pybtex style ``relpos`` (``bibtex_default_style``).
* A numbered table's caption stays put when a wide table scrolls sideways: the theme
  wraps every table in a scroll box (``pst-scrollable-table-container``) with its
  ``<caption>`` inside; each page's HTML is rewritten so that the caption sits above
  the box, in a ``div.relpos-table`` that takes the table's id (a link to the table
  lands on its caption) and names the caption as the table's label.
"""
from __future__ import annotations

import html as html_lib
import json
import re
import shutil
import subprocess
from pathlib import Path

from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

PLOTLY_JS = "plotly.min.js"
FIGURES_JS = "relpos-figures.js"
FIGURES_DIR = "relpos-figures"
ICONS_CSS = "relpos-icons.css"
VENDOR = Path(__file__).resolve().parents[1] / "assets" / "vendor" / "plotly"
# the smallest first: (file under _static, the trace types it draws); see assets/vendor/plotly
PLOTLY_BUNDLES = (
    ("vendor/plotly/plotly-basic.min.js", frozenset({"bar", "pie", "scatter"})),
    ("vendor/plotly/plotly-cartesian.min.js", frozenset({
        "bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour", "image",
        "pie", "scatter", "scatterternary", "violin"})),
)
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
    if getattr(app.env, "relpos_full_plotly", False):
        shutil.copyfile(_plotly_js_source(), static / PLOTLY_JS)
    (static / FIGURES_JS).write_text(figures_js())
    _lighten_pages(Path(app.outdir))
    source = _mathjax_source()
    if source is not None:
        for path in source.rglob("*"):
            relative = path.relative_to(source).as_posix()
            if path.is_file() and not relative.startswith(MATHJAX_SKIP):
                target = static / MATHJAX_DIR / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)


# -- figures: drawn on demand ------------------------------------------------------------

def _check_vendored_plotly() -> None:
    """The vendored bundles are the plotly.js version the plotly package draws with."""
    from relpos_core.figures._plotly import plotlyjs_version

    want = plotlyjs_version()
    for name, _ in PLOTLY_BUNDLES:
        path = VENDOR / Path(name).name
        if not path.is_file():
            raise ExtensionError(f"{path} is missing (see assets/vendor/plotly/README.md)")
        head = path.read_text(encoding="utf-8", errors="replace")[:400]
        found = re.search(r"plotly\.js \([a-z]+ - minified\) v(\S+)", head)
        if not found or found.group(1) != want:
            raise ExtensionError(
                f"{path.name} is plotly.js {found.group(1) if found else '?'}, the plotly package draws with {want}: "
                "update assets/vendor/plotly (README.md there says how)")


def figures_js() -> str:
    """``_static/relpos-figures.js``: draws each figure of the page when it comes near the
    screen, after loading its page's plotly.js bundle and its spec (slider frames included)."""
    from relpos_core.figures._plotly import figure_js
    from relpos_core.figures.style import THEMES

    return f"""/* The book's figures, drawn on demand. Written by _ext/relpos_book.py from
   relpos_core/figures/_plotly.py (figure_js): do not edit. */
(function () {{
  var here = document.currentScript.src, base = here.slice(0, here.lastIndexOf("/") + 1);
  var themes = {json.dumps(THEMES)};
{figure_js()}
  var loading = {{}};
  function plotly(bundle) {{
    if (!loading[bundle]) {{
      loading[bundle] = new Promise(function (resolve, reject) {{
        var s = document.createElement("script");
        s.src = base + bundle;
        s.onload = resolve;
        s.onerror = function () {{ reject(new Error("could not load " + s.src)); }};
        document.head.appendChild(s);
      }});
    }}
    return loading[bundle];
  }}
  function load(div) {{
    var url = div.getAttribute("data-relpos-spec");
    return fetch(url).then(function (r) {{
      if (!r.ok) {{ throw new Error("could not load " + url + ": HTTP " + r.status); }}
      return r.json();
    }});
  }}
  function show(div) {{
    div.setAttribute("data-relpos-state", "loading");
    return Promise.all([plotly(div.getAttribute("data-relpos-plotly")), load(div)]).then(function (got) {{
      return relposFigure(got[1], div.id, themes)();
    }}).then(function () {{ div.setAttribute("data-relpos-state", "drawn"); }}, function (err) {{
      div.setAttribute("data-relpos-state", "failed");
      div.textContent = "This figure could not be drawn: " + err.message;
      console.error(err);
    }});
  }}
  function init() {{
    var divs = Array.prototype.slice.call(document.querySelectorAll("div.relpos-figure[data-relpos-plotly]"));
    if (!("IntersectionObserver" in window)) {{ divs.forEach(show); return; }}
    var near = new IntersectionObserver(function (entries) {{
      entries.forEach(function (e) {{
        if (e.isIntersecting) {{ near.unobserve(e.target); show(e.target); }}
      }});
    }}, {{rootMargin: "0px 0px 200px 0px"}});
    divs.forEach(function (d) {{ near.observe(d); }});
  }}
  if (document.readyState === "loading") {{ document.addEventListener("DOMContentLoaded", init); }} else {{ init(); }}
}})();
"""


FIGURE_CLASS = 'class="plotly-graph-div relpos-figure"'
_FIGURE_DIV = re.compile(
    r'<div id="(?P<id>relpos-[0-9a-f]+)" class="plotly-graph-div relpos-figure" '
    r'style="height:(?P<height>\d+)px; width:100%;"></div>\s*<script type="text/javascript">')


def _trace_types(spec: dict) -> set[str]:
    traces = list(spec.get("data") or [])
    for frame in spec.get("frames") or []:
        traces += list(frame.get("data") or [])
    return {t.get("type") or "scatter" for t in traces}


def plotly_bundle(types: set[str]) -> str | None:
    """The smallest vendored bundle that draws every trace type in ``types`` (None: the full one)."""
    for name, has in PLOTLY_BUNDLES:
        if types <= has:
            return name
    return None


def book_figures(body: str, root: str) -> tuple[str, list[tuple[str, dict]], set[str]]:
    """``body`` with every figure output in its book form (an empty div that names its
    spec's file); the specs to write (``(id, spec)``, slider frames included) and the
    trace types drawn. ``root`` is the page's way up to the
    book's root ("", "../"). A figure output that cannot be read fails the build."""
    from relpos_core.figures._plotly import SPEC_PREFIX, SPEC_SUFFIX

    out, at, specs, types, converted = [], 0, [], set(), 0
    for match in _FIGURE_DIV.finditer(body):
        converted += 1
        div_id = match.group("id")
        start = body.find(SPEC_PREFIX, match.end())
        end = body.find(SPEC_SUFFIX + json.dumps(div_id), start)
        close = body.find("</script>", end)
        if start < 0 or end < 0 or close < 0 or body[match.end():start].strip() != "(function () {":
            raise ExtensionError(f"figure {div_id}: its script does not hold a spec that the book can read")
        spec = json.loads(body[start + len(SPEC_PREFIX):end])
        types |= _trace_types(spec)
        specs.append((div_id, spec))
        out.append(body[at:match.start()])
        out.append(f'<div id="{div_id}" class="plotly-graph-div relpos-figure" '
                   f'style="height:{match.group("height")}px; width:100%;" '
                   f'data-relpos-spec="{root}_static/{FIGURES_DIR}/{div_id}.json" data-relpos-plotly="@BUNDLE@"></div>')
        at = close + len("</script>")
    out.append(body[at:])
    rewritten = "".join(out)
    if body.count(FIGURE_CLASS) != converted or rewritten.count("data-relpos-plotly=") != converted:
        raise ExtensionError(f"{body.count(FIGURE_CLASS)} figure outputs on the page, {converted} of them read: "
                             "one is left in its notebook form (it would load plotly from a CDN)")
    return rewritten, specs, types


def _book_figures(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if not body or "relpos-figure" not in body:
        return
    root = "../" * pagename.count("/")
    body, specs, types = book_figures(body, root)
    bundle = plotly_bundle(types)
    if bundle is None:
        app.env.relpos_full_plotly = True
        bundle = PLOTLY_JS
    context["body"] = body.replace('data-relpos-plotly="@BUNDLE@"', f'data-relpos-plotly="{bundle}"')
    folder = Path(app.outdir) / "_static" / FIGURES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for div_id, spec in specs:
        (folder / f"{div_id}.json").write_text(json.dumps(spec, separators=(",", ":")))
    app.add_js_file(FIGURES_JS, loading_method="defer")


# -- no icon font ---------------------------------------------------------------------------

_ICON_FONT = re.compile(r'\s*<script defer src="[^"]*_static/scripts/fontawesome\.js[^"]*"></script>')
# the search's scripts (searchindex.js: 0.1 MB), in <head> of every page: deferred, so that
# they no longer hold back the first paint (the search box needs them only when used)
_SEARCH_SCRIPTS = re.compile(r'<script src="(?P<src>[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js))"></script>')
# the live sliders' widget state (each Output widget holds a copy of its figure: 0.3 MB on
# the T5 page), which only a widget manager reads; the book loads none (nb_ipywidgets_js)
_WIDGET_STATE = re.compile(r'\s*<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>', re.S)
_CLASS_ATTR = re.compile(r'class="([^"]*)"')
_STYLE = {"fas": "fa-solid", "far": "fa-regular", "fab": "fa-brands",
          "fa-solid": "fa-solid", "fa-regular": "fa-regular", "fa-brands": "fa-brands"}
# classes that size or move an icon, not name one
_MODIFIER = re.compile(r"fa-(?:\d*x|xs|sm|lg|xl|2xs|2xl|fw|spin|pulse|border|inverse|flip.*|rotate.*|stack.*|li|ul)$")


def icons_used(html: str) -> set[tuple[str, str]]:
    """The (style, icon) pairs of the Font Awesome classes in ``html``."""
    used = set()
    for attr in _CLASS_ATTR.findall(html):
        classes = attr.split()
        styles = [_STYLE[c] for c in classes if c in _STYLE]
        if styles:
            used |= {(styles[0], c) for c in classes if c.startswith("fa-") and c not in _STYLE and not _MODIFIER.match(c)}
    return used


def icons_drawn() -> set[tuple[str, str]]:
    """The (style, icon) pairs ``assets/relpos-icons.css`` draws."""
    css = (Path(__file__).resolve().parents[1] / "assets" / ICONS_CSS).read_text()
    return set(re.findall(r"\.(fa-(?:solid|regular|brands))\.(fa-[a-z0-9-]+)::before", css))


def _lighten_pages(outdir: Path) -> None:
    """Every page without the theme's Font Awesome script (each icon it uses is drawn by
    ``relpos-icons.css``, else the build fails: an icon would silently vanish), without the
    widget state no script of the book reads, and with the search's scripts deferred."""
    drawn, missing = icons_drawn(), {}
    for page in outdir.rglob("*.html"):
        if page.relative_to(outdir).parts[0].startswith("_"):
            continue
        html = page.read_text(encoding="utf-8")
        for icon in icons_used(html) - drawn:
            missing.setdefault(" ".join(icon), page.relative_to(outdir).as_posix())
        html = _ICON_FONT.sub("", html)
        html = _WIDGET_STATE.sub("", html)
        html = _SEARCH_SCRIPTS.sub(lambda m: f'<script defer src="{m.group("src")}"></script>', html)
        if MATHJAX_ENTRY not in html and _MATH.search(html):  # no MathJax script: typeset here
            # math outside the body (a heading's formula in the theme's page contents), on a
            # page whose body was typeset at build time: typeset it too
            typeset = typeset_math(html, "../" * (len(page.relative_to(outdir).parts) - 1))
            if typeset is not None:
                html, css = typeset
                html = html.replace("</head>", f'<style class="relpos-toc-math">{css}</style>\n</head>', 1)
        page.write_text(html, encoding="utf-8")
    if missing:
        raise ExtensionError(f"icons used but not drawn by assets/{ICONS_CSS}: {missing}")


# -- math typeset at build time ---------------------------------------------------------------

_MATH = re.compile(r'(?P<open><(?P<tag>span|div) class="math notranslate nohighlight"[^>]*>)\s*'
                   r'(?P<tex>\\\((?P<inline>.*?)\\\)|\\\[(?P<display>.*?)\\\])\s*</(?P=tag)>', re.S)
MATHJAX_RENDER = Path(__file__).with_name("mathjax_render.js")


def typeset_math(body: str, root: str) -> tuple[str, str] | None:
    """``body`` with every formula as MathJax CommonHTML, and the CSS they need; None when
    Node.js or MathJax is missing (the page then typesets in the browser)."""
    matches = list(_MATH.finditer(body))
    if not matches:
        return body, ""
    source, node = _mathjax_source(), shutil.which("node")
    if source is None or node is None:
        return None
    items = [{"tex": html_lib.unescape(m.group("inline") if m.group("inline") is not None else m.group("display")),
              "display": m.group("inline") is None} for m in matches]
    request = {"es5": str(source), "fontURL": f"{root}_static/{MATHJAX_DIR}/output/chtml/fonts/woff-v2",
               "items": items}
    done = subprocess.run([node, str(MATHJAX_RENDER)], input=json.dumps(request), capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise ExtensionError(f"MathJax could not typeset the page: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    out, at = [], 0
    for m, rendered in zip(matches, result["html"]):
        out += [body[at:m.start()], m.group("open"), rendered, f"</{m.group('tag')}>"]
        at = m.end()
    out.append(body[at:])
    return "".join(out), result["css"]


def _typeset_math(app, pagename, templatename, context, doctree) -> None:
    body = context.get("body")
    if not body or "math notranslate" not in body:
        return
    typeset = typeset_math(body, "../" * pagename.count("/"))
    if typeset is None:
        if not getattr(app.env, "relpos_math_warned", False):
            app.env.relpos_math_warned = True
            logger.warning("Node.js (or django-static-mathjax) is missing: the pages typeset their math in the "
                           "browser, loading MathJax (1.2 MB) on every page with math")
        return
    context["body"], css = typeset
    context["metatags"] = context.get("metatags", "") + f'\n<style id="MJX-CHTML-styles">{css}</style>'
    # no MathJax script (nor its configuration) on the page: the math is typeset already
    scripts = context.get("script_files")
    if scripts is not None:
        def mathjax(js) -> bool:
            name, attributes = str(getattr(js, "filename", js)), getattr(js, "attributes", {}) or {}
            return MATHJAX_DIR in name or "mathjax" in name.lower() or "MathJax" in attributes.get("body", "")
        scripts[:] = [js for js in scripts if not mathjax(js)]


_SCROLL_BOX = '<div class="pst-scrollable-table-container">'
_CAPTIONED = re.compile(r'\s*<table(?P<attrs>[^>]*)>\s*<caption>(?P<caption>.*?)</caption>', re.S)
_ID = re.compile(r'\sid="([^"]+)"')


def captions_outside_scroll_boxes(body: str) -> str:
    """``body`` with each captioned table's caption moved out of its scroll box:
    ``<div class="relpos-table" id=ID><div class="caption relpos-table-caption" id=ID-caption>
    CAPTION</div><div class="pst-scrollable-table-container"><table aria-labelledby=ID-caption>
    ...</table></div></div>``. Tables without a caption are left as they are."""
    out, at = [], 0
    while True:
        start = body.find(_SCROLL_BOX, at)
        if start < 0:
            break
        inner = start + len(_SCROLL_BOX)
        table = _CAPTIONED.match(body, inner)
        end = body.find("</table>", inner)
        close = body.find("</div>", end) if end >= 0 else -1
        if table is None or end < 0 or close < 0:
            out.append(body[at:inner])
            at = inner
            continue
        attrs = table.group("attrs")
        found = _ID.search(attrs)
        table_id = found.group(1) if found else None
        attrs = _ID.sub("", attrs)
        label = f"{table_id}-caption" if table_id else None
        wrapper = f'<div class="relpos-table"{f" id={chr(34)}{table_id}{chr(34)}" if table_id else ""}>'
        caption = (f'<div class="caption relpos-table-caption"{f" id={chr(34)}{label}{chr(34)}" if label else ""}>'
                   f'{table.group("caption")}</div>')
        labelled = f' aria-labelledby="{label}"' if label else ""
        out.append(body[at:start])
        out.append(f"{wrapper}{caption}{_SCROLL_BOX}<table{attrs}{labelled}>")
        out.append(body[table.end():close + len("</div>")])
        out.append("</div>")
        at = close + len("</div>")
    out.append(body[at:])
    return "".join(out)


def _move_table_captions(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = captions_outside_scroll_boxes(context["body"])


def _register_bibliography_style() -> None:
    from pybtex.plugin import register_plugin
    from pybtex.style.formatting.unsrt import Style as UnsrtStyle
    from pybtex.style.labels import BaseLabelStyle

    class AuthorYearLabels(BaseLabelStyle):
        """ "He et al., 2021"; two papers with the same label become "2021a" and "2021b"."""

        def format_labels(self, sorted_entries):
            labels = []
            for entry in sorted_entries:
                authors = entry.persons.get("author", [])
                names = [" ".join(p.last_names or p.first_names).strip("{}") for p in authors]
                who = names[0] if len(names) == 1 else (
                    f"{names[0]} and {names[1]}" if len(names) == 2 else f"{names[0]} et al."
                )
                labels.append(f"{who}, {entry.fields.get('year', 'n.d.')}")
            seen: dict[str, int] = {}
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
    _check_vendored_plotly()
    _register_bibliography_style()
    app.add_css_file(ICONS_CSS)
    app.connect("html-page-context", _book_figures)
    app.connect("html-page-context", _typeset_math, priority=900)  # after sphinx.ext.mathjax adds its script
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_assets)
    app.connect("html-page-context", _move_table_captions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
