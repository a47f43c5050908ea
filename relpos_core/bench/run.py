"""The benchmark's runner: prepare every row, time them side by side, fit, keep what finished.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). For every case of
``relpos_core.bench.cases`` and every length of a preset:

* the first call (FlexAttention's compile, warm-up elsewhere) is timed and reported apart
  (``first_call_s``), never mixed into the figures;
* the peak memory of one call and, for SDPA rows, the SDPA backend that actually ran, for
  all calls of one length from one profiler session (``rp.measure.profile``), next to
  the analytic count (``rp.measure.analytic_bytes``);
* time per call over repeated bursts, the bursts of every row of every length
  interleaved in shuffled rounds (``rp.measure.timing.interleaved``, shared with the
  decode benchmark), summarised as min, quartiles, median, max and the spread
  (q3 - q1) / median (``relpos_core.bench.stats``); a row over the preset's threshold is
  measured again and, if it stays over, flagged ``noisy``;
* ratios from the same run, pairs of lengths where a path took longer at the smaller L
  measured again, and growth exponents of time and memory against L with their standard
  errors.

A row that fails is recorded with its error (a budget refusal as ``skipped``); a row is
handed to ``on_row`` as soon as it is prepared, so the command line keeps it if the run
stops; Ctrl-C during timing ends the run with the samples taken so far
(``"complete": false``). No process-wide setting is left changed: torch's thread count
and dynamo's recompile limit are restored after the run.
"""
from __future__ import annotations

import math
import sys
import time
import warnings
from pathlib import Path

import torch

from relpos_core.bench import stats as bench_stats
from relpos_core.bench.cases import (Case, build_cases, case_analytic_bytes, distance_parameter, make_call,
                                     make_inputs)
from relpos_core.bench.presets import FLEX_FALLBACK_OPTIONS, SCHEMA, resolve_preset
from relpos_core.budget import MAX_BUDGET, MemoryBudgetError, memory_budget
from relpos_core.kernels import flex
from relpos_core.measure.backends import detect_sdpa_backend
from relpos_core.measure.device import check_device
from relpos_core.measure.memory import measure_peak_memory
from relpos_core.measure.profile import batched_cpu_profile
from relpos_core.measure.timing import TimedCall, _sync, burst, interleaved
from relpos_core.provenance import device_name, git_commit, load_average, machine

__all__ = ["run_benchmark", "check_device", "public_row"]


def public_row(row: dict) -> dict:
    """A row as it is written: without the runner's private entries."""
    return {k: v for k, v in row.items() if not k.startswith("_") and k != "info"}


def _first_call(fn, device):
    """Run fn once (compile, warm-up); (wall s, CPU s)."""
    _sync(device)
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    del out
    _sync(device)
    return time.perf_counter() - w0, time.process_time() - c0


def _error_text(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first[:400]}"


def _prepare_row(case: Case, p: dict, L: int, x: dict, device, dtype, row: dict):
    """Build the call, run it once; returns fn (None when the row is skipped or failed)."""
    options = FLEX_FALLBACK_OPTIONS if (case.backend == "flex" and device.type == "cuda") else (None,)
    last_error = None
    for opts in options:
        try:
            fn, info = make_call(case, p, L, x, device, dtype, compiled=p["compiled"], kernel_options=opts)
            wall, cpu = _first_call(fn, device)
        except MemoryBudgetError as e:
            row.update(status="skipped", reason=str(e))
            return None
        except Exception as e:  # noqa: BLE001 - recorded, and the run exits non-zero
            last_error = e
            if "out of resource" in str(e) and opts is not options[-1]:
                continue
            row.update(status="error", reason=_error_text(e))
            return None
        row.update(status="ok", first_call_s=wall, first_call_cpu_s=cpu, kernel_options=opts)
        row["info"] = info
        return fn
    row.update(status="error", reason=_error_text(last_error))  # pragma: no cover
    return None


