"""The book's visual language: one colour and one display name per scheme, and the
plot chrome every figure shares.

Every figure that draws several schemes asks :func:`scheme_color` and
:func:`scheme_label`, which read each scheme's declaration (``color`` and ``display``
in ``relpos_core/schemes/<name>.py``): a new scheme brings its own colour.

The colours are chosen to be told apart by readers with any of the three common
colour-vision deficiencies and to read on the book's light and dark backgrounds:

* every pair of declared schemes and variants is at least :data:`MIN_SCHEME_DELTA_E`
  apart (CIE76 distance in CIE Lab, :func:`delta_e`), so a variant drawn beside its
  family (DeBERTa and DeBERTa + EMD, Kerple log and power) is told apart by colour;
* the eight schemes a figure usually compares (``none``, ``absolute``, ``shaw``,
  ``t5``, ``transformer_xl``, ``deberta``, ``alibi``, ``rope``) take Okabe and Ito's
  and Paul Tol's colour-blind-safe colours; ``tests/test_figures.py`` checks that
  every pair stays apart (CIE76 distance >= 10) under simulated protanopia,
  deuteranopia and tritanopia (Machado et al., 2009), and that every colour has a
  contrast of at least 2:1 against white and against the dark theme's background;
* a variant (``shaw_key``, ``music_transformer``, ``learned``, ...) takes a shade of
  its family's hue or a colour of its own, still that far from every other scheme; a
  figure that shows a variant next to its family also varies the dash or the marker;
* what is not a scheme is never told apart by colour when it is a way of computing the
  same thing: kernel forms and backends take dashes and markers
  (``figures/bench.py``); the KV-cache layouts take one colour each, :data:`KV_COLORS`,
  in every figure that draws them. A marker always has its line's colour.

No plotly import here.
"""
from __future__ import annotations

import re

from relpos_core import schemes

__all__ = ["scheme_color", "scheme_label", "readable", "MAX_TRACES", "MAX_HEIGHT", "NEUTRAL", "SERIES_COLORS",
           "THEMES", "delta_e", "MIN_SCHEME_DELTA_E", "KV_COLORS", "kv_color"]

#: the most traces (lines, bar series) one plot should show; helpers warn beyond it
MAX_TRACES = 8

#: the tallest a figure should be (px, slider included): a slider and what it changes
#: are seen together on a laptop screen
MAX_HEIGHT = 600

#: the colour of reference lines and of "nothing" (a baseline, a bound)
NEUTRAL = "#8c8c8c"

#: colours for series that are not schemes (bidirectional / causal, measured /
#: analytic): the same colour-blind-safe set, in an order that keeps the first few
#: apart
SERIES_COLORS = ("#0072b2", "#e69f00", "#117733", "#ee3377", "#56b4e9", "#d55e00",
                 "#999933", "#9467bd")


#: the least CIE76 distance between the colours of any two declared schemes or variants
#: (``tests/test_style.py`` checks every pair)
MIN_SCHEME_DELTA_E = 25.0

#: one colour per KV-cache layout, the same in every figure of the book that draws one
#: (multi-head, grouped-query, multi-query and multi-head latent attention); variants of a
#: layout ("MHA (unrotated keys)", "MLA (absorbed)") keep its colour and change the dash
KV_COLORS = {"MHA": "#0072b2", "GQA": "#009e73", "MQA": "#e69f00", "MLA": "#cc79a7"}


def kv_color(layout: str) -> str:
    """The colour of KV-cache layout ``layout`` ("MHA", "GQA", "MQA", "MLA", or a
    variant written after it: "MLA (absorbed)", "GQA, d_h = 128")."""
    if not isinstance(layout, str):
        raise ValueError(f"layout must be a string naming a KV layout, got {type(layout).__name__}")
    kind = re.split(r"[\s,(]", layout.strip(), maxsplit=1)[0]
    if kind not in KV_COLORS:
        raise ValueError(f"layout must start with one of {list(KV_COLORS)}, got {layout!r}")
    return KV_COLORS[kind]


