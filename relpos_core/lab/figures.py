"""Figures of a lab run: plotly figures for the chapter (through ``rp.figures``) and
matplotlib PNGs for ``python -m relpos_core.lab``.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb). plotly and matplotlib
are imported inside the functions, never when the module is imported.
"""
from __future__ import annotations

import math
from pathlib import Path

from relpos_core import schemes

from . import results as R
from .presets import SHAW_KS, T5_MAX_DISTANCES

__all__ = [
    "LABELS",
    "length_figure",
    "curves_figure",
    "clipping_slider",
    "band_figure",
    "position_figure",
    "t5_last_bucket_start",
    "shared_rows",
    "save_plots",
]

LABELS = {name: schemes.lookup(name).display for name in schemes.names()}  # from the declarations


def _dash(variant: str) -> str:
    """Dotted for no position, dashed for positions added to the tokens, solid for the relative schemes."""
    name = variant.split("-")[0]
    if name not in LABELS:
        return "solid"
    injects = schemes.lookup(name).scheme.injects
    return {"nothing": "dot", "input": "dash"}.get(injects, "solid")


def _rp_figures():
    import relpos_core.figures as figures  # plotly is loaded by the first figure call

    return figures


def length_figure(results: dict, task: str, variants=None, *, title: str | None = None):
    """Accuracy against evaluation length (1x .. 8x the training length), one line per
    model: mean over seeds, error bars from the lowest to the highest seed."""
    rows = R.length_table(results, task, variants)
    mults = [k for k in rows[0] if isinstance(k, int)]
    train_length = results["preset"]["tasks"][task]["train_length"]
    xs = [m * train_length for m in mults]
    series, styles = {}, {}
    for row in rows:
        name = LABELS.get(row["variant"], row["variant"])
        series[name] = [row[m]["mean"] for m in mults]
        styles[name] = dict(
            error_y=dict(type="data", symmetric=False, array=[row[m]["max"] - row[m]["mean"] for m in mults],
                         arrayminus=[row[m]["mean"] - row[m]["min"] for m in mults], thickness=1, width=3),
            line=dict(dash=_dash(row["variant"])),
        )
    fig = _rp_figures().line(xs, series, x_label=f"evaluation length L (trained at L = {train_length})",
                             y_label="accuracy", title=title, log_x=True, styles=styles, height=500)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
                      margin=dict(b=150))
    return fig


def curves_figure(results: dict, task: str, variants=None, *, seed: int | None = None):
    """Training loss against step for every model of ``task`` (one seed, the first by default)."""
    rows = R.length_table(results, task, variants)
    series, steps = {}, None
    for row in rows:
        recs = R.records(results, f"{task}/{row['variant']}")
        rec = recs[0] if seed is None else next(r for r in recs if r["seed"] == seed)
        steps = [c[0] for c in rec["curve"]]
        series[LABELS.get(row["variant"], row["variant"])] = [c[1] for c in rec["curve"]]
    fig = _rp_figures().line(steps, series, x_label="training step", y_label="training loss (nats)",
                             log_y=True, mode="lines", height=420)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
                      margin=dict(b=150))
    return fig


def t5_last_bucket_start(max_distance: int, num_buckets: int = 32) -> int:
    """First distance of the last bidirectional T5 bucket: ceil(m (D / m)^((n - 1 - m) / (n - m)))
    with n = num_buckets // 2 buckets per direction and m = n // 2 exact ones."""
    n = num_buckets // 2
    m = n // 2
    return math.ceil(m * (max_distance / m) ** ((n - 1 - m) / (n - m)))


def shared_rows(family: str, value: int, max_offset: int) -> tuple[list[int], list[int]]:
    """For offsets r in [-D, D] without 0: how many offsets of that range share r's Shaw row
    (clip k = ``value``) or T5 bucket (max_distance = ``value``, 32 buckets, bidirectional).
    Returns (offsets, counts). A model that sees position only through that row cannot beat
    1 / count on offset r (guessing among the offsets it cannot tell apart)."""
    import torch

    from relpos_core.schemes import t5
    from relpos_core.terms import clipped_rows

    r = torch.cat([torch.arange(-max_offset, 0), torch.arange(1, max_offset + 1)])  # (2D,)
    if family == "shaw":
        rows = clipped_rows(value)(r.clone())  # (2D,) clip(r, -k, k) + k
    elif family == "t5":
        rows = t5.t5_relative_bucket(r, max_distance=value)  # (2D,)
    else:
        raise ValueError(f"family must be 'shaw' or 't5', got {family!r}")
    counts = (rows[:, None] == rows[None, :]).sum(1)  # (2D,)
    return r.tolist(), counts.tolist()


