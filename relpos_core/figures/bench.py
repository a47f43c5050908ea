"""Figures of a benchmark run (``python -m relpos_core.bench``): the book and the benchmark share them.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Every function reads
the result dict the benchmark writes as JSON (``read_result``); nothing is re-measured.

* ``scheme_figure``: small multiples for one scheme, time, measured peak memory and time
  over no-bias SDPA against L, one line per path in the scheme's colour (dash = form, marker = backend,
  open markers = rows flagged noisy, bars = interquartile range);
* ``scheme_slider``: the same figure with a slider over the schemes, on fixed axes;
* ``exponent_figure``: every path's growth exponent of time and of memory, with its
  fit error, against the reference slopes 1 (linear) and 2 (quadratic);
  ``exponent_slider``: the same with a slider over the backends (one screen each);
* ``analytic_bytes_figure``: ``rp.measure.analytic_bytes`` of every path against L for
  a given (H, d, dtype), with the measured CPU points of a run on top when they match;
* ``report_html``: all of them on one HTML page (what the benchmark writes next to its JSON).
"""
from __future__ import annotations

import html as _html
import json
import math
from pathlib import Path

from relpos_core import schemes

from ._plotly import attach_narrow, plotly_modules
from .style import MAX_HEIGHT, NEUTRAL, scheme_color, scheme_label

__all__ = ["read_result", "path_style", "scheme_figure", "scheme_slider", "exponent_figure", "exponent_slider",
           "analytic_bytes_figure", "report_html", "FORM_DASH", "FORM_SYMBOL", "BACKEND_SYMBOL"]

BASE = schemes.baseline()  # the no-position scheme: the ratios' denominator, not drawn as a scheme


def _causal_label(scheme: str, causal: bool) -> str:
    """", causal" for a causal row of a scheme that also runs bidirectionally (a decoder-only
    scheme's rows are all causal: ``Scheme.causal_only``)."""
    only = scheme in schemes.names() and schemes.lookup(scheme).scheme.causal_only
    return ", causal" if causal and not only else ""


def _follows_length(scheme: str) -> bool:
    """Whether the scheme's distance parameter is the sequence length (``Distance.follows_length``)."""
    distance = schemes.lookup(scheme).scheme.distance
    return distance is not None and distance.follows_length


# colour is the scheme's (``style.scheme_color``), never a form's or a backend's: the
# kernel form of a path (how the position term is computed) is its dash, the backend its
# marker, the same in every figure of the costs chapter; in a figure of markers only
# (the exponents) the form is the marker's shape
FORM_DASH = {"none": "longdashdot", "naive": "dot", "gather": "dash", "skew": "solid", "hf": "dashdot"}
FORM_SYMBOL = {"none": "x", "naive": "square", "gather": "triangle-up", "skew": "circle", "hf": "star"}
BACKEND_SYMBOL = {"eager": "square", "sdpa": "circle", "flex": "diamond", "transformers": "star"}
MIB = 2**20
#: the schemes' names as the book writes them (``style.scheme_label``: each declaration's ``display``)
DISPLAY = {s: scheme_label(s) for s in schemes.names()}
#: names short enough for a slider's steps on a phone (each declaration's ``short``)
SHORT = {s: schemes.lookup(s).short for s in schemes.names()}


def _key_legend(fig, forms, backends, *, form_markers: bool = False) -> None:
    """Legend entries for the dashes (forms; marker shapes with ``form_markers``) and the
    markers (backends), in the neutral colour, not one per path: short enough to sit
    above the plot on a phone."""
    go, _ = plotly_modules()
    for form in forms:
        if form_markers:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=form, hoverinfo="skip",
                                     marker=dict(color=NEUTRAL, symbol=FORM_SYMBOL.get(form, "circle"), size=8)))
        else:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=form, hoverinfo="skip",
                                     line=dict(color=NEUTRAL, dash=FORM_DASH.get(form, "solid"), width=2)))
    for backend in backends:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=backend, hoverinfo="skip",
                                 marker=dict(color=NEUTRAL, symbol=BACKEND_SYMBOL.get(backend, "circle"), size=8)))


