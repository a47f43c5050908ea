"""The evidence a decision guide reads from a lab run: levels and comparisons over every run.

Book: "Choosing a scheme" (chapters/16_choosing_a_scheme.ipynb).

The guide states a number only with its interval and its number of runs, and a claim only
where it holds at every learning rate the run has. These helpers read the committed lab
results (``relpos_core.lab.results``) through its own functions, over **every** run of a
scheme (not only those its solve rule counts as solved), at one budget:

* :func:`level`: per learning rate, the Student t interval of a probe's mean accuracy
  over all runs, with how many runs there were and how many were solved;
* :func:`reaching`: per learning rate, how many runs reach a level on held-out rows (a
  count that does not depend on the solve rule);
* :func:`difference`: per learning rate, run A minus run B seed by seed (paired, every
  seed);
* :func:`everywhere`: whether a test holds at every learning rate (the rule for stating
  a claim; otherwise the guide says "not shown");
* :func:`span`: a short text of the per-learning-rate means ("0.12 / 0.13"), for the
  boxes of the decision figure, and :func:`interval_text`, one mean with its interval.

Accuracies are fractions in [0, 1]; differences are A minus B.
"""
from __future__ import annotations

from . import results as R

__all__ = ["level", "reaching", "difference", "everywhere", "span", "interval_text"]


def _budget(res: dict, budget: int | None) -> int:
    found = R.budgets(res)
    if budget is None:
        return found[-1]
    if budget not in found:
        raise ValueError(f"budget must be one of {found}, got {budget!r}")
    return budget


def level(res: dict, run_id: str, probe: str, *, budget: int | None = None,
          what: str = "accuracy") -> dict:
    """``{lr: {mean, low, high, n, half_width, solved}}``: ``run_id``'s mean at ``probe``
    over all its runs at that learning rate after ``budget`` (default: the largest), its
    95 % t interval, and ``solved``, how many of the ``n`` runs the solve rule counted."""
    b = _budget(res, budget)
    out = {}
    for lr in R.lrs(res):
        vals = list(R.values(res, run_id, probe, budget=b, lr=lr, what=what).values())
        k, _ = R.solved(res, run_id, budget=b, lr=lr)
        out[lr] = {**R.t_interval(vals), "solved": k}
    return out


def reaching(res: dict, run_id: str, probe: str, at_least: float, *,
             budget: int | None = None, what: str = "accuracy") -> dict:
    """``{lr: (k, n)}``: ``k`` of ``run_id``'s ``n`` runs at that learning rate score at
    least ``at_least`` at ``probe`` after ``budget`` (default: the largest)."""
    if not 0 <= at_least <= 1:
        raise ValueError(f"at_least must be in [0, 1], got {at_least!r}")
    b = _budget(res, budget)
    out = {}
    for lr in R.lrs(res):
        vals = R.values(res, run_id, probe, budget=b, lr=lr, what=what).values()
        out[lr] = (sum(v >= at_least for v in vals), len(vals))
    return out


def difference(res: dict, run_a: str, run_b: str, probe: str, *,
               budget: int | None = None) -> dict:
    """``{lr: paired}``: ``run_a`` minus ``run_b`` at ``probe``, seed by seed over every
    seed (solved or not), after ``budget`` (default: the largest); each value is
    ``relpos_core.lab.results.paired``'s dict (mean, low, high, n, wins)."""
    b = _budget(res, budget)
    return {lr: R.paired(res, run_a, run_b, probe, budget=b, lr=lr, solved_only=False)
            for lr in R.lrs(res)}


def everywhere(per_lr: dict, test) -> bool:
    """True when ``test(stat)`` holds at every learning rate of ``per_lr``."""
    if not per_lr:
        raise ValueError("per_lr must hold at least one learning rate")
    return all(bool(test(st)) for st in per_lr.values())


def span(per_lr: dict, digits: int = 2) -> str:
    """The means at each learning rate, lowest learning rate first: ``"0.12 / 0.13"``."""
    return " / ".join(f"{per_lr[lr]['mean']:.{digits}f}" for lr in sorted(per_lr))


def interval_text(st: dict, digits: int = 2, *, signed: bool = False) -> str:
    """``"0.94 [0.85, 1.03]"``: a mean with its 95 % interval (``signed``: with a sign)."""
    f = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    return f"{f.format(st['mean'])} [{f.format(st['low'])}, {f.format(st['high'])}]"