def _check_module_outputs(rows_fns, device, dtype):
    """Module rows: each relpos_core path must give the Hugging Face module's output."""
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    reference = {}
    for row, fn in rows_fns:
        if row["mode"] == "module" and row["backend"] == "transformers":
            reference[row["scheme"]] = fn().float()
    for row, fn in rows_fns:
        if row["mode"] != "module" or row["backend"] == "transformers" or row["scheme"] not in reference:
            continue
        diff = float((fn().float() - reference[row["scheme"]]).abs().max())
        row["max_abs_diff_vs_hf"] = diff
        if not diff <= tol:
            row.update(status="error", reason=f"output differs from the Hugging Face module by {diff:.3g} "
                                              f"(tolerance {tol:g})")


def _clock_ms(sample: dict, clock: str) -> float:
    return sample["wall_ms"] if clock in ("wall", "cuda") else sample["cpu_ms"]


def _summarize(t: TimedCall, clock: str) -> None:
    row = t.row
    row["time_ms"] = bench_stats.summarize([_clock_ms(s, clock) for s in t.samples])
    row["ms"] = row["time_ms"]["median"]
    row["samples_ms"] = [_clock_ms(s, clock) for s in t.samples]
    if clock == "cpu":
        row["wall_ms"] = bench_stats.summarize([s["wall_ms"] for s in t.samples])
    faults = [s["faults"] for s in t.samples if s.get("faults") is not None]
    if faults:
        row["page_faults_per_call"] = bench_stats.summarize(faults)["median"]


def _prepare_length(cases: list[Case], p: dict, L: int, device, dtype, progress, on_row) -> tuple[list, list]:
    """Rows of one length: built, run once (compile, warm-up), compared with Hugging Face
    (module rows), memory and SDPA backend measured, calls per burst chosen.

    Returns (rows, [TimedCall of the rows to time])."""
    x = make_inputs(p, L, device, dtype, seed=p.get("seed", 0))
    rows, live = [], []
    for case in cases:
        row = dict(scheme=case.scheme, form=case.form, backend=case.backend, mode=case.mode, causal=case.causal,
                   block_skipping=case.block_skipping, L=L, B=p["B"], H=p["H"], d=p["d"],
                   k=distance_parameter(case.scheme, p, L), dtype=p["dtype"], label=case.label, note=case.note,
                   compiled=p["compiled"] if case.backend == "flex" else None)
        if case.backend == "flex" and not p["compiled"]:
            row["note"] = (row["note"] + "; " if row["note"] else "") + "FlexAttention's eager reference (not compiled)"
        try:
            row["analytic_bytes"] = case_analytic_bytes(case, p, L, dtype, device, p["compiled"])
        except ValueError as e:
            row["analytic_bytes"] = None
            row["analytic_note"] = str(e)
        fn = _prepare_row(case, p, L, x, device, dtype, row)
        progress(f"L={L} {case.label}")
        rows.append(row)
        if fn is not None:
            live.append((row, fn))
    _check_module_outputs(live, device, dtype)
    live = [(r, f) for r, f in live if r["status"] == "ok"]
    # memory and the SDPA backend, one call each
    if device.type == "cpu":
        measured = batched_cpu_profile([fn for _, fn in live])
    else:
        measured = [(measure_peak_memory(fn, device=device), detect_sdpa_backend(fn)[1]) for _, fn in live]
    timed = []
    for (row, fn), (peak, backend) in zip(live, measured):
        row["peak_bytes"] = peak
        a = row.get("analytic_bytes")
        row["peak_over_analytic"] = peak / a if a else None
        info = row.pop("info", {}) or {}
        if "ran_instead" in info:
            row["ran_instead"] = info["ran_instead"]
        ran_sdpa = row.get("ran_instead", "").startswith("sdpa")
        row["sdpa_backend"] = backend if (row["backend"] == "sdpa" or ran_sdpa or backend != "none") else None
        # calls per burst: enough for min_burst_ms of the clock
        est_ms = max(_clock_ms(burst(fn, 1, device), p["clock"]), 1e-3)
        iters = max(1, min(1000, math.ceil(p["min_burst_ms"] / est_ms)))
        row.update(iters=iters, attempts=1)
        timed.append(TimedCall(row, fn, iters))
    for row in rows:
        on_row(public_row(row))
    return rows, timed


