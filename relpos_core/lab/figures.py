"""Figures of a lab run: plotly figures for the chapter (through ``rp.figures``) and
matplotlib PNGs for ``python -m relpos_core.lab``.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb,
chapters/15_experiments_marker.ipynb). plotly and matplotlib
are imported inside the functions, never when the module is imported. Labels and line
styles come from the scheme declarations; one colour per scheme across every figure.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

from relpos_core import schemes

from . import results as R

__all__ = ["LABELS", "label", "short_label", "color", "length_figure", "levels_figure", "steps_figure", "curves_figure", "paired_figure",
           "parts_figure", "clipping_figure", "clipping_families", "band_figure", "position_figure", "shared_rows", "budget_name",
           "save_plots"]

LABELS = {name: schemes.lookup(name).display for name in schemes.names()}  # from the declarations
_SUFFIXES = {"1layer": "one layer", "k16": "k = 16", "sinusoidal": "sinusoidal start"}
FLOOR_STYLE = dict(color="#555555", dash="dot", width=1.5)


def label(variant: str) -> str:
    """Display name of a lab variant: the declaration's, with the experiment's change after it."""
    base, *rest = variant.split("-")
    name = LABELS.get(base, base)
    return name if not rest else f"{name}, " + ", ".join(_SUFFIXES.get(x, x) for x in rest)


def short_label(variant: str) -> str:
    """A compact label for crowded axes: the declaration's ``short``, with the change after it."""
    base, *rest = variant.split("-")
    name = schemes.lookup(base).short if base in LABELS else base
    return name if not rest else f"{name}, " + ", ".join(_SUFFIXES.get(x, x) for x in rest)


def color(variant: str) -> str:
    """The declaration's colour of a lab variant's scheme (one colour per scheme in the book)."""
    name = variant.split("-")[0]
    return schemes.lookup(name).color if name in LABELS else "#000000"


def _dash(variant: str) -> str:
    """Dotted for no position, dashed for positions added to the tokens, solid for the rest."""
    name = variant.split("-")[0]
    if name not in LABELS:
        return "solid"
    scheme = schemes.lookup(name).scheme
    return "dot" if not scheme.has_positions else "dash" if scheme.positions_in_tokens else "solid"


def budget_name(results: dict, budget: int) -> str:
    return "the cap" if budget == 1 else f"{budget}x the cap"


def _go():
    from relpos_core.figures._plotly import plotly_modules

    return plotly_modules()[0]


def _steady_slider(make_figure, values, *, name, initial, below_axis: bool = False):
    """``rp.figures.slider`` whose frames keep the figure's full height (and, with
    ``below_axis``, a slider below a bottom x axis and its title)."""
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


def _bottom_legend(fig, rows: int = 3):
    """The legend in rows above the plot (the budget slider sits below the axis), with room
    for ``rows`` rows; plotly grows the margin where a narrow screen wraps it into more."""
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      margin=dict(l=60, r=20, t=30 + 22 * rows, b=110))
    return fig


def _budgets_slider(results, make, initial=None):
    names = [budget_name(results, b) for b in R.budgets(results)]
    by_name = dict(zip(names, R.budgets(results)))
    return _steady_slider(lambda n: make(by_name[n]), names, name="budget", initial=initial or names[0])


