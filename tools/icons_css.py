"""Write assets/relpos-icons.css: the theme's icons as CSS masks, without its icon font.

pydata-sphinx-theme loads Font Awesome as a 1.5 MB script (``fontawesome.js``) on every
page, for the dozen icons of the page chrome; without the script its CSS would fetch
the icon web fonts (270 kB). The book drops the script (``_ext/relpos_book.py``) and
draws each icon it uses from this file: the icon's SVG path, taken from the theme's own
``fontawesome.js``, as a ``mask-image`` painted in ``currentColor``. The build fails
when a page uses an icon this file does not draw: add it to ``ICONS`` and run

    python tools/icons_css.py

Font Awesome Free icons: CC BY 4.0 (https://fontawesome.com/license/free).
"""
from __future__ import annotations

import re
import sys
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "assets" / "relpos-icons.css"

#: (style, name) of every icon the built pages use; the style's Font Awesome 5 and 6 class names
ICONS = {
    "solid": ["angle-left", "angle-right", "arrow-up", "bars", "circle-half-stroke", "code", "download",
              "expand", "file", "file-lines", "file-pdf", "house", "lightbulb", "list", "magnifying-glass",
              "moon", "pencil", "play", "rocket", "sun", "compress", "chevron-down", "chevron-right",
              "chevron-left", "chevron-up", "arrow-right", "arrow-left", "square-caret-right"],
    "regular": [],
    "brands": ["github", "square-github"],
}
#: the icon of each admonition kind (pydata-sphinx-theme's --pst-icon-admonition-* in its CSS),
#: drawn in the admonition's colour instead of a glyph of the icon font; "" is the default
ADMONITIONS = {"": "bell", "note": "circle-info", "attention": "circle-exclamation",
               "important": "circle-exclamation", "caution": "triangle-exclamation",
               "warning": "triangle-exclamation", "danger": "triangle-exclamation", "error": "circle-xmark",
               "hint": "lightbulb", "tip": "lightbulb", "seealso": "share", "admonition-todo": "bell"}
CLASSES = {"solid": ("fa-solid", "fas"), "regular": ("fa-regular", "far"), "brands": ("fa-brands", "fab")}
PREFIX = {"solid": "fas", "regular": "far", "brands": "fab"}


def theme_script() -> Path:
    import pydata_sphinx_theme

    return Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "scripts" / "fontawesome.js"


def packs(source: str) -> dict[str, str]:
    """The text of each style's icon table: what comes before its ``d("fas", ...)`` call."""
    calls = [(m.start(), m.group(1)) for m in re.finditer(r'\bd\("(fa[srb])",\w+\)', source)]
    if sorted(p for _, p in calls) != ["fab", "far", "fas"]:
        raise SystemExit(f"{theme_script()}: cannot find the icon tables (found {calls}); update tools/icons_css.py")
    out, start = {}, 0
    for at, prefix in sorted(calls):
        out[prefix] = source[start:at]
        start = at
    return out


ENTRY = re.compile(r'(?:"(?P<q>[a-z0-9-]+)"|(?P<n>[a-z0-9]+)):\[(?P<w>\d+),(?P<h>\d+),\[(?P<aliases>[^\]]*)\],"[0-9a-f]+",'
                   r'(?P<path>"[^"]*"|\["[^\]]*\])\]')


def icon_table(text: str) -> dict[str, tuple[int, int, list[str], list[str]]]:
    table = {}
    for m in ENTRY.finditer(text):
        name = m.group("q") or m.group("n")
        aliases = [a.strip('"') for a in m.group("aliases").split(",") if a and not a.strip('"').isdigit()]
        paths = re.findall(r'"([^"]*)"', m.group("path"))
        table[name] = (int(m.group("w")), int(m.group("h")), aliases, [p for p in paths if p])
    return table


def css() -> str:
    tables = {p: icon_table(t) for p, t in packs(theme_script().read_text()).items()}
    rules = ["/* Written by tools/icons_css.py from the theme's fontawesome.js: do not edit.",
             "   Font Awesome Free icons (CC BY 4.0, https://fontawesome.com/license/free) as CSS masks,",
             "   so that the page needs neither the 1.5 MB icon script nor the icon fonts. */",
             ".fa-solid, .fas, .fa-regular, .far, .fa-brands, .fab { font-family: inherit !important; }",
             ", ".join(f".{c}::before" for cs in CLASSES.values() for c in cs)
             + ' { content: "" !important; display: inline-block; width: 1.15em; height: 1em;'
               " vertical-align: -0.125em; background-color: currentColor;"
               " -webkit-mask: var(--relpos-icon) no-repeat center / contain;"
               " mask: var(--relpos-icon) no-repeat center / contain; }"]
    def icon(style, name):
        table = tables[PREFIX[style]]
        hit = table.get(name) or next((v for k, v in table.items() if name in v[2]), None)
        if hit is None:
            raise SystemExit(f"no {style} icon {name!r} in {theme_script()}")
        width, height, aliases, paths = hit
        svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}">'
               + "".join(f'<path d="{p}"/>' for p in paths) + "</svg>")
        return aliases, "data:image/svg+xml," + urllib.parse.quote(svg, safe=" /:=,.-")

    for style, names in ICONS.items():
        for name in names:
            aliases, url = icon(style, name)
            selectors = [f".{c}.fa-{n}::before" for c in CLASSES[style] for n in [name, *aliases]]
            rules.append(f'{", ".join(selectors)} {{ --relpos-icon: url("{url}"); }}')
    title = ".admonition{kind} > .admonition-title::after, div.admonition{kind} > .admonition-title::after"
    rules.append(title.format(kind="") + ' { content: "" !important; font: inherit !important;'
                 " background-color: currentColor; -webkit-mask: var(--relpos-icon) no-repeat center / contain;"
                 " mask: var(--relpos-icon) no-repeat center / contain; }")
    for kind, name in ADMONITIONS.items():
        _, url = icon("solid", name)
        rules.append(f'{title.format(kind=f".{kind}" if kind else "")} {{ --relpos-icon: url("{url}"); }}')
    return "\n".join(rules) + "\n"


def main() -> int:
    OUT.write_text(css())
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
