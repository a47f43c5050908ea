import subprocess
import sys

import numpy as np
import pytest
import torch

import relpos_core as rp
from relpos_core.figures.slider import SLIDER_PX


def test_heatmap_labels_and_values():
    fig = rp.figures.heatmap(rp.relative_offsets(4), title="j - i")
    (trace,) = fig.data
    assert trace.type == "heatmap"
    assert trace.z[0][3] == 3 and trace.z[3][0] == -3
    assert fig.layout.xaxis.title.text == "key j" and fig.layout.yaxis.title.text == "query i"
    assert fig.layout.yaxis.range[0] > fig.layout.yaxis.range[1]  # query 0 on top
    assert trace.texttemplate == "%{z:d}"  # small matrix: values written in the cells


def test_heatmap_writes_cell_text_instead_of_the_values():
    words = [["R", "N", "R"], ["N", "R", "N"]]
    fig = rp.figures.heatmap(torch.tensor([[1, 2, 3], [4, 5, 6]]), cell_text=words)
    (trace,) = fig.data
    assert [list(row) for row in trace.text] == words and trace.texttemplate == "%{text}"
    assert [t["template"] for t in fig.layout.meta["relpos"]["text"]] == ["%{text}"]  # kept when fitted
    assert trace.z[1][2] == 6  # the colour still shows the values
    with pytest.raises(ValueError, match=r"cell_text\[0\] must be 2 rows of 3 strings"):
        rp.figures.heatmap(torch.zeros(2, 3), cell_text=[["R", "N"], ["N", "R"]])
    with pytest.raises(ValueError, match="cell_text must have one entry per matrix"):
        rp.figures.heatmap([torch.zeros(2, 3)] * 2, cell_text=[words])


def test_heatmap_side_by_side_shares_the_colour_scale():
    a, b = rp.relative_offsets(5), 2 * rp.relative_offsets(5)
    fig = rp.figures.heatmap([a, b], titles=["a", "b"])
    assert len(fig.data) == 2
    assert fig.data[0].zmin == fig.data[1].zmin == -8 and fig.data[0].zmax == fig.data[1].zmax == 8


def test_heatmap_large_matrix_has_no_cell_text():
    fig = rp.figures.heatmap(torch.randn(40, 40))
    assert not fig.data[0].texttemplate
    assert fig.layout.meta["relpos"]["text"] == []  # not even where the page is wide


def test_colour_scale_follows_the_sign_of_the_data():
    signed = rp.figures.heatmap(rp.relative_offsets(5))
    both_signs = rp.figures.heatmap(torch.tensor([[-1.0, 2.0]]))
    one_sign = rp.figures.heatmap(torch.tensor([[-1.0, -2.0]]))  # e.g. an ALiBi bias
    assert signed.data[0].colorscale == both_signs.data[0].colorscale
    assert one_sign.data[0].colorscale != signed.data[0].colorscale
    index = rp.figures.heatmap(rp.relative_offsets(5).abs())  # non-negative: sequential
    assert signed.data[0].zmid == 0 and index.data[0].zmid is None
    assert signed.data[0].colorscale != index.data[0].colorscale
    explicit = rp.figures.heatmap(rp.relative_offsets(5), colorscale="Viridis")
    assert explicit.data[0].colorscale == index.data[0].colorscale


def test_colour_bar_title_and_hover_name_the_quantity():
    fig = rp.figures.heatmap(
        [rp.relative_offsets(4)] * 2, value_label="offset j − i", colorbar_title="j − i (tokens)"
    )
    assert [t.showscale for t in fig.data] == [False, True]  # one shared colour bar
    assert fig.data[1].colorbar.title.text == "j − i (tokens)"
    assert "offset j − i %{customdata[2]}" in fig.data[0].hovertemplate
    assert "value" not in fig.data[0].hovertemplate
    plain = rp.figures.heatmap(rp.relative_offsets(4), value_label="bucket")
    assert plain.data[0].colorbar.title.text == "bucket"  # defaults to the quantity
    with pytest.raises(ValueError, match="value_label"):
        rp.figures.heatmap(rp.relative_offsets(4), value_label="")


