"""Plotly, loaded lazily, with the book's renderer.

Library code must import with only torch installed, so plotly is imported inside
functions through :func:`plotly_modules`. The first call registers the ``"relpos"``
renderer and the ``"relpos"`` template (``book_template``) and makes both the
defaults. The renderer gives every figure one rich representation, ``text/html``: a div and a script that calls ``window.Plotly``. The built book ships
plotly.js once (``_static/plotly.min.js``, copied from the plotly package by
``_ext/relpos_book.py``) so the script finds it; anywhere else (JupyterLab, Colab, VS
Code) the script loads the same plotly.js version from the plotly CDN first.

The HTML never inlines plotly.js (4 MB) into an output. There is deliberately no
``application/vnd.plotly.v1+json`` entry: myst-nb cannot render that mime type and
warns about it (a warning the book build turns into an error rather than suppress).
"""
from __future__ import annotations

import functools
import json
import uuid

RENDERER_NAME = "relpos"
TEMPLATE_NAME = "relpos"


@functools.lru_cache(maxsize=None)
def plotly_modules():
    """Import plotly (``go``, ``pio``) on first use and register the book renderer."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
        from plotly.io._renderers import MimetypeRenderer
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "relpos_core.figures needs plotly: pip install 'relpos_core[book]' (or pip install plotly ipywidgets)"
        ) from err

    class BookRenderer(MimetypeRenderer):
        def to_mimebundle(self, fig_dict):
            return figure_mimebundle(fig_dict)

    pio.renderers[RENDERER_NAME] = BookRenderer()
    pio.renderers.default = RENDERER_NAME
    pio.templates[TEMPLATE_NAME] = book_template(go, pio)
    pio.templates.default = TEMPLATE_NAME
    return go, pio


def book_template(go, pio):
    """plotly's white template with the book's colours: the colour-blind-safe series
    colours, the light theme's text and grid, a transparent paper (the page's own
    background shows through; the figure script recolours text and grid in dark mode)."""
    from .style import SERIES_COLORS, THEMES

    light = THEMES["light"]
    template = go.layout.Template(pio.templates["plotly_white"])
    axis = dict(gridcolor=light["grid"], linecolor=light["line"], zerolinecolor=light["zeroline"])
    template.layout.update(
        colorway=list(SERIES_COLORS), paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor=light["plot_bg"],
        font=dict(color=light["font"]), xaxis=axis, yaxis=axis,
    )
    return template


def plotlyjs_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


def figure_html(fig_dict: dict, *, div_id: str | None = None) -> str:
    """A self-contained ``<div>`` + ``<script>`` that draws ``fig_dict`` (frames included).

    Uses ``window.Plotly`` when the page already has it (the built book), and loads
    plotly.js from the CDN otherwise. The script

    * draws without plotly's toolbar (``displayModeBar: false``): it covered legends and
      titles, and the book's figures need none of its tools;
    * picks the figure's narrow layout (``layout.meta.relpos.narrow``, e.g. heatmap panels
      stacked one per row) when its container is narrower than that layout's ``below``
      px, for the figure and every slider frame, and redraws when a resize crosses it;
    * takes the text, grid and control colours of the book's light or dark mode
      (``style.THEMES``) and follows the reader's toggle; the paper stays transparent;
    * re-fits tick labels and cell text to the width it is given (``FIT_JS``).
    """
    _, pio = plotly_modules()
    from .style import THEMES

    div_id = div_id or f"relpos-{uuid.uuid4().hex[:12]}"
    spec = pio.to_json(fig_dict, validate=False).replace("</", "<\\/")
    height = (fig_dict.get("layout") or {}).get("height") or 450
    cdn = f"https://cdn.plot.ly/plotly-{plotlyjs_version()}.min.js"
    # The book build (_ext/relpos_book.py) reads ``var spec = ...;`` back from this
    # script: keep that line as it is (``SPEC_PREFIX`` / ``SPEC_SUFFIX``).
    return f"""<div id="{div_id}" class="plotly-graph-div relpos-figure" style="height:{int(height)}px; width:100%;"></div>
