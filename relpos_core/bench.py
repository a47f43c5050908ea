"""``python -m relpos_core.bench``: which kernel path, and how its cost grows with L, in one run.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb), which plots a committed
CPU run (``data/bench-cpu.json``) with the figure code of ``relpos_core.figures.bench``.

For every (scheme, form, backend) path of ``relpos_core.registry`` (cases:
``relpos_core.bench_cases``) and every length L of a preset the benchmark records

* time per call over repeated bursts: min, quartiles, median, max and the spread
  (q3 - q1) / median (``relpos_core.bench_stats``). The bursts of all rows at one L are
  interleaved (round 1 of every row, then round 2, ...), so a burst of load from another
  process lands on many rows a little rather than on one row a lot. A row whose spread
  is over the preset's threshold is measured again; if it stays over, it is flagged
  ``noisy``. The first call (FlexAttention's compile, warm-up elsewhere) is timed and
  reported apart (``first_call_s``), never mixed into the figures;
* the measured peak memory of one call (the CPU profiler or the CUDA allocator, as
  ``rp.measure.measure_peak_memory`` counts it) next to ``rp.measure.analytic_bytes``;
* for SDPA rows, the SDPA backend that actually ran (``rp.measure.detect_sdpa_backend``);
* ratios from the same run: over SDPA and FlexAttention with no bias (same L, same
  causal setting), over the scheme's fastest path, and for module rows over the Hugging
  Face module, each with the interval the two rows' interquartile ranges allow.

After the sweep, every pair of lengths where a path took longer at the smaller L is
measured again, alternating the two rows; a pair that still inverts is flagged
``noisy``. Then the growth exponent of time and of measured peak memory against L
(log-log slope and its standard error) is fitted for every curve.

Presets: ``quick`` (tests: tiny sizes, two lengths, FlexAttention's eager reference,
nothing compiled), ``cpu`` (the default without ``--gpu``: four lengths for every path,
FlexAttention compiled, one intra-op thread, process CPU time as the clock, since on a
shared machine wall-clock time also counts the time other processes held the core),
``gpu`` (``--gpu``: L up to 16384, B=1, H=16, d=64, bf16, CUDA events). Every argument is
checked before anything runs; a row that fails is recorded with its error, the JSON is
written, and the exit status is 1.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from relpos_core import bench_stats
from relpos_core.cli import integer_in, number_in
from relpos_core.bench_cases import (Case, build_cases, case_analytic_bytes, distance_parameter, make_call,
                                     make_inputs)
from relpos_core.measure import guard
from relpos_core.measure._profiler import without_profiler_chatter
from relpos_core.measure.backends import BACKEND_OPS, detect_sdpa_backend
from relpos_core.measure.memory import measure_peak_memory
from relpos_core.provenance import device_name, git_commit, load_average, machine

__all__ = ["PRESETS", "SCHEMA", "MAX_LENGTH", "run_benchmark", "main", "format_table", "parse_args"]

SCHEMA = "relpos-bench/2"
MAX_LENGTH = 32768  # twice the GPU preset's largest L

PRESETS = {
    "quick": dict(B=1, H=2, d=8, lengths=[16, 32], dtype="float32", budget=64 * 2**20, compiled=False,
                  k=dict(shaw=4, shaw_key=4, t5=16, deberta=4), threads=1, clock="cpu", pin_allocator=True,
                  repeats=3, min_burst_ms=0.3, retries=1, spread_threshold=0.5, monotonic_retries=0,
                  # FlexAttention's eager reference still traces each score_mod with dynamo (~1-3 s):
                  # one flex row (no bias), at the largest length only
                  flex_only=[["none", "none", False]], flex_lengths=[32],
                  block_skip_cases=[], train_schemes=["t5"], modules=False),
    "cpu": dict(B=1, H=4, d=32, lengths=[128, 256, 512, 1024], dtype="float32", budget=2**30, compiled=True,
                k=dict(shaw=16, shaw_key=16, t5=128, deberta=64), threads=1, clock="cpu", pin_allocator=True,
                repeats=5, min_burst_ms=20.0, retries=2, spread_threshold=0.20, monotonic_retries=2,
                block_skip_cases=[("none", "none"), ("alibi", "gather")], train_schemes=["t5"], modules=True),
    "gpu": dict(B=1, H=16, d=64, lengths=[1024, 2048, 4096, 8192, 16384], dtype="bfloat16", budget=40 * 2**30,
                compiled=True, k=dict(shaw=64, shaw_key=64, t5=128, deberta=256), threads=None, clock="cuda",
                repeats=5, min_burst_ms=5.0, retries=2, spread_threshold=0.10, monotonic_retries=2,
                block_skip_cases=[("none", "none"), ("alibi", "gather"), ("t5", "gather")],
                train_schemes=["t5"], train_lengths=[1024, 2048, 4096], modules=True,
                module_lengths=[1024, 2048, 4096]),
}
# Flex kernel options to try, in order, when a compiled kernel runs out of GPU shared memory
# (the H200 reference needed num_stages=2 forward and 64 x 64 blocks, one stage, for backward).
FLEX_FALLBACK_OPTIONS = (None, {"num_stages": 2}, {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1})


# ----------------------------------------------------------------------------- timing and memory


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _burst(fn, iters: int, device) -> tuple[float, float]:
    """(process CPU ms, wall ms) per call over ``iters`` calls (wall from CUDA events on a GPU).

    Also counts the process's minor page faults per call into ``_burst.faults``."""
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0 = time.process_time_ns()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        cpu = (time.process_time_ns() - c0) / 1e6 / iters
        return cpu, start.elapsed_time(end) / iters
    f0, c0, w0 = _faults(), time.process_time_ns(), time.perf_counter_ns()
    for _ in range(iters):
        fn()
    cpu, wall = (time.process_time_ns() - c0) / 1e6 / iters, (time.perf_counter_ns() - w0) / 1e6 / iters
    _burst.faults = (_faults() - f0) / iters
    return cpu, wall