def test_side_by_side_panels_label_their_rows_once():
    fig = rp.figures.heatmap([torch.randn(6, 6)] * 3, annotate_max=0)  # no numbers: one row
    assert fig.layout.yaxis.showticklabels is not False
    assert fig.layout.yaxis2.showticklabels is False and fig.layout.yaxis3.showticklabels is False
    assert set(fig.layout.meta["relpos"]["axes"]) == {"xaxis", "yaxis", "xaxis2", "xaxis3"}
    taller = rp.figures.heatmap([torch.randn(4, 6), torch.randn(6, 6)], annotate_max=0)  # rows differ
    assert taller.layout.yaxis2.showticklabels is not False


def label_gap_px(fig, axis):
    """Pixels between two tick labels of ``axis`` at the nominal width."""
    meta = fig.layout.meta["relpos"]["axes"][axis]
    ax = fig.layout[axis]
    vals = list(ax.tickvals)
    n = len(meta["labels"])
    domain = ax.domain[1] - ax.domain[0]
    length = (rp.figures._fit.NOMINAL_WIDTH - 60 - 90) * domain if axis.startswith("x") else None
    return (vals[1] - vals[0]) * length / n if len(vals) > 1 else float("inf"), meta["need"]


@pytest.mark.parametrize("panels, L", [(1, 8), (1, 48), (4, 48), (3, 16), (1, 32)])
def test_ticks_every_power_of_two_cells_and_never_crowded(panels, L):
    fig = rp.figures.heatmap([torch.randn(L, L)] * panels)
    for col in range(1, panels + 1):
        axis = "xaxis" if col == 1 else f"xaxis{col}"
        vals = list(fig.layout[axis].tickvals)
        step = vals[1] - vals[0] if len(vals) > 1 else 1
        assert step in (1, 2, 4, 8, 16, 32) and vals == list(range(0, L, step))
        assert list(fig.layout[axis].ticktext) == [str(v) for v in vals]
        gap, need = label_gap_px(fig, axis)
        assert gap >= need, f"labels {gap:.0f} px apart, each needs {need:.0f} px"
    if panels == 1 and L == 8:
        assert list(fig.layout.xaxis.tickvals) == list(range(8))  # room for every label


def test_custom_tick_labels_are_thinned_and_shown_on_hover():
    labels = [f"h{h}: m = {2 ** -(h + 1):.3g}" for h in range(16)]
    fig = rp.figures.heatmap(torch.randn(16, 40), y_ticks=labels, x_ticks=list(range(40)))
    assert list(fig.layout.yaxis.ticktext) == [labels[v] for v in fig.layout.yaxis.tickvals]
    assert list(fig.data[0].customdata[3][5])[:2] == ["5", labels[3]]  # hover shows the labels
    assert "%{customdata[1]}" in fig.data[0].hovertemplate


def test_cell_text_only_where_legible():
    small = rp.figures.heatmap(rp.relative_offsets(6))
    assert small.data[0].texttemplate == "%{z:d}"
    crowded = rp.figures.heatmap([torch.randn(12, 12)] * 4)  # 4 panels, 2-decimal values
    assert all(not t.texttemplate for t in crowded.data)
    spec = crowded.layout.meta["relpos"]["text"]
    assert [s["trace"] for s in spec] == [0, 1, 2, 3]  # the browser may switch them on
    assert all(s["template"] == "%{z:.2f}" for s in spec)


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


def visible(frame_or_fig, trace):
    """(rows, cols) of a heatmap trace and the [lo, hi] ranges of its axes."""
    layout = frame_or_fig.layout
    suffix = (trace.xaxis or "x")[1:]
    return layout[f"xaxis{suffix}"].range, layout[f"yaxis{suffix}"].range


@pytest.mark.parametrize("values", [[4, 8, 16], [16, 8, 4]])
def test_static_slider_frames_show_all_their_data_at_one_size(values):
    fig = rp.figures.slider(
        lambda L: rp.figures.heatmap([rp.relative_offsets(L)] * 2, titles=[f"L = {L}", "b"]),
        values, name="L",
    ).static_figure()
    heights = {f.layout.height for f in fig.frames} | {fig.layout.height}
    assert len(heights) == 1  # the figure never changes size
    tallest = rp.figures.heatmap([rp.relative_offsets(16)] * 2, titles=["L = 16", "b"])
    assert fig.layout.height >= tallest.layout.height
    for frame in fig.frames:
        L = int(frame.name)
        for trace in frame.data:
            (x_lo, x_hi), (y_hi, y_lo) = visible(frame, trace)  # y is reversed
            assert (x_lo, x_hi) == (-0.5, L - 0.5) and (y_lo, y_hi) == (-0.5, L - 0.5)
            assert len(trace.z) == L and max(trace.x) == L - 1
        assert [a.text for a in frame.layout.annotations] == [f"L = {L}", "b"]
        assert len(frame.layout.meta["relpos"]["axes"]["xaxis"]["labels"]) == L
        assert frame.layout.xaxis.tickvals[-1] <= L - 1


