"""Results of a lab run: JSON with provenance, and the statistics the chapter reads from it.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb).

A results file is one JSON object:

* ``format``: ``"relpos-lab/2"``;
* ``provenance``: the machine (``relpos_core.provenance.machine``: CPU model, the
  instruction set torch dispatched to, threads, torch build, load average), date, git
  commit, preset, seeds, learning rates, wall and CPU time, and the command;
* ``preset``: the full preset (tasks, probes, caps, budgets, solve rule, every run);
* ``runs``: one record per (run, seed, learning rate): steps trained, the step it was
  solved at (or None), the learning curve, and per budget the evaluation at every probe.

Statistics (all over runs that share a learning rate; each claim is checked at every
learning rate and every budget, its *cells*):

* ``summary``: mean, sample standard deviation, min, max;
* ``t_interval``: Student's t interval for a mean (two-sided, 95% by default);
* ``held_out_solved``: whether a run solved its task, read from its held-out evaluation at
  the training condition (accuracy >= ``SOLVED_HELD_OUT``, 0.95); the training rule that
  stops a run (``solved_at``) is kept as ``rule="training"``;
* ``paired``: scheme A minus scheme B seed by seed (the two saw the same batches and are
  scored on the same rows), with the interval of the mean difference and the count of
  seeds each way; at a probe other than the training one only seeds where both runs
  solved their task count ("k of N solved");
* ``permutation_p``: a two-sided exact permutation test of a difference of means (the
  interaction test behind "depends on the learning rate" and "budget-dependent");
* ``verdict``: a claim checked at every (learning rate, budget) cell: "holds", "holds
  where testable", "depends on the learning rate", "budget-dependent", "shown in some
  cells", "not shown", "does not hold" (the opposite shown) or "untestable".

A level claim (``at_least``, ``at_most``) is shown in a cell when the whole 95% interval of
the mean lies past the level, over at least ``min_seeds`` (3) runs; a comparison
(``better``) when the interval of the paired difference lies above zero. A cell whose
interval straddles the boundary is "not shown", not "does not hold".
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import torch

from ..provenance import git_commit, machine

__all__ = [
    "FORMAT", "COMMITTED", "build_results", "results_text", "save_results", "load_results", "committed_path",
    "load_committed", "from_partial", "complete_seeds", "only_complete_seeds", "with_runs", "SHARED_SETTINGS", "lrs", "budgets", "records", "result", "values", "solved", "steps_to_solve", "summary",
    "t_quantile", "t_interval", "paired", "verdict", "VERDICTS", "better", "at_least", "at_most", "solves",
    "claims_table", "compact_claims_table", "verdict_grid", "SOLVED_HELD_OUT", "SOLVE_RULES", "held_out_solved", "is_solved",
    "permutation_p", "margin",
    "testable_text", "rows_for_standard_error",
    "length_table", "length_table_markdown",
    "detail_accuracy", "cosine_similarity", "provenance_line", "git_commit",
]

FORMAT = "relpos-lab/2"
COMMITTED = "lab-full.json"  # the committed results the chapters read


def build_results(preset, seeds, lrs, run_output: dict, *, command: str | None = None,
                  commit: str | None = None) -> dict:
    """The results object for ``run_output`` (from ``train.run_preset``). Pass ``commit``
    (``git_commit()`` taken before training) so edits made while it ran do not count. A
    preset cut down to some of its runs (``presets.subset``, ``--runs``) names them in the
    provenance's ``runs``."""
    from .presets import PRESETS

    provenance = {
        **machine("cpu", commit=commit),  # the lab trains on the CPU
        "preset": preset.name,
        "seeds": list(seeds),
        "lrs": list(lrs),
        "threads": run_output.get("threads"),
        "workers": run_output.get("workers", 1),
        "wall_s": run_output["wall_s"],
        "cpu_s": run_output.get("cpu_s"),
        "command": command,
    }
    if preset.name in PRESETS and len(preset.runs) < len(PRESETS[preset.name].runs):
        provenance["runs"] = [r.run_id for r in preset.runs]  # a subset of the named preset (--runs)
    if "load_start" in run_output:
        provenance["load_average_start"] = run_output["load_start"]
    return {"format": FORMAT, "provenance": provenance, "preset": preset.to_dict(), "runs": run_output["runs"]}