def _vertical(go, x, y_top, name, color, dash, showlegend):
    return go.Scatter(x=[x, x], y=[0, y_top], mode="lines", name=name, line=dict(color=color, dash=dash, width=1.5),
                      hoverinfo="name", showlegend=showlegend, legendgroup=name)


def clipping_slider(results: dict, family: str):
    """Accuracy against the offset r to the marker at the training length, one frame per
    clip k (``family="shaw"``) or T5 max_distance (``family="t5"``). With it: the best a
    model can do from the position term alone (1 / offsets sharing r's row or bucket) and
    vertical lines at the first offsets that share a row or bucket with another."""
    if family not in ("shaw", "t5"):
        raise ValueError(f"family must be 'shaw' or 't5', got {family!r}")
    from relpos_core.figures._plotly import plotly_modules

    go, _ = plotly_modules()
    values = SHAW_KS if family == "shaw" else T5_MAX_DISTANCES
    default = 8 if family == "shaw" else 128
    base = "marker/shaw" if family == "shaw" else "marker/t5"
    suffix = "-k{}" if family == "shaw" else "-md{}"
    max_offset = results["preset"]["tasks"]["marker"]["options"]["max_offset"]

    def make(value):
        run_id = base if value == default else base + suffix.format(value)
        details, mean, per_seed = R.detail_accuracy(results, run_id)
        lo = [min(col) for col in zip(*per_seed)]
        hi = [max(col) for col in zip(*per_seed)]
        offsets, counts = shared_rows(family, value, max_offset)
        merged = [abs(r) for r, c in zip(offsets, counts) if c > 1]
        limit = value if family == "shaw" else (min(merged) if merged else max_offset)
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=details, y=mean, mode="lines+markers", name="accuracy (mean of seeds)",
                                 error_y=dict(type="data", symmetric=False, array=[h - m for h, m in zip(hi, mean)],
                                              arrayminus=[m - l for m, l in zip(mean, lo)], thickness=1, width=2),
                                 line=dict(color="#1f77b4")))
        fig.add_trace(go.Scatter(x=offsets, y=[1 / c for c in counts], mode="lines", name="position term alone",
                                 line=dict(color="#7f7f7f", dash="dot", shape="hvh")))
        label = f"clip at |r| = {value}" if family == "shaw" else f"first shared bucket at |r| = {limit}"
        fig.add_trace(_vertical(go, -limit, 1.05, label, "#d62728", "dash", False))
        fig.add_trace(_vertical(go, limit, 1.05, label, "#d62728", "dash", False))
        title = (f"Shaw key+value, k = {value}" if family == "shaw" else f"T5, max_distance = {value}")
        fig.update_layout(
            title=title, height=420, margin=dict(l=70, r=20, t=60, b=60), showlegend=False,
            xaxis=dict(title="offset r = marker position − token position", range=[-max_offset - 1, max_offset + 1],
                       dtick=4),
            yaxis=dict(title="accuracy", range=[0, 1.05]),
        )
        return fig

    return _steady_slider(make, list(values), name="k" if family == "shaw" else "max_distance", initial=default,
                          below_axis=True)


def band_figure(results: dict, offsets=(-16, 15), seed_index: int = 0):
    """Cosine similarity between the rows of Shaw's layer-0 key table for offsets
    ``offsets[0] .. offsets[1]``, random start and sinusoidal start side by side, with a
    slider from before to after training (one seed, the first by default)."""
    runs = (("marker/shaw-k16", "random start"), ("marker/shaw-k16-sinusoidal", "sinusoidal start"))
    ticks = list(range(offsets[0], offsets[1] + 1))

    def make(stage):
        panels = []
        for run_id, _ in runs:
            rec = R.records(results, run_id)[seed_index]
            k = rec["tables"]["initial"]["k"]
            rows = slice(offsets[0] + k, offsets[1] + k + 1)  # row r + k holds offset r
            key = "initial" if stage == "before training" else "trained"
            panels.append(R.cosine_similarity(rec["tables"][key]["rel_key"])[rows, rows])
        fig = _rp_figures().heatmap(panels, titles=[label for _, label in runs], x_ticks=ticks, y_ticks=ticks,
                                    x_label="offset r'", y_label="offset r", zmin=-1, zmax=1, colorscale="RdBu_r",
                                    annotate_max=0, height=430, title=f"Shaw key table, layer 0, {stage}")
        fig.update_xaxes(dtick=8)
        fig.update_yaxes(dtick=4)
        fig.update_yaxes(showticklabels=False, row=1, col=2)  # the left panel's labels serve both
        fig.update_traces(colorbar=dict(title=dict(text="cosine<br>similarity"), len=0.8))
        return fig

    return _steady_slider(make, ["before training", "after training"], name="table", initial="after training")


