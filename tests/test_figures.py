import subprocess
import sys

import pytest
import torch

import relpos_core as rp


def test_heatmap_labels_and_values():
    fig = rp.figures.heatmap(rp.relative_offsets(4), title="j - i")
    (trace,) = fig.data
    assert trace.type == "heatmap"
    assert trace.z[0][3] == 3 and trace.z[3][0] == -3
    assert fig.layout.xaxis.title.text == "key j" and fig.layout.yaxis.title.text == "query i"
    assert fig.layout.yaxis.autorange == "reversed"  # query 0 on top
    assert trace.texttemplate == "%{z:d}"  # small matrix: values written in the cells


def test_heatmap_side_by_side_shares_the_colour_scale():
    a, b = rp.relative_offsets(5), 2 * rp.relative_offsets(5)
    fig = rp.figures.heatmap([a, b], titles=["a", "b"])
    assert len(fig.data) == 2
    assert fig.data[0].zmin == fig.data[1].zmin == -8 and fig.data[0].zmax == fig.data[1].zmax == 8


def test_heatmap_large_matrix_has_no_cell_text():
    fig = rp.figures.heatmap(torch.randn(40, 40))
    assert fig.data[0].texttemplate is None


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda: rp.figures.heatmap(torch.zeros(3)), "matrix"),
        (lambda: rp.figures.heatmap([torch.zeros(2, 2)], titles=["a", "b"]), "titles"),
        (lambda: rp.figures.heatmap(torch.zeros(2, 2), x_ticks=[1]), "x_ticks"),
        (lambda: rp.figures.heatmap(torch.zeros(2, 2), annotate_max=-1), "annotate_max"),
        (lambda: rp.figures.slider(lambda L: None, [], name="L"), "values"),
        (lambda: rp.figures.slider(lambda L: None, [1, 1], name="L"), "values"),
        (lambda: rp.figures.slider(None, [1], name="L"), "make_figure"),
        (lambda: rp.figures.slider(lambda L: rp.figures.heatmap(torch.eye(L)), [1, 2], name="L", initial=3), "initial"),
        (lambda: rp.figures.slider(lambda L: "not a figure", [1, 2], name="L"), "make_figure"),
    ],
)
def test_bad_figure_arguments(call, param):
    with pytest.raises(ValueError, match=param):
        call()


def offsets_figure(L):
    return rp.figures.heatmap(rp.relative_offsets(L))


def test_static_slider_has_a_frame_per_value_with_different_data():
    values = [3, 4, 6]
    fig = rp.figures.slider(offsets_figure, values, name="L").static_figure()
    assert [f.name for f in fig.frames] == ["3", "4", "6"]
    assert [len(f.data[0].z) for f in fig.frames] == values
    (control,) = fig.layout.sliders
    assert [s.label for s in control.steps] == ["3", "4", "6"]
    assert all(s.method == "animate" and list(s.args[0]) == [s.label] for s in control.steps)
    assert control.currentvalue.prefix == "L = "


def test_static_slider_keeps_one_height_in_every_frame():
    fig = rp.figures.slider(offsets_figure, [3, 12], name="L").static_figure()
    heights = {f.layout.height for f in fig.frames}
    assert heights == {fig.layout.height}  # moving the slider never resizes the figure
    assert fig.layout.height == offsets_figure(12).layout.height + 80  # the tallest, plus the slider


def test_static_slider_rejects_changing_trace_counts():
    def make(n):
        return rp.figures.heatmap([torch.eye(2)] * n)

    with pytest.raises(ValueError, match="same number of traces"):
        rp.figures.slider(make, [1, 2], name="n").static_figure()


def test_live_slider_recomputes_on_move():
    calls = []

    def make(L):
        calls.append(L)
        return offsets_figure(L)

    fig = rp.figures.slider(make, [3, 5], name="L")
    control = fig.widget.children[0]
    assert calls == [3] and control.description == "L"
    control.value = 5
    assert calls == [3, 5]  # moved: make_figure ran again for the new value
    assert fig.value == 5 and len(fig.current_figure.data[0].z) == 5


def test_one_bundle_for_live_and_static():
    bundle = rp.figures.slider(offsets_figure, [3, 4], name="L")._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # Jupyter, Colab
    html = bundle["text/html"]  # the static book
    assert "Plotly.newPlot" in html and "Plotly.addFrames" in html
    assert "window.Plotly" in html  # uses the book's single plotly.js when present
    assert "plotly.min.js\"" not in html.split("window.Plotly")[0]  # plotly.js is never inlined
    assert len(html) < 100_000


def test_plain_figures_render_through_the_book_renderer():
    import plotly.io as pio

    fig = offsets_figure(3)
    bundle = pio.renderers["relpos"].to_mimebundle(fig.to_dict())
    assert set(bundle) == {"text/html", "text/plain"}  # nothing myst-nb would drop with a warning
    assert pio.renderers.default == "relpos"


def test_library_imports_with_only_torch_numpy_matplotlib():
    code = (
        "import sys\n"
        "for name in ('plotly', 'ipywidgets', 'IPython', 'tqdm', 'transformers'):\n"
        "    sys.modules[name] = None  # make the import fail, as on a bare GPU machine\n"
        "import relpos_core as rp\n"
        "import relpos_core.bench  # the benchmark too: tqdm is optional\n"
        "assert rp.kernels.flex and rp.measure.analytic_bytes\n"
        "assert rp.relative_offsets(3).shape == (3, 3)\n"
        "try:\n"
        "    rp.figures.heatmap(rp.relative_offsets(3))\n"
        "except ImportError as err:\n"
        "    assert 'plotly' in str(err)\n"
        "else:\n"
        "    raise AssertionError('heatmap without plotly must raise ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_line_chart():
    fig = rp.figures.line([1, 2, 4], {"a": [1, 2, 3], "b": torch.tensor([3, 2, 1])}, x_label="L", y_label="bytes", log_x=True)
    assert [t.name for t in fig.data] == ["a", "b"] and list(fig.data[1].y) == [3, 2, 1]
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis.title.text == "L"
    with pytest.raises(ValueError, match="series"):
        rp.figures.line([1, 2], {"a": [1]}, x_label="L", y_label="y")


def test_line_styles_per_series_and_exact_log_ticks():
    fig = rp.figures.line(
        [128, 256, 512], {"a": [1, 2, 4], "b": [2, 4, 8]}, x_label="L", y_label="MiB", log_x=True,
        styles={"b": dict(mode="markers", marker=dict(symbol="circle-open"))},
    )
    assert fig.data[0].mode == "lines+markers" and fig.data[1].mode == "markers"
    assert fig.data[1].marker.symbol == "circle-open"
    assert list(fig.layout.xaxis.tickvals) == [128, 256, 512]
    with pytest.raises(ValueError, match="styles"):
        rp.figures.line([1], {"a": [1]}, x_label="x", y_label="y", styles={"c": {}})
