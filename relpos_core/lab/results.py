"""Results of a lab run: JSON with provenance, and the statistics the chapter reads from it.

Book: "Experiments" (chapters/10_experiments.ipynb).

A results file is one JSON object:

* ``format``: ``"relpos-lab/2"``;
* ``provenance``: the machine (``relpos_core.provenance.machine``: CPU model, the
  instruction set torch dispatched to, threads, torch build, load average), date, git
  commit, preset, seeds, learning rates, wall and CPU time, and the command;
* ``preset``: the full preset (tasks, probes, caps, budgets, solve rule, every run);
* ``runs``: one record per (run, seed, learning rate): steps trained, the step it was
  solved at (or None), the learning curve, and per budget the evaluation at every probe.

Statistics (all over runs that share a learning rate; each claim is checked at every
learning rate and every budget):

* ``summary``: mean, sample standard deviation, min, max;
* ``t_interval``: Student's t interval for a mean (two-sided, 95% by default);
* ``paired``: scheme A minus scheme B seed by seed (the two saw the same batches and are
  scored on the same rows), with the interval of the mean difference and the count of
  seeds each way; at a probe other than the training one only seeds where both runs
  solved their task count ("k of N solved");
* ``verdict``: a claim checked at every (learning rate, budget): "holds", "budget-dependent",
  "depends on the learning rate", "mixed", "does not hold" or "untestable".
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
    "load_committed", "from_partial", "complete_seeds", "only_complete_seeds", "lrs", "budgets", "records", "result", "values", "solved", "steps_to_solve", "summary",
    "t_quantile", "t_interval", "paired", "verdict", "VERDICTS", "better", "at_least", "at_most", "solves",
    "claims_table",
    "length_table", "length_table_markdown",
    "detail_accuracy", "cosine_similarity", "provenance_line", "git_commit",
]

FORMAT = "relpos-lab/2"
COMMITTED = "lab-full.json"  # the committed results the chapters read


def build_results(preset, seeds, lrs, run_output: dict, *, command: str | None = None,
                  commit: str | None = None) -> dict:
    """The results object for ``run_output`` (from ``train.run_preset``). Pass ``commit``
    (``git_commit()`` taken before training) so edits made while it ran do not count."""
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
    from .presets import get_preset
    from .train import jobs_of

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing partial file (<out>.partial.jsonl), got {str(path)!r}")
    head, rows = read_partial(path)
    if not head or not all(k in head for k in ("preset", "seeds", "lrs", "git_commit")):
        raise ValueError(f"{path} has no head line with preset, seeds, lrs and git_commit: not a lab partial file")
    preset = get_preset(head["preset"]) if preset is None else preset
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


def values(results: dict, run_id: str, probe: str, *, budget: int = 1, lr: float | None = None,
           what: str = "accuracy", solved_only: bool = False) -> dict:
    """``{(lr, seed): value}`` of ``run_id`` at ``probe`` after ``budget``; ``solved_only``:
    only the runs solved within that budget."""
    out = {}
    for r in records(results, run_id, lr):
        if solved_only and not r["budgets"][str(budget)]["solved"]:
            continue
        out[(r["lr"], r["seed"])] = _field(result(r, probe, budget), what)
    return out


def solved(results: dict, run_id: str, *, budget: int = 1, lr: float | None = None) -> tuple[int, int]:
    """(k, N): runs of ``run_id`` solved within ``budget``, of all its runs."""
    recs = records(results, run_id, lr)
    return sum(r["budgets"][str(budget)]["solved"] for r in recs), len(recs)


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
           what: str = "accuracy", solved_only: bool | None = None, confidence: float = 0.95) -> dict:
    """``run_a`` minus ``run_b`` at ``probe``, seed by seed, at one learning rate and budget.

    ``solved_only`` (default: True except at the task's first probe, the training
    condition): only seeds where both runs solved their task within the budget. Returns
    {diffs, seeds, mean, low, high, n, a_wins, b_wins, ties} (low/high: the t interval of
    the mean difference; NaN when no seed is left).
    """
    task = records(results, run_a, lr)[0]["task"]
    first = results["preset"]["tasks"][task]["probes"][0]["name"]
    if solved_only is None:
        solved_only = probe != first
    a = values(results, run_a, probe, budget=budget, lr=lr, what=what, solved_only=solved_only)
    b = values(results, run_b, probe, budget=budget, lr=lr, what=what, solved_only=solved_only)
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


VERDICTS = ("holds", "holds where testable", "budget-dependent", "depends on the learning rate", "mixed",
            "does not hold", "untestable")


def verdict(checks: dict) -> str:
    """A claim's verdict from ``{(lr, budget): True | False | None}``, checked at every learning
    rate and budget (None: not testable there, e.g. too few runs solved the task to compare).

    "holds": true everywhere; "holds where testable": true wherever it could be tested, but
    some budget could not test it at any learning rate (no model had solved the task yet);
    "budget-dependent": the same at every learning rate but not at every budget;
    "depends on the learning rate": the same at every budget but not at every learning rate;
    "mixed": true at some (learning rate, budget) and false at others, in a pattern neither the
    budget nor the learning rate alone explains; "does not hold": false everywhere it was
    tested; "untestable": nowhere testable.
    """
    if not checks:
        raise ValueError("checks must hold at least one (lr, budget) result")
    tested = {k: v for k, v in checks.items() if v is not None}
    if not tested:
        return "untestable"
    vals = list(tested.values())
    the_lrs = sorted({k[0] for k in checks})
    the_budgets = sorted({k[1] for k in checks})
    if all(vals):
        untested_budget = any(all(checks[(lr, b)] is None for lr in the_lrs) for b in the_budgets)
        return "holds where testable" if (untested_budget or len(tested) < len(checks)) else "holds"
    if not any(vals):
        return "does not hold"
    if all(len({checks[(lr, b)] for lr in the_lrs} - {None}) <= 1 for b in the_budgets):
        return "budget-dependent"
    if all(len({checks[(lr, b)] for b in the_budgets} - {None}) <= 1 for lr in the_lrs):
        return "depends on the learning rate"
    return "mixed"


def _everywhere(results: dict, check) -> dict:
    """``check(lr, budget) -> (bool, stats)`` at every learning rate and budget: {verdict, checks, stats}."""
    checks, stats = {}, {}
    for lr in lrs(results):
        for b in budgets(results):
            checks[(lr, b)], stats[(lr, b)] = check(lr, b)
    return {"verdict": verdict(checks), "checks": checks, "stats": stats}


def better(results: dict, run_a: str, run_b: str, probe: str, *, what: str = "accuracy", min_seeds: int = 3,
           solved_only: bool | None = None) -> dict:
    """The claim "A scores higher than B at ``probe``": at each (learning rate, budget) the 95% t
    interval of the paired difference A - B lies above 0 (at a probe beyond the training one, over
    the seeds where both runs solved; with fewer than ``min_seeds`` such seeds it is not testable
    there). Returns {verdict, checks, stats}."""
    def check(lr, b):
        d = paired(results, run_a, run_b, probe, budget=b, lr=lr, what=what, solved_only=solved_only)
        return (None if d["n"] < min_seeds else bool(d["low"] > 0)), d

    return _everywhere(results, check)


def at_least(results: dict, run_id: str, probe: str, level: float, *, what: str = "accuracy",
             solved_only: bool = False) -> dict:
    """The claim "``run_id`` reaches ``level`` at ``probe``": the mean over the seeds of each (learning
    rate, budget) is at least ``level``. Returns {verdict, checks, stats}."""
    def check(lr, b):
        vals = list(values(results, run_id, probe, budget=b, lr=lr, what=what, solved_only=solved_only).values())
        s = summary(vals) if vals else {"mean": math.nan, "n": 0}
        return (None if not vals else bool(s["mean"] >= level)), s

    return _everywhere(results, check)


def at_most(results: dict, run_id: str, probe: str, level: float, *, what: str = "accuracy",
            solved_only: bool = False) -> dict:
    """The claim "``run_id`` stays at or below ``level`` at ``probe``" (mean over the seeds)."""
    def check(lr, b):
        vals = list(values(results, run_id, probe, budget=b, lr=lr, what=what, solved_only=solved_only).values())
        s = summary(vals) if vals else {"mean": math.nan, "n": 0}
        return (None if not vals else bool(s["mean"] <= level)), s

    return _everywhere(results, check)


def solves(results: dict, run_id: str, *, at_least_k: int | None = None) -> dict:
    """The claim "``run_id`` solves its task": at each (learning rate, budget) at least ``at_least_k``
    of its runs (default: all) were solved within the budget."""
    def check(lr, b):
        k, n = solved(results, run_id, budget=b, lr=lr)
        return k >= (n if at_least_k is None else at_least_k), {"solved": k, "runs": n}

    return _everywhere(results, check)


def _stat_text(st: dict) -> str:
    if "solved" in st:
        return f"{st['solved']}/{st['runs']} solved"
    if "low" in st:
        if st["n"] == 0:
            return "no seed solved"
        return f"{st['mean']:+.2f} [{st['low']:+.2f}, {st['high']:+.2f}] ({st['n']})"
    return "–" if st.get("n", 0) == 0 else f"{st['mean']:.2f}"


def claims_table(rows, results: dict) -> str:
    """A Markdown table of claims: one row per (text, claim) with the numbers behind the claim at
    every (learning rate, budget) (paired mean difference [95% interval] (seeds), mean, or runs
    solved), a mark for whether it holds there (✓, ✗, or ? where it cannot be tested), and the
    verdict."""
    keys = [(lr, b) for lr in lrs(results) for b in budgets(results)]
    head = "| claim | " + " | ".join(f"lr {lr:g}, {'cap' if b == 1 else f'{b}x cap'}" for lr, b in keys)
    lines = [head + " | verdict |", "|---|" + "---|" * len(keys) + "---|"]
    for text, c in rows:
        marks = {True: "✓ ", False: "✗ ", None: "? "}
        cells = [marks[c["checks"][k]] + _stat_text(c["stats"][k]) for k in keys]
        lines.append(f"| {text} | " + " | ".join(cells) + f" | **{c['verdict']}** |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- tables


def length_table(results: dict, task: str, variants=None, *, budget: int = 1, lr: float | None = None) -> list[dict]:
    """One row per variant of ``task``: solved (k, N) and, per length probe, the summary over the
    runs that solved (every run at the training probe)."""
    setup = results["preset"]["tasks"].get(task)
    if setup is None:
        raise ValueError(f"task must be one of {sorted(results['preset']['tasks'])}, got {task!r}")
    if variants is None:
        variants = [r["variant"] for r in results["preset"]["runs"] if r["task"] == task]
    probes = [p["name"] for p in setup["probes"] if not p["options"]]
    rows = []
    for v in variants:
        run_id = f"{task}/{v}"
        row = {"variant": v, "solved": solved(results, run_id, budget=budget, lr=lr)}
        for i, probe in enumerate(probes):
            vals = list(values(results, run_id, probe, budget=budget, lr=lr, solved_only=i > 0).values())
            row[probe] = summary(vals) if vals else None
        rows.append(row)
    return rows


def length_table_markdown(results: dict, task: str, variants=None, labels=None, *, budget: int = 1,
                          lr: float | None = None) -> str:
    """The accuracy table as Markdown: runs solved, then mean (min to max) per length; beyond the
    training length over the solved runs only."""
    rows = length_table(results, task, variants, budget=budget, lr=lr)
    probes = [k for k in rows[0] if k not in ("variant", "solved")]
    head = "| model | solved | " + " | ".join(f"L = {p[1:]}" for p in probes) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(probes)]
    for row in rows:
        name = (labels or {}).get(row["variant"], row["variant"])
        cells = []
        for p in probes:
            s = row[p]
            cells.append("–" if s is None else f"{s['mean']:.2f}" if s["n"] == 1
                         else f"{s['mean']:.2f} ({s['min']:.2f}–{s['max']:.2f})")
        k, n = row["solved"]
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