def _flag_noise(timed: list[TimedCall], p: dict) -> None:
    for t in timed:
        row = t.row
        row["noisy"] = row["time_ms"]["spread"] > p["spread_threshold"]
        row["noise_reasons"] = [r for r in row.get("noise_reasons", []) if not r.startswith("spread")]
        if row["noisy"]:
            row["noise_reasons"].append(f"spread {row['time_ms']['spread']:.2f} over the threshold "
                                        f"{p['spread_threshold']} after {row['attempts']} attempts")


def _time_rows(timed: list[TimedCall], p: dict, device) -> None:
    """Interleaved bursts of every row; rows over the spread threshold measured again (the
    quieter attempt kept), then flagged ``noisy`` if still over."""
    interleaved(timed, p["repeats"], device, seed=0)
    for t in timed:
        _summarize(t, p["clock"])
    for attempt in range(p["retries"]):
        noisy = [t for t in timed if t.row["time_ms"]["spread"] > p["spread_threshold"]]
        if not noisy:
            break
        kept = {id(t): (t.samples, t.row["time_ms"]["spread"]) for t in noisy}
        for t in noisy:
            t.samples = []
            t.row["attempts"] += 1
        interleaved(noisy, p["repeats"], device, seed=attempt + 1)
        for t in noisy:
            _summarize(t, p["clock"])
            old_samples, old_spread = kept[id(t)]
            if old_spread < t.row["time_ms"]["spread"]:  # keep the quieter attempt
                t.samples = old_samples
                _summarize(t, p["clock"])
    _flag_noise(timed, p)


def _recheck_monotonic(rows, timed: list[TimedCall], p, device, log) -> None:
    """Re-measure pairs (L, next L) of a curve where the smaller L took longer; flag those that still do."""
    by_row = {id(t.row): t for t in timed}
    for attempt in range(p.get("monotonic_retries", 0)):
        pairs = bench_stats.monotonic_violations(rows)
        if not pairs:
            break
        for a, b in pairs:
            pair = [by_row[id(r)] for r in (a, b) if id(r) in by_row]
            if len(pair) != 2:
                continue
            log(f"re-measuring {a['label']} at L={a['L']} and L={b['L']} (the smaller L took longer)")
            for t in pair:
                t.samples = []
                t.row["attempts"] += 1
            interleaved(pair, p["repeats"], device, seed=100 + attempt)  # the pair alternates
            for t in pair:
                _summarize(t, p["clock"])
            _flag_noise(pair, p)
    for a, b in bench_stats.monotonic_violations(rows):
        for r in (a, b):
            r["noisy"] = True
            r.setdefault("noise_reasons", []).append(
                f"not monotonic: {a['ms']:.4g} ms at L={a['L']} > {b['ms']:.4g} ms at L={b['L']} "
                f"after re-measuring (the two are within each other's noise or the cost is flat)")


def _slug(device) -> str:
    if device.type == "cpu":
        return "cpu"
    return "".join(c if c.isalnum() else "-" for c in device_name(device).lower()).strip("-")


def _versions() -> dict:
    out = {}
    for name in ("numpy", "transformers", "triton"):
        try:
            module = __import__(name)
            out[name] = getattr(module, "__version__", "?")
        except ImportError:
            out[name] = None
    return out


def _progress_fn(total: int, desc: str, enabled: bool):
    if not enabled:
        return lambda text: None, lambda: None
    bar = _progress(range(total), desc)
    if hasattr(bar, "update"):
        def step(text):
            bar.set_postfix_str(text[-60:], refresh=False)
            bar.update(1)
        return step, bar.close
    counter = [0]

    def plain(text):
        counter[0] += 1
        if counter[0] % 10 == 0 or counter[0] == total:
            print(f"[relpos bench] {counter[0]}/{total} {text}", flush=True)
    return plain, lambda: None


