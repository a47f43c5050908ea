"""One call that turns "a figure as a function of a parameter" into a slider.

``slider(make_figure, values, name="L")`` returns a :class:`SliderFigure` that shows

* in a live kernel (Jupyter, Colab): an ipywidgets slider; moving it calls
  ``make_figure(value)`` again and redraws (nothing is precomputed for the kernel);
* in the static HTML book: a plotly figure with a slider over ``make_figure(v)`` for
  every ``v`` in ``values``, precomputed when the cell ran (plotly frames).

Both live in one output bundle, and each front end picks the representation it can
draw: JupyterLab prefers the widget view (tests/live moves these sliders in a running
JupyterLab); the book's ``_config.yml`` drops the widget view for HTML
(``nb_mime_priority_overrides``), so the page gets the plotly slider. The same cell does
the right thing in both places. Works with ipywidgets 7.7 (what Colab ships) and 8.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from ._plotly import LEGEND_NARROW_BELOW, attach_narrow, figure_mimebundle, plotly_modules

__all__ = ["slider", "SliderFigure", "value_label"]

#: the height the slider control adds below the plot (px)
SLIDER_PX = 80
#: a slider figure's legend on a phone when its wide layout puts it under the plot: above the
#: plot, as rp.figures.line draws it, with room below for the x axis only
NARROW_LEGEND = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)
NARROW_ROOM_BELOW = 60



def value_label(value) -> str:
    """How a slider writes ``value``: round large numbers short (10000 -> "10k",
    500000.0 -> "500k", 1000000 -> "1M", 1500000 -> "1.5M"), other numbers without a
    trailing ".0" (131072.0 -> "131072", 0.5 -> "0.5"), anything else as ``str``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        n = int(value)
        for unit, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
            if abs(n) >= 10 * unit if unit == 10**3 else abs(n) >= unit:
                if n % (unit // 10) == 0:  # at most one decimal: exact
                    return f"{n / unit:g}{suffix}"
                break
        return str(n)
    return f"{value:g}"


_FRAME_KEYS = ("title", "annotations", "meta", "shapes", "legend")


def _numbers(data) -> list[float] | None:
    """``data`` as floats (None and non-finite entries dropped), or None when it is not
    numeric (category labels: plotly places those itself)."""
    out = []
    for x in data:
        if x is None:
            continue
        try:
            x = float(x)
        except (TypeError, ValueError):
            return None
        if math.isfinite(x):
            out.append(x)
    return out


def _bar_extent(fig, traces, letter: str) -> list[float]:
    """What bars put on their value axis: 0, and each bar's end, stacked when the layout
    stacks them (the sum of the positive and of the negative parts per category)."""
    stacked = fig.layout.barmode in ("stack", "relative")
    ends, up, down = [0.0], {}, {}
    for trace in traces:
        other = "x" if letter == "y" else "y"
        values = list(trace[letter] or [])
        places = list(trace[other]) if trace[other] is not None else list(range(len(values)))
        for place, v in zip(places, values):
            v = _numbers([v])
            if not v:
                continue
            if not stacked:
                ends.append(v[0])
                continue
            side = up if v[0] >= 0 else down
            side[place] = side.get(place, 0.0) + v[0]
    return ends + list(up.values()) + list(down.values())


def _axis_range(fig, axis_name: str, axis) -> list | None:
    """The range an automatic axis would show for ``fig``'s data, made explicit; None for
    an axis plotly must place itself (categories, nothing numeric on it)."""
    letter = axis_name[0]
    ref = letter + axis_name[5:]  # "xaxis2" -> "x2"
    values, bar_traces = [], []
    for trace in fig.data:
        if (getattr(trace, f"{letter}axis", None) or letter) != ref:
            continue
        if trace.type == "heatmap":
            data = trace[letter] if trace[letter] is not None else None
            if data is None:
                n = len(trace.z) if letter == "y" else len(trace.z[0])
                data = list(range(n))
            numbers = _numbers(data)
            if numbers is None:
                return None
            values += [min(numbers) - 0.5, max(numbers) + 0.5] if numbers else []
            continue
        if trace.type == "bar" and (trace.orientation == "h") == (letter == "x"):
            bar_traces.append(trace)  # this is the bars' value axis
            continue
        if trace[letter] is None:
            continue
        numbers = _numbers(trace[letter])
        if numbers is None:
            return None
        values += numbers
    if bar_traces:
        values += _bar_extent(fig, bar_traces, letter)
    if not values:
        return None
    lo, hi = min(values), max(values)
    if axis.type == "log":
        positive = [x for x in values if x > 0]
        if not positive:
            return None
        lo, hi = math.log10(min(positive)), math.log10(max(positive))
    pad = 0.05 * (hi - lo) if hi > lo else 0.5
    bounds = [lo - pad, hi + pad]
    return bounds[::-1] if axis.autorange == "reversed" else bounds


def frame_layout(fig) -> dict:
    """The parts of ``fig``'s layout that differ between slider frames, made explicit."""
    layout = {key: fig.layout[key] for key in _FRAME_KEYS if fig.layout[key] is not None}
    for key in fig.layout:
        if not key.startswith(("xaxis", "yaxis")):
            continue
        axis = fig.layout[key]
        spec = axis.to_plotly_json()
        if axis.range is None:
            computed = _axis_range(fig, key, axis)
            if computed is not None:
                spec["range"] = computed
                spec["autorange"] = False
        layout[key] = spec
    return layout


def _legend_below(layout: dict) -> bool:
    """Whether a layout (plain JSON) puts its legend under the plot, where the slider goes."""
    legend = layout.get("legend") or {}
    return layout.get("showlegend") is not False and (legend.get("y") or 0) < 0


def _legend_above_on_a_phone(fig):
    """``fig``, with a narrow layout whose legend sits above the plot when its own legend is
    under it: on a phone the legend wraps onto rows the bottom margin did not plan for and
    would run into the slider (``_narrow_figure`` moves it where a narrow layout exists)."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    if (meta.get("relpos") or {}).get("narrow") or not _legend_below(fig.layout.to_plotly_json()):
        return fig
    go, _ = plotly_modules()
    narrow = go.Figure(fig)
    narrow.update_layout(legend=NARROW_LEGEND, margin=dict(b=NARROW_ROOM_BELOW))
    return attach_narrow(fig, narrow, below=LEGEND_NARROW_BELOW)


def _narrow_figure(fig):
    """``fig`` in its narrow layout (``layout.meta.relpos.narrow``), or None if it has none."""
    go, _ = plotly_modules()
    meta = (fig.layout.meta or {}).get("relpos") if isinstance(fig.layout.meta, dict) else None
    patch = (meta or {}).get("narrow")
    if not patch:
        return None
    layout = fig.layout.to_plotly_json()
    layout.update(patch["layout"])
    if _legend_below(layout):
        layout["legend"] = {**layout["legend"], **NARROW_LEGEND}
        layout["margin"] = {**(layout.get("margin") or {}), "b": NARROW_ROOM_BELOW}
    data = []
    for trace, change in zip(fig.data, patch.get("data") or [{}] * len(fig.data)):
        trace = trace.to_plotly_json()
        trace.update({k: v for k, v in (change or {}).items()})
        data.append(trace)
    return go.Figure(data=data, layout=layout)


def _hide_missing_notes(layout: dict, count: int) -> dict:
    """``layout`` with its annotations padded to ``count`` by invisible ones: a slider step with fewer
    annotations than another must hide the other's extra ones (Plotly animates annotations by index and
    leaves the rest drawn: the skew's "drop" titles stayed on the first step)."""
    notes = [a.to_plotly_json() if hasattr(a, "to_plotly_json") else dict(a) for a in layout.get("annotations") or ()]
    if len(notes) >= count:
        return layout
    hidden = dict(text="", visible=False, showarrow=False, x=0, y=0, xref="paper", yref="paper")
    return {**layout, "annotations": notes + [dict(hidden) for _ in range(count - len(notes))]}


def _with_narrow(fig, narrow, height: int, notes: int = 0) -> dict:
    """``fig``'s meta with its narrow layout made a frame layout like the wide one: explicit
    ranges, one height for every frame (the slider's room included) and room below."""
    meta = dict(fig.layout.meta)
    relpos = dict(meta["relpos"])
    layout = _hide_missing_notes(frame_layout(narrow), notes)
    layout["meta"] = {"relpos": {k: v for k, v in ((layout.get("meta") or {}).get("relpos") or {}).items()
                                 if k != "narrow"}}  # the narrow layout's own tick and text plan
    margin = narrow.layout.margin.to_plotly_json() if narrow.layout.margin else {}
    layout["margin"] = {**margin, "b": max(margin.get("b") or 0, 30) + SLIDER_PX}
    layout["height"] = height
    own_plot = (narrow.layout.height or 450) - (margin.get("t") or 0) - (margin.get("b") or 0)
    plot = height - (margin.get("t") or 0) - layout["margin"]["b"]
    data = [_below_plot_kept(change, own_plot, plot) for change in relpos["narrow"].get("data") or []]
    relpos["narrow"] = dict(relpos["narrow"], layout=_plain(layout), **({"data": data} if data else {}))
    meta["relpos"] = relpos
    return meta


def _below_plot_kept(change, own_plot: float, plot: float):
    """A narrow trace change whose colour bar sits below the plot (paper y < 0, so many px under
    it in the frame's own plot height) at the same px once the frame takes the slider's shared
    height: a short frame's bar otherwise lands on the slider."""
    bar = (change or {}).get("colorbar") or {}
    y = bar.get("y")
    if not isinstance(y, (int, float)) or y >= 0 or own_plot <= 0 or plot <= 0 or bar.get("yref") == "container":
        return change
    return {**change, "colorbar": {**bar, "y": y * own_plot / plot}}


def _plain(layout: dict) -> dict:
    """A layout dict with plotly objects turned into plain JSON values."""
    return {k: (v.to_plotly_json() if hasattr(v, "to_plotly_json") else
                [x.to_plotly_json() if hasattr(x, "to_plotly_json") else x for x in v] if isinstance(v, (list, tuple))
                else v) for k, v in layout.items()}


class SliderFigure:
    """A figure with a parameter slider; see :func:`slider`."""

    def __init__(self, make_figure: Callable, values: Sequence, *, name: str, initial=None):
        if not callable(make_figure):
            raise ValueError(f"make_figure must be callable (value -> plotly figure), got {type(make_figure).__name__}")
        values = list(values)
        if not values:
            raise ValueError("values must hold at least one parameter value, got an empty sequence")
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"values must be distinct, got {values}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string (the parameter's label), got {name!r}")
        initial = values[0] if initial is None else initial
        if initial not in values:
            raise ValueError(f"initial must be one of values {values}, got {initial!r}")
        self.make_figure = make_figure
        self.values = values
        self.name = name
        self.value = initial
        self.current_figure = self._figure(initial)
        self._widget = None

    def _figure(self, value):
        go, _ = plotly_modules()
        fig = self.make_figure(value)
        if not isinstance(fig, go.Figure):
            raise ValueError(f"make_figure({value!r}) must return a plotly go.Figure, got {type(fig).__name__}")
        return _legend_above_on_a_phone(fig)

    # -- live kernel ---------------------------------------------------------------
    @property
    def widget(self):
        """The ipywidgets form: a slider over ``values`` above an output that redraws."""
        if self._widget is None:
            import ipywidgets as widgets
            from IPython.display import display

            control = widgets.SelectionSlider(
                options=[(value_label(v), v) for v in self.values],
                value=self.value,
                description=self.name,
                continuous_update=False,
                layout=widgets.Layout(width="60%"),
            )
            output = widgets.Output()

            def redraw(change):
                # inside the output: an error while recomputing shows there as a traceback
                # (a widget callback's exception would otherwise only reach the kernel's log)
                with output:
                    output.clear_output(wait=True)
                    self.value = change["new"]
                    self.current_figure = self._figure(self.value)  # recomputed, not looked up
                    display(self.current_figure)

            control.observe(redraw, names="value")
            with output:
                display(self.current_figure)
            self._widget = widgets.VBox([control, output])
        return self._widget

    # -- static HTML -----------------------------------------------------------------
    def static_figure(self):
        """A plotly figure with one frame per value and a slider that switches frames.

        Every frame carries its whole layout: explicit axis ranges (computed from its own
        data where ``make_figure`` left them automatic), tick sets, subplot titles, the
        colour bar and the tick/cell-text plan in ``layout.meta``. All frames share one
        height, the tallest, so moving the slider never resizes the figure or crops a
        frame that is larger than the first one.
        """
        go, _ = plotly_modules()
        figures = {
            repr(v): (self.current_figure if v == self.value else self._figure(v))
            for v in self.values
        }
        n_traces = len(figures[repr(self.value)].data)
        for v in self.values:
            if len(figures[repr(v)].data) != n_traces:
                raise ValueError(
                    f"make_figure must return the same number of traces for every value: "
                    f"{n_traces} for {self.value!r} but {len(figures[repr(v)].data)} for {v!r}"
                )
        height = max((fig.layout.height or 450) for fig in figures.values()) + SLIDER_PX
        narrow = {repr(v): _narrow_figure(figures[repr(v)]) for v in self.values}
        narrow_height = max((n.layout.height or 450 for n in narrow.values() if n is not None),
                            default=None)
        frames = []
        # a step with fewer annotations than another must hide the other's extra ones: Plotly
        # animates annotations by index and leaves the rest drawn (the skew's "drop" titles stayed)
        most_notes = max([len(f.layout.annotations or ()) for f in figures.values()]
                         + [len(n.layout.annotations or ()) for n in narrow.values() if n is not None])
        for v in self.values:
            fig = figures[repr(v)]
            layout = _hide_missing_notes(frame_layout(fig), most_notes)
            layout["height"] = height
            if narrow[repr(v)] is not None:
                layout["meta"] = _with_narrow(fig, narrow[repr(v)], narrow_height + SLIDER_PX, most_notes)
            frames.append(go.Frame(name=str(v), data=list(fig.data), layout=layout))
        base = go.Figure(figures[repr(self.value)])
        base.update_layout(frames[self.values.index(self.value)].layout.to_plotly_json())
        base.frames = frames
        steps = [
            dict(
                label=value_label(v),
                method="animate",
                args=[
                    [str(v)],
                    dict(
                        mode="immediate",
                        frame=dict(duration=0, redraw=True),
                        transition=dict(duration=0),
                    ),
                ],
            )
            for v in self.values
        ]
        margin = base.layout.margin.to_plotly_json() if base.layout.margin else {}
        below = max(margin.get("b") or 0, 30)  # the figure's own room below its plot

        def control(room_below):  # the slider, under what the figure draws below its plot
            return dict(active=self.values.index(self.value), currentvalue=dict(prefix=f"{self.name} = "),
                        pad=dict(t=room_below + 10), steps=steps)

        base.update_layout(sliders=[control(below)], margin={**margin, "b": below + SLIDER_PX},
                           height=height)
        narrow_base = narrow[repr(self.value)]
        if narrow_base is not None:  # the narrow layout places the slider under its own room
            narrow_margin = narrow_base.layout.margin.to_plotly_json() if narrow_base.layout.margin else {}
            meta = base.layout.meta.to_plotly_json() if hasattr(base.layout.meta, "to_plotly_json") else dict(base.layout.meta)
            relpos = dict(meta["relpos"])
            layout = dict(relpos["narrow"]["layout"])
            layout["sliders"] = [control(max(narrow_margin.get("b") or 0, 30))]
            relpos["narrow"] = dict(relpos["narrow"], layout=layout)
            base.update_layout(meta=dict(meta, relpos=relpos))
        return base

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = figure_mimebundle(self.static_figure())
        try:
            widget = self.widget
        except ImportError:  # no ipywidgets: the static slider still works
            widget = None
        if widget is not None and getattr(widget, "comm", None) is not None:
            # the widget view, written out: ipywidgets 7 (Colab's) has no _repr_mimebundle_,
            # and 8's gives the same three keys
            bundle["application/vnd.jupyter.widget-view+json"] = {
                "version_major": 2, "version_minor": 0, "model_id": widget.model_id}
        bundle["text/plain"] = f"<slider over {self.name} = {self.values}>"
        return bundle


def slider(make_figure: Callable, values: Sequence, *, name: str, initial=None) -> SliderFigure:
    """A figure as a function of one parameter, as a slider that works live and static.

    ``make_figure(value)`` must return a plotly ``go.Figure`` with the same number of
    traces for every value. Example::

        rp.figures.slider(lambda L: rp.figures.heatmap(rp.relative_offsets(L)), [4, 8, 12], name="L")
    """
    return SliderFigure(make_figure, values, name=name, initial=initial)