def results_text(results: dict) -> str:
    """``results`` as JSON text: provenance and preset indented, one line per run record."""
    head = {k: v for k, v in results.items() if k != "runs"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "runs": [\n  '
    text += ",\n  ".join(json.dumps(r, separators=(",", ":")) for r in results["runs"]) + "\n ]\n}\n"
    if json.loads(text) != json.loads(json.dumps(results)):  # pragma: no cover - a formatting bug
        raise RuntimeError("results_text: the compact layout does not read back as the same object")
    return text


def save_results(results: dict, path) -> Path:
    """Write ``results`` to ``path`` (``results_text``'s layout)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(results_text(results))
    return path


def load_results(path) -> dict:
    """Read a results file and check its shape (format, provenance, preset, runs)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing results file, got {str(path)!r}")
    results = json.loads(path.read_text())
    if not isinstance(results, dict) or results.get("format") != FORMAT:
        raise ValueError(f"{path} is not a lab results file of this version (format {FORMAT!r}): "
                         f"regenerate it with python -m relpos_core.lab")
    for key in ("provenance", "preset", "runs"):
        if key not in results:
            raise ValueError(f"{path} has no {key!r} entry")
    for key in ("device", "cpu_model", "cpu_capability", "torch", "date", "git_commit", "preset", "seeds", "lrs",
                "wall_s"):
        if key not in results["provenance"]:
            raise ValueError(f"{path}: provenance has no {key!r}")
    return results


def committed_path(name: str = COMMITTED) -> Path:
    """The committed results file ``name``, shipped with the package (``relpos_core/data/``,
    found by ``relpos_core.resources``): the same wherever relpos_core is installed. Every
    reader of committed lab results goes through this one function."""
    from relpos_core import resources

    return resources.path(name)


def load_committed(name: str = COMMITTED) -> dict:
    """``load_results(committed_path(name))``."""
    return load_results(committed_path(name))


def from_partial(path, *, preset=None) -> dict:
    """The results object of an unfinished run, read from its partial file
    (``<out>.partial.jsonl``, which ``python -m relpos_core.lab`` appends a row to as each run
    finishes), without moving or changing it: the same layout as the file the command line
    writes when it is stopped (``"complete": false``, every finished row, in the run's order).

    The partial file records the code's commit, seeds, learning rates and command, not the
    machine: the provenance's machine is the one this is called on, so call it on the
    machine that trained (``provenance["snapshot"]`` says when and from how many rows). The
    wall time is not known from the rows: ``wall_s`` is None. ``preset``: the preset the rows
    were trained with (default: the one named in the file, as this code defines it).
    """
    from ..outputs import read_partial
    from .presets import get_preset, subset
    from .train import jobs_of

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing partial file (<out>.partial.jsonl), got {str(path)!r}")
    head, rows = read_partial(path)
    if not head or not all(k in head for k in ("preset", "seeds", "lrs", "git_commit")):
        raise ValueError(f"{path} has no head line with preset, seeds, lrs and git_commit: not a lab partial file")
    if preset is None:
        preset = get_preset(head["preset"])
        if head.get("runs"):
            preset = subset(preset, head["runs"])
    if preset.name != head["preset"]:
        raise ValueError(f"preset must be the file's preset {head['preset']!r}, got {preset.name!r}")
    order = {(s.run_id, seed, lr): i for i, (s, seed, lr) in enumerate(jobs_of(preset, head["seeds"], head["lrs"]))}
    unknown = [(r["run_id"], r["seed"], r["lr"]) for r in rows if (r["run_id"], r["seed"], r["lr"]) not in order]
    if unknown:
        raise ValueError(f"{path} holds rows that preset {preset.name!r} does not define, e.g. {unknown[0]}")
    rows = sorted(rows, key=lambda r: order[(r["run_id"], r["seed"], r["lr"])])
    run = dict(runs=rows, wall_s=None, cpu_s=round(sum(r["cpu_s"] for r in rows), 2), threads=None,
               workers=None, load_start=head.get("load_start"))
    res = build_results(preset, head["seeds"], head["lrs"], run, command=head.get("command"),
                        commit=head["git_commit"])
    res["provenance"]["snapshot"] = {"partial": path.name, "rows": len(rows), "of": len(order),
                                     "date": res["provenance"]["date"]}
    res["complete"] = False
    return res


def complete_seeds(results: dict) -> list[int]:
    """The seeds for which every run of the preset finished at every learning rate."""
    wanted = {(r["run_id"], lr) for r in results["preset"]["runs"] for lr in lrs(results)}
    have: dict[int, set] = {}
    for r in results["runs"]:
        have.setdefault(r["seed"], set()).add((r["run_id"], r["lr"]))
    return [s for s in results["provenance"]["seeds"] if have.get(s, set()) >= wanted]


def only_complete_seeds(results: dict) -> dict:
    """``results`` restricted to ``complete_seeds``: every comparison is then paired over the
    same seeds at every learning rate. A complete file comes back unchanged (the same
    object); otherwise a copy whose ``provenance["seeds"]`` lists the seeds kept and
    ``provenance["seeds_dropped"]`` the unfinished ones."""
    keep = complete_seeds(results)
    if keep == list(results["provenance"]["seeds"]):
        return results
    if not keep:
        raise ValueError("results must hold at least one seed finished at every run and learning rate, "
                         f"got none of {results['provenance']['seeds']}")
    dropped = [s for s in results["provenance"]["seeds"] if s not in keep]
    provenance = {**results["provenance"], "seeds": keep, "seeds_dropped": dropped}
    runs = [r for r in results["runs"] if r["seed"] in keep]
    return {**results, "provenance": provenance, "runs": runs}


# the preset fields two runs must share for their records to be compared seed by seed
SHARED_SETTINGS = ("model", "budgets", "solve_threshold", "solve_window", "warmup_steps", "log_points")


def with_runs(results: dict, other: dict, run_ids) -> dict:
    """``results`` with ``other``'s records of ``run_ids`` added: controls trained once, by
    another run of the same settings, set beside new runs (a paired comparison needs only the
    same seeds: a seed fixes the training batches and the evaluation rows, whatever the run).

    Checked before anything is added (ValueError naming what differs): each run's task setup,
    the preset's shared training settings (``SHARED_SETTINGS``) and each run's spec (scheme,
    options, model) are equal in both; ``other`` holds each run at every seed and learning
    rate of ``results``; ``results`` does not hold them yet. Only those seeds and learning
    rates are taken. The copy's ``provenance["added"]`` names the runs and ``other``'s
    provenance (machine, torch, date, commit, command), so the file each record came from stays
    known."""
    ids = list(run_ids)
    if not ids:
        raise ValueError("run_ids must name at least one run of other")
    mine, theirs = results["preset"], other["preset"]
    def plain(x):  # as read back from JSON (a preset built in memory holds tuples)
        return json.loads(json.dumps(x))

    for key in SHARED_SETTINGS:
        if plain(mine[key]) != plain(theirs[key]):
            raise ValueError(f"other must share the preset's {key}: {mine[key]!r} here, {theirs[key]!r} there")
    specs = {r["run_id"]: r for r in theirs["runs"]}
    have = {r["run_id"] for r in results["runs"]}
    seeds, the_lrs = list(results["provenance"]["seeds"]), lrs(results)
    added = []
    for run_id in ids:
        if run_id not in specs:
            raise ValueError(f"run_ids must be runs of other ({', '.join(specs)}), got {run_id!r}")
        if run_id in have:
            raise ValueError(f"results already holds {run_id!r}: nothing to add")
        task = specs[run_id]["task"]
        if plain(mine["tasks"].get(task)) != plain(theirs["tasks"][task]):
            raise ValueError(f"other's task {task!r} (of {run_id}) is set up differently from this run's")
        got = [r for r in other["runs"] if r["run_id"] == run_id and r["seed"] in seeds and r["lr"] in the_lrs]
        missing = sorted({(s, lr) for s in seeds for lr in the_lrs} - {(r["seed"], r["lr"]) for r in got})
        if missing:
            raise ValueError(f"other lacks {run_id} at (seed, lr) {missing}")
        added += got
    preset = {**mine, "runs": list(mine["runs"]) + [specs[i] for i in ids]}
    source = {k: other["provenance"].get(k) for k in ("device_name", "cpu_model", "torch", "date", "git_commit",
                                                        "command")}
    provenance = {**results["provenance"],
                  "added": list(results["provenance"].get("added", [])) + [{"runs": ids, "from": source}]}
    return {**results, "provenance": provenance, "preset": preset, "runs": list(results["runs"]) + added}


# ----------------------------------------------------------------------------- reading records


def lrs(results: dict) -> list[float]:
    return list(results["provenance"]["lrs"])


def budgets(results: dict) -> list[int]:
    return sorted(results["preset"]["budgets"])


def records(results: dict, run_id: str, lr: float | None = None) -> list[dict]:
    """Every record of ``run_id`` (at one learning rate, or all), in (learning rate, seed) order."""
    found = [r for r in results["runs"] if r["run_id"] == run_id and (lr is None or r["lr"] == lr)]
    if not found:
        ids = sorted({r["run_id"] for r in results["runs"]})
        if run_id not in ids:
            raise ValueError(f"run_id must be one of {ids}, got {run_id!r}")
        raise ValueError(f"lr must be one of {lrs(results)}, got {lr!r}")
    return sorted(found, key=lambda r: (r["lr"], r["seed"]))


def result(record: dict, probe: str, budget: int = 1) -> dict:
    """A record's evaluation at ``probe`` after ``budget`` (x the cap)."""
    b = record["budgets"].get(str(budget))
    if b is None:
        raise ValueError(f"budget must be one of {sorted(map(int, record['budgets']))}, got {budget!r}")
    if "eval_of" in b:  # the same model as an earlier budget (solved, or stopped, before this one)
        b = record["budgets"][b["eval_of"]]
    if probe not in b["eval"]:
        raise ValueError(f"probe must be one of {list(b['eval'])} for {record['run_id']}, got {probe!r}")
    return b["eval"][probe]


def _field(evaluation: dict, what: str) -> float:
    if what in ("accuracy", "floor"):
        return evaluation[what]
    if what not in evaluation["parts"]:
        raise ValueError(f"what must be 'accuracy', 'floor' or one of {sorted(evaluation['parts'])}, got {what!r}")
    return evaluation["parts"][what]


SOLVED_HELD_OUT = 0.95  # held-out accuracy at the training condition that counts as solved
SOLVE_RULES = ("held_out", "training")


def _first_probe(results: dict, task: str) -> str:
    return results["preset"]["tasks"][task]["probes"][0]["name"]


def held_out_solved(results: dict, record: dict, budget: int = 1, threshold: float = SOLVED_HELD_OUT) -> bool:
    """Whether ``record`` solved its task within ``budget``, read from its held-out evaluation:
    accuracy at the task's first probe (the training condition, fresh rows) >= ``threshold``.

    The training rule (0.99 over the last 50 training steps) stops a run; it is stricter than
    the evaluation and misses runs that score >= 0.99 on held-out rows, so results read
    "solved" from here."""
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold!r}")
    return result(record, _first_probe(results, record["task"]), budget)["accuracy"] >= threshold


def is_solved(results: dict, record: dict, budget: int = 1, rule: str = "held_out") -> bool:
    """``record`` solved within ``budget`` by ``rule``: "held_out" (``held_out_solved``) or
    "training" (the rule that stopped training)."""
    if rule == "held_out":
        return held_out_solved(results, record, budget)
    if rule == "training":
        return bool(record["budgets"][str(budget)]["solved"])
    raise ValueError(f"rule must be one of {SOLVE_RULES}, got {rule!r}")


def values(results: dict, run_id: str, probe: str, *, budget: int = 1, lr: float | None = None,
           what: str = "accuracy", solved_only: bool = False, rule: str = "held_out") -> dict:
    """``{(lr, seed): value}`` of ``run_id`` at ``probe`` after ``budget``; ``solved_only``:
    only the runs solved within that budget (by ``rule``, ``is_solved``)."""
    out = {}
    for r in records(results, run_id, lr):
        if solved_only and not is_solved(results, r, budget, rule):
            continue
        out[(r["lr"], r["seed"])] = _field(result(r, probe, budget), what)
    return out


def solved(results: dict, run_id: str, *, budget: int = 1, lr: float | None = None,
           rule: str = "held_out") -> tuple[int, int]:
    """(k, N): runs of ``run_id`` solved within ``budget`` (by ``rule``), of all its runs."""
    recs = records(results, run_id, lr)
    return sum(is_solved(results, r, budget, rule) for r in recs), len(recs)


def steps_to_solve(results: dict, run_id: str, lr: float | None = None) -> dict:
    """``{(lr, seed): step it was solved at, or None}``."""
    return {(r["lr"], r["seed"]): r["solved_at"] for r in records(results, run_id, lr)}


# ----------------------------------------------------------------------------- statistics


def summary(vals) -> dict:
    """mean, sample std (0 for one value), min, max and n of a list of numbers."""
    vals = [float(v) for v in vals]
    if not vals:
        raise ValueError("values must hold at least one number")
    n = len(vals)
    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(vals), "max": max(vals), "n": n}