def test_static_slider_line_frames_get_explicit_ranges():
    def make(scale):
        return rp.figures.line([1, 2, 3], {"a": [0, scale, 2 * scale]}, x_label="x", y_label="y")

    fig = rp.figures.slider(make, [1, 10], name="scale").static_figure()
    for frame, top in zip(fig.frames, (2, 20)):
        lo, hi = frame.layout.yaxis.range
        assert lo < 0 and top < hi < 1.2 * top  # every point inside, little waste
        assert frame.layout.yaxis.autorange is False


def test_static_slider_bar_frames_cover_the_stacked_bars_and_leave_categories_alone():
    go = pytest.importorskip("plotly.graph_objects")

    def make(scale):
        parts = [go.Bar(x=["absolute", "rope"], y=[scale, 2 * scale], name=n) for n in ("keys", "values")]
        return go.Figure(parts).update_layout(barmode="stack")

    fig = rp.figures.slider(make, [1, 10], name="scale").static_figure()
    for frame, top in zip(fig.frames, (4, 40)):  # the stack of both parts, from 0
        lo, hi = frame.layout.yaxis.range
        assert lo <= 0 and top < hi < 1.2 * top
        assert frame.layout.xaxis.range is None  # category labels: plotly places them


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


@pytest.mark.slow
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


def test_line_legend_does_not_squeeze_the_plot():
    fig = rp.figures.line([1, 2], {"a long series name": [1, 2], "another": [2, 1]},
                          x_label="L", y_label="MiB")
    assert fig.layout.legend.orientation == "h" and fig.layout.legend.xanchor == "left"
    assert fig.layout.legend.y > 1  # above the plot, not beside it
    assert "MiB %{y:.4~g}" in fig.data[0].hovertemplate  # rounded


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


def test_numbered_table_for_the_book_and_for_jupyter():
    md = "| a | b |\n|---|---|\n| 1 | x < y |\n| 2 | z |"
    tbl = rp.figures.table(md, name="tbl-test-demo", caption="Two rows.")
    bundle = tbl._repr_mimebundle_()
    assert bundle["text/markdown"].startswith(":::{table} Two rows.\n:name: tbl-test-demo\n")
    assert bundle["text/markdown"].rstrip().endswith(":::") and md in bundle["text/markdown"]
    html = bundle["text/html"]
    assert "<caption>Two rows.</caption>" in html and html.count("<tr>") == 3
    assert "x &lt; y" in html  # escaped


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(markdown="not a table", name="tbl-a", caption="c"), "markdown"),
        (dict(markdown="| a |\n| b |", name="tbl-a", caption="c"), "separator"),
        (dict(markdown="| a | b |\n|---|---|\n| 1 |", name="tbl-a", caption="c"), "columns"),
        (dict(markdown="| a |\n|---|", name="Table 1", caption="c"), "name"),
        (dict(markdown="| a |\n|---|", name="tbl-a", caption=""), "caption"),
    ],
)
def test_bad_table_arguments(kwargs, param):
    with pytest.raises(ValueError, match=param):
        rp.figures.table(kwargs.pop("markdown"), **kwargs)


def test_log_axes_label_a_few_ticks_in_full_whatever_their_span():
    short = rp.figures.line([1, 2, 4, 8, 16, 32, 64], {"a": [63, 33, 17, 9, 5, 3, 1.9]},
                            x_label="H", y_label="ratio", log_x=True, log_y=True)
    assert list(short.layout.yaxis.ticktext) == ["2", "5", "10", "20", "50"]  # not a bare "5" for 50
    wide = rp.figures.line(list(range(1, 20)), {"a": [10.0**k for k in range(-6, 13)]},
                           x_label="x", y_label="y", log_y=True)
    assert wide.layout.yaxis.dtick == 2 and wide.layout.yaxis.tickvals is None  # 18 decades


# -- one visual language (relpos_core.figures.style) ----------------------------------