<script type="text/javascript">
(function () {{
{SPEC_PREFIX}{spec}{SPEC_SUFFIX}{json.dumps(div_id)}, themes = {json.dumps(THEMES)};
{figure_js()}
  var start = relposFigure(spec, id, themes);
  if (window.Plotly) {{ start(); }} else {{
    var s = document.createElement("script");
    s.src = {json.dumps(cdn)};
    s.onload = start;
    document.head.appendChild(s);
  }}
}})();
</script>"""


#: the line of a figure's script that holds its spec: ``SPEC_PREFIX + JSON + SPEC_SUFFIX``
SPEC_PREFIX = "  var spec = "
SPEC_SUFFIX = ";\n  var id = "


def figure_js() -> str:
    """``relposFigure(spec, id, themes)``: the function that draws a figure spec into the
    div ``id`` and returns ``start()`` (draw, then follow resizes and the colour mode).
    The figure's own script (Jupyter, Colab) and the book's ``relpos-figures.js`` both
    define it from this text, so they draw alike."""
    return f"""  function relposFigure(spec, id, themes) {{
{FIT_JS}
{LEGEND_JS}
{LAYOUT_JS}
  function draw() {{
    var div = document.getElementById(id);
    var narrow = isNarrow(div);
    drawnNarrow = narrow;
    var base = variant(spec, narrow), layout = withTheme(base.layout, colourMode());
    div.style.height = (layout.height || 450) + "px";
    var config = Object.assign({{responsive: true, displaylogo: false, displayModeBar: false}}, spec.config || {{}});
    return Plotly.newPlot(div, base.data, layout, config).then(function (gd) {{
      // a frame's meta (its tick and cell-number plan) is not part of what Plotly animates: keep it
      gd.on("plotly_animatingframe", function (e) {{
        var m = e && e.frame && e.frame.layout && e.frame.layout.meta;
        if (m) {{ gd.layout.meta = m; }}
      }});
      gd.on("plotly_afterplot", function () {{ fit(gd); fitLegend(gd); }});
      fit(gd);
      fitLegend(gd);
      if (spec.frames && spec.frames.length) {{
        var frames = spec.frames.map(function (f) {{ return variant(f, narrow); }});
        return Plotly.addFrames(gd, asFrames(frames, base.layout));
      }}
    }});
  }}
  return function start() {{ return draw().then(follow); }};
  }}"""


# On a phone a legend wraps onto more rows and, the figure's height being fixed, takes the
# plot's room: in a container narrower than LEGEND_NARROW_BELOW px the figure grows until
# its legend is at most LEGEND_SHARE of the plot's height (and back to its own height when
# the legend is short again). Every figure of the book gets this, sliders included; it
# relayouts only when the height it wants differs, so it settles.
LEGEND_SHARE = 0.45
LEGEND_NARROW_BELOW = 600
LEGEND_JS = """
  function fitLegend(gd) {
    var full = gd._fullLayout, legend = gd.querySelector(".legend");
    if (!full || !full._size || !legend || gd._relposFitting) { return; }
    var base = gd._relposBaseHeight || (gd._relposBaseHeight = full.height);
    var want = base;
    if (gd.clientWidth < %d) {
      var plotAtBase = full._size.h - (full.height - base);
      var tall = legend.getBoundingClientRect().height;
      want = Math.max(base, Math.ceil(base + tall / %s - plotAtBase));
    }
    if (Math.abs(want - full.height) < 4) { gd._relposLegendTries = 0; return; }
    // the legend pushes the top margin too, so one step may fall short: a few more
    // steps (afterplot fires inside the relayout, while the lock is held)
    if ((gd._relposLegendTries = (gd._relposLegendTries || 0) + 1) > 5) { return; }
    gd._relposFitting = true;
    gd.style.height = want + "px";
    Plotly.relayout(gd, {height: want}).then(function () { gd._relposFitting = false; fitLegend(gd); },
                                             function () { gd._relposFitting = false; });
  }""" % (LEGEND_NARROW_BELOW, LEGEND_SHARE)


# The figure's layout for its width and for the page's colour mode. ``variant`` merges a
# narrow layout patch (``meta.relpos.narrow``: ``below`` px, ``layout``, per-trace
# ``data``) into a figure or a slider frame; ``follow`` redraws when a resize crosses
# ``below`` (keeping the slider's step) and recolours when the reader toggles the theme.
LAYOUT_JS = """
  var drawnNarrow = null;
  function relposMeta(obj) { return obj && obj.layout && obj.layout.meta && obj.layout.meta.relpos; }
  function variant(obj, narrow) {
    var meta = relposMeta(obj), patch = narrow && meta && meta.narrow;
    if (!patch) { return obj; }
    var out = Object.assign({}, obj, {layout: Object.assign({}, obj.layout, patch.layout)});
    if (obj.data) {
      out.data = obj.data.map(function (t, k) { return Object.assign({}, t, (patch.data || [])[k] || {}); });
    }
    return out;
  }
  // Slider frames without what none of them changes. The height: every frame shares the
  // figure's, and on a phone fitLegend may have grown the figure past it (a frame that set
  // it back laid the axes out for the smaller figure inside the grown one). A layout key
  // equal in every frame and in the drawn figure (a square plot's axes, whose ranges
  // Plotly widened to keep the circle round): re-sent by a frame, it undoes what Plotly
  // computed at the first draw.
  function asFrames(frames, drawn) {
    var same = function (a, b) { return JSON.stringify(a) === JSON.stringify(b); };
    var keys = {};
    frames.forEach(function (f) { Object.keys(f.layout || {}).forEach(function (k) { keys[k] = true; }); });
    var fixed = Object.keys(keys).filter(function (k) {
      return k === "height" || frames.every(function (f) { return f.layout && same(f.layout[k], drawn[k]); });
    });
    return frames.map(function (f) {
      if (!f.layout) { return f; }
      var layout = Object.assign({}, f.layout);
      fixed.forEach(function (k) { delete layout[k]; });
      return Object.assign({}, f, {layout: layout});
    });
  }
  function isNarrow(div) {
    var meta = relposMeta(spec), width = div.clientWidth;
    if (!(meta && meta.narrow) || !width) { return false; }
    return width < meta.narrow.below;
  }
  function colourMode() {
    return document.documentElement.getAttribute("data-theme") === "dark" ? "dark" : "light";
  }
  function themeUpdate(layout, mode) {
    var c = themes[mode], out = {"font.color": c.font, "paper_bgcolor": "rgba(0,0,0,0)",
                                  "plot_bgcolor": c.plot_bg, "legend.bgcolor": "rgba(0,0,0,0)"};
    Object.keys(layout).forEach(function (key) {
      if (!/^[xy]axis[0-9]*$/.test(key)) { return; }
      out[key + ".gridcolor"] = c.grid;
      out[key + ".linecolor"] = c.line;
      out[key + ".zerolinecolor"] = c.zeroline;
      out[key + ".tickcolor"] = c.line;
    });
    (layout.sliders || []).forEach(function (s, i) {
      out["sliders[" + i + "].bgcolor"] = c.slider_bg;
      out["sliders[" + i + "].bordercolor"] = c.slider_border;
      out["sliders[" + i + "].activebgcolor"] = c.slider_active;
      out["sliders[" + i + "].tickcolor"] = c.line;
    });
    return out;
  }
  function withTheme(layout, mode) {
    var out = Object.assign({}, layout), update = themeUpdate(layout, mode);
    Object.keys(update).forEach(function (path) {
      var parts = path.replace(/\\[(\\d+)\\]/g, ".$1").split("."), o = out;
      for (var i = 0; i < parts.length - 1; i++) {
        var k = parts[i];
        o[k] = Array.isArray(o[k]) ? o[k].slice() : Object.assign({}, o[k] || {});
        o = o[k];
      }
      o[parts[parts.length - 1]] = update[path];
    });
    return out;
  }
  function follow() {
    var div = document.getElementById(id), width = div.clientWidth, mode = colourMode();
    function resized() {
      if (div.clientWidth === width) { return; }
      width = div.clientWidth;
      if (!width || !div._fullLayout) { return; }
      // the column changed width without the window resizing (the page's styles arriving
      // late on a busy machine): fit the drawn figure to it, as Plotly does on a window resize
      if (isNarrow(div) === drawnNarrow) { Plotly.Plots.resize(div); return; }
      var slider = div.layout.sliders && div.layout.sliders[0], step = slider ? slider.active : null;
      Plotly.purge(div);
      draw().then(function () {
        var first = spec.layout.sliders && spec.layout.sliders[0];
        if (step === null || !first || step === first.active) { return; }
        return Plotly.animate(div, [first.steps[step].args[0][0]], {mode: "immediate",
          frame: {duration: 0, redraw: true}, transition: {duration: 0}}).then(function () {
          return Plotly.relayout(div, {"sliders[0].active": step});
        });
      });
    }
    if (window.ResizeObserver) { new ResizeObserver(resized).observe(div); }
    else { window.addEventListener("resize", resized); }
    new MutationObserver(function () {
      var now = colourMode();
      if (now === mode || !div._fullLayout) { return; }
      mode = now;
      Plotly.relayout(div, themeUpdate(div.layout, mode));
    }).observe(document.documentElement, {attributes: true, attributeFilter: ["data-theme"]});
  }"""


# Re-applies the rule of ``_fit.py`` for the width the browser gives the figure: tick
# labels every 1, 2, 4, ... cells, cell text only where it is legible. Runs after every
# redraw (resize, slider step); it relayouts only when something changes, so it settles.
FIT_JS = """
  function fit(gd) {
    var meta = gd.layout.meta && gd.layout.meta.relpos;
    if (!meta || !gd._fullLayout || gd._relposFitting) { return; }
    var full = gd._fullLayout, relayout = {}, changed = false;
    function step(n, length, need) {
      var s = 1, cell = length / Math.max(n, 1);
      while (s * cell < need && s < n) { s *= 2; }
      return s;
    }
    Object.keys(meta.axes || {}).forEach(function (name) {
      var spec = meta.axes[name], ax = full[name];
      if (!ax || !ax._length) { return; }
      var s = step(spec.labels.length, ax._length, spec.need), vals = [], text = [];
      for (var i = 0; i < spec.labels.length; i += s) { vals.push(i); text.push(spec.labels[i]); }
      var now = (gd.layout[name] || {}).tickvals || [];
      if (now.length !== vals.length || now[1] !== vals[1]) {
        relayout[name + ".tickvals"] = vals;
        relayout[name + ".ticktext"] = text;
        changed = true;
      }
    });
    var restyle = [];
    (meta.text || []).forEach(function (spec) {
      var trace = gd._fullData[spec.trace];
      if (!trace) { return; }
      var xa = full["xaxis" + trace.xaxis.slice(1)], ya = full["yaxis" + trace.yaxis.slice(1)];
      var rows = trace.z.length, cols = rows ? trace.z[0].length : 0;
      var fits = xa._length / cols >= spec.need && ya._length / rows >= 16;
      var want = fits ? spec.template : "";
      if ((gd.data[spec.trace].texttemplate || "") !== want) { restyle.push([spec.trace, want]); }
    });
    (meta.titles || []).forEach(function (spec) {
      var ax = full[spec.axis], perLine = ax ? Math.max(8, Math.floor(ax._length / 7.8)) : 0;
      if (!perLine) { return; }
      var lines = [], line = "";
      function plain(t) { return t.replace(/<[^>]*>/g, ""); }
      spec.text.split(" ").forEach(function (word) {
        if (line && plain(line + " " + word).length > perLine) { lines.push(line); line = word; }
        else { line = line ? line + " " + word : word; }
      });
      lines.push(line);
      var text = lines.join("<br>");
      if ((full.annotations[spec.index] || {}).text !== text) {
        relayout["annotations[" + spec.index + "].text"] = text;
        changed = true;
      }
    });
    if (!changed && !restyle.length) { return; }
    gd._relposFitting = true;
    var done = changed ? Plotly.relayout(gd, relayout) : Promise.resolve();
    done.then(function () {
      return Promise.all(restyle.map(function (r) {
        return Plotly.restyle(gd, {texttemplate: [r[1]]}, [r[0]]);
      }));
    }).then(function () { gd._relposFitting = false; }, function () { gd._relposFitting = false; });
  }"""


def attach_narrow(fig, narrow, *, below: int = 600):
    """``fig`` with ``narrow`` as its layout for containers narrower than ``below`` px
    (``layout.meta.relpos.narrow``, applied by the figure script): ``narrow`` must draw
    the same traces on the same axes (a grid of other shape: 6 x 1 instead of 3 x 2);
    its layout replaces ``fig``'s key by key, its traces' settings where they differ."""
    if len(narrow.data) != len(fig.data):
        raise ValueError(f"narrow must draw the same {len(fig.data)} traces as fig, got {len(narrow.data)}")
    layout = narrow.layout.to_plotly_json()
    for key in ("template", "meta"):
        layout.pop(key, None)
    data = []
    for wide_trace, narrow_trace in zip(fig.data, narrow.data):
        w, n = wide_trace.to_plotly_json(), narrow_trace.to_plotly_json()
        data.append({key: value for key, value in n.items() if w.get(key) != value})
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    relpos = dict(meta.get("relpos") or {})
    relpos["narrow"] = dict(below=int(below), layout=layout, data=data)
    fig.update_layout(meta=dict(meta, relpos=relpos))
    return fig


def figure_mimebundle(fig) -> dict:
    """The mime bundle for a plotly figure (a ``go.Figure`` or its dict)."""
    fig_dict = fig if isinstance(fig, dict) else fig.to_dict()
    plain = {"data": fig_dict.get("data", []), "layout": fig_dict.get("layout", {})}
    if fig_dict.get("frames"):
        plain["frames"] = fig_dict["frames"]
    _, pio = plotly_modules()
    return {
        "text/html": figure_html(plain),
        "text/plain": f"<plotly figure: {_title_text(fig_dict)}>",
    }


def _title_text(fig_dict: dict) -> str:
    title = (fig_dict.get("layout") or {}).get("title") or {}
    return title.get("text", "") if isinstance(title, dict) else str(title)