def length_figure(results: dict, task: str, variants=None, *, lr: float | None = None, height: int = 520):
    """Accuracy against evaluation length, one line per model, a slider over the budget.

    Each point is the mean over the runs that solved the task within that budget (all
    runs at the training length), error bars from the lowest to the highest such run; the
    hover says how many runs that is. The grey dotted line is the task's position-free
    floor."""
    setup = results["preset"]["tasks"][task]
    probes = [p for p in setup["probes"] if not p["options"]]
    xs = [p["length"] for p in probes]
    variants = variants or [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    go = _go()

    def make(budget):
        fig = go.Figure()
        floor = [R.summary(R.values(results, f"{task}/{variants[0]}", p["name"], budget=budget,
                                    what="floor").values())["mean"] for p in probes]
        fig.add_trace(go.Scatter(x=xs, y=floor, mode="lines", name="position-free floor", line=FLOOR_STYLE,
                                 hovertemplate="floor %{y:.2f}<extra></extra>"))
        unsolved = []
        for v in variants:
            run_id = f"{task}/{v}"
            means, lo, hi, text = [], [], [], []
            for i, p in enumerate(probes):
                vals = list(R.values(results, run_id, p["name"], budget=budget, lr=lr, solved_only=i > 0).values())
                k = len(vals)
                n = len(R.records(results, run_id, lr))
                s = R.summary(vals) if vals else None
                means.append(s["mean"] if s else None)
                lo.append(s["mean"] - s["min"] if s else 0)
                hi.append(s["max"] - s["mean"] if s else 0)
                text.append(f"{k} of {n} runs")
            if all(m is None for m in means[1:]):
                unsolved.append(label(v))
            fig.add_trace(go.Scatter(
                x=xs, y=means, mode="lines+markers", name=label(v), text=text,
                line=dict(color=color(v), dash=_dash(v), width=1.8), marker=dict(size=6),
                error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo, thickness=1, width=3),
                hovertemplate=f"{label(v)}<br>L = %{{x}}: %{{y:.2f}} (%{{text}})<extra></extra>"))
        # a model no run of which solved the task has no point past the training length: said under the
        # axis title (inside the plot it would cover the lines of the models that did)
        if len(unsolved) == len(variants):
            note = _wrapped("no model solved the task in this budget: nothing to show past the training length")
        else:
            note = _wrapped("not solved in this budget: " + ", ".join(unsolved)) if unsolved else ""
        fig.add_annotation(text=note, xref="paper", yref="paper", x=0, y=0, yshift=-46, xanchor="left",
                           yanchor="top", align="left", showarrow=False, font=dict(size=11, color="#555"),
                           visible=bool(note))
        fig.update_layout(height=height, xaxis=dict(title=f"evaluation length L (trained at {setup['train_length']})",
                                                    type="log", tickvals=xs, ticktext=[str(x) for x in xs]),
                          yaxis=dict(title="accuracy", range=[0, 1.05]))
        fig = _bottom_legend(fig, rows=math.ceil((len(variants) + 1) / 4))
        return fig.update_layout(margin=dict(b=130))  # the note's three lines under the axis title

    return _budgets_slider(results, make)


def _wrapped(text: str, width: int = 40) -> str:
    """``text`` in lines of at most ``width`` characters joined by ``<br>``: a phone's plot is about 260 px wide."""
    return "<br>".join(textwrap.wrap(text, width))


def levels_figure(results: dict, task: str, probe: str, variants=None, *, budget: int | None = None,
                  reference: float | None = None, reference_label: str | None = None,
                  height: int | None = None):
    """One probe's accuracy per model and learning rate: a row per model, a point per
    learning rate at the mean over the runs that solved the task within ``budget``
    (default: the largest), bars for its 95% t interval (a point needs two solved runs;
    a row without one says how many were solved). ``reference`` draws a dotted vertical
    line (a baseline such as the binding-free score) named by ``reference_label``."""
    go = _go()
    found = R.budgets(results)
    b = found[-1] if budget is None else budget
    if b not in found:
        raise ValueError(f"budget must be one of {found}, got {budget!r}")
    variants = variants or [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    rows = [short_label(v) for v in variants]
    fig = go.Figure()
    the_lrs = R.lrs(results)
    for j, lr in enumerate(the_lrs):
        xs, ys, lo, hi, text = [], [], [], [], []
        for i, v in enumerate(variants):
            vals = list(R.values(results, f"{task}/{v}", probe, budget=b, lr=lr, solved_only=True).values())
            n = len(R.records(results, f"{task}/{v}", lr))
            if len(vals) < 2:
                continue
            ti = R.t_interval(vals)
            xs.append(ti["mean"])
            ys.append(i + (j - (len(the_lrs) - 1) / 2) * 0.22)
            lo.append(ti["mean"] - ti["low"])
            hi.append(ti["high"] - ti["mean"])
            text.append(f"{label(v)}, lr {lr:g}: {ti['mean']:.2f} [{ti['low']:.2f}, {ti['high']:.2f}],"
                        f" {len(vals)} of {n} runs solved")
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=f"learning rate {lr:g}", text=text,
            marker=dict(symbol=("circle", "diamond")[j % 2], size=9, color=("#1f77b4", "#ff7f0e")[j % 2]),
            error_x=dict(type="data", symmetric=False, array=hi, arrayminus=lo, thickness=1.4, width=3),
            hovertemplate="%{text}<extra></extra>"))
    empty = [i for i, v in enumerate(variants)
             if not any(len(R.values(results, f"{task}/{v}", probe, budget=b, lr=lr, solved_only=True)) >= 2
                        for lr in the_lrs)]
    for i in empty:
        k, n = R.solved(results, f"{task}/{variants[i]}", budget=b)
        fig.add_annotation(x=0.02, y=i, text=f"{k} of {n} runs solved", showarrow=False, xanchor="left",
                           font=dict(size=12, color="#666666"))
    if reference is not None:
        fig.add_vline(x=reference, line=FLOOR_STYLE, annotation_text=reference_label,
                      annotation_position="top")
    fig.update_layout(height=height or min(600, 150 + 34 * len(rows)),
                      xaxis=dict(title=f"accuracy at {probe.lstrip('L')} tokens (95% interval)", range=[0, 1.05]),
                      yaxis=dict(tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed",
                                 zeroline=False, automargin=True, range=[len(rows) - 0.5, -0.5]),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      margin=dict(l=20, r=20, t=80, b=60))
    return fig