def _linear(colour):
    rgb = np.array([int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)


def _contrast(a, b):
    lum = sorted((float(_linear(c) @ [0.2126, 0.7152, 0.0722]) for c in (a, b)), reverse=True)
    return (lum[0] + 0.05) / (lum[1] + 0.05)


# Machado, Oliveira and Fernandes (2009), severity 1: linear-RGB matrices that show a
# colour as a reader with protanopia, deuteranopia or tritanopia sees it
VISION = {
    "normal": np.eye(3),
    "protanopia": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                            [-0.003882, -0.048116, 1.051998]]),
    "deuteranopia": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                              [-0.011820, 0.042940, 0.968881]]),
    "tritanopia": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                            [0.004733, 0.691367, 0.303900]]),
}


def _lab(rgb):
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ np.clip(rgb, 0, 1) / [0.95047, 1.0, 1.08883]
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def _distance(a, b, vision):
    return float(np.linalg.norm(_lab(VISION[vision] @ _linear(a)) - _lab(VISION[vision] @ _linear(b))))


COMPARED = ["none", "absolute", "shaw", "t5", "transformer_xl", "deberta", "alibi", "rope"]
DARK_BACKGROUND = "#14181e"  # the book theme's dark mode


def test_every_registry_scheme_has_one_colour_and_a_readable_name():
    style = rp.figures.style
    for name in rp.registry.scheme_names():
        assert style.scheme_color(name).startswith("#") and len(style.scheme_color(name)) == 7
        assert style.scheme_label(name) and "_" not in style.scheme_label(name)
    assert style.scheme_label("rope") == "RoPE" and style.scheme_label("t5") == "T5 buckets"
    with pytest.raises(ValueError, match="registry name"):  # no spelling but the declared names
        style.scheme_color("txl")
    assert set(style.known_schemes()) == set(rp.schemes.names())  # the declarations, nothing else
    assert all(style.scheme_color(s) == rp.schemes.lookup(s).color for s in style.known_schemes())
    with pytest.raises(ValueError, match="name"):
        style.scheme_color("bogus")


@pytest.mark.parametrize("vision", list(VISION))
def test_the_compared_schemes_stay_apart_for_colour_blind_readers(vision):
    colours = {s: rp.figures.style.scheme_color(s) for s in COMPARED}
    least = 20 if vision == "normal" else 10  # CIE76 units
    close = [(a, b, round(_distance(colours[a], colours[b], vision)))
             for i, a in enumerate(COMPARED) for b in COMPARED[i + 1:]
             if _distance(colours[a], colours[b], vision) < least]
    assert not close, f"{vision}: scheme colours too close: {close}"


def test_scheme_colours_read_on_light_and_dark_pages():
    style = rp.figures.style
    for name in style.known_schemes():
        colour = style.scheme_color(name)
        assert _contrast(colour, "#ffffff") >= 2.0, (name, colour)
        assert _contrast(colour, DARK_BACKGROUND) >= 2.0, (name, colour)
    for colour in style.SERIES_COLORS:
        assert _contrast(colour, "#ffffff") >= 2.0 and _contrast(colour, DARK_BACKGROUND) >= 2.0


@pytest.mark.parametrize("raw, shown", [
    ("cos(m θ_k)", "cos(m θ<sub>k</sub>)"),
    ("cosine similarity of R_p and R_q", "cosine similarity of R<sub>p</sub> and R<sub>q</sub>"),
    ("content--content", "content–content"),
    (r"$\theta_{k} \cdot L^2$", "θ<sub>k</sub> · L<sup>2</sup>"),
    (r"\mathrm{bias}(i, j)", "bias(i, j)"),
    ("shaw_key", "shaw_key"),  # a registry name is not a subscript
    ("--workers", "--workers"),
])
def test_latex_and_markup_become_text_a_figure_can_show(raw, shown):
    assert rp.figures.style.readable(raw) == shown


def test_figures_write_labels_as_readable_text():
    fig = rp.figures.heatmap([torch.eye(2)] * 2, titles=["cos(m θ_k)", "a--b"], y_label="R_p")
    assert [a.text for a in fig.layout.annotations] == ["cos(m θ<sub>k</sub>)", "a–b"]
    assert fig.layout.yaxis.title.text == "R<sub>p</sub>"
    line = rp.figures.line([1, 2], {"θ_k": [1, 2]}, x_label="L^2", y_label="y")
    assert line.data[0].name == "θ<sub>k</sub>" and line.layout.xaxis.title.text == "L<sup>2</sup>"


