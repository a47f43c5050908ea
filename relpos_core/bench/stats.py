"""The benchmark's arithmetic: spread of repeated timings, growth exponents, ratios, monotonicity.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Pure Python (no
torch), so every rule here is tested on synthetic numbers (``tests/test_bench.py``):

* ``summarize(samples)``: min, quartiles, median, max of per-call times and the relative
  spread ``(q3 - q1) / median``; a row whose spread is above the threshold is measured
  again, and flagged ``noisy`` if it stays above it.
* ``fit_exponent(lengths, values)``: the least-squares slope of log(value) against
  log(L), with its standard error, so "naive is L^2 d in memory" becomes a measured
  slope of 2 with an error bar instead of a sentence.
* ``add_ratios(rows)``: each row's time over the no-bias SDPA and FlexAttention rows of
  the same run (same L, same causal setting, same mode), and over its scheme's fastest
  path at that L, each with the interval its two interquartile ranges allow.
* ``monotonic_violations(rows)``: pairs of lengths where a path was slower at the
  smaller L than at the next larger one.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from relpos_core import schemes

__all__ = [
    "quantile",
    "summarize",
    "fit_exponent",
    "series_key",
    "series",
    "fit_all",
    "add_ratios",
    "monotonic_violations",
]


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of an already sorted sequence."""
    if not sorted_values:
        raise ValueError("sorted_values must hold at least one value, got an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples: Iterable[float]) -> dict:
    """min, q1, median, q3, max, n and spread = (q3 - q1) / median of per-call times (ms)."""
    values = sorted(float(s) for s in samples)
    if not values:
        raise ValueError("samples must hold at least one timing, got none")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"samples must be finite and >= 0, got {values}")
    med = quantile(values, 0.5)
    q1, q3 = quantile(values, 0.25), quantile(values, 0.75)
    return dict(min=values[0], q1=q1, median=med, q3=q3, max=values[-1], n=len(values),
                spread=(q3 - q1) / med if med > 0 else 0.0)


def fit_exponent(lengths: Sequence[float], values: Sequence[float]) -> dict:
    """Slope of log(values) against log(lengths) by least squares, with its standard error.

    Returns ``slope``, ``stderr`` (None with fewer than 3 points), ``intercept`` (natural
    log), ``n`` and ``last_slope`` (between the two largest lengths: the growth rate
    once constant per-call costs no longer dominate).
    """
    pts = sorted((float(x), float(y)) for x, y in zip(lengths, values))
    if len(pts) != len(lengths) or len(lengths) != len(values):
        raise ValueError(f"lengths and values must have the same length, got {len(lengths)} and {len(values)}")
    if len(pts) < 2:
        raise ValueError(f"fit_exponent needs at least 2 points, got {len(pts)}")
    if any(x <= 0 or y <= 0 or not (math.isfinite(x) and math.isfinite(y)) for x, y in pts):
        raise ValueError(f"lengths and values must be finite and > 0 for a log-log fit, got {pts}")
    if len({x for x, _ in pts}) < 2:
        raise ValueError(f"fit_exponent needs at least 2 distinct lengths, got {sorted({x for x, _ in pts})}")
    xs = [math.log(x) for x, _ in pts]
    ys = [math.log(y) for _, y in pts]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    intercept = my - slope * mx
    stderr = None
    if n > 2:
        ssr = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
        stderr = math.sqrt(ssr / (n - 2) / sxx)
    top = [i for i, x in enumerate(xs) if x < xs[-1]]
    last = (ys[-1] - ys[top[-1]]) / (xs[-1] - xs[top[-1]])  # the two largest distinct lengths
    return dict(slope=slope, stderr=stderr, intercept=intercept, n=n, last_slope=last)


SERIES_FIELDS = ("scheme", "form", "backend", "mode", "causal", "block_skipping")


def series_key(row: dict) -> tuple:
    """Rows of one curve share everything but L: (scheme, form, backend, mode, causal, block_skipping)."""
    return tuple(row.get(f) for f in SERIES_FIELDS)