def _t_cdf(t: float, df: int) -> float:
    """Student's t CDF by Simpson's rule on its density (float64; exact to ~1e-10 for df >= 1)."""
    if t == 0:
        return 0.5
    x = abs(t)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    # substitute u = atan(s / sqrt(df)) so the integrand is smooth and the range finite
    top = math.atan(x / math.sqrt(df))
    n = 2000
    h = top / n

    def f(u):
        s = math.sqrt(df) * math.tan(u)
        return math.exp(log_c - (df + 1) / 2 * math.log1p(s * s / df)) * math.sqrt(df) / math.cos(u) ** 2

    area = f(0) + f(top) + sum((4 if i % 2 else 2) * f(i * h) for i in range(1, n))
    half = area * h / 3
    return 0.5 + half if t > 0 else 0.5 - half


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The p quantile of Student's t with ``df`` degrees of freedom (bisection on ``_t_cdf``)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df!r}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_interval(vals, confidence: float = 0.95) -> dict:
    """Mean of ``vals`` with its two-sided Student t interval: {mean, low, high, n, half_width}.

    One value gives an unbounded interval (low = -inf, high = +inf): one seed says nothing
    about the spread."""
    vals = [float(v) for v in vals]
    if not vals:
        raise ValueError("values must hold at least one number")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    s = summary(vals)
    if s["n"] == 1:
        return {"mean": s["mean"], "low": -math.inf, "high": math.inf, "n": 1, "half_width": math.inf}
    half = t_quantile(0.5 + confidence / 2, s["n"] - 1) * s["std"] / math.sqrt(s["n"])
    return {"mean": s["mean"], "low": s["mean"] - half, "high": s["mean"] + half, "n": s["n"], "half_width": half}