def batched_cpu_profile(fns: list) -> list[tuple[int, str]]:
    """(peak bytes, SDPA backend) of each call, by the rules of ``rp.measure``, from ONE profile.

    ``rp.measure.measure_peak_memory`` and ``rp.measure.detect_sdpa_backend`` each start
    the profiler, which costs 0.05 to 0.3 s of CPU per session; so the benchmark runs
    every call of one length inside a single session, each inside its own
    ``record_function`` window, with Python's garbage collector paused. For each window
    the peak is the running sum of the bytes the call allocated minus those of its own
    allocations it freed, at its maximum (as measure_peak_memory counts, except that a
    free of memory allocated *before* the call, garbage of an earlier row released during
    this one, cannot lower the call's peak); the backend is the SDPA operator that ran
    (``rp.measure.backends.BACKEND_OPS``; "none" when none ran). ``tests/test_bench.py``
    checks both against the library's functions.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    enabled = gc.isenabled()
    gc.disable()
    try:
        with without_profiler_chatter(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            for i, fn in enumerate(fns):
                with record_function(f"relpos_bench_call_{i}"):
                    out = fn()
                    del out
    finally:
        if enabled:
            gc.enable()
    windows = {}
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.name.startswith("relpos_bench_call_"):
            windows[int(node.name.rsplit("_", 1)[1])] = node
        else:
            stack.extend(node.children)
    out = []
    for i in range(len(fns)):
        allocations, ops = [], []
        todo = [windows[i]]
        while todo:
            node = todo.pop()
            if node.name == "[memory]":
                allocations.append((node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size))
            else:
                ops.append(node.name)
            todo.extend(node.children)
        allocations.sort()
        own, live, peak = {}, 0, 0
        for _, ptr, size in allocations:
            if size > 0:
                own[ptr] = size
                live += size
                peak = max(peak, live)
            elif ptr in own:
                live -= own.pop(ptr)
        found = []
        for name in ops:
            backend = next((b for op, b in BACKEND_OPS if op in name), None)
            if backend is not None and backend not in found:
                found.append(backend)
        out.append((int(peak), "+".join(found) if found else "none"))
    return out


def _raise_recompile_limit(n: int) -> None:
    """Every FlexAttention kernel of the run stays compiled (the rows of all lengths are
    timed together), so dynamo must keep that many entries: past its limit it would fall
    back, silently, to FlexAttention's slow eager reference."""
    from torch import _dynamo
    from relpos_core.kernels.flex import compiled_flex_attention

    compiled_flex_attention()  # sets the kernel layer's own limit first
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(_dynamo.config, name):
            setattr(_dynamo.config, name, max(getattr(_dynamo.config, name), n))