def _entry(name: str):
    """The registry entry of scheme ``name``: its declaration gives the colour and the label."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a scheme's registry name (a string), got {type(name).__name__}")
    if name not in schemes.names():
        raise ValueError(f"name must be a scheme's registry name, one of {sorted(schemes.names())}; got {name!r}")
    return schemes.lookup(name)


def scheme_color(name: str) -> str:
    """The one colour (``#rrggbb``) the whole book uses for scheme ``name`` (a registry
    name such as ``"rope"``, ``"t5"``, ``"shaw_key"``)."""
    return _entry(name).color


def scheme_label(name: str) -> str:
    """The name a reader sees for scheme ``name`` ("RoPE", "T5 buckets", "Shaw (key only)")."""
    return _entry(name).display


def known_schemes() -> tuple[str, ...]:
    """Every registry name :func:`scheme_color` knows (aliases excluded)."""
    return tuple(schemes.names())


# -- plot chrome for the book's light and dark themes ------------------------------------
#: colours of text, grid and controls in each of the book's colour modes (the theme's
#: own text and background colours); the figure script applies the one the page shows
#: and follows the reader's toggle
THEMES = {
    "light": dict(font="#222832", grid="#e5e7ea", line="#9ca4af", zeroline="#c7ccd3",
                  slider_bg="#f3f4f5", slider_border="#9ca4af", slider_active="#d1d5da",
                  plot_bg="#ffffff"),
    "dark": dict(font="#ced6dd", grid="rgba(206, 214, 221, 0.14)", line="#677384",
                 zeroline="rgba(206, 214, 221, 0.35)", slider_bg="#29313d",
                 slider_border="#677384", slider_active="#48566b", plot_bg="rgba(0, 0, 0, 0)"),
}


# -- LaTeX and markup written as text a figure can show ----------------------------------
# plotly writes SVG text: it does not typeset LaTeX in a static page, but it knows
# <sub>, <sup>, <b>, <i> and <br>
_COMMANDS = {
    "theta": "θ", "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "Delta": "Δ",
    "epsilon": "ε", "lambda": "λ", "mu": "μ", "pi": "π", "sigma": "σ", "tau": "τ",
    "phi": "φ", "omega": "ω", "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥",
    "geq": "≥", "ne": "≠", "neq": "≠", "infty": "∞", "pm": "±", "to": "→", "ldots": "…",
    "dots": "…", "approx": "≈", "propto": "∝", "sqrt": "√", "sum": "Σ", "in": "∈",
    "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
}
_COMMAND = re.compile(r"\\([A-Za-z]+)(?![A-Za-z])")
_WRAPPER = re.compile(r"\\(?:mathrm|text|textrm|mathbf|mathit|operatorname)\{([^{}]*)\}")
_BRACED = re.compile(r"([_^])\{([^{}]*)\}")
_SINGLE = re.compile(r"(?<=[^\s_^])([_^])([A-Za-z0-9])(?![A-Za-z0-9])")
_DASH = re.compile(r"(?<=\w)--(?=\w)")


def readable(text):
    """``text`` with LaTeX and markdown markup written the way a figure can show it:
    ``θ_k`` becomes θ<sub>k</sub>, ``R_{p}`` R<sub>p</sub>, ``L^2`` L<sup>2</sup>,
    ``\\theta`` θ, ``content--content`` content–content; ``$`` and backticks are
    dropped. Names with an underscore inside a word (``shaw_key``) are left alone.
    ``None`` stays ``None``.
    """
    if text is None:
        return None
    text = str(text).replace("$", "").replace("`", "")
    text = _WRAPPER.sub(lambda m: m.group(1), text)
    text = _COMMAND.sub(lambda m: _COMMANDS.get(m.group(1), m.group(0)), text)
    tag = {"_": "sub", "^": "sup"}
    text = _BRACED.sub(lambda m: f"<{tag[m.group(1)]}>{m.group(2)}</{tag[m.group(1)]}>", text)
    text = _SINGLE.sub(lambda m: f"<{tag[m.group(1)]}>{m.group(2)}</{tag[m.group(1)]}>", text)
    return _DASH.sub("–", text)

# -- colour distance (CIE76 in CIE Lab, D65 white) ----------------------------------------
def _lab(colour: str) -> tuple[float, float, float]:
    """``#rrggbb`` (sRGB) as CIE Lab (D65), by the standard formulas."""
    if not (isinstance(colour, str) and re.fullmatch(r"#[0-9a-fA-F]{6}", colour)):
        raise ValueError(f"colour must be '#rrggbb', got {colour!r}")
    rgb = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    x = (0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047
    y = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    z = (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883
    f = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def delta_e(a: str, b: str) -> float:
    """CIE76 colour difference of two ``#rrggbb`` colours: the Euclidean distance in CIE
    Lab (about 2.3 is a just-noticeable difference; the book keeps every pair of schemes
    at least :data:`MIN_SCHEME_DELTA_E` apart)."""
    return sum((p - q) ** 2 for p, q in zip(_lab(a), _lab(b))) ** 0.5