def paired(results: dict, run_a: str, run_b: str, probe: str, *, budget: int = 1, lr: float,
           what: str = "accuracy", solved_only: bool | None = None, confidence: float = 0.95,
           rule: str = "held_out") -> dict:
    """``run_a`` minus ``run_b`` at ``probe``, seed by seed, at one learning rate and budget.

    ``solved_only`` (default: True except at the task's first probe, the training
    condition): only seeds where both runs solved their task within the budget (by
    ``rule``). Returns {diffs, seeds, mean, low, high, n, a_wins, b_wins, ties} (low/high:
    the t interval of the mean difference; NaN when no seed is left).
    """
    task = records(results, run_a, lr)[0]["task"]
    if solved_only is None:
        solved_only = probe != _first_probe(results, task)
    a = values(results, run_a, probe, budget=budget, lr=lr, what=what, solved_only=solved_only, rule=rule)
    b = values(results, run_b, probe, budget=budget, lr=lr, what=what, solved_only=solved_only, rule=rule)
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    out = {"diffs": diffs, "seeds": [s[1] for s in seeds], "n": len(diffs),
           "a_wins": sum(d > 0 for d in diffs), "b_wins": sum(d < 0 for d in diffs),
           "ties": sum(d == 0 for d in diffs)}
    if diffs:
        ti = t_interval(diffs, confidence)
        out.update(mean=ti["mean"], low=ti["low"], high=ti["high"])
    else:
        out.update(mean=math.nan, low=math.nan, high=math.nan)
    return out


MAX_EXACT = 20_000  # label arrangements enumerated by permutation_p before it samples