def _progress(items, desc):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        print(f"[relpos bench] tqdm is not installed: plain loop over {len(items)} cases ({desc})", flush=True)
        return items
    return tqdm(items, desc=desc)


def _lengths_of(cases: list[Case], p: dict) -> dict:
    by_length = {}
    for L in p["lengths"]:
        active = []
        for c in cases:
            if c.lengths and L not in c.lengths:
                continue
            if c.mode == "train" and p.get("train_lengths") and L not in p["train_lengths"]:
                continue
            if c.mode == "module" and p.get("module_lengths") and L not in p["module_lengths"]:
                continue
            if c.backend == "flex" and c.mode == "forward":
                if p.get("flex_lengths") and L not in p["flex_lengths"]:
                    continue
                if p.get("flex_only") is not None and [c.scheme, c.form, c.causal] not in p["flex_only"]:
                    continue
            active.append(c)
        by_length[L] = active
    return by_length


_PRESET = "preset"


def run_benchmark(preset: str = "cpu", *, device=None, budget=_PRESET, progress: bool = True, log=print,
                  on_row=None, allocator=None, **overrides) -> dict:
    """Run a preset; returns the result (``schema``, ``complete``, ``provenance``, ``rows``, ``fits``,
    ``summary``).

    ``on_row(row)`` receives every row as soon as it is prepared (the command line keeps
    them in a partial file). Ctrl-C during the timing ends the run early: the rows are
    summarised from the bursts taken so far, those with none marked ``interrupted``, and
    the result says ``"complete": false``. ``allocator``: what the caller set for the
    process's allocator (recorded in the provenance). Arguments are checked before anything runs.
    """
    p = resolve_preset(preset, **overrides)
    if budget != _PRESET:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                   or not 1 <= budget <= MAX_BUDGET):
            raise ValueError(f"budget must be a number of bytes in [1, 2**62] or None, got {budget!r}")
        p["budget"] = budget
    device = check_device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if p.get("peers"):  # relpos_core against the peers' implementations (relpos_core.bench.peers)
        from relpos_core.bench.peers.run import run_peers

        if device.type != "cpu":
            raise ValueError(f"device must be cpu for the {preset} preset (its clock is process CPU time), "
                             f"got {device}")
        return run_peers(p, device=device, log=log)
    if p["clock"] == "cuda" and device.type != "cuda":
        p["clock"] = "cpu"
    if device.type == "cuda" and p["clock"] == "cpu":
        p["clock"] = "cuda"
    on_row = on_row or (lambda row: None)
    dtype = getattr(torch, p["dtype"])
    threads_before = torch.get_num_threads()
    if p.get("threads") and device.type == "cpu":
        torch.set_num_threads(int(p["threads"]))
    threads_used = torch.get_num_threads() if device.type == "cpu" else None
    commit = git_commit()  # of the code that runs, before anything can change the tree
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    load_start = load_average()
    by_length = _lengths_of(build_cases(p), p)
    total = sum(len(v) for v in by_length.values())
    step, close = _progress_fn(total, f"relpos bench ({preset}, {device.type})", progress)
    rows, timed, complete = [], [], True
    limits = flex.recompile_limits(4 * len(p["lengths"]) * 64) if p["compiled"] else _nothing()
    try:
        with limits, memory_budget(p["budget"]), torch.no_grad(), warnings.catch_warnings():
            if not p["compiled"]:  # the eager reference is what this preset asks for
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            try:
                for L in p["lengths"]:
                    rows_L, timed_L = _prepare_length(by_length[L], p, L, device, dtype, step, on_row)
                    rows += rows_L
                    timed += timed_L
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                _time_rows(timed, p, device)
                _recheck_monotonic(rows, timed, p, device, log if progress else (lambda *_: None))
            except KeyboardInterrupt:
                complete = False
                for t in timed:
                    if t.samples:
                        _summarize(t, p["clock"])
                    else:
                        t.row.update(status="interrupted", reason="Ctrl-C before this row was timed")
                log("interrupted: the rows are summarised from the bursts taken so far (complete: false)")
    finally:
        close()
        torch.set_num_threads(threads_before)
    rows = [public_row(r) for r in rows]
    bench_stats.add_ratios(rows)
    fits = bench_stats.fit_all(rows)
    summary = _summary(rows, fits, p, time.perf_counter() - start_wall, time.process_time() - start_cpu)
    provenance = _provenance(p, device, commit)
    provenance["load_average_at_start"] = load_start
    provenance["threads"] = threads_used
    provenance["allocator"] = allocator or "the platform's default"
    return dict(schema=SCHEMA, complete=complete, provenance=provenance, rows=rows, fits=fits, summary=summary)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _summary(rows, fits, p, wall_s, cpu_s) -> dict:
    worst = {}
    for r in rows:
        ratio = r.get("peak_over_analytic")
        if ratio is None:
            continue
        key = r["backend"]
        if key not in worst or abs(ratio - 1) > abs(worst[key]["ratio"] - 1):
            worst[key] = dict(ratio=ratio, label=r["label"], L=r["L"], peak_bytes=r["peak_bytes"],
                              analytic_bytes=r["analytic_bytes"])
    first = sum(r.get("first_call_s", 0.0) for r in rows)
    flex_first = sum(r.get("first_call_s", 0.0) for r in rows if r["backend"] == "flex" and p["compiled"])
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "skipped", "error", "interrupted")}
    inductor = None
    if p["compiled"]:
        from torch._dynamo.utils import counters

        inductor = {k: v for k, v in counters["inductor"].items() if "cache" in k}
    return dict(
        rows=counts, noisy_rows=sum(1 for r in rows if r.get("noisy")),
        worst_peak_over_analytic=worst,
        wall_s=wall_s, cpu_s=cpu_s, first_calls_wall_s=first, flex_compile_wall_s=flex_first,
        measure_wall_s=wall_s - first,
        fits_with_4_lengths=sum(1 for f in fits if f["n"] >= 4),
        inductor_cache=inductor,  # FlexAttention kernels loaded from PyTorch's on-disk cache (hit) or compiled
    )