def position_figure(results: dict, variants=("learned", "rope", "deberta", "deberta_emd")):
    """Accuracy against absolute position for the position task (mean over seeds)."""
    series, details, styles = {}, None, {}
    for v in variants:
        details, mean, _ = R.detail_accuracy(results, f"position/{v}")
        series[LABELS.get(v, v)] = mean
        styles[LABELS.get(v, v)] = dict(line=dict(dash=_dash(v)))
    fig = _rp_figures().line(details, series, x_label="absolute position i", y_label="accuracy", height=420,
                             styles=styles)
    fig.update_yaxes(range=[0, 1.05])
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0),
                      margin=dict(b=140))
    return fig


def _steady_slider(make_figure, values, *, name, initial, below_axis: bool = False):
    """``rp.figures.slider`` with two changes to its static (HTML) form: every frame keeps
    the figure's full height (the frames would otherwise carry each figure's own height,
    without the room added for the slider, and the plot would shrink when the slider
    moves), and with ``below_axis`` the slider sits below a bottom x axis and its title."""
    from relpos_core.figures.slider import SliderFigure

    class Steady(SliderFigure):
        def static_figure(self):
            fig = super().static_figure()
            if below_axis:
                fig.layout.sliders[0].pad = dict(t=75)
                fig.update_layout(margin=dict(b=150), height=fig.layout.height + 40)
            for frame in fig.frames:
                frame.layout.height = fig.layout.height
            return fig

    return Steady(make_figure, values, name=name, initial=initial)


# ----------------------------------------------------------------------------- PNGs for the CLI


def save_plots(results: dict, out_dir, stem: str) -> list[str]:
    """Write one PNG per task (accuracy against length) and the marker and position
    detail plots into ``out_dir``; returns the paths (empty without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    p = results["provenance"]
    note = f"preset {p['preset']}, seeds {p['seeds']}, torch {p['torch']}, {p['date']}"
    tasks = [t for t in results["preset"]["tasks"] if len(results["preset"]["tasks"][t]["multipliers"]) > 1]
    for task in tasks:
        rows = R.length_table(results, task, _main_variants(results, task))
        mults = [k for k in rows[0] if isinstance(k, int)]
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        for row in rows:
            mean = [row[m]["mean"] for m in mults]
            err = [[row[m]["mean"] - row[m]["min"] for m in mults], [row[m]["max"] - row[m]["mean"] for m in mults]]
            ax.errorbar(mults, mean, yerr=err, marker="o", capsize=3, label=LABELS.get(row["variant"], row["variant"]),
                        linestyle="-" if _dash(row["variant"]) == "solid" else "--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(mults, [f"{m}x" for m in mults])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel(f"evaluation length (x the training length {results['preset']['tasks'][task]['train_length']})")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{task}: {note}", fontsize=8)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out_dir / f"{stem}-{task}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))
    detail_plots = [("marker", [r["run_id"] for r in results["preset"]["runs"] if r["task"] == "marker"]),
                    ("position", [r["run_id"] for r in results["preset"]["runs"] if r["task"] == "position"])]
    for task, ids in detail_plots:
        if not ids:
            continue
        cols = 4
        rows = -(-len(ids) // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(12, 2.3 * rows + 0.8), sharex=True, sharey=True,
                                 squeeze=False)
        for ax, run_id in zip(axes.flat, ids):
            details, mean, per_seed = R.detail_accuracy(results, run_id)
            for seed in per_seed:
                ax.plot(details, seed, color="0.75", linewidth=0.8)
            ax.plot(details, mean, marker=".", color="C0", linewidth=1.2)
            ax.set_title(run_id.split("/", 1)[1], fontsize=8)
            ax.set_ylim(0, 1.05)
            ax.grid(alpha=0.3)
        for ax in axes.flat[len(ids):]:
            ax.set_visible(False)
        fig.supxlabel("offset r = marker - token" if task == "marker" else "absolute position", fontsize=9)
        fig.supylabel("accuracy at the training length (grey: each seed)", fontsize=9)
        fig.suptitle(f"{task} by detail: {note}", fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{stem}-{task}-detail.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(str(path))
    return paths


def _main_variants(results: dict, task: str) -> list[str]:
    """Variants of ``task`` that are one model per scheme (no sweeps)."""
    return [r["variant"] for r in results["preset"]["runs"] if r["task"] == task and r["variant"] == r["scheme"]]