def _pin_allocator() -> dict | None:
    """Fix glibc malloc's thresholds for the run (CPU); returns what was set, or None elsewhere.

    By default glibc serves allocations above a *dynamic* threshold with fresh mmap'd
    pages, which page-fault on every call (about 3.5 us per 4 KiB page on the machine of
    the committed run), and moves the threshold with what the process freed before, so
    one row's time depended on the rows before it. Fixed, as a long-running process
    reaches: allocations up to 32 MiB (glibc's maximum threshold) reuse freed heap memory;
    larger ones are still mapped per call, and each row records its page faults per call.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if platform.system() != "Linux" or not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        settings = {"M_MMAP_THRESHOLD": (-3, 32 * 2**20), "M_TRIM_THRESHOLD": (-1, 2**30), "M_TOP_PAD": (-2, 64 * 2**20)}
        done = {key: value for key, (code, value) in settings.items() if libc.mallopt(code, value) == 1}
    except (OSError, AttributeError):  # not glibc
        return None
    return done or None


# ----------------------------------------------------------------------------- one length


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
        except guard.MemoryBudgetError as e:
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


def _sample(rows_fns, p, device, rounds: int, seed: int = 0):
    """``rounds`` rounds; each times one burst of every row, in a shuffled order (seeded).

    Appends to row['_cpu'] / row['_wall'] / row['_faults']. Rows of every length are
    interleaved, so a change of load during the run falls on short and long sequences
    alike instead of bending the growth exponents.
    """
    order = list(rows_fns)
    for r in range(rounds):
        random.Random(seed * 1000 + r).shuffle(order)
        for row, fn in order:
            _burst.faults = None
            cpu, wall = _burst(fn, row["iters"], device)
            row["_cpu"].append(cpu)
            row["_wall"].append(wall)
            if _burst.faults is not None:
                row.setdefault("_faults", []).append(_burst.faults)


def _summarize_row(row, clock):
    primary = row["_wall"] if clock in ("wall", "cuda") else row["_cpu"]
    row["time_ms"] = bench_stats.summarize(primary)
    row["ms"] = row["time_ms"]["median"]
    if clock == "cpu":
        row["wall_ms"] = bench_stats.summarize(row["_wall"])
    if row.get("_faults"):
        row["page_faults_per_call"] = bench_stats.summarize(row["_faults"])["median"]


def _prepare_length(cases: list[Case], p: dict, L: int, device, dtype, progress):
    """Rows of one length: built, run once (compile, warm-up), compared with Hugging Face
    (module rows), memory and SDPA backend measured, calls per burst chosen.

    Returns (rows, [(row, fn) of the rows to time])."""
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
    for (row, fn), (peak, backend) in zip(live, measured):
        row["peak_bytes"] = peak
        a = row.get("analytic_bytes")
        row["peak_over_analytic"] = peak / a if a else None
        ran_sdpa = row.get("info", {}).get("ran_instead", "").startswith("sdpa")
        row["sdpa_backend"] = backend if (row["backend"] == "sdpa" or ran_sdpa or backend != "none") else None
        # iterations per burst: enough calls for min_burst_ms of the clock
        est_ms = max(_burst(fn, 1, device)[1 if p["clock"] in ("wall", "cuda") else 0], 1e-3)
        row["iters"] = max(1, min(1000, math.ceil(p["min_burst_ms"] / est_ms)))
        row["_cpu"], row["_wall"], row["_faults"] = [], [], []
        row["attempts"] = 1
        row["_fn"] = fn
    return rows, live


def _time_rows(live, p, device):
    """Interleaved bursts of every row; rows over the spread threshold measured again (the
    quieter attempt kept), then flagged ``noisy`` if still over."""
    _sample(live, p, device, p["repeats"], seed=0)
    for row, _ in live:
        _summarize_row(row, p["clock"])
    for attempt in range(p["retries"]):
        noisy = [(r, f) for r, f in live if r["time_ms"]["spread"] > p["spread_threshold"]]
        if not noisy:
            break
        kept = {id(r): (r["_cpu"], r["_wall"], r.get("_faults"), r["time_ms"]) for r, _ in noisy}
        for r, _ in noisy:
            r["_cpu"], r["_wall"], r["_faults"] = [], [], []
            r["attempts"] += 1
        _sample(noisy, p, device, p["repeats"], seed=attempt + 1)
        for r, _ in noisy:
            _summarize_row(r, p["clock"])
            old_cpu, old_wall, old_faults, old_stats = kept[id(r)]
            if old_stats["spread"] < r["time_ms"]["spread"]:  # keep the quieter attempt
                r["_cpu"], r["_wall"], r["_faults"] = old_cpu, old_wall, old_faults
                _summarize_row(r, p["clock"])
    for row, fn in live:
        row["noisy"] = row["time_ms"]["spread"] > p["spread_threshold"]
        row["noise_reasons"] = ([f"spread {row['time_ms']['spread']:.2f} over the threshold "
                                 f"{p['spread_threshold']} after {row['attempts']} attempts"] if row["noisy"] else [])


def _measure_length(cases: list[Case], p: dict, L: int, device, dtype, progress) -> list[dict]:
    """One length prepared and timed on its own (tests; the run interleaves every length)."""
    rows, live = _prepare_length(cases, p, L, device, dtype, progress)
    _time_rows(live, p, device)
    return rows


def _recheck_monotonic(rows, p, device, dtype, log):
    """Re-measure pairs (L, next L) of a curve where the smaller L took longer; flag those that still do."""
    for attempt in range(p.get("monotonic_retries", 0)):
        pairs = bench_stats.monotonic_violations(rows)
        if not pairs:
            return
        for a, b in pairs:
            fns = []
            for r in (a, b):
                fn = r.get("_fn")
                if fn is None:
                    break
                fns.append((r, fn))
            if len(fns) != 2:
                continue
            log(f"re-measuring {a['label']} at L={a['L']} and L={b['L']} (the smaller L took longer)")
            for r, fn in fns:
                r["_cpu"], r["_wall"], r["_faults"] = [], [], []
                r["attempts"] += 1
            _sample(fns, p, device, p["repeats"], seed=100 + attempt)  # the pair alternates
            for r, _ in fns:
                _summarize_row(r, p["clock"])
                r["noisy"] = r["time_ms"]["spread"] > p["spread_threshold"]
                r["noise_reasons"] = [t for t in r["noise_reasons"] if not t.startswith("spread")]
                if r["noisy"]:
                    r["noise_reasons"].append(f"spread {r['time_ms']['spread']:.2f} over the threshold "
                                              f"{p['spread_threshold']} after {r['attempts']} attempts")
    for a, b in bench_stats.monotonic_violations(rows):
        for r in (a, b):
            r["noisy"] = True
            r["noise_reasons"].append(
                f"not monotonic: {a['ms']:.4g} ms at L={a['L']} > {b['ms']:.4g} ms at L={b['L']} "
                f"after re-measuring (the two are within each other's noise or the cost is flat)")


# ----------------------------------------------------------------------------- the run




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


def resolve_preset(preset: str, **overrides) -> dict:
    """A preset's settings with overrides (``lengths``, ``budget``, ``threads``, ``repeats``,
    ``spread_threshold``, ``modules``, ``seed``) applied; validated."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)}, got {preset!r}")
    p = json.loads(json.dumps(PRESETS[preset]))  # a deep copy
    p["name"] = preset
    for key, value in overrides.items():
        if value is not None:
            p[key] = value
    lengths = p["lengths"]
    if not lengths or any(not isinstance(L, int) or isinstance(L, bool) or not 1 <= L <= MAX_LENGTH for L in lengths):
        raise ValueError(f"lengths must be integers in [1, {MAX_LENGTH}], got {lengths}")
    p["lengths"] = sorted(set(lengths))
    if p["budget"] is not None and not 1 <= p["budget"] <= guard.MAX_BUDGET:
        raise ValueError(f"budget must be a number of bytes in [1, 2**62] or None, got {p['budget']}")
    return p


