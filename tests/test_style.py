"""One visual language: one colour per scheme, far enough apart; forms and backends by
dash and marker, never by colour; one colour per KV layout; markers in their line's
colour; slider labels written short (10k, 1M)."""
import itertools
import re

import nbformat
import pytest

import relpos_core as rp

style = rp.figures.style
pytest.importorskip("plotly")


def test_delta_e_is_cie76_in_lab():
    assert style.delta_e("#ffffff", "#000000") == pytest.approx(100.0, abs=1e-3)
    assert style.delta_e("#0072b2", "#0072b2") == 0.0
    # sRGB red is L* 53.24, a* 80.09, b* 67.20 (D65); black is 0, 0, 0
    assert style.delta_e("#ff0000", "#000000") == pytest.approx((53.24**2 + 80.09**2 + 67.20**2) ** 0.5, abs=0.05)
    with pytest.raises(ValueError, match="colour"):
        style.delta_e("red", "#000000")


def test_every_scheme_and_variant_has_exactly_one_colour():
    names = list(rp.schemes.names())
    assert {"sandwich", "cope", "deberta_emd", "kerple_power", "randomized", "learned"} <= set(names)
    colours = {n: style.scheme_color(n) for n in names}
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours.values())
    assert all(style.scheme_color(n) == colours[n] for n in names)  # asked twice: the same
    assert len(set(colours.values())) == len(names), "two schemes share a colour"


def test_every_pair_of_schemes_is_far_apart_in_lab():
    names = list(rp.schemes.names())
    close = [(a, b, round(style.delta_e(style.scheme_color(a), style.scheme_color(b)), 1))
             for a, b in itertools.combinations(names, 2)
             if style.delta_e(style.scheme_color(a), style.scheme_color(b)) < style.MIN_SCHEME_DELTA_E]
    assert not close, f"scheme colours closer than ΔE {style.MIN_SCHEME_DELTA_E}: {close}"
    assert style.MIN_SCHEME_DELTA_E >= 20


def _bench_run():
    return rp.figures.bench.read_result(rp.resources.path("bench-cpu.json"))


def _paths(fig):
    return [t for t in fig.data if t.x is not None and len(t.x) and t.x[0] is not None]


def test_forms_and_backends_are_told_apart_by_dash_and_marker_not_colour():
    bench = rp.figures.bench
    assert not hasattr(bench, "FORM_COLORS")
    assert len(set(bench.FORM_DASH.values())) == len(bench.FORM_DASH)
    assert len(set(bench.BACKEND_SYMBOL.values())) == len(bench.BACKEND_SYMBOL)
    run = _bench_run()
    scheme = "t5"
    fig = bench.scheme_figure(run, scheme)
    paths = _paths(fig)
    assert len({t.line.dash for t in paths}) > 1  # several forms: several dashes
    assert {t.line.color for t in paths} == {style.scheme_color(scheme)}  # one colour: the scheme's
    assert all(t.marker.color == t.line.color for t in paths)  # markers in their line's colour
    key = [t for t in fig.data if t not in paths]
    assert key and {t.line.color for t in key if t.mode == "lines"} <= {style.NEUTRAL}
    assert {t.marker.color for t in key if t.mode == "markers"} <= {style.NEUTRAL}
    exponents = bench.exponent_figure(run)
    for t in _paths(exponents):  # each row's marker: its scheme's colour, the form its shape
        schemes_of_rows = [next(s for s in rp.schemes.names() if y.startswith(style.scheme_label(s) + " "))
                           for y in t.y]
        assert list(t.marker.color) == [style.scheme_color(s) for s in schemes_of_rows]
    grid = bench.analytic_bytes_figure(H=4, d=32, dtype="float32", lengths=[128, 256],
                                       schemes=["t5", "alibi"], measured=run)
    for t in _paths(grid):
        assert t.marker.color == t.line.color or t.line.color is None


def test_a_styled_line_keeps_its_marker_in_the_line_colour():
    fig = rp.figures.line([1, 2], {"MQA": [1, 2], "MLA (absorbed)": [2, 3]}, x_label="x", y_label="y",
                          styles={n: dict(line=dict(color=style.kv_color(n))) for n in ("MQA", "MLA (absorbed)")})
    assert [t.line.color for t in fig.data] == [style.KV_COLORS["MQA"], style.KV_COLORS["MLA"]]
    assert [t.marker.color for t in fig.data] == [t.line.color for t in fig.data]
    own = rp.figures.line([1, 2], {"a": [1, 2]}, x_label="x", y_label="y",
                          styles={"a": dict(line=dict(color="#000000"), marker=dict(color="#ffffff"))})
    assert own.data[0].marker.color == "#ffffff"  # a marker colour the caller asks for wins


def test_each_kv_layout_has_one_colour():
    assert set(style.KV_COLORS) == set(rp.decoding.scale.KINDS)
    assert len(set(style.KV_COLORS.values())) == len(style.KV_COLORS)
    for layout in rp.decoding.scale.LAYOUTS:  # "MLA (absorbed)" keeps MLA's colour
        assert style.kv_color(layout) == style.KV_COLORS[layout.split()[0]]
    with pytest.raises(ValueError, match="layout"):
        style.kv_color("MOE")


def test_the_kv_chapter_colours_its_layouts_from_the_one_table():
    nb = nbformat.read("chapters/09_kv_cache_at_scale.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any("KIND_COLORS = rp.figures.style.KV_COLORS" in s for s in code)
    assert not [s for s in code if re.search(r"#[0-9a-fA-F]{6}\b", s)], "a layout colour typed in a cell"
    drawing = [s for s in code if "rp.figures." in s and ("MLA" in s or "kind" in s.lower())]
    assert drawing and all("KIND_COLORS" in s for s in drawing if "rp.figures.line" in s or "bars(" in s)


@pytest.mark.parametrize("value, label", [
    (10000.0, "10k"), (100000.0, "100k"), (500000.0, "500k"), (1000000.0, "1M"), (1500000, "1.5M"),
    (4096, "4096"), (131072, "131072"), (2.0, "2"), (0.5, "0.5"), ("RoPE", "RoPE"), (10**9, "1G")])
def test_slider_labels_are_written_short(value, label):
    from relpos_core.figures.slider import value_label

    assert value_label(value) == label


def test_a_slider_over_base_frequencies_shows_10k_not_10000_0():
    bases = [10000.0, 100000.0, 500000.0, 1000000.0]
    fig = rp.figures.slider(lambda b: rp.figures.line([1, 2], {"a": [1, b]}, x_label="x", y_label="y"),
                            bases, name="base").static_figure()
    assert [s.label for s in fig.layout.sliders[0].steps] == ["10k", "100k", "500k", "1M"]
