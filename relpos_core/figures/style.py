"""The book's visual language: one colour and one display name per scheme, and the
plot chrome every figure shares.

Every figure that draws several schemes asks :func:`scheme_color` and
:func:`scheme_label`, which read each scheme's declaration (``color`` and ``display``
in ``relpos_core/schemes/<name>.py``): a new scheme brings its own colour.

The colours are chosen to be told apart by readers with any of the three common
colour-vision deficiencies and to read on the book's light and dark backgrounds:

* the eight schemes a figure usually compares (``none``, ``absolute``, ``shaw``,
  ``t5``, ``transformer_xl``, ``deberta``, ``alibi``, ``rope``) take Okabe and Ito's
  and Paul Tol's colour-blind-safe colours; ``tests/test_figures.py`` checks that
  every pair stays apart (CIE76 distance >= 10) under simulated protanopia,
  deuteranopia and tritanopia (Machado et al., 2009), and that every colour has a
  contrast of at least 2:1 against white and against the dark theme's background;
* a variant (``shaw_key``, ``music_transformer``, ``learned``, ...) takes a shade of
  its family's hue or a colour of its own; a figure that shows a variant next to its
  family also varies the dash or the marker, as the chapters do.

No plotly import here.
"""
from __future__ import annotations

import re

from relpos_core import schemes

__all__ = ["scheme_color", "scheme_label", "readable", "MAX_TRACES", "MAX_HEIGHT", "NEUTRAL", "SERIES_COLORS",
           "THEMES"]

# other spellings the lab and older notebooks use for the same schemes
_ALIASES = {"shaw_kv": "shaw", "shaw_k": "shaw_key", "txl": "transformer_xl"}

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


def _entry(name: str):
    """The registry entry of scheme ``name``: its declaration gives the colour and the label."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a scheme's registry name (a string), got {type(name).__name__}")
    key = _ALIASES.get(name, name)
    if key not in schemes.names():
        raise ValueError(f"name must be a scheme's registry name, one of {sorted(schemes.names())}; got {name!r}")
    return schemes.lookup(key)


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