def _top_legend(height_px: int = 0) -> dict:
    return dict(orientation="h", yref="container", y=1, yanchor="top", x=0, xanchor="left", font=dict(size=12),
                itemwidth=30, traceorder="normal")


def read_result(path) -> dict:
    """A benchmark result written by ``python -m relpos_core.bench`` (schema relpos-bench/2)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("schema") != "relpos-bench/2":
        raise ValueError(f"{path} is not a relpos-bench/2 result (schema {data.get('schema')!r})")
    return data


def path_style(form: str, backend: str, *, noisy: bool = False, scheme: str | None = None) -> dict:
    """Line and marker of a path: the colour of ``scheme`` (the neutral colour without
    one), the dash by form, the marker's shape by backend; the marker has its line's colour."""
    colour = scheme_color(scheme) if scheme is not None else NEUTRAL
    symbol = BACKEND_SYMBOL.get(backend, "circle") + ("-open" if noisy else "")
    return dict(line=dict(color=colour, dash=FORM_DASH.get(form, "solid"), width=2),
                marker=dict(color=colour, symbol=symbol, size=8))


def _curves(result: dict, scheme: str, mode: str) -> dict[tuple, list[dict]]:
    curves: dict[tuple, list[dict]] = {}
    for r in result["rows"]:
        if r["scheme"] != scheme or r["mode"] != mode or r["status"] != "ok" or r.get("block_skipping") is False:
            continue
        if r["scheme"] == BASE and r["causal"] and mode == "forward":
            continue  # the causal baselines are used for ratios, not drawn
        curves.setdefault((r["form"], r["backend"], r["causal"]), []).append(r)
    return {k: sorted(v, key=lambda r: r["L"]) for k, v in sorted(curves.items())}


def _fit(result: dict, r: dict, quantity: str) -> dict | None:
    for f in result.get("fits", []):
        if f["quantity"] == quantity and all(f.get(k) == r.get(k) for k in
                                             ("scheme", "form", "backend", "mode", "causal", "block_skipping")):
            return f
    return None


def _log_range(values, pad=0.08) -> list[float]:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return [0, 1]
    lo, hi = math.log10(min(vals)), math.log10(max(vals))
    span = max(hi - lo, 0.3)
    return [lo - pad * span, hi + pad * span]


def _ranges(result: dict, mode: str) -> dict:
    rows = [r for r in result["rows"] if r["status"] == "ok" and r["mode"] == mode]
    ratio_key = "x_hf" if mode == "module" else "x_sdpa0"
    return dict(
        x=_log_range([r["L"] for r in rows], pad=0.05),
        time=_log_range([r["time_ms"]["q1"] for r in rows] + [r["time_ms"]["q3"] for r in rows]),
        memory=_log_range([r["peak_bytes"] / MIB for r in rows if r.get("peak_bytes")]),
        ratio=_log_range([r.get(ratio_key) for r in rows] + [1.0]),
    )


#: a figure's height with room left for a slider under ``style.MAX_HEIGHT``
HEIGHT = MAX_HEIGHT - 80


def scheme_figure(result: dict, scheme: str, *, mode: str = "forward", traces_per_panel: int | None = None,
                  ranges: dict | None = None, height: int = HEIGHT):
    """Time, peak memory and time over no-bias SDPA (module rows: over Hugging Face) against L.

    One line per path of ``scheme`` in ``mode`` (hover for its fitted exponents);
    ``traces_per_panel`` pads with empty traces (a slider needs the same number for every
    scheme); ``ranges`` fixes the axes.
    """
    go, _ = plotly_modules()
    from plotly.subplots import make_subplots

    curves = _curves(result, scheme, mode)
    if not curves:
        raise ValueError(f"the result has no ok rows for scheme {scheme!r} in mode {mode!r}")
    n = traces_per_panel or len(curves)
    if n < len(curves):
        raise ValueError(f"traces_per_panel must be >= the number of paths ({len(curves)}), got {n}")
    ratio_key, ratio_title = ("x_hf", "× Hugging Face") if mode == "module" else ("x_sdpa0", "× SDPA, no bias")
    clock = "CPU ms" if "CPU" in result["provenance"].get("clock", "") else "ms"
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.05)
    for (form, backend, causal), rows in curves.items():
        name = "Hugging Face module" if backend == "transformers" else f"{form}/{backend}"
        name += _causal_label(scheme, causal)
        t_fit, m_fit = _fit(result, rows[0], "time"), _fit(result, rows[0], "peak_bytes")
        fitted = ""
        if t_fit and m_fit:
            fitted = f"<br>time ∝ L^{t_fit['slope']:.2f}, memory ∝ L^{m_fit['slope']:.2f}"
        Ls = [r["L"] for r in rows]
        style = path_style(form, backend, scheme=scheme)
        symbols = [path_style(form, backend, noisy=bool(r.get("noisy")))["marker"]["symbol"] for r in rows]
        med = [r["time_ms"]["median"] for r in rows]
        err = dict(type="data", symmetric=False, array=[r["time_ms"]["q3"] - m for r, m in zip(rows, med)],
                   arrayminus=[m - r["time_ms"]["q1"] for r, m in zip(rows, med)], thickness=1.2, width=3)
        hover = [f"<b>{name}</b>, L={r['L']}<br>{m:.4g} {clock} (IQR {r['time_ms']['q1']:.3g}–"
                 f"{r['time_ms']['q3']:.3g}){fitted}"
                 + ("<br>noisy: " + "; ".join(r.get("noise_reasons", [])) if r.get("noisy") else "")
                 for r, m in zip(rows, med)]
        common = dict(mode="lines+markers", showlegend=False, line=style["line"],
                      marker=dict(style["marker"], symbol=symbols))
        fig.add_trace(go.Scatter(x=Ls, y=med, name=name, error_y=err, hovertext=hover, hoverinfo="text", **common),
                      row=1, col=1)
        mem = [r["peak_bytes"] / MIB if r.get("peak_bytes") else None for r in rows]
        fig.add_trace(go.Scatter(x=Ls, y=mem, name=name,
                                 hovertemplate="L=%{x}<br>%{y:.4g} MiB" + fitted + "<extra>" + name + "</extra>",
                                 **common), row=2, col=1)
        ratio = [r.get(ratio_key) for r in rows]
        fig.add_trace(go.Scatter(x=Ls, y=ratio, name=name,
                                 hovertemplate="L=%{x}<br>%{y:.3g}x<extra>" + name + "</extra>", **common),
                      row=3, col=1)
    for _ in range(n - len(curves)):  # padding: same trace count for every scheme
        for row in (1, 2, 3):
            fig.add_trace(go.Scatter(x=[], y=[], showlegend=False, hoverinfo="skip"), row=row, col=1)
    order = [t for panel in range(3) for t in list(fig.data)[panel::3]]
    fig.data = tuple(order)
    in_mode = [r for r in result["rows"] if r["mode"] == mode and r["status"] == "ok"]
    _key_legend(fig, [f for f in FORM_DASH if any(r["form"] == f for r in in_mode)],
                [b for b in BACKEND_SYMBOL if any(r["backend"] == b for r in in_mode)])
    ranges = ranges or _ranges(result, mode)
    lengths = sorted({r["L"] for r in result["rows"]})
    for row, (title, key) in enumerate(((clock + " per call", "time"), ("peak MiB", "memory"),
                                        (ratio_title, "ratio")), start=1):
        fig.update_yaxes(title_text=title, type="log", range=ranges[key], dtick=1, row=row, col=1)
        fig.update_xaxes(type="log", range=ranges["x"], tickvals=lengths, ticktext=[str(L) for L in lengths],
                         row=row, col=1)
    fig.update_xaxes(title_text="sequence length L", row=3, col=1)
    fig.add_hline(y=1.0, line=dict(dash="dot", color=NEUTRAL, width=1), row=3, col=1)
    # r=40: room for the last label of a slider placed under the figure
    fig.update_layout(height=height, margin=dict(l=70, r=40, t=80, b=40), legend=_top_legend())
    return fig


def scheme_slider(result: dict, schemes=None, *, mode: str = "forward", height: int = HEIGHT):
    """``scheme_figure`` with a slider over ``schemes`` (default: every scheme of the run), fixed axes."""
    from .slider import slider

    present = []
    for r in result["rows"]:
        if r["mode"] == mode and r["status"] == "ok" and r["scheme"] not in present:
            present.append(r["scheme"])
    schemes = list(schemes) if schemes is not None else [s for s in present if s != BASE]
    missing = [s for s in schemes if s not in present]
    if missing:
        raise ValueError(f"schemes {missing} have no ok rows in mode {mode!r}; present: {present}")
    n = max(len(_curves(result, s, mode)) for s in schemes)
    ranges = _ranges(result, mode)
    by_label = {SHORT.get(s, s): s for s in schemes}
    return slider(lambda label: scheme_figure(result, by_label[label], mode=mode, traces_per_panel=n, ranges=ranges,
                                              height=height),
                  list(by_label), name="scheme")


def _label(scheme: str, form: str, backend: str, causal: bool) -> str:
    return f"{DISPLAY.get(scheme, scheme)} {form}/{backend}" + _causal_label(scheme, causal)


def _exponent_fits(result: dict, mode: str, min_points: int) -> list[dict]:
    fits = [f for f in result["fits"] if f["mode"] == mode and f["n"] >= min_points
            and not (f["scheme"] == BASE and f["causal"]) and f.get("block_skipping") is not False]
    if not fits:
        raise ValueError(f"the result has no fits with at least {min_points} lengths in mode {mode!r}")
    return fits


def exponent_figure(result: dict, *, mode: str = "forward", min_points: int = 4, height: int | None = None,
                    backends=None):
    """Growth exponents of time and peak memory (slope of log y against log L, bars: fit error).

    ``backends`` (default: all) keeps only those backends' paths; the legend keys every
    form and backend of the run either way, so figures of different backends match (a
    slider over them: ``exponent_slider``).
    """
    go, _ = plotly_modules()
    from plotly.subplots import make_subplots

    every = _exponent_fits(result, mode, min_points)
    all_backends = [b for b in BACKEND_SYMBOL if any(f["backend"] == b for f in every)]
    all_forms = [f for f in FORM_SYMBOL if any(x["form"] == f for x in every)]
    if backends is not None:
        unknown = set(backends) - set(all_backends)
        if unknown:
            raise ValueError(f"backends must be among {all_backends} (those of the run in mode {mode!r}), "
                             f"got {sorted(unknown)}")
    fits = [f for f in every if backends is None or f["backend"] in backends]
    backends = [b for b in all_backends if any(f["backend"] == b for f in fits)]
    keys = []
    for f in sorted(fits, key=lambda f: (backends.index(f["backend"]), f["scheme"], f["form"], f["causal"])):
        k = (f["scheme"], f["form"], f["backend"], f["causal"])
        if k not in keys:
            keys.append(k)
    one_backend = len(backends) == 1 and len(all_backends) > 1  # the backend is said elsewhere
    labels = [_label(*k).replace(f"/{k[2]}", "") if one_backend else _label(*k) for k in keys]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=["time", "memory"])
    for col, quantity in enumerate(("time", "peak_bytes"), start=1):
        for backend in backends:
            xs, ys, errs, colours, symbols = [], [], [], [], []
            for k, label in zip(keys, labels):
                if k[2] != backend:
                    continue
                f = next((f for f in fits if f["quantity"] == quantity and
                          (f["scheme"], f["form"], f["backend"], f["causal"]) == k), None)
                if f is None:
                    continue
                xs.append(f["slope"])
                ys.append(label)
                errs.append(f["stderr"] or 0.0)
                colours.append(scheme_color(k[0]))  # the scheme's colour; the form: the shape
                symbols.append(FORM_SYMBOL.get(k[1], "circle"))
            if not xs:
                continue
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="markers", name=backend, showlegend=False,
                marker=dict(color=colours, symbol=symbols, size=9, line=dict(color=colours, width=0.5)),
                error_x=dict(type="data", array=errs, thickness=1.2, width=3, color=NEUTRAL),
                hovertemplate="%{y}<br>x = %{x:.2f}<extra>" + quantity.replace("_bytes", "") + "</extra>"),
                row=1, col=col)
        for ref in (1, 2):
            fig.add_vline(x=ref, line=dict(dash="dot", color=NEUTRAL, width=1), row=1, col=col)
        fig.update_xaxes(range=[-0.2, 2.9], tickvals=[0, 1, 2], row=1, col=col)
    _key_legend(fig, all_forms, [], form_markers=True)  # each row's label names its backend
    fig.update_yaxes(autorange="reversed", type="category", row=1, col=1, automargin=True)
    fig.update_xaxes(title_text="exponent x of L<sup>x</sup>", row=1, col=1)
    height = height or 160 + 17 * len(keys)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=90, b=50),
                      legend=_top_legend())
    # on a phone the legend wraps onto more rows: more room above, and for the rows
    narrow = go.Figure(fig)
    narrow.update_layout(height=height + 100, margin=dict(t=115))
    return attach_narrow(fig, narrow)


def exponent_slider(result: dict, *, mode: str = "forward", min_points: int = 4):
    """``exponent_figure`` one backend at a time, with a slider over the backends: each
    screen holds one backend's paths (all of them at once are taller than a screen)."""
    from .slider import slider

    every = _exponent_fits(result, mode, min_points)
    backends = [b for b in BACKEND_SYMBOL if any(f["backend"] == b for f in every)]
    rows = max(len({(f["scheme"], f["form"], f["causal"]) for f in every if f["backend"] == b})
               for b in backends)
    height = min(HEIGHT, 135 + 17 * rows)
    return slider(lambda backend: exponent_figure(result, mode=mode, min_points=min_points, height=height,
                                                  backends=[backend]),
                  backends, name="backend")