def test_lines_and_bars_take_their_schemes_colours():
    style = rp.figures.style
    fig = rp.figures.line([1, 2], {"RoPE": [1, 2], "T5, FlexAttention": [2, 3], "bound": [0, 1]},
                          x_label="L", y_label="MiB", schemes={"T5, FlexAttention": "t5"})
    colours = [t.line.color for t in fig.data]
    assert colours[:2] == [style.scheme_color("rope"), style.scheme_color("t5")]
    assert colours[2] not in colours[:2]  # a series that is no scheme takes a free colour
    styled = rp.figures.line([1, 2], {"RoPE": [1, 2]}, x_label="L", y_label="y",
                             styles={"RoPE": dict(line=dict(color="#000000"))})
    assert styled.data[0].line.color == "#000000"  # the caller's style wins
    bars = rp.figures.bars({"ALiBi": 1.0, "other": 2.0}, x_label="ms", schemes={"ALiBi": "alibi"})
    assert list(bars.data[0].marker.color)[0] == style.scheme_color("alibi")
    with pytest.raises(ValueError, match="schemes"):
        rp.figures.line([1], {"a": [1]}, x_label="x", y_label="y", schemes={"b": "rope"})


def test_heatmap_hover_rounds_values_and_names_masked_cells():
    bias = torch.tensor([[0.123456, float("nan")], [-1234.5, 2.0]])
    fig = rp.figures.heatmap(bias, value_label="bias")
    (trace,) = fig.data
    assert "%{customdata[2]}" in trace.hovertemplate and "%{z}" not in trace.hovertemplate
    assert [c[2] for c in trace.customdata[0]] == ["0.123", "masked"]
    assert [c[2] for c in trace.customdata[1]] == ["−1,234", "2"]  # sign kept; hover never says NaN


def test_integer_data_gets_an_integer_colour_bar():
    fig = rp.figures.heatmap(rp.schemes.shaw.shaw_relative_index(8, max_relative_position=2), zmin=0, zmax=4)
    bar = fig.data[0].colorbar
    assert bar.tickformat == "d" and bar.dtick == 1 and bar.tick0 == 0
    wide = rp.figures.heatmap(torch.arange(64).view(8, 8))
    assert wide.data[0].colorbar.dtick in (10, 20) and wide.data[0].colorbar.tickformat == "d"
    floats = rp.figures.heatmap(torch.rand(4, 4))
    assert floats.data[0].colorbar.tickformat is None


def narrow_layout(fig):
    return fig.layout.meta["relpos"]["narrow"]


def test_panels_stack_one_per_row_below_600_px_and_keep_their_numbers():
    fig = rp.figures.heatmap([rp.relative_offsets(8)] * 2, titles=["a", "b"])
    assert all(t.texttemplate == "%{z:d}" for t in fig.data)  # side by side at 672 px
    assert fig.layout.xaxis.domain[1] < fig.layout.xaxis2.domain[0]
    narrow = narrow_layout(fig)
    assert narrow["below"] >= 600
    layout = narrow["layout"]
    assert layout["xaxis"]["domain"] == layout["xaxis2"]["domain"] == [0.0, 1.0]  # one per row
    assert layout["yaxis"]["domain"][0] > layout["yaxis2"]["domain"][1]  # first on top
    assert [d["texttemplate"] for d in narrow["data"]] == ["%{z:d}", "%{z:d}"]  # numbers kept
    assert narrow["data"][1]["colorbar"]["orientation"] == "h"  # the colour bar below them
    assert layout["yaxis2"]["showticklabels"] is not False  # each panel labels its rows


def test_panels_that_cannot_show_their_numbers_side_by_side_take_two_rows():
    L = 6  # 7 columns of two-digit numbers: four panels side by side leave 16 px a cell
    entries = torch.arange(1, L * L + 1).view(L, L)
    padded = torch.cat([torch.zeros(L, 1, dtype=entries.dtype), entries], 1)
    fig = rp.figures.heatmap([entries, padded, entries, padded], titles=list("abcd"))
    assert all(t.texttemplate for t in fig.data)  # every panel keeps its numbers
    assert fig.layout.yaxis.domain[0] > fig.layout.yaxis3.domain[1]  # two rows of two
    assert fig.layout.height <= rp.figures.style.MAX_HEIGHT - 80  # room for a slider