def steps_figure(results: dict, task: str, variants=None, *, height: int | None = None):
    """Steps to solve, one point per run (circles: the smaller learning rate, diamonds: the
    larger), and a cross at the right for every run not solved within the largest budget.
    One row per model (labels read horizontally, however many models the task has)."""
    go = _go()
    setup = results["preset"]["tasks"][task]
    variants = variants or [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    top = setup["cap"] * max(R.budgets(results))
    fig = go.Figure()
    symbols = ("circle", "diamond", "square", "triangle-up")
    for j, lr in enumerate(R.lrs(results)):
        ys, xs, names = [], [], []
        ys_u, names_u = [], []
        for v in variants:
            for (run_lr, seed), step in R.steps_to_solve(results, f"{task}/{v}", lr).items():
                if step is None:
                    ys_u.append(short_label(v))
                    names_u.append(f"seed {seed}")
                else:
                    ys.append(short_label(v))
                    xs.append(step)
                    names.append(f"seed {seed}")
        colour = "#1f77b4" if j == 0 else "#ff7f0e"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=f"solved, learning rate {lr:g}", text=names,
                                 marker=dict(symbol=symbols[j % 4], size=8, opacity=0.75, color=colour),
                                 hovertemplate="%{y}, %{text}: %{x} steps<extra></extra>"))
        fig.add_trace(go.Scatter(x=[top * 1.25] * len(ys_u), y=ys_u, mode="markers",
                                 name=f"not solved in {top} steps, learning rate {lr:g}", text=names_u,
                                 marker=dict(symbol="x", size=8, color=colour),
                                 hovertemplate="%{y}, %{text}: not solved<extra></extra>"))
    cap = setup["cap"]
    fig.add_vline(x=cap, line=dict(color="#999999", dash="dash", width=1))
    fig.add_vline(x=top, line=dict(color="#999999", dash="dash", width=1))
    ticks = [v for v in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if v <= top * 1.3]
    rows = [short_label(v) for v in variants]
    height = height or min(600, max(300, 170 + 28 * len(rows)))  # a row per model, one screen
    fig.update_layout(height=height,
                      yaxis=dict(title=None, categoryorder="array", categoryarray=rows[::-1]),
                      xaxis=dict(title="steps to solve (log)", type="log", tickvals=ticks,
                                 ticktext=[str(t) for t in ticks]))
    fig.update_layout(legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      margin=dict(l=110, r=20, t=90, b=60))
    return fig


