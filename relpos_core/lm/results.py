"""Results of the language-model lab: the JSON with provenance, and the tables the book reads.

Book: "Evidence from a language model" (chapters/13_language_model.ipynb) describes the lab
and reads the committed run.

A results file holds ``{"format", "preset", "corpus", "provenance", "runs", "complete"}``;
``runs`` are the records of ``relpos_core.lm.train`` (kind "base": one scheme and seed;
kind "extension": one RoPE extension method and seed). Intervals across seeds are
Student t intervals (``relpos_core.lab.results.t_interval``), one value per seed.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from relpos_core.lab.results import t_interval
from relpos_core.provenance import machine

__all__ = ["FORMAT", "COMMITTED", "build_results", "from_partial", "load_results", "load_committed", "committed_path", "base_runs",
           "extension_runs", "bpb_values", "passkey_accuracy", "bpb_table", "passkey_table", "extension_table",
           "table_markdown", "results_text", "SECOND_LR", "LONG_BUDGET", "change_verdict", "verdicts_at_both"]

FORMAT = "relpos-lm/1"
COMMITTED = "lm-full.json"
SECOND_LR = "lm-full-lr1e-3.json"  # the full run's model and budget at a second learning rate
LONG_BUDGET = "lm-long.json"  # the full run at four times its training budget, for seven schemes


def build_results(preset, runs: list[dict], *, corpus: dict, command: str, commit: str, wall_s: float,
                  workers: int, threads: int, load_start=None, complete: bool = True) -> dict:
    provenance = {**machine("cpu", commit=commit), "preset": preset.name, "command": command, "workers": workers,
                  "threads": threads, "wall_s": round(wall_s, 2), "cpu_s": round(sum(r["cpu_s"] for r in runs), 2),
                  "load_average_start": load_start, "corpus_hash": corpus.get("hash"),
                  "corpus_matches_pin": corpus.get("matches_pin")}
    return {"format": FORMAT, "preset": preset.to_dict(), "corpus": corpus, "provenance": provenance,
            "runs": runs, "complete": complete}


def results_text(results: dict) -> str:
    return json.dumps(results, indent=1, default=str) + "\n"


def load_results(path) -> dict:
    res = json.loads(Path(path).read_text())
    if res.get("format") != FORMAT:
        raise ValueError(f"{path} is not a language-model lab result (format {res.get('format')!r}, "
                         f"expected {FORMAT!r})")
    return res


def committed_path(name: str = COMMITTED) -> Path:
    from relpos_core import resources

    return resources.path(name)


def load_committed(name: str = COMMITTED) -> dict:
    return load_results(committed_path(name))


def from_partial(path, *, preset: str | None = None) -> dict:
    """A results object (``"complete": false``) from an unfinished run's ``<out>.partial.jsonl``:
    its finished runs with the preset they were run under; no machine provenance beyond the head's."""
    from relpos_core.outputs import read_partial

    from .presets import get_preset

    head, rows = read_partial(path)
    head = head or {}
    name = preset or head.get("preset")
    return {"format": FORMAT, "preset": get_preset(name).to_dict(), "corpus": {"hash": head.get("corpus_hash")},
            "provenance": {"preset": name, "git_commit": head.get("git_commit"), "command": head.get("command"),
                           "from_partial": str(path)}, "runs": rows, "complete": False}


def base_runs(results: dict, scheme: str | None = None) -> list[dict]:
    return [r for r in results["runs"] if r["kind"] == "base" and (scheme is None or r["scheme"] == scheme)]


def extension_runs(results: dict, method: str | None = None) -> list[dict]:
    return [r for r in results["runs"] if r["kind"] == "extension" and (method is None or r["method"] == method)]


def _evaluation(record: dict, stage: str) -> dict | None:
    return record["eval"] if record["kind"] == "base" else record.get(stage)


def bpb_values(records, length: int, *, stage: str = "eval", sliding: bool = False) -> list[float]:
    """Bits per byte at ``length``, one per record (seed)."""
    out = []
    for r in records:
        ev = _evaluation(r, stage)
        if ev is not None:
            out.append(ev[str(length)]["sliding_bpb" if sliding else "bpb"])
    return out


def passkey_accuracy(record: dict, length: int, *, stage: str = "eval", depths=None, what: str = "digit") -> float | None:
    """Digit accuracy (``what="digit"``) or exact-match rate ("exact") of one record's passkey rows at ``length``."""
    ev = _evaluation(record, stage)
    if ev is None or ev[str(length)].get("passkey") is None:
        return None
    probe = ev[str(length)]["passkey"]
    depths = list(probe) if depths is None else depths
    if what == "digit":
        return sum(probe[d]["digit_correct"] for d in depths) / max(1, sum(probe[d]["digits"] for d in depths))
    return sum(probe[d]["exact"] for d in depths) / max(1, sum(probe[d]["rows"] for d in depths))