def permutation_p(a, b, *, paired: bool = False, draws: int = 20_000, seed: int = 0) -> float:
    """Two-sided permutation p-value of mean(a) - mean(b).

    ``paired=False``: the labels of the pooled values are permuted (every split of them
    into groups of len(a) and len(b)); ``paired=True``: a and b are pairs (the same seed)
    and the sign of each difference is flipped. Exact when there are at most ``MAX_EXACT``
    arrangements, otherwise ``draws`` random ones (seeded). The smallest p it can give is
    the share of arrangements as extreme as the observed one (two groups of 5: 2 / 252;
    5 pairs: 2 / 32, so 5 pairs can never reach p < 0.05)."""
    import itertools
    import random

    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError(f"a and b must hold at least one number each, got {len(a)} and {len(b)}")
    if paired and len(a) != len(b):
        raise ValueError(f"paired: a and b must have the same length, got {len(a)} and {len(b)}")
    tol = 1e-12
    if paired:
        d = [x - y for x, y in zip(a, b)]
        obs = abs(sum(d))
        if 2 ** len(d) <= MAX_EXACT:
            signs = itertools.product((1, -1), repeat=len(d))
            hits = [abs(sum(s * x for s, x in zip(sg, d))) >= obs - tol for sg in signs]
            return sum(hits) / len(hits)
        rng = random.Random(seed)
        hits = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= obs - tol for _ in range(draws))
        return (hits + 1) / (draws + 1)
    pool, n_a = a + b, len(a)
    total = sum(pool)

    def stat(idx):
        s_a = sum(pool[i] for i in idx)
        return abs(s_a / n_a - (total - s_a) / len(b))

    obs = stat(range(n_a))
    if math.comb(len(pool), n_a) <= MAX_EXACT:
        hits = [stat(idx) >= obs - tol for idx in itertools.combinations(range(len(pool)), n_a)]
        return sum(hits) / len(hits)
    rng = random.Random(seed)
    hits = sum(stat(rng.sample(range(len(pool)), n_a)) >= obs - tol for _ in range(draws))
    return (hits + 1) / (draws + 1)


VERDICTS = ("holds", "holds where testable", "depends on the learning rate", "budget-dependent",
            "shown in some cells", "not shown", "does not hold", "untestable")
ALPHA = 0.05  # the interaction test's level


def verdict(checks: dict, *, opposite: dict | None = None, interaction: dict | None = None,
            alpha: float = ALPHA) -> str:
    """A claim's verdict from ``{(lr, budget): True | False | None}``: True where the claim is
    shown there, False where it is not shown, None where it cannot be tested (too few runs).

    ``opposite``: ``{(lr, budget): bool}``, where the reverse is shown (the interval lies on
    the other side of the boundary). ``interaction``: ``{"lr": {budget: p}, "budget": {lr:
    p}}``, the permutation tests of the difference between learning rates (per budget) and
    between budgets (per learning rate); without them no verdict names a dependence.

    "holds": shown in every cell; "holds where testable": shown in every cell that could
    be tested, some could not; "not shown": shown nowhere it was tested; "does not hold":
    the opposite shown in every tested cell; "depends on the learning rate": shown at
    every budget of some learning rates and at none of others, and the difference between
    the learning rates is significant (p < ``alpha``) at every budget where the cells
    differ; "budget-dependent": the same for budgets; "shown in some cells": any other
    pattern (the table says in which cells); "untestable": nowhere testable.
    """
    if not checks:
        raise ValueError("checks must hold at least one (lr, budget) result")
    tested = {k: v for k, v in checks.items() if v is not None}
    if not tested:
        return "untestable"
    if all(tested.values()):
        return "holds" if len(tested) == len(checks) else "holds where testable"
    if not any(tested.values()):
        if opposite and all(opposite.get(k, False) for k in tested):
            return "does not hold"
        return "not shown"
    the_lrs = sorted({k[0] for k in checks})
    the_budgets = sorted({k[1] for k in checks})
    inter = interaction or {}

    def by(axis_values, other_values, key, tests):
        """True when each value of the other axis gives one answer along this axis's cells,
        the answers differ, and every differing slice passes its test."""
        rows = {}
        for o in other_values:
            seen = {checks[key(o, x)] for x in axis_values} - {None}
            if len(seen) > 1:
                return False
            rows[o] = seen
        if not tests:
            return False
        for x in axis_values:  # the slices along the other axis where the answers differ
            seen = {checks[key(o, x)] for o in other_values} - {None}
            if len(seen) > 1 and not (tests.get(x) is not None and tests[x] < alpha):
                return False
        return True

    if by(the_budgets, the_lrs, lambda lr, b: (lr, b), inter.get("lr")):
        return "depends on the learning rate"
    if by(the_lrs, the_budgets, lambda b, lr: (lr, b), inter.get("budget")):
        return "budget-dependent"
    return "shown in some cells"


def _interactions(results: dict, samples: dict) -> dict:
    """Permutation tests behind a dependence: per budget, the two learning rates' samples
    (different models: labels permuted); between the first and the last budget, the same
    runs paired by (learning rate, seed), signs flipped, pooled over the learning rates
    (five pairs alone can never reach p < 0.05). ``samples``: {(lr, budget): {seed: value}}."""
    the_lrs, the_budgets = lrs(results), budgets(results)
    out = {"lr": {}, "budget": {}}
    if len(the_lrs) == 2:
        for b in the_budgets:
            x, y = samples[(the_lrs[0], b)], samples[(the_lrs[1], b)]
            out["lr"][b] = permutation_p(list(x.values()), list(y.values())) if x and y else None
    if len(the_budgets) >= 2:  # pooled over the learning rates: pairs (lr, seed)
        first, last = the_budgets[0], the_budgets[-1]
        xs, ys = [], []
        for lr in the_lrs:
            x, y = samples[(lr, first)], samples[(lr, last)]
            for s in sorted(set(x) & set(y)):
                xs.append(x[s])
                ys.append(y[s])
        p = permutation_p(xs, ys, paired=True) if xs else None
        out["budget"] = {lr: p for lr in the_lrs}
    return out