def analytic_bytes_figure(*, H: int, d: int, dtype, lengths, schemes, k: dict | None = None, B: int = 1,
                          measured: dict | None = None, height: int = HEIGHT):
    """``analytic_bytes`` of every forward path of ``schemes`` against L, one panel per scheme.

    ``measured``: a benchmark result; its CPU rows are drawn as open circles on the panels
    when the run's (B, H, d, dtype) equal the figure's (else those traces stay empty, so a
    slider over (H, d, dtype) keeps one trace count).
    """
    go, _ = plotly_modules()
    from plotly.subplots import make_subplots

    import torch

    from relpos_core.measure.analytic import analytic_bytes
    from relpos_core.registry import paths

    k = dict(k or {})
    dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    wide = _analytic_bytes_grid(go, make_subplots, analytic_bytes, paths, H=H, d=d, dt=dt, B=B, k=k,
                                lengths=lengths, schemes=schemes, measured=measured, cols=2, height=height)
    # on a phone: one panel per row, short enough that six and a slider fit a screen
    panel = min((height - 125) / -(-len(schemes) // 2), 100)
    narrow = _analytic_bytes_grid(go, make_subplots, analytic_bytes, paths, H=H, d=d, dt=dt, B=B, k=k,
                                  lengths=lengths, schemes=schemes, measured=measured, cols=1,
                                  height=int(145 + len(schemes) * panel), top=105)  # the key wraps
    return attach_narrow(wide, narrow)


def _analytic_bytes_grid(go, make_subplots, analytic_bytes, paths, *, H, d, dt, B, k, lengths, schemes, measured,
                         cols, height, top=85):
    dtype_name = str(dt).replace("torch.", "")
    rows_n = -(-len(schemes) // cols)
    fig = make_subplots(rows=rows_n, cols=cols, shared_xaxes=True, horizontal_spacing=0.1,
                        vertical_spacing=0.3 / rows_n, subplot_titles=[DISPLAY.get(s, s) for s in schemes])
    matches = False
    if measured is not None:
        sz = measured["provenance"]["sizes"]
        matches = (sz["B"], sz["H"], sz["d"], sz["dtype"]) == (B, H, d, dtype_name)
    lo, hi = math.inf, 0.0
    forms, backends = set(), set()
    for i, scheme in enumerate(schemes):
        r, c = i // cols + 1, i % cols + 1
        for p in paths(scheme):
            forms.add(p.form)
            backends.add(p.backend)
            causal = p.causal == "required"
            ys = []
            for L in lengths:
                kk = L if _follows_length(scheme) else k.get(scheme, 16)  # a row per distance: up to L
                ys.append(analytic_bytes(scheme, p.form, p.backend, B=B, H=H, Lq=L, Lk=L, d=d, k=kk, dtype=dt,
                                         causal=causal) / MIB)
            lo, hi = min(lo, min(ys)), max(hi, max(ys))
            name = f"{p.form}/{p.backend}"
            style = path_style(p.form, p.backend, scheme=scheme)
            fig.add_trace(go.Scatter(x=list(lengths), y=ys, mode="lines+markers", name=name, showlegend=False,
                                     line=style["line"], marker=style["marker"], legendgroup=name,
                                     hovertemplate="L=%{x}<br>%{y:.4g} MiB (analytic)<extra>" + name + "</extra>"),
                          row=r, col=c)
            mx, my = [], []
            if matches:
                for row in measured["rows"]:
                    if (row["scheme"], row["form"], row["backend"], row["mode"]) == (scheme, p.form, p.backend,
                                                                                   "forward") \
                            and row["causal"] == causal and row["status"] == "ok" and row.get("peak_bytes"):
                        mx.append(row["L"])
                        my.append(row["peak_bytes"] / MIB)
            fig.add_trace(go.Scatter(x=mx, y=my, mode="markers", name=name + " measured", showlegend=False,
                                     legendgroup=name,
                                     marker=dict(color=style["line"]["color"], size=9, symbol="circle-open",
                                                 line=dict(width=2)),
                                     hovertemplate="L=%{x}<br>%{y:.4g} MiB measured<extra>" + name + "</extra>"),
                          row=r, col=c)
    _key_legend(fig, [f for f in FORM_DASH if f in forms], [b for b in BACKEND_SYMBOL if b in backends])
    yr = [math.log10(lo) - 0.2, math.log10(hi) + 0.2]
    ticks = [L for L in lengths if math.log2(L) % 2 == 1] or list(lengths)
    for i in range(len(schemes)):
        r, c = i // cols + 1, i % cols + 1
        fig.update_yaxes(type="log", range=yr, dtick=2, row=r, col=c, title_text="MiB" if c == 1 else None)
        fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(L) for L in ticks], row=r, col=c,
                         title_text="L" if r == rows_n else None)
    fig.update_layout(height=height, margin=dict(l=60, r=40, t=top, b=40), legend=_top_legend())
    return fig


def report_html(result: dict) -> str:
    """One self-contained HTML page: provenance, the exponents, and every scheme's figure."""
    _, pio = plotly_modules()
    pv = result["provenance"]
    parts = [f"<h1>relpos benchmark: {_html.escape(str(pv.get('device_name')))}</h1>",
             "<pre>" + _html.escape(json.dumps({k: pv[k] for k in pv if k != "sizes"}, indent=1, default=str))
             + "</pre>"]
    figures = []
    try:
        figures.append(("growth exponents", exponent_figure(result, min_points=2)))
    except ValueError:
        pass
    schemes = []
    for r in result["rows"]:
        if r["mode"] == "forward" and r["status"] == "ok" and r["scheme"] not in schemes and r["scheme"] != BASE:
            schemes.append(r["scheme"])
    ranges = _ranges(result, "forward")
    for s in schemes:
        figures.append((s, scheme_figure(result, s, ranges=ranges)))
    for mode in ("train", "module"):
        for s in sorted({r["scheme"] for r in result["rows"] if r["mode"] == mode and r["status"] == "ok"}):
            try:
                figures.append((f"{s} ({mode})", scheme_figure(result, s, mode=mode)))
            except ValueError:
                pass
    for i, (title, fig) in enumerate(figures):
        parts.append(f"<h2>{_html.escape(title)}</h2>")
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False))
    return "<!doctype html><html><head><meta charset='utf-8'><title>relpos benchmark</title></head><body " \
           "style='max-width:900px;margin:auto;font-family:sans-serif'>" + "\n".join(parts) + "</body></html>"