@pytest.mark.parametrize("L", [4, 16, 64])
def test_heatmaps_leave_room_for_a_slider_under_the_height_cap(L):
    for panels in (1, 2, 3):
        fig = rp.figures.heatmap([torch.randn(L, L)] * panels)
        assert fig.layout.height <= rp.figures.style.MAX_HEIGHT - 80
    assert rp.figures.heatmap(torch.randn(L, L), height=300).layout.height == 300


def test_slider_frames_carry_their_narrow_layout_at_one_height():
    fig = rp.figures.slider(lambda L: rp.figures.heatmap([rp.relative_offsets(L)] * 2), [4, 8],
                            name="L").static_figure()
    narrow = [f.layout.meta["relpos"]["narrow"]["layout"] for f in fig.frames]
    assert len({n["height"] for n in narrow}) == 1  # the slider never resizes it on a phone
    assert all(n["margin"]["b"] >= SLIDER_PX for n in narrow)
    base = fig.layout.meta["relpos"]["narrow"]["layout"]
    assert base["height"] == narrow[0]["height"] and base["sliders"][0]["pad"]["t"] > 40
    assert all("sliders" not in n for n in narrow)  # a frame never resets the slider
    assert fig.layout.height <= rp.figures.style.MAX_HEIGHT


def test_a_short_slider_frame_keeps_its_phone_colour_bar_under_its_plot():
    """A frame with 2 rows takes the height of the frame with 16: its colour bar, below the plot on a
    phone, stays the same px under it (it was placed for its own short plot and landed on the slider)."""
    fig = rp.figures.slider(lambda H: rp.figures.heatmap(torch.randn(H, 16), annotate_max=0), [2, 16],
                            name="H").static_figure()
    below_px = []
    for frame in fig.frames:
        narrow = frame.layout.meta["relpos"]["narrow"]
        m = narrow["layout"]["margin"]
        plot = narrow["layout"]["height"] - m["t"] - m["b"]
        (bar,) = [t["colorbar"] for t in narrow["data"] if t and t.get("colorbar")]
        below_px.append(-bar["y"] * plot)
    assert below_px[0] == pytest.approx(below_px[1]) and 0 < below_px[1] < 30


def test_figure_script_hides_the_toolbar_and_follows_the_colour_mode():
    html = rp.figures._plotly.figure_mimebundle(offsets_figure(3))["text/html"]
    assert "displayModeBar: false" in html
    assert '"dark"' in html and "data-theme" in html  # the dark mode's colours, the toggle
    import plotly.io as pio

    template = pio.templates[pio.templates.default]
    assert template.layout.paper_bgcolor == "rgba(0,0,0,0)"  # no white box on a dark page
    assert list(template.layout.colorway) == list(rp.figures.style.SERIES_COLORS)


def test_benchmark_figures_fit_a_screen_with_their_slider():
    from pathlib import Path

    run = rp.figures.bench.read_result(rp.resources.path("bench-cpu.json"))
    cap = rp.figures.style.MAX_HEIGHT
    assert rp.figures.bench.scheme_slider(run).static_figure().layout.height <= cap
    exponents = rp.figures.bench.exponent_slider(run).static_figure()
    assert exponents.layout.height <= cap
    assert [f.name for f in exponents.frames] == ["eager", "sdpa", "flex"]
    assert len({len(f.data) for f in exponents.frames}) == 1
    rows = {f.name: {y for t in f.data if t.y and t.y[0] is not None for y in t.y} for f in exponents.frames}
    assert all("/" not in y for ys in rows.values() for y in ys)  # the slider names the backend
    everything = rp.figures.bench.exponent_figure(run)  # all backends at once: the rows say which
    assert any("/eager" in y for t in everything.data if t.y and t.y[0] is not None for y in t.y)
    bytes_figure = rp.figures.bench.analytic_bytes_figure(
        H=4, d=32, dtype="float32", lengths=[128, 256, 512], schemes=["t5", "alibi", "rope"], measured=run)
    assert bytes_figure.layout.height <= cap - 80
    narrow = bytes_figure.layout.meta["relpos"]["narrow"]["layout"]
    domains = [narrow[k]["domain"] for k in narrow if k.startswith("xaxis")]
    assert domains and all(d == [0.0, 1.0] for d in domains)  # one panel per row on a phone
    assert len(set(rp.figures.bench.FORM_DASH.values())) == len(rp.figures.bench.FORM_DASH)  # a dash per form