def _everywhere(results: dict, check, kind: str, level: float | None = None) -> dict:
    """``check(lr, budget) -> (shown, opposite, stats, samples)`` at every cell: {verdict,
    checks, opposite, stats, interaction, testable, cells, kind, level}."""
    checks, opposite, stats, samples = {}, {}, {}, {}
    for lr in lrs(results):
        for b in budgets(results):
            checks[(lr, b)], opposite[(lr, b)], stats[(lr, b)], samples[(lr, b)] = check(lr, b)
    inter = _interactions(results, samples)
    return {"verdict": verdict(checks, opposite=opposite, interaction=inter), "checks": checks,
            "opposite": opposite, "stats": stats, "interaction": inter,
            "testable": sum(v is not None for v in checks.values()), "cells": len(checks),
            "kind": kind, "level": level}


def better(results: dict, run_a: str, run_b: str, probe: str, *, what: str = "accuracy", min_seeds: int = 3,
           solved_only: bool | None = None, rule: str = "held_out") -> dict:
    """The claim "A scores higher than B at ``probe``": shown in a (learning rate, budget)
    cell where the 95% t interval of the paired difference A - B lies above 0 (at a probe
    beyond the training one, over the seeds where both runs solved, by ``rule``; with fewer
    than ``min_seeds`` such seeds it is not testable there); the opposite where it lies
    below 0. Returns {verdict, checks, opposite, stats, interaction, testable, cells, ...}."""
    def check(lr, b):
        d = paired(results, run_a, run_b, probe, budget=b, lr=lr, what=what, solved_only=solved_only, rule=rule)
        if d["n"] < min_seeds:
            return None, False, d, {}
        return bool(d["low"] > 0), bool(d["high"] < 0), d, dict(zip(d["seeds"], d["diffs"]))

    return _everywhere(results, check, "better")


def _level(results, run_id, probe, level, sign, what, solved_only, min_seeds, rule):
    if not isinstance(level, (int, float)) or not 0 <= level <= 1:
        raise ValueError(f"level must be a number in [0, 1], got {level!r}")

    def check(lr, b):
        got = values(results, run_id, probe, budget=b, lr=lr, what=what, solved_only=solved_only, rule=rule)
        if len(got) < min_seeds:
            s = summary(got.values()) if got else {"mean": math.nan, "n": 0}
            return None, False, dict(s, low=math.nan, high=math.nan), {}
        ti = t_interval(list(got.values()))
        shown = ti["low"] >= level if sign > 0 else ti["high"] <= level
        reverse = ti["high"] < level if sign > 0 else ti["low"] > level
        return bool(shown), bool(reverse), ti, {seed: v for (_, seed), v in got.items()}

    return _everywhere(results, check, "at_least" if sign > 0 else "at_most", level)


def at_least(results: dict, run_id: str, probe: str, level: float, *, what: str = "accuracy",
             solved_only: bool = False, min_seeds: int = 3, rule: str = "held_out") -> dict:
    """The claim "``run_id`` reaches ``level`` at ``probe``": shown in a (learning rate,
    budget) cell where the lower end of the 95% t interval of the mean over its runs (at
    least ``min_seeds``) is at least ``level``; the opposite where the upper end is below it."""
    return _level(results, run_id, probe, level, +1, what, solved_only, min_seeds, rule)


def at_most(results: dict, run_id: str, probe: str, level: float, *, what: str = "accuracy",
            solved_only: bool = False, min_seeds: int = 3, rule: str = "held_out") -> dict:
    """The claim "``run_id`` stays at or below ``level`` at ``probe``": the upper end of the
    95% interval of the mean is at most ``level`` (the opposite: the lower end above it)."""
    return _level(results, run_id, probe, level, -1, what, solved_only, min_seeds, rule)


def solves(results: dict, run_id: str, *, at_least_k: int | None = None, rule: str = "held_out") -> dict:
    """The claim "``run_id`` solves its task": at each (learning rate, budget) at least ``at_least_k``
    of its runs (default: all) were solved within the budget (by ``rule``: read from the
    held-out evaluation by default). A count is observed, not estimated: where it falls
    short the claim does not hold there."""
    def check(lr, b):
        recs = records(results, run_id, lr)
        hit = {r["seed"]: float(is_solved(results, r, b, rule)) for r in recs}
        k, n = int(sum(hit.values())), len(hit)
        ok = k >= (n if at_least_k is None else at_least_k)
        return ok, not ok, {"solved": k, "runs": n}, hit

    return _everywhere(results, check, "solves", at_least_k)


def margin(claim: dict) -> float | None:
    """How far a claim stays on its side of the boundary at its tightest tested cell: the
    lower end of the interval (``better``), its distance from the level (``at_least``:
    low - level; ``at_most``: level - high), or runs to spare (``solves``). None where no
    cell was tested."""
    tested = [k for k, v in claim["checks"].items() if v is not None]
    if not tested:
        return None
    st = [claim["stats"][k] for k in tested]
    kind = claim.get("kind")
    if kind == "better":
        return min(s["low"] for s in st)
    if kind == "at_least":
        return min(s["low"] - claim["level"] for s in st)
    if kind == "at_most":
        return min(claim["level"] - s["high"] for s in st)
    if kind == "solves":
        need = claim["level"]
        return min(s["solved"] - (s["runs"] if need is None else need) for s in st)
    raise ValueError(f"claim must come from better, at_least, at_most or solves, got kind {kind!r}")