def series(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    """Rows grouped by ``series_key``, each group sorted by L."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault(series_key(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["L"]) for k, v in out.items()}


def fit_all(rows: Iterable[dict], *, min_points: int = 2) -> list[dict]:
    """Growth exponents of time (median ms) and measured peak bytes per series with enough ok rows."""
    fits = []
    for key, group in series(rows).items():
        ok = [r for r in group if r.get("status") == "ok"]
        base = dict(zip(SERIES_FIELDS, key))
        for quantity, get in (("time", lambda r: r["ms"]), ("peak_bytes", lambda r: r.get("peak_bytes"))):
            pts = [(r["L"], get(r)) for r in ok if get(r) is not None and get(r) > 0]
            if len({L for L, _ in pts}) < min_points:
                continue
            fit = fit_exponent([L for L, _ in pts], [v for _, v in pts])
            fits.append(dict(base, quantity=quantity, lengths=[L for L, _ in pts],
                             noisy_points=sum(1 for r in ok if r.get("noisy")) if quantity == "time" else 0,
                             **fit))
    return fits


def _ratio(row: dict, base: dict | None) -> tuple[float | None, list[float] | None]:
    if base is None or row.get("status") != "ok" or base.get("status") != "ok" or not base["ms"]:
        return None, None
    t, b = row["time_ms"], base["time_ms"]
    lo = t["q1"] / b["q3"] if b["q3"] > 0 else None
    hi = t["q3"] / b["q1"] if b["q1"] > 0 else None
    return row["ms"] / base["ms"], ([lo, hi] if lo is not None and hi is not None else None)


def add_ratios(rows: list[dict]) -> None:
    """Set x_sdpa0, x_flex0 (time over no-bias SDPA / FlexAttention) and x_best (over the
    scheme's fastest path), each with an ``_iqr`` interval and a note when its baseline is noisy.

    Baselines come from the same run, the same L, causal setting and mode. Module rows
    (Hugging Face and relpos_core on the same module) are compared with the Hugging Face
    row of their scheme instead (``x_hf``).
    """
    baseline = schemes.baseline()  # no position at all: the "no bias" rows every ratio divides by
    by_key = {}
    for r in rows:
        by_key[(r["scheme"], r["form"], r["backend"], r["mode"], r["causal"], r.get("block_skipping"), r["L"])] = r
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("status") != "ok" or r["mode"] == "module":
            continue
        if r.get("block_skipping") is False:  # a comparison row, not a path a user would pick
            continue
        k = (r["scheme"], r["mode"], r["causal"], r["L"])
        if k not in best or r["ms"] < best[k]["ms"]:
            best[k] = r
    for r in rows:
        notes = []
        if r["mode"] == "module":
            hf = next((x for x in rows if x["mode"] == "module" and x["scheme"] == r["scheme"]
                       and x["backend"] == "transformers" and x["L"] == r["L"]), None)
            r["x_hf"], r["x_hf_iqr"] = _ratio(r, hf)
            for name in ("x_sdpa0", "x_flex0", "x_best"):
                r[name], r[name + "_iqr"] = None, None
            if hf is not None and hf.get("noisy") and r["x_hf"] is not None:
                notes.append("the Hugging Face row it is compared with is noisy")
            r["ratio_notes"] = notes
            continue
        for name, backend in (("x_sdpa0", "sdpa"), ("x_flex0", "flex")):
            skip = True if backend == "flex" and r["causal"] else None
            base = by_key.get((baseline, "none", backend, r["mode"], r["causal"], skip, r["L"]))
            r[name], r[name + "_iqr"] = _ratio(r, base)
            if base is not None and base.get("noisy") and r[name] is not None:
                notes.append(f"{name}: the no-bias {backend} row it divides by is noisy")
        b = best.get((r["scheme"], r["mode"], r["causal"], r["L"]))
        r["x_best"], r["x_best_iqr"] = _ratio(r, b)
        r["best_path"] = f"{b['form']}/{b['backend']}" if b is not None else None
        r["ratio_notes"] = notes


def monotonic_violations(rows: Iterable[dict]) -> list[tuple[dict, dict]]:
    """(smaller-L row, next-larger-L row) pairs of one series where the smaller L took longer."""
    out = []
    for group in series(rows).values():
        ok = [r for r in group if r.get("status") == "ok"]
        for a, b in zip(ok, ok[1:]):
            if a["ms"] > b["ms"]:
                out.append((a, b))
    return out