def test_a_slider_figure_with_its_legend_under_the_plot_puts_it_above_on_a_phone():
    # under the plot the legend wraps onto more rows on a phone than the bottom margin holds
    # and runs into the slider (the browser check found one): the narrow layout moves it
    def make(lr):
        fig = rp.figures.line([16, 64, 256], {f"s{i}": [0.1 * i, 0.2, 0.3] for i in range(8)},
                              log_x=True, x_label="L", y_label="accuracy")
        return fig.update_layout(legend=dict(y=-0.25, yanchor="top"), margin=dict(t=30, b=170))

    fig = rp.figures.slider(make, [1e-3, 3e-3], name="learning rate").static_figure()
    assert fig.layout.legend.y == -0.25  # the wide layout keeps the author's legend
    assert fig.layout.sliders[0].pad.t >= 170  # and its slider under the legend's room
    narrow = fig.layout.meta["relpos"]["narrow"]
    assert narrow["layout"]["legend"]["y"] > 1 and narrow["layout"]["legend"]["yanchor"] == "bottom"
    assert narrow["layout"]["sliders"][0]["pad"]["t"] < 170  # no empty room left under the axis
    assert all(f.layout.meta["relpos"]["narrow"]["layout"]["legend"]["y"] > 1 for f in fig.frames)
    def legend_on_top(value):
        return rp.figures.line([1, 2], {"a": [1, value], "b": [2, 1]}, x_label="x", y_label="y")

    above = rp.figures.slider(legend_on_top, [1, 2], name="x").static_figure()
    assert "narrow" not in ((above.layout.meta or {}).get("relpos") or {})  # nothing to move


def test_a_narrow_layout_must_draw_the_same_traces():
    go = pytest.importorskip("plotly.graph_objects")
    wide = go.Figure([go.Scatter(x=[1], y=[1]), go.Scatter(x=[1], y=[2])])
    with pytest.raises(ValueError, match="narrow"):
        rp.figures._plotly.attach_narrow(wide, go.Figure([go.Scatter(x=[1], y=[1])]))
    narrow = go.Figure(wide).update_layout(height=700)
    narrow.data[1].update(mode="markers")
    fig = rp.figures._plotly.attach_narrow(wide, narrow, below=500)
    patch = fig.layout.meta["relpos"]["narrow"]
    assert patch["below"] == 500 and patch["layout"]["height"] == 700
    assert patch["data"] == [{}, {"mode": "markers"}]  # only what differs


def test_table_captions_move_out_of_their_scroll_box():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "relpos_book", Path(__file__).resolve().parents[1] / "_ext" / "relpos_book.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    body = ('<p>x</p><div class="pst-scrollable-table-container"><table class="table" id="tbl-a">\n'
            '<caption><span class="caption-number">Table 1.1 </span><span class="caption-text">A.</span>'
            '</caption>\n<tbody><tr><td>1</td></tr></tbody>\n</table>\n</div>\n'
            '<div class="pst-scrollable-table-container"><table class="table">\n<tbody></tbody>\n</table>\n</div>')
    out = ext.captions_outside_scroll_boxes(body)
    assert out.startswith('<p>x</p><div class="relpos-table" id="tbl-a"><div class="caption relpos-table-caption" '
                          'id="tbl-a-caption"><span class="caption-number">Table 1.1 </span>')
    caption_at, box_at = out.index("relpos-table-caption"), out.index("pst-scrollable-table-container")
    assert caption_at < box_at and "<caption>" not in out  # above the scroll box, not in it
    assert '<table class="table" aria-labelledby="tbl-a-caption">' in out
    assert out.count("<div") == out.count("</div>")
    assert out.endswith('<div class="pst-scrollable-table-container"><table class="table">\n<tbody></tbody>\n'
                        '</table>\n</div>')  # a table without a caption stays as it was


def _book_extension():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "relpos_book", Path(__file__).resolve().parents[1] / "_ext" / "relpos_book.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    return ext