def curves_figure(results: dict, task: str, variants=None, *, seed: int = 0, lr: float | None = None):
    """Training loss against step for every model of ``task`` (one seed, one learning rate)."""
    variants = variants or [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    lr = R.lrs(results)[0] if lr is None else lr
    go = _go()
    fig = go.Figure()
    for v in variants:
        rec = next(r for r in R.records(results, f"{task}/{v}", lr) if r["seed"] == seed)
        fig.add_trace(go.Scatter(x=[c[0] for c in rec["curve"]], y=[c[1] for c in rec["curve"]], mode="lines",
                                 name=label(v), line=dict(color=color(v), dash=_dash(v), width=1.6)))
    fig.update_layout(height=460, xaxis=dict(title="training step"),
                      yaxis=dict(title="training loss (nats, log)", type="log"))
    return _bottom_legend(fig, rows=math.ceil(len(variants) / 4))


def paired_figure(results: dict, comparisons, *, height: int | None = None):
    """Paired differences with their intervals: one row per comparison (label, run_a, run_b,
    probe), one point per (learning rate, budget) at the mean of A - B over seeds, bars for
    its 95% t interval. A row whose four bars all stay on one side of 0 holds everywhere."""
    go = _go()
    fig = go.Figure()
    styles = {}
    the_lrs, the_budgets = R.lrs(results), R.budgets(results)
    for i, lr in enumerate(the_lrs):
        for j, b in enumerate(the_budgets):
            styles[(lr, b)] = dict(color=("#1f77b4", "#ff7f0e")[i % 2], symbol=("circle", "diamond")[j % 2])
    labels = [c[0] for c in comparisons]
    for (lr, b), style in styles.items():
        xs, lo, hi, ys, text = [], [], [], [], []
        for k, (name, a, bb, probe) in enumerate(comparisons):
            d = R.paired(results, a, bb, probe, budget=b, lr=lr)
            if d["n"] < 2:
                continue
            offset = (the_lrs.index(lr) * len(the_budgets) + the_budgets.index(b) - 1.5) * 0.15
            ys.append(k + offset)
            xs.append(d["mean"])
            lo.append(d["mean"] - d["low"])
            hi.append(d["high"] - d["mean"])
            text.append(f"{name}: {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}], {d['n']} seeds")
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers", name=f"lr {lr:g}, {budget_name(results, b)}", text=text,
            marker=dict(color=style["color"], symbol=style["symbol"], size=8),
            error_x=dict(type="data", symmetric=False, array=hi, arrayminus=lo, thickness=1.2, width=3),
            hovertemplate="%{text}<extra></extra>"))
    fig.add_vline(x=0, line=dict(color="#444444", width=1))
    fig.update_layout(height=height or 140 + 48 * len(comparisons),
                      xaxis=dict(title="A − B, accuracy (95% interval)", range=[-1.05, 1.05]),
                      yaxis=dict(tickvals=list(range(len(labels))), ticktext=labels, autorange="reversed",
                                 zeroline=False, automargin=True),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                      margin=dict(l=20, r=20, t=80, b=60))
    return fig


def parts_figure(results: dict, task: str, variants=None, *, probe: str | None = None):
    """Bidirectional marker task: the share of labels with the right sign (which side) and the
    right distance, per model, mean over every run; a slider over the budget."""
    go = _go()
    setup = results["preset"]["tasks"][task]
    probe = probe or setup["probes"][0]["name"]
    variants = variants or [r["variant"] for r in results["preset"]["runs"]
                            if r["task"] == task and r["variant"] == r["scheme"]]

    def make(budget):
        fig = go.Figure()
        for part, col in (("sign", "#4d4d4d"), ("distance", "#b3b3b3")):  # not scheme colours
            ys, err_lo, err_hi = [], [], []
            for v in variants:
                s = R.summary(R.values(results, f"{task}/{v}", probe, budget=budget, what=part).values())
                ys.append(s["mean"])
                err_lo.append(s["mean"] - s["min"])
                err_hi.append(s["max"] - s["mean"])
            fig.add_trace(go.Bar(x=[short_label(v) for v in variants], y=ys, name=f"right {part}", marker_color=col,
                                 error_y=dict(type="data", symmetric=False, array=err_hi, arrayminus=err_lo,
                                              thickness=1, width=2)))
        fig.add_hline(y=0.5, line=dict(color="#555555", dash="dot", width=1))
        fig.update_layout(barmode="group", height=460, yaxis=dict(title="share of labels", range=[0, 1.05]),
                          xaxis=dict(tickangle=-90),  # upright labels never overlap
                          legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                          margin=dict(l=60, r=20, t=60, b=120))
        return fig

    return _budgets_slider(results, make)