def _interval(vals) -> dict | None:
    vals = [v for v in vals if v is not None]
    return t_interval(vals) if vals else None


def _scheme_rows(results: dict, values_at) -> list[dict]:
    """One row per scheme with base runs: {scheme, n, "<L>": t interval of ``values_at(recs, L)``}."""
    rows = []
    for scheme in results["preset"]["schemes"]:
        recs = base_runs(results, scheme)
        if recs:
            rows.append({"scheme": scheme, "n": len(recs),
                         **{str(L): _interval(values_at(recs, L)) for L in results["preset"]["eval_lengths"]}})
    return rows


def bpb_table(results: dict, *, sliding: bool = False) -> list[dict]:
    """One row per scheme: {scheme, n, "<L>": t interval of the bits per byte across seeds}."""
    return _scheme_rows(results, lambda recs, L: bpb_values(recs, L, sliding=sliding))


def paired_change(results: dict, scheme: str, length: int, *, sliding: bool = False) -> dict:
    """Bits per byte at ``length`` minus at the training length, run by run (paired per seed):
    the t interval of those differences over the scheme's base runs."""
    recs = base_runs(results, scheme)
    first = results["preset"]["eval_lengths"][0]
    pairs = zip(bpb_values(recs, length, sliding=sliding), bpb_values(recs, first, sliding=sliding))
    return t_interval([a - b for a, b in pairs])


def change_verdict(iv: dict) -> str:
    """What a paired change's t interval supports: "holds" (its upper end below zero), "not
    shown" (it contains zero: the runs cannot tell it from no change), "rises steeply" (its
    lower end above one bit per byte) or "rises"."""
    if iv["low"] <= 0 <= iv["high"]:
        return "not shown"
    if iv["high"] < 0:
        return "holds"
    return "rises steeply" if iv["low"] > 1 else "rises"


def verdicts_at_both(first: dict, second: dict, length: int) -> dict:
    """The schemes of both runs (two learning rates, say): {scheme: {"first": interval,
    "second": interval, "verdicts": (first's, second's), "agree": whether they are the same}}
    of the paired change at ``length``. Only a verdict the two agree on survives the second run."""
    out = {}
    for scheme in first["preset"]["schemes"]:
        if scheme not in second["preset"]["schemes"]:
            continue
        a, b = paired_change(first, scheme, length), paired_change(second, scheme, length)
        va, vb = change_verdict(a), change_verdict(b)
        out[scheme] = {"first": a, "second": b, "verdicts": (va, vb), "agree": va == vb}
    return out


def passkey_table(results: dict, *, depths=None, what: str = "digit") -> list[dict]:
    """One row per scheme: {scheme, n, "<L>": t interval of the passkey accuracy across seeds}."""
    return _scheme_rows(results, lambda recs, L: [passkey_accuracy(r, L, depths=depths, what=what) for r in recs])


def extension_table(results: dict, *, stage: str, what: str = "bpb", depths=None) -> list[dict]:
    """Methods x lengths: ``stage`` "zero_shot" or "finetuned"; ``what`` "bpb", "sliding_bpb" or "passkey"."""
    lengths = results["preset"]["eval_lengths"]
    rows = []
    for method in [e["name"] for e in results["preset"]["extensions"]]:
        recs = extension_runs(results, method)
        if stage == "zero_shot" and method == results["preset"]["extension_scheme"]:
            recs, st = base_runs(results, method), "eval"  # RoPE zero-shot is the base run
        else:
            st = stage
        recs = [r for r in recs if _evaluation(r, st) is not None]
        if not recs:
            continue
        row = {"method": method, "n": len(recs)}
        for L in lengths:
            if what == "passkey":
                row[str(L)] = _interval([passkey_accuracy(r, L, stage=st, depths=depths) for r in recs])
            else:
                row[str(L)] = _interval(bpb_values(recs, L, stage=st, sliding=what == "sliding_bpb"))
        rows.append(row)
    return rows


def _cell(iv) -> str:
    if iv is None:
        return "-"
    if iv["n"] == 1 or not math.isfinite(iv["half_width"]):
        return f"{iv['mean']:.3f} (n=1)"
    return f"{iv['mean']:.3f} ± {iv['half_width']:.3f}"


def table_markdown(rows: list[dict], key: str, lengths) -> str:
    head = f"| {key} | n | " + " | ".join(str(L) for L in lengths) + " |"
    sep = "|" + "---|" * (len(lengths) + 2)
    body = [f"| {r[key]} | {r['n']} | " + " | ".join(_cell(r.get(str(L))) for L in lengths) + " |" for r in rows]
    return "\n".join([head, sep, *body])