def test_the_book_moves_each_figure_spec_out_of_the_page():
    import json

    ext = _book_extension()
    slider = rp.figures.slider(offsets_figure, [3, 4], name="L")
    html = slider._repr_mimebundle_()["text/html"]
    body = "<p>before</p>" + html + "<p>after</p>"
    out, specs, types = ext.book_figures(body, "../")
    assert out.startswith("<p>before</p>") and out.endswith("<p>after</p>")
    assert "<script" not in out and "Plotly" not in out  # no inline spec, no CDN loader
    (div_id, spec), = specs
    assert f'data-relpos-spec="../_static/relpos-figures/{div_id}.json"' in out
    assert len(spec["frames"]) == 2 and spec["data"]  # the slider's frames travel with the spec
    assert json.loads(json.dumps(spec)) == spec
    assert types == {"heatmap"} and ext.plotly_bundle(types).endswith("plotly-cartesian.min.js")
    assert ext.plotly_bundle({"scatter", "bar"}).endswith("plotly-basic.min.js")
    assert ext.plotly_bundle({"scatter3d"}) is None  # the full plotly.min.js
    with pytest.raises(Exception, match="figure outputs on the page"):
        ext.book_figures(body.replace('<script type="text/javascript">', "<script>"), "")


def test_the_book_script_draws_with_the_same_code_as_a_notebook_output():
    from relpos_core.figures._plotly import figure_js

    ext = _book_extension()
    js = ext.figures_js()
    assert figure_js() in js and "IntersectionObserver" in js and "data-relpos-spec" in js


@pytest.mark.skipif(__import__("shutil").which("node") is None, reason="needs Node.js")
def test_math_is_typeset_at_build_time():
    ext = _book_extension()
    if ext._mathjax_source() is None:
        pytest.skip("needs django-static-mathjax")
    body = ('<p>a <span class="math notranslate nohighlight">\\(\\theta_k &lt; 1\\)</span> b</p>'
            '<div class="math notranslate nohighlight">\n\\[\\begin{aligned} x &amp;= 1\\end{aligned}\\]</div>')
    out, css = ext.typeset_math(body, "../")
    assert out.count("<mjx-container") == 2 and 'display="true"' in out
    assert "\\(" not in out and "\\[" not in out
    assert "mjx-c1D703" in out  # θ
    assert "../_static/mathjax/output/chtml/fonts/woff-v2" in css
    with pytest.raises(Exception, match="could not typeset"):
        ext.typeset_math('<span class="math notranslate nohighlight">\\(\\frac{1}\\)</span>', "")


@pytest.mark.parametrize("matrix, kwargs, match", [
    (torch.zeros(600, 600), {}, r"at most 262144 cells \(512 x 512\)"),  # before: 2000 x 2000 ran 919 s
    (np.zeros((600, 600)), {}, r"at most 262144 cells"),
    (np.array([["a", "b"], ["c", "d"]]), {}, "must hold real numbers"),
    (np.ones((2, 2)) * (1 + 1j), {}, "must hold real numbers"),
    (torch.ones(2, 2, dtype=torch.complex64), {}, "must hold real numbers"),
    (np.array([[1e308, -1e308], [0.0, 1.0]]), {}, r"finite values within \+-1e\+100"),
    (np.eye(2), dict(zmin=2.0, zmax=1.0), "zmin must be less than zmax"),
    (np.eye(2), dict(zmin=float("nan")), "zmin must be None or a finite number"),
    (np.eye(2), dict(zmax="1"), "zmax must be None or a finite number"),
])
def test_heatmap_refuses_what_it_cannot_draw_by_name(matrix, kwargs, match):
    with pytest.raises(ValueError, match=match):
        rp.figures.heatmap(matrix, **kwargs)


def test_heatmap_still_draws_masked_cells():
    m = torch.tensor([[0.0, float("-inf")], [1.0, 2.0]])
    assert rp.figures.heatmap(m) is not None


def test_slider_frames_hide_the_annotations_another_step_added():
    """Plotly animates annotations by index: a step with fewer must hide the rest (the skew's titles stayed)."""
    import plotly.graph_objects as go

    def make(n):
        fig = go.Figure(go.Scatter(x=[0, 1], y=[0, n]))
        for k in range(n):
            fig.add_annotation(text=f"note {k}", x=k, y=0, showarrow=False)
        return fig

    fig = rp.figures.slider(make, [1, 3], name="n").static_figure()
    counts = [len(f.layout.annotations) for f in fig.frames]
    assert counts == [3, 3]
    first = fig.frames[0].layout.annotations
    assert first[0].text == "note 0" and [a.visible for a in first[1:]] == [False, False]