def testable_text(claim: dict) -> str:
    """"k of n cells": where the claim could be tested."""
    return f"{claim['testable']} of {claim['cells']} cells"


def _stat_text(st: dict) -> str:
    if "solved" in st:
        return f"{st['solved']}/{st['runs']} solved"
    if st.get("n", 0) == 0:
        return "no seed solved" if "diffs" in st else "–"
    if "diffs" in st:
        return f"{st['mean']:+.2f} [{st['low']:+.2f}, {st['high']:+.2f}] ({st['n']})"
    if math.isnan(st.get("low", math.nan)):
        return f"{st['mean']:.2f} ({st['n']})"
    return f"{st['mean']:.2f} [{st['low']:.2f}, {st['high']:.2f}] ({st['n']})"


def _verdict_text(c: dict) -> str:
    v = c["verdict"]
    if v == "shown in some cells":
        return f"shown in {sum(x is True for x in c['checks'].values())} of {c['testable']} cells"
    if v in ("depends on the learning rate", "budget-dependent"):
        tests = c["interaction"]["lr" if v.startswith("depends") else "budget"]
        ps = [p for p in tests.values() if p is not None]
        return f"{v} (p ≤ {max(ps):.3f})" if ps else v
    return v


def _mark(c: dict, cell) -> str:
    """What claim ``c`` shows at ``cell`` (lr, budget): ✓ shown, ✗ the opposite shown, · neither, ? not testable."""
    check = c["checks"][cell]
    return "?" if check is None else "✓" if check else "✗" if c.get("opposite", {}).get(cell) else "·"


def _budget_of(results: dict, budget: int | None) -> int:
    """``budget`` (default: the largest of ``results``), checked against the budgets it holds."""
    found = budgets(results)
    b = found[-1] if budget is None else budget
    if b not in found:
        raise ValueError(f"budget must be one of {found}, got {budget!r}")
    return b


def claims_table(rows, results: dict) -> str:
    """A Markdown table of claims: one row per (text, claim) with the numbers behind the claim at
    every (learning rate, budget) (paired mean difference or mean with its 95% interval and
    runs, or runs solved), a mark for what it shows there (✓ shown, ✗ the opposite shown,
    · not shown either way, ? not testable), the cells testable, and the verdict."""
    keys = [(lr, b) for lr in lrs(results) for b in budgets(results)]
    head = "| claim | " + " | ".join(f"lr {lr:g}, {'cap' if b == 1 else f'{b}x cap'}" for lr, b in keys)
    lines = [head + " | testable | verdict |", "|---|" + "---|" * len(keys) + "---|---|"]
    for text, c in rows:
        cells = []
        for k in keys:
            cells.append(_mark(c, k) + " " + _stat_text(c["stats"][k]))
        lines.append(f"| {text} | " + " | ".join(cells)
                     + f" | {c['testable']}/{c['cells']} | **{_verdict_text(c)}** |")
    return "\n".join(lines)


def compact_claims_table(rows, results: dict, budget: int | None = None) -> str:
    """``claims_table`` narrow enough for a phone: one column per learning rate with the
    numbers at one ``budget`` (default: the largest) and its mark, then the verdict over every
    (learning rate, budget) cell, as ``claims_table`` gives it."""
    budget = _budget_of(results, budget)
    the_lrs = lrs(results)
    lines = ["| claim | " + " | ".join(f"lr {lr:g}" for lr in the_lrs) + " | verdict |",
             "|---|" + "---|" * len(the_lrs) + "---|"]
    for text, c in rows:
        cells = []
        for lr in the_lrs:
            k = (lr, budget)
            cells.append(_mark(c, k) + " " + _stat_text(c["stats"][k]))
        lines.append(f"| {text} | " + " | ".join(cells) + f" | **{_verdict_text(c)}** |")
    return "\n".join(lines)


def _short_stat(st: dict) -> str:
    if "solved" in st:
        return f"{st['solved']}/{st['runs']}"
    if st.get("n", 0) == 0 or math.isnan(st.get("mean", math.nan)):
        return "–"
    return f"{st['mean']:+.2f}" if "diffs" in st else f"{st['mean']:.2f}"