_PRESET = "preset"


def run_benchmark(preset: str = "cpu", *, device=None, budget=_PRESET, progress: bool = True, log=print,
                  **overrides) -> dict:
    """Run a preset; returns the result (``schema``, ``provenance``, ``rows``, ``fits``, ``summary``).

    Arguments are checked by ``main``; called directly, ``preset``, ``device`` and the
    overrides are checked here before anything runs.
    """
    p = resolve_preset(preset, **overrides)
    if budget != _PRESET:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                   or not 1 <= budget <= guard.MAX_BUDGET):
            raise ValueError(f"budget must be a number of bytes in [1, 2**62] or None, got {budget!r}")
        p["budget"] = budget
    device = _check_device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if p["clock"] == "cuda" and device.type != "cuda":
        p["clock"] = "cpu"
    if device.type == "cuda" and p["clock"] == "cpu":
        p["clock"] = "cuda"
    dtype = getattr(torch, p["dtype"])
    threads_before = torch.get_num_threads()
    if p.get("threads") and device.type == "cpu":
        torch.set_num_threads(int(p["threads"]))
    threads_used = torch.get_num_threads() if device.type == "cpu" else None
    if p["compiled"]:
        _raise_recompile_limit(4 * len(p["lengths"]) * 32)
    allocator = _pin_allocator() if (device.type == "cpu" and p.get("pin_allocator")) else None
    commit = git_commit()  # of the code that runs, before anything can change the tree
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    load_start = load_average()
    cases = build_cases(p)
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
    total = sum(len(v) for v in by_length.values())
    step, close = _progress_fn(total, f"relpos bench ({preset}, {device.type})", progress)
    rows = []
    try:
        with guard.memory_budget(p["budget"]), torch.no_grad(), warnings.catch_warnings():
            if not p["compiled"]:  # the eager reference is what this preset asks for
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            live = []
            for L in p["lengths"]:
                rows_L, live_L = _prepare_length(by_length[L], p, L, device, dtype, step)
                rows += rows_L
                live += live_L
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            _time_rows(live, p, device)
            _recheck_monotonic(rows, p, device, dtype, log if progress else (lambda *_: None))
    finally:
        close()
        torch.set_num_threads(threads_before)
    for r in rows:
        r.pop("_faults", None)
        for key in ("_fn", "_cpu", "_wall"):
            samples = r.pop(key, None)
            if key == "_cpu" and samples is not None and p["clock"] == "cpu":
                r["samples_ms"] = list(samples)
            if key == "_wall" and samples is not None and p["clock"] != "cpu":
                r["samples_ms"] = list(samples)
        info = r.pop("info", {}) or {}
        if "ran_instead" in info:
            r["ran_instead"] = info["ran_instead"]
    bench_stats.add_ratios(rows)
    fits = bench_stats.fit_all(rows)
    summary = _summary(rows, fits, p, time.perf_counter() - start_wall, time.process_time() - start_cpu)
    provenance = _provenance(p, device, commit)
    provenance["load_average_at_start"] = load_start
    provenance["threads"] = threads_used
    why = " ".join(_pin_allocator.__doc__.split("\n\n")[1].split())
    provenance["allocator"] = {"glibc mallopt": allocator, "why": why} if allocator else "the platform's default"
    return dict(schema=SCHEMA, provenance=provenance, rows=rows, fits=fits, summary=summary)


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
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "skipped", "error")}
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
        load_average=load_average(),  # 1, 5, 15 min, at the end
    )


