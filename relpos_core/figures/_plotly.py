"""Plotly, loaded lazily, with the book's renderer.

Library code must import with only torch installed, so plotly is imported inside
functions through :func:`plotly_modules`. The first call registers the ``"relpos"``
renderer and makes it the default. It gives every figure one rich representation,
``text/html``: a div and a script that calls ``window.Plotly``. The built book ships
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
    return go, pio


def plotlyjs_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return get_plotlyjs_version()


def figure_html(fig_dict: dict, *, div_id: str | None = None) -> str:
    """A self-contained ``<div>`` + ``<script>`` that draws ``fig_dict`` (frames included).

    Uses ``window.Plotly`` when the page already has it (the built book), and loads
    plotly.js from the CDN otherwise.
    """
    _, pio = plotly_modules()
    div_id = div_id or f"relpos-{uuid.uuid4().hex[:12]}"
    spec = pio.to_json(fig_dict, validate=False).replace("</", "<\\/")
    height = (fig_dict.get("layout") or {}).get("height") or 450
    cdn = f"https://cdn.plot.ly/plotly-{plotlyjs_version()}.min.js"
    return f"""<div id="{div_id}" class="plotly-graph-div relpos-figure" style="height:{int(height)}px; width:100%;"></div>
<script type="text/javascript">
(function () {{
  var spec = {spec};
{FIT_JS}
  function draw() {{
    var config = Object.assign({{responsive: true, displaylogo: false}}, spec.config || {{}});
    Plotly.newPlot({json.dumps(div_id)}, spec.data, spec.layout, config).then(function (gd) {{
      gd.on("plotly_afterplot", function () {{ fit(gd); }});
      fit(gd);
      if (spec.frames && spec.frames.length) {{ return Plotly.addFrames(gd, spec.frames); }}
    }});
  }}
  if (window.Plotly) {{ draw(); }} else {{
    var s = document.createElement("script");
    s.src = {json.dumps(cdn)};
    s.onload = draw;
    document.head.appendChild(s);
  }}
}})();
</script>"""


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
      spec.text.split(" ").forEach(function (word) {
        if (line && (line + " " + word).length > perLine) { lines.push(line); line = word; }
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