def _provenance(p, device, commit: str) -> dict:
    sizes = {k: v for k, v in p.items() if k not in ("budget", "name")}
    clock = {"cpu": "process CPU time (time.process_time_ns) of the bursts", "wall": "wall clock (perf_counter)",
             "cuda": "CUDA events around each burst"}[p["clock"]]
    return dict(
        **machine(device, commit=commit),
        preset=p["name"], sizes=sizes, dtype=p["dtype"], threads=torch.get_num_threads() if device.type == "cpu"
        else None, memory_budget_bytes=p["budget"], versions=_versions(),
        command=" ".join([Path(sys.argv[0]).name] + sys.argv[1:]) if sys.argv else None,
        clock=clock,
        timing=(f"each row: {p['repeats']} bursts of `iters` calls (iters chosen so a burst lasts about "
                f"{p['min_burst_ms']} ms), the bursts of all rows at one L interleaved; time_ms summarises the "
                f"per-call times of the bursts; the first call (compile / warm-up) is first_call_s, excluded"),
        spread=(f"(q3 - q1) / median of the bursts; over {p['spread_threshold']} the row is measured again "
                f"(up to {p['retries']} times, the quieter attempt kept) and flagged noisy if it stays over"),
        peak=("max bytes allocated during one call above what was allocated before it (CPU profiler "
              "allocation events, all calls of one L in one profiler session; CUDA allocator stats)"),
    )  # machine() records the load average (1, 5, 15 min) at the end