# ----------------------------------------------------------------------------- output


def _fmt_bytes(n):
    return "-" if n is None else guard.format_bytes(n)


def format_table(result: dict) -> str:
    """Plain-text table of every row and the growth exponents (all from this one run)."""
    head = (f"{'L':>6} {'path':<52} {'status':<7} {'ms':>9} {'spread':>6} {'x sdpa0':>8} {'x flex0':>8} "
            f"{'x best':>7} {'peak':>10} {'/analytic':>9} {'sdpa':<6}")
    lines = [head, "-" * len(head)]

    def num(v, f="{:.2f}"):
        return "-" if v is None else f.format(v)

    for r in sorted(result["rows"], key=lambda r: (r["mode"], r["scheme"], r["form"], r["backend"],
                                                   r["causal"], str(r["block_skipping"]), r["L"])):
        spread = r.get("time_ms", {}).get("spread")
        flag = "*" if r.get("noisy") else " "
        lines.append(f"{r['L']:>6} {r['label'][:52]:<52} {r['status']:<7} {num(r.get('ms'), '{:.3f}'):>9}"
                     f"{flag}{num(spread):>5} {num(r.get('x_sdpa0')):>8} {num(r.get('x_flex0')):>8} "
                     f"{num(r.get('x_best') if r['mode'] != 'module' else r.get('x_hf')):>7} "
                     f"{_fmt_bytes(r.get('peak_bytes')):>10} {num(r.get('peak_over_analytic'), '{:.3f}'):>9} "
                     f"{str(r.get('sdpa_backend') or '-'):<6}")
        if r["status"] != "ok":
            lines.append(f"{'':>6}   -> {r['reason'][:200]}")
    lines.append("x sdpa0 / x flex0: time over SDPA / FlexAttention with no bias (same L, causal setting, mode); "
                 "x best: over the scheme's fastest path (module rows: over the Hugging Face module); * noisy")
    lines.append("")
    lines.append(f"{'growth exponent (log-log slope vs L)':<60} {'time':>14} {'peak memory':>14} {'n':>3}")
    by = {}
    for f in result["fits"]:
        by.setdefault(bench_stats.series_key(f), {})[f["quantity"]] = f
    for key, fs in by.items():
        t, m = fs.get("time"), fs.get("peak_bytes")
        label = next(r["label"] for r in result["rows"] if bench_stats.series_key(r) == key)

        def cell(f):
            if f is None:
                return "-"
            return f"{f['slope']:.2f}" + (f" +- {f['stderr']:.2f}" if f["stderr"] is not None else "")
        lines.append(f"{label[:60]:<60} {cell(t):>14} {cell(m):>14} {(t or m)['n']:>3}")
    s = result["summary"]
    lines.append("")
    lines.append("worst measured peak / analytic per backend: " + ", ".join(
        f"{b} {w['ratio']:.3f} ({w['label']}, L={w['L']})" for b, w in s["worst_peak_over_analytic"].items()))
    lines.append(f"rows: {s['rows']}, noisy: {s['noisy_rows']}; wall {s['wall_s']:.0f} s (first calls "
                 f"{s['first_calls_wall_s']:.0f} s, of which FlexAttention compiles {s['flex_compile_wall_s']:.0f} s), "
                 f"CPU {s['cpu_s']:.0f} s")
    return "\n".join(lines)


