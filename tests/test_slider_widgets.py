"""The live form of rp.figures.slider with the ipywidgets Colab ships (7.7) and with 8."""
from __future__ import annotations

import pytest

import relpos_core as rp

ipywidgets = pytest.importorskip("ipywidgets")
go = pytest.importorskip("plotly.graph_objects")


def _slider():
    calls = []

    def make(v):
        calls.append(v)
        return go.Figure(go.Heatmap(z=[[v, 0], [0, v]]))

    return rp.figures.slider(make, [1, 2, 3], name="k"), calls


def test_widget_view_in_the_bundle_without_widget_repr_mimebundle(monkeypatch):
    """ipywidgets 7.7 (Colab's) has no Widget._repr_mimebundle_: the bundle must not need it."""
    monkeypatch.delattr(ipywidgets.Widget, "_repr_mimebundle_", raising=False)
    slider, _ = _slider()
    bundle = slider._repr_mimebundle_()
    view = bundle["application/vnd.jupyter.widget-view+json"]
    assert view == {"version_major": 2, "version_minor": 0, "model_id": slider.widget.model_id}
    assert "text/html" in bundle  # the static slider, for the book and any front end without widgets


def test_moving_the_control_recomputes_the_figure():
    slider, calls = _slider()
    control = slider.widget.children[0]
    control.value = 3
    assert calls[-1] == 3 and slider.value == 3 and slider.current_figure.data[0].z[0][0] == 3


def test_an_error_while_recomputing_is_shown_not_lost(monkeypatch):
    """A move whose figure function raises shows the traceback in the slider's output."""
    shown = []
    slider, _ = _slider()
    output = slider.widget.children[1]
    monkeypatch.setattr(type(output), "__exit__", lambda self, etype, value, tb: shown.append(etype) or True)
    slider.make_figure = lambda v: (_ for _ in ()).throw(RuntimeError("state changed"))
    slider.widget.children[0].value = 2
    assert RuntimeError in shown  # raised inside the output widget, which displays it
