"""One call that turns "a figure as a function of a parameter" into a slider.

``slider(make_figure, values, name="L")`` returns a :class:`SliderFigure` that shows

* in a live kernel (Jupyter, Colab): an ipywidgets slider; moving it calls
  ``make_figure(value)`` again and redraws (nothing is precomputed for the kernel);
* in the static HTML book: a plotly figure with a slider over ``make_figure(v)`` for
  every ``v`` in ``values``, precomputed when the cell ran (plotly frames).

Both live in one output bundle, and each front end picks the representation it can
draw: Jupyter and Colab prefer the widget view; the book's ``_config.yml`` drops the
widget view for HTML (``nb_mime_priority_overrides``), so the page gets the plotly
slider. The same cell does the right thing in both places.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ._plotly import figure_mimebundle, plotly_modules

__all__ = ["slider", "SliderFigure"]


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
        return fig

    # -- live kernel ---------------------------------------------------------------
    @property
    def widget(self):
        """The ipywidgets form: a slider over ``values`` above an output that redraws."""
        if self._widget is None:
            import ipywidgets as widgets
            from IPython.display import display

            control = widgets.SelectionSlider(
                options=[(str(v), v) for v in self.values],
                value=self.value,
                description=self.name,
                continuous_update=False,
                layout=widgets.Layout(width="60%"),
            )
            output = widgets.Output()

            def redraw(change):
                self.value = change["new"]
                self.current_figure = self._figure(self.value)  # recomputed, not looked up
                with output:
                    output.clear_output(wait=True)
                    display(self.current_figure)

            control.observe(redraw, names="value")
            with output:
                display(self.current_figure)
            self._widget = widgets.VBox([control, output])
        return self._widget

    # -- static HTML -----------------------------------------------------------------
    def static_figure(self):
        """A plotly figure with one frame per value and a slider that switches frames."""
        go, _ = plotly_modules()
        figures = {repr(v): (self.current_figure if v == self.value else self._figure(v)) for v in self.values}
        base = go.Figure(figures[repr(self.value)])
        n_traces = len(base.data)
        # one height for the figure and every frame (the tallest, plus the slider), so
        # moving the slider never resizes the figure or pushes the plot into the slider
        height = max((fig.layout.height or 450) for fig in figures.values()) + 80
        frames = []
        for v in self.values:
            fig = figures[repr(v)]
            if len(fig.data) != n_traces:
                raise ValueError(
                    f"make_figure must return the same number of traces for every value: "
                    f"{n_traces} for {self.value!r} but {len(fig.data)} for {v!r}"
                )
            layout = {key: fig.layout[key] for key in ("title", "annotations") if fig.layout[key] is not None}
            layout["height"] = height
            for key in fig.layout:
                if key.startswith(("xaxis", "yaxis")):
                    layout[key] = fig.layout[key]
            frames.append(go.Frame(name=str(v), data=list(fig.data), layout=layout))
        base.frames = frames
        steps = [
            dict(
                label=str(v),
                method="animate",
                args=[[str(v)], dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))],
            )
            for v in self.values
        ]
        base.update_layout(
            sliders=[
                dict(
                    active=self.values.index(self.value),
                    currentvalue=dict(prefix=f"{self.name} = "),
                    pad=dict(t=40),
                    steps=steps,
                )
            ],
            margin=dict(b=110),
            height=height,
        )
        return base

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = figure_mimebundle(self.static_figure())
        try:
            widget_bundle = self.widget._repr_mimebundle_()
        except ImportError:  # no ipywidgets: the static slider still works
            widget_bundle = None
        if widget_bundle:
            bundle["application/vnd.jupyter.widget-view+json"] = widget_bundle["application/vnd.jupyter.widget-view+json"]
        bundle["text/plain"] = f"<slider over {self.name} = {self.values}>"
        return bundle


def slider(make_figure: Callable, values: Sequence, *, name: str, initial=None) -> SliderFigure:
    """A figure as a function of one parameter, as a slider that works live and static.

    ``make_figure(value)`` must return a plotly ``go.Figure`` with the same number of
    traces for every value. Example::

        rp.figures.slider(lambda L: rp.figures.heatmap(rp.relative_offsets(L)), [4, 8, 12], name="L")
    """
    return SliderFigure(make_figure, values, name=name, initial=initial)