def shared_rows(family: str, value: int, max_offset: int) -> tuple[list[int], list[int]]:
    """For offsets r in [-D, D] without 0: how many offsets of that range share r's table row
    or bucket in scheme ``family`` with its distance parameter set to ``value`` (Shaw: clip
    k = ``value``; T5: max_distance = ``value``, 32 buckets, bidirectional). Returns (offsets,
    counts). One layer that sees position only through that row cannot beat 1 / count on
    offset r (guessing among the offsets it cannot tell apart)."""
    import torch

    from relpos_core.pieces.vectors import RowIndex

    entry = schemes.lookup(family)
    if entry.scheme.distance is None:
        raise ValueError(f"family must be a scheme with a distance parameter, got {family!r}")
    term = entry.example(1, 2, device="meta", options={entry.scheme.distance.name: value})
    index = next((v for p in term.all_pieces for v in vars(p).values() if isinstance(v, RowIndex)), None)
    if index is None:
        raise ValueError(f"family must be a scheme whose term reads a table row per offset, got {family!r}")
    r = torch.cat([torch.arange(-max_offset, 0), torch.arange(1, max_offset + 1)])  # (2D,) j - i
    rows = index(r.clone())  # (2D,) the row of each offset
    counts = (rows[:, None] == rows[None, :]).sum(1)  # (2D,)
    return r.tolist(), counts.tolist()


def _family_options(results: dict, family: str):
    run = next(r for r in results["preset"]["runs"] if r["task"] == "marker" and r["variant"] == family)
    return schemes.lookup(family).options(run["position"])


def clipping_families() -> list[str]:
    """The schemes whose declarations bring runs to the clipping experiment (``Lab.runs``)."""
    return [n for n in schemes.names() if any(r.experiment == "clipping" for r in schemes.lookup(n).lab.runs)]


def clipping_figure(results: dict, *, budget: int = 1):
    """Accuracy against the offset r to the marker at the training length, one layer against
    two, with the best one layer can do from its position term alone (1 / offsets sharing
    r's row or bucket); a slider between Shaw's clipped table and T5's buckets."""
    go = _go()
    max_offset = results["preset"]["tasks"]["marker"]["options"]["max_offset"]

    def make(family):
        options, distance = _family_options(results, family), schemes.lookup(family).scheme.distance
        value = getattr(options, distance.name)
        offsets, counts = shared_rows(family, value, max_offset)
        fig = go.Figure()
        fig.add_trace(go.Scatter(x=offsets, y=[1 / c for c in counts], mode="lines", name="one layer's bound",
                                 line=dict(color="#555555", dash="dot", shape="hvh", width=1.5)))
        for variant, name, col in ((f"{family}-1layer", "one layer", "#d62728"), (family, "two layers", "#1f77b4")):
            details, mean, per_run = R.detail_accuracy(results, f"marker/{variant}", budget=budget)
            lo = [m - min(c) for m, c in zip(mean, zip(*per_run))]
            hi = [max(c) - m for m, c in zip(mean, zip(*per_run))]
            fig.add_trace(go.Scatter(x=details, y=mean, mode="lines+markers", name=name, line=dict(color=col),
                                     error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo,
                                                  thickness=1, width=2)))
        # 13 px: "T5 buckets, 32 buckets, max_distance = 128" fits a phone's width on one line
        fig.update_layout(title=dict(text=f"{LABELS[family]}, {distance.describe(options)}", y=0.98,
                                     font=dict(size=13)), height=480,
                          xaxis=dict(title="offset r = marker position − token position",
                                     range=[-max_offset - 1, max_offset + 1], dtick=4),
                          yaxis=dict(title="accuracy (every run)", range=[0, 1.05]),
                          legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
                          margin=dict(l=60, r=20, t=100, b=110))
        return fig

    families = clipping_families()
    return _steady_slider(make, families, name="scheme", initial=families[0])