def _write_figures(result: dict, path: Path) -> str | None:
    """One HTML page with the per-scheme figures and the exponents (needs plotly)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return None
    from relpos_core.figures import bench as bench_figures

    html = bench_figures.report_html(result)
    path.write_text(html)
    return str(path)


# ----------------------------------------------------------------------------- command line




_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _budget(text: str):
    raw = str(text).strip().lower().replace("_", "")
    if raw == "none":
        return None
    number = raw.rstrip("kmgtib")
    unit = raw[len(number):]
    if not number.isdigit() or unit not in _UNITS or int(number) * _UNITS[unit] < 1 \
            or int(number) * _UNITS[unit] > guard.MAX_BUDGET:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes in [1, 2**62], optionally with a unit (KiB, MiB, GiB, TiB), "
            f"or 'none' for no limit, got {text!r}")
    return int(number) * _UNITS[unit]








def _check_device(text) -> torch.device:
    """cpu, or cuda[:N] with a CUDA device present; anything else is a ValueError."""
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {text!r} ({e})") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {text!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {text!r} asks for CUDA, but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}); run on a GPU machine or use --device cpu")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {text!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        device = torch.device("cuda", index)
    return device


def _check_out(path: Path) -> None:
    """The output and its figure page must be writable: checked by writing a probe file next to them."""
    if path.exists() and path.is_dir():
        raise ValueError(f"{path} is a directory; give a file name such as {path / 'bench.json'}")
    if path.suffix != ".json":
        raise ValueError(f"must end in .json, got {str(path)!r}")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".relpos-bench-probe-", delete=True):
            pass
    except OSError as e:
        raise ValueError(f"cannot write to {parent}: {e.strerror or e}") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{path} exists and is not writable")


_PRESET_BUDGET = object()  # not a string: argparse would pass a string default through _budget


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m relpos_core.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="size preset (default: gpu with --gpu, quick with --quick, else cpu)")
    ap.add_argument("--quick", action="store_true", help="the quick preset (tests: tiny sizes, nothing compiled)")
    ap.add_argument("--gpu", action="store_true", help="the gpu preset: L up to 16384, B=1, H=16, d=64, bf16")
    ap.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda for the gpu preset, else cpu)")
    ap.add_argument("--lengths", type=integer_in(1, MAX_LENGTH), nargs="+", default=None, metavar="L",
                    help=f"override the preset's sequence lengths (integers in [1, {MAX_LENGTH}])")
    ap.add_argument("--budget", type=_budget, default=_PRESET_BUDGET,
                    help="memory budget of rp.attend's guard: bytes (e.g. 1073741824 or 1GiB) or 'none'")
    ap.add_argument("--out", default=None, help="JSON path (default bench_out/bench-<device>.json)")
    ap.add_argument("--threads", type=integer_in(1, 4 * (os.cpu_count() or 1)), default=None, help="torch intra-op threads on CPU (cpu preset: 1)")
    ap.add_argument("--repeats", type=integer_in(1, 100), default=None, help="timed bursts per row (preset's by default)")
    ap.add_argument("--spread-threshold", type=number_in(0, 10), default=None,
                    help="relative spread (q3 - q1) / median above which a row is re-measured, then flagged")
    ap.add_argument("--no-modules", action="store_true", help="skip the Hugging Face module rows")
    ap.add_argument("--no-figures", action="store_true", help="write no HTML figure page next to the JSON")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    chosen = [name for name, flag in (("quick", args.quick), ("gpu", args.gpu)) if flag]
    if len(chosen) > 1:
        ap.error("--quick and --gpu: use one")
    if chosen and args.preset is not None and args.preset != chosen[0]:
        ap.error(f"--{chosen[0]} and --preset {args.preset} disagree: use one")
    args.preset = args.preset or (chosen[0] if chosen else "cpu")
    default_device = "cuda" if args.preset == "gpu" else "cpu"
    try:
        args.device = _check_device(args.device or default_device)
    except ValueError as e:
        ap.error(f"argument --device: {e}")
    if args.threads is not None and args.device.type != "cpu":
        ap.error("argument --threads: applies to CPU runs only")
    out = Path(args.out) if args.out else Path("bench_out") / f"bench-{_slug(args.device)}.json"
    try:
        _check_out(out)
    except ValueError as e:
        ap.error(f"argument --out: {e}")
    args.out = out
    return args


def main(argv=None) -> int:
    """Run from the command line; returns the exit status (1 when a row failed)."""
    args = parse_args(argv)
    overrides = dict(lengths=args.lengths, threads=args.threads, repeats=args.repeats,
                     spread_threshold=args.spread_threshold, modules=False if args.no_modules else None)
    budget = _PRESET if args.budget is _PRESET_BUDGET else args.budget
    result = run_benchmark(args.preset, device=args.device, budget=budget, progress=not args.no_progress,
                           **{k: v for k, v in overrides.items() if v is not None})
    html = None if args.no_figures else _write_figures(result, args.out.with_suffix(".html"))
    result["provenance"]["figures"] = html
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(format_table(result))
    missing = " (no figure page: --no-figures)" if args.no_figures else " (plotly missing: no figure page)"
    print(f"wrote {args.out}" + (f" and {html}" if html else missing))
    errors = [r for r in result["rows"] if r["status"] == "error"]
    if errors:
        print(f"{len(errors)} row(s) failed:", file=sys.stderr)
        for r in errors:
            print(f"  L={r['L']} {r['label']}: {r['reason']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
