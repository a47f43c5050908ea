"""Results of a lab run: JSON with provenance, and the tables the chapter reads from it.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

A results file is one JSON object:

* ``format``: ``"relpos-lab/1"``;
* ``provenance``: device, torch and Python versions, date (UTC), git commit, preset,
  seeds, threads, wall time and the command that made it;
* ``preset``: the full preset (tasks, budgets, model shape, every run);
* ``runs``: one record per (run, seed): accuracy at every evaluation length, per-detail
  counts at the training length, the training curve, parameter count and timings.

Accuracy over seeds is summarised as mean, sample standard deviation, min and max.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ..provenance import git_commit, machine

__all__ = [
    "FORMAT",
    "build_results",
    "results_text",
    "save_results",
    "load_results",
    "records",
    "accuracies",
    "summary",
    "length_table",
    "length_table_markdown",
    "detail_accuracy",
    "compare",
    "cosine_similarity",
    "provenance_line",
    "committed_path",
    "git_commit",
]

FORMAT = "relpos-lab/1"




def build_results(preset, seeds, run_output: dict, *, command: str | None = None, commit: str | None = None) -> dict:
    """The results object for ``run_output`` (from ``train.run_preset``). Pass ``commit``
    (``git_commit()`` taken before training) so edits made while it ran do not count."""
    provenance = {
        **machine("cpu", commit=commit),  # the lab trains on the CPU
        "preset": preset.name,
        "seeds": list(seeds),
        "threads": run_output.get("threads"),
        "workers": run_output.get("workers", 1),
        "wall_s": run_output["wall_s"],
        "cpu_s": run_output.get("cpu_s"),
        "command": command,
    }
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
        raise ValueError(f"{path} is not a lab results file (format {FORMAT!r})")
    for key in ("provenance", "preset", "runs"):
        if key not in results:
            raise ValueError(f"{path} has no {key!r} entry")
    for key in ("device", "torch", "date", "git_commit", "preset", "seeds", "wall_s"):
        if key not in results["provenance"]:
            raise ValueError(f"{path}: provenance has no {key!r}")
    return results


def records(results: dict, run_id: str) -> list[dict]:
    """Every seed's record of ``run_id``, in seed order."""
    found = sorted((r for r in results["runs"] if r["run_id"] == run_id), key=lambda r: r["seed"])
    if not found:
        ids = sorted({r["run_id"] for r in results["runs"]})
        raise ValueError(f"run_id must be one of {ids}, got {run_id!r}")
    return found


def accuracies(results: dict, run_id: str, multiplier: int = 1) -> list[float]:
    """Accuracy of ``run_id`` at ``multiplier`` x its training length, one per seed."""
    out = []
    for r in records(results, run_id):
        if str(multiplier) not in r["eval"]:
            raise ValueError(f"multiplier must be one of {sorted(map(int, r['eval']))} for {run_id}, got {multiplier}")
        out.append(r["eval"][str(multiplier)]["accuracy"])
    return out


def summary(values) -> dict:
    """mean, sample std (0 for one value), min, max and n of a list of numbers."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must hold at least one number")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "n": n}


def length_table(results: dict, task: str, variants=None) -> list[dict]:
    """One row per variant of ``task``: {variant, multiplier -> summary over seeds}."""
    ids = [r["run_id"] for r in results["preset"]["runs"] if r["task"] == task]
    if not ids:
        tasks = sorted({r["task"] for r in results["preset"]["runs"]})
        raise ValueError(f"task must be one of {tasks}, got {task!r}")
    if variants is not None:
        ids = [f"{task}/{v}" for v in variants]
    rows = []
    for run_id in ids:
        first = records(results, run_id)[0]
        row = {"variant": first["variant"], "scheme": first["scheme"]}
        for m in first["eval"]:
            row[int(m)] = summary(accuracies(results, run_id, int(m)))
        rows.append(row)
    return rows


def length_table_markdown(results: dict, task: str, variants=None, labels=None) -> str:
    """The accuracy table as Markdown: mean (min to max over seeds) per evaluation length."""
    rows = length_table(results, task, variants)
    mults = [k for k in rows[0] if isinstance(k, int)]
    train_length = results["preset"]["tasks"][task]["train_length"]
    head = "| model | " + " | ".join(f"{m}x (L = {m * train_length})" for m in mults) + " |"
    lines = [head, "|---|" + "---:|" * len(mults)]
    for row in rows:
        name = (labels or {}).get(row["variant"], row["variant"])
        cells = []
        for m in mults:
            s = row[m]
            cells.append(f"{s['mean']:.2f}" if s["n"] == 1 else f"{s['mean']:.2f} ({s['min']:.2f}–{s['max']:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_accuracy(results: dict, run_id: str) -> tuple[list[int], list[float], list[list[float]]]:
    """Accuracy per ``detail`` value at the training length: (details, mean over seeds, per seed)."""
    per_seed = []
    details = None
    for r in records(results, run_id):
        counts = {int(k): v for k, v in r["eval"]["1"]["by_detail"].items()}
        if details is None:
            details = sorted(counts)
        per_seed.append([counts[d][0] / counts[d][1] if d in counts and counts[d][1] else float("nan")
                         for d in details])
    mean = [sum(col) / len(col) for col in zip(*per_seed)]
    return details, mean, per_seed


def compare(results: dict, run_a: str, run_b: str, multiplier: int = 1) -> dict:
    """Accuracy of ``run_a`` minus ``run_b`` at ``multiplier``, seed by seed (same seeds in both).

    Returns ``{"diffs": [...], "mean": float, "a_wins_every_seed": bool, "b_wins_every_seed": bool}``.
    """
    a = {r["seed"]: r["eval"][str(multiplier)]["accuracy"] for r in records(results, run_a)}
    b = {r["seed"]: r["eval"][str(multiplier)]["accuracy"] for r in records(results, run_b)}
    if set(a) != set(b):
        raise ValueError(f"run_a and run_b must have the same seeds, got {sorted(a)} and {sorted(b)}")
    diffs = [a[s] - b[s] for s in sorted(a)]
    return {"diffs": diffs, "mean": sum(diffs) / len(diffs), "a_wins_every_seed": all(d > 0 for d in diffs),
            "b_wins_every_seed": all(d < 0 for d in diffs)}


def cosine_similarity(table) -> torch.Tensor:
    """(R, R) cosine similarity between the rows of an (R, d) table."""
    t = torch.as_tensor(table, dtype=torch.float64)  # (R, d)
    if t.dim() != 2 or t.shape[0] < 1:
        raise ValueError(f"table must be a 2-D (rows, dim) array, got shape {tuple(t.shape)}")
    unit = t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (R, d)
    return unit @ unit.T  # (R, R)


def committed_path(name: str = "lab-book.json") -> Path:
    """The committed results file ``name``, shipped with the package (``relpos_core/data/``,
    found by ``relpos_core.resources``): the same wherever relpos_core is installed."""
    from relpos_core import resources

    return resources.path(name)


def provenance_line(results: dict, path=None) -> str:
    """One sentence naming the file and where, when and how it was made."""
    p = results["provenance"]
    where = f"`{Path(path).as_posix()}`: " if path is not None else ""
    seeds = ", ".join(str(s) for s in p["seeds"])
    workers = p.get("workers", 1)
    return (f"{where}preset `{p['preset']}`, seeds {seeds}, {p['device']} ({p['device_name']}, "
            f"{workers} process(es) of {p.get('threads')} thread(s)), torch {p['torch']}, "
            f"commit `{p['git_commit'][:12]}`, {p['date']}, {p['wall_s']:.0f} s wall time")