def band_figure(results: dict, offsets=(-16, 15), seed: int = 0, lr: float | None = None):
    """Cosine similarity between the rows of Shaw's layer-0 key table for offsets
    ``offsets[0] .. offsets[1]``, random start and sinusoidal start side by side, with a
    slider from before to after training (one run)."""
    runs = (("marker/shaw-k16", "random start"), ("marker/shaw-k16-sinusoidal", "sinusoidal start"))
    ticks = list(range(offsets[0], offsets[1] + 1))
    lr = R.lrs(results)[0] if lr is None else lr

    def make(stage):
        import relpos_core.figures as rpf

        panels = []
        for run_id, _ in runs:
            rec = next(r for r in R.records(results, run_id, lr) if r["seed"] == seed)
            k = rec["tables"]["initial"]["k"]
            rows = slice(offsets[0] + k, offsets[1] + k + 1)  # row r + k holds offset r
            key = "initial" if stage == "before training" else "trained"
            panels.append(R.cosine_similarity(rec["tables"][key]["rel_key"])[rows, rows])
        fig = rpf.heatmap(panels, titles=[name for _, name in runs], x_ticks=ticks, y_ticks=ticks,
                          x_label="offset r'", y_label="offset r", zmin=-1, zmax=1, colorscale="RdBu_r",
                          annotate_max=0, height=430, title=f"Shaw key table, layer 0, {stage}")
        fig.update_xaxes(dtick=8)
        fig.update_yaxes(dtick=4)
        fig.update_yaxes(showticklabels=False, row=1, col=2)  # the left panel's labels serve both
        fig.update_traces(colorbar=dict(title=dict(text="cosine<br>similarity"), len=0.8))
        return fig

    return _steady_slider(make, ["before training", "after training"], name="table", initial="after training")


def position_figure(results: dict, variants=None):
    """Accuracy against absolute position for the position task (mean over every run), a
    slider over the budget."""
    go = _go()
    variants = variants or [r["variant"] for r in results["preset"]["runs"] if r["task"] == "position"]

    def make(budget):
        fig = go.Figure()
        details = None
        for v in variants:
            details, mean, _ = R.detail_accuracy(results, f"position/{v}", budget=budget)
            fig.add_trace(go.Scatter(x=details, y=mean, mode="lines+markers", name=label(v), marker=dict(size=4),
                                     line=dict(color=color(v), dash=_dash(v))))
        fig.update_layout(height=440, xaxis=dict(title="absolute position i"),
                          yaxis=dict(title="accuracy (every run)", range=[0, 1.05]))
        return _bottom_legend(fig, rows=1)

    return _budgets_slider(results, make)


# ----------------------------------------------------------------------------- PNGs for the CLI


def save_plots(results: dict, out_dir, stem: str) -> list[str]:
    """One PNG per task with a length ladder (accuracy against length, largest budget, solved
    runs), and the steps to solve of every task; returns the paths (empty without matplotlib)."""
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
    budget = max(R.budgets(results))
    note = f"preset {p['preset']}, {len(p['seeds'])} seed(s) x {len(p['lrs'])} lr, {p['cpu_capability']}, {p['date']}"
    for task, setup in results["preset"]["tasks"].items():
        variants = [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
        if not variants:
            continue
        rows = R.length_table(results, task, variants, budget=budget)
        probes = R._probe_keys(rows[0])
        lengths = [int(k[1:]) for k in probes]
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
        for row in rows:
            ys = [row[k]["mean"] if row[k] else float("nan") for k in probes]
            ax.plot(lengths, ys, marker="o", label=f"{label(row['variant'])} ({row['solved'][0]}/{row['solved'][1]})",
                    linestyle="-" if _dash(row["variant"]) == "solid" else "--", color=color(row["variant"]))
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(x) for x in lengths])
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("evaluation length (solved runs)")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=6, ncol=2)
        for i, v in enumerate(variants):
            steps = [s for s in R.steps_to_solve(results, f"{task}/{v}").values()]
            bx.scatter([i] * len(steps), [s if s is not None else setup["cap"] * budget * 1.2 for s in steps],
                       marker="o", color=color(v), s=14)
        bx.set_xticks(range(len(variants)), [label(v) for v in variants], rotation=60, fontsize=6, ha="right")
        bx.set_yscale("log")
        bx.set_ylabel("steps to solve (top row: not solved)")
        fig.suptitle(f"{task}: {note}", fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{stem}-{task}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(str(path))
    return paths