def verdict_grid(rows, results: dict, *, budget: int | None = None) -> str:
    """A compact Markdown table of claims for the top of a page (it reads at 390 px): one
    row per (text, claim), its verdict over every cell, then per learning rate the number
    behind it at ``budget`` (default: the largest) with the mark of :func:`claims_table`
    (runs solved "k/n", a mean, or a paired difference "+0.26"). The intervals and the
    other budget are in the claim's full table (:func:`claims_table`)."""
    b = _budget_of(results, budget)
    the_lrs = lrs(results)
    lines = ["| finding | verdict | " + " | ".join(f"lr {lr:g}" for lr in the_lrs) + " |",
             "|---|---|" + "---:|" * len(the_lrs)]
    for text, c in rows:
        cells = []
        for lr in the_lrs:
            cells.append(f"{_short_stat(c['stats'][(lr, b)])} {_mark(c, (lr, b))}")
        lines.append(f"| {text} | {_verdict_text(c)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def rows_for_standard_error(labels_per_row: float, se: float = 0.01, p: float = 0.5) -> int:
    """Evaluation rows for a binomial standard error of at most ``se`` per probe at accuracy
    ``p`` (0.5: the worst case): labels n = p (1 - p) / se^2, rows = n / labels per row
    (rounded up). Labels within a row are not independent, so this is a lower bound."""
    if not labels_per_row > 0:
        raise ValueError(f"labels_per_row must be > 0, got {labels_per_row!r}")
    if not 0 < se < 1:
        raise ValueError(f"se must be in (0, 1), got {se!r}")
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    return math.ceil(p * (1 - p) / se ** 2 / labels_per_row)


# ----------------------------------------------------------------------------- tables


def length_table(results: dict, task: str, variants=None, *, budget: int = 1, lr: float | None = None,
                 rule: str = "held_out") -> list[dict]:
    """One row per variant of ``task``: solved (k, N, by ``rule``) and, per length probe, the
    summary over the runs that solved (every run at the training probe); ``row["all"]``:
    per probe, the summary over every run, solved or not (reported beside the solved ones,
    so that the solve rule hides no result)."""
    setup = results["preset"]["tasks"].get(task)
    if setup is None:
        raise ValueError(f"task must be one of {sorted(results['preset']['tasks'])}, got {task!r}")
    if variants is None:
        variants = [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    probes = [p["name"] for p in setup["probes"] if not p["options"]]
    rows = []
    for v in variants:
        run_id = f"{task}/{v}"
        row = {"variant": v, "solved": solved(results, run_id, budget=budget, lr=lr, rule=rule)}
        every = {}
        for i, probe in enumerate(probes):
            vals = list(values(results, run_id, probe, budget=budget, lr=lr, solved_only=i > 0, rule=rule).values())
            row[probe] = summary(vals) if vals else None
            every[probe] = summary(values(results, run_id, probe, budget=budget, lr=lr).values())
        row["all"] = every
        rows.append(row)
    return rows


def _probe_keys(row: dict) -> list[str]:
    return [k for k in row if k not in ("variant", "solved", "all")]


def length_table_markdown(results: dict, task: str, variants=None, labels=None, *, budget: int = 1,
                          lr: float | None = None, rule: str = "held_out") -> str:
    """The accuracy table as Markdown: runs solved, then per length the mean over every run
    and, beyond the training length, the mean over the solved runs (in brackets) where
    some run did not solve the task."""
    rows = length_table(results, task, variants, budget=budget, lr=lr, rule=rule)
    probes = _probe_keys(rows[0])
    head = "| model | solved | " + " | ".join(f"L = {p[1:]}" for p in probes) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(probes)]
    for row in rows:
        name = (labels or {}).get(row["variant"], row["variant"])
        k, n = row["solved"]
        cells = []
        for p in probes:
            s, every = row[p], row["all"][p]
            text = f"{every['mean']:.2f}"
            if k < n and p != probes[0]:
                text += " (–)" if s is None else f" ({s['mean']:.2f})"
            cells.append(text)
        lines.append(f"| {name} | {k}/{n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_accuracy(results: dict, run_id: str, *, budget: int = 1, lr: float | None = None):
    """Accuracy per ``detail`` value at the task's first probe: (details, mean over runs, per run)."""
    per_run, details = [], None
    for r in records(results, run_id, lr):
        probe = results["preset"]["tasks"][r["task"]]["probes"][0]["name"]
        first = result(r, probe, budget)
        counts = {int(k): v for k, v in first["by_detail"].items()}
        if details is None:
            details = sorted(counts)
        per_run.append([counts[d][0] / counts[d][1] if d in counts and counts[d][1] else float("nan")
                        for d in details])
    mean = [sum(col) / len(col) for col in zip(*per_run)]
    return details, mean, per_run


def cosine_similarity(table) -> torch.Tensor:
    """(R, R) cosine similarity between the rows of an (R, d) table."""
    t = torch.as_tensor(table, dtype=torch.float64)  # (R, d)
    if t.dim() != 2 or t.shape[0] < 1:
        raise ValueError(f"table must be a 2-D (rows, dim) array, got shape {tuple(t.shape)}")
    unit = t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (R, d)
    return unit @ unit.T  # (R, R)


def provenance_line(results: dict, path=None) -> str:
    """One sentence naming the file and where, when and how it was made."""
    p = results["provenance"]
    where = f"`{Path(path).as_posix()}`: " if path is not None else ""
    seeds = ", ".join(str(s) for s in p["seeds"])
    the_lrs = " and ".join(f"{x:g}" for x in p["lrs"])
    load = p.get("load_average_start") or p.get("load_average")
    load_text = f", load average {load[0]:.1f} on {p['cpu_count']} cores at the start" if load else ""
    procs = ("" if p.get("threads") is None
             else f", {p.get('workers') or 1} process(es) of {p['threads']} thread(s)")
    wall = "wall time not recorded" if p["wall_s"] is None else f"{p['wall_s'] / 60:.0f} min wall time"
    status = ""
    if results.get("complete") is False:
        snap = p.get("snapshot")
        status = (f"; unfinished: {snap['rows']} of {snap['of']} runs, read on {snap['date']}" if snap
                  else f"; unfinished: {len(results['runs'])} runs")
    if p.get("seeds_dropped"):
        status += f" (seeds {', '.join(map(str, p['seeds_dropped']))} left out: not finished everywhere)"
    return (f"{where}preset `{p['preset']}`, seeds {seeds}, learning rates {the_lrs}; {p['cpu_model']} "
            f"(torch dispatches to {p['cpu_capability']}){procs}, torch {p['torch']}, "
            f"commit `{p['git_commit'][:12]}`, {p['date']}, {wall}{load_text}{status}")
