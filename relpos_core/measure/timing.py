"""Timing: one call (``measure_time``), and the bursts both benchmarks time side by side.

Book: "What it costs" (chapters/11_what_it_costs.ipynb) and "The KV
cache" (chapters/08_the_kv_cache.ipynb). Absolute times drift from machine to machine, so
the book compares ratios taken in one run.

``burst(fn, iters, device)`` times ``iters`` calls in a row and reports the process's CPU
time, the wall time (CUDA events on a GPU) and the minor page faults, per call.
``interleaved(calls, rounds, device)`` times one burst of every call per round, in a
shuffled (seeded) order each round, so that a burst of load from another process lands
on many calls a little rather than on one call a lot: the kernel benchmark
(``relpos_core.bench``) and the decode benchmark (``relpos_core.decoding.bench``) both
time with it and summarise the samples the same way (``relpos_core.bench.stats``).
"""
from __future__ import annotations

import random
import resource
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from relpos_core._validate import check_int, check_positive_int

__all__ = ["measure_time", "infer_device", "burst", "interleaved", "TimedCall"]


def infer_device(args, kwargs=None) -> torch.device:
    """The device of the first tensor among args/kwargs (CPU if there is none)."""
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.device("cpu")


def measure_time(fn, *args, warmup: int = 3, iters: int = 10, device=None, **kwargs) -> float:
    """Mean milliseconds of ``fn(*args, **kwargs)`` over ``iters`` calls after ``warmup`` calls.

    On CUDA: CUDA events around the ``iters`` calls, synchronised. On CPU: perf_counter.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    warmup = check_int("warmup", warmup, min_value=0)
    iters = check_positive_int("iters", iters)
    dev = torch.device(device) if device is not None else infer_device(args, kwargs)
    for _ in range(warmup):
        fn(*args, **kwargs)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn(*args, **kwargs)
        end.record()
        torch.cuda.synchronize(dev)
        return start.elapsed_time(end) / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        fn(*args, **kwargs)
    return (time.perf_counter() - t0) * 1e3 / iters


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def burst(fn, iters: int, device) -> dict:
    """``iters`` calls of ``fn`` in a row: per call, process CPU ms, wall ms (CUDA events on a GPU)
    and minor page faults (CPU)."""
    iters = check_positive_int("iters", iters)
    device = torch.device(device)
    _sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        c0 = time.process_time_ns()
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        return dict(cpu_ms=(time.process_time_ns() - c0) / 1e6 / iters, wall_ms=start.elapsed_time(end) / iters,
                    faults=None)
    f0, c0, w0 = _faults(), time.process_time_ns(), time.perf_counter_ns()
    for _ in range(iters):
        fn()
    return dict(cpu_ms=(time.process_time_ns() - c0) / 1e6 / iters, wall_ms=(time.perf_counter_ns() - w0) / 1e6 / iters,
                faults=(_faults() - f0) / iters)


@dataclass
class TimedCall:
    """A prepared call being timed by :func:`interleaved`: the result ``row`` it fills, the
    call, calls per burst, and the bursts so far."""

    row: dict
    fn: Callable
    iters: int = 1
    samples: list = field(default_factory=list)


def interleaved(calls, rounds: int, device, *, seed: int = 0, on_round=None) -> None:
    """``rounds`` rounds, each one burst of every call, in a shuffled order (seeded).

    ``calls``: objects with ``fn``, ``iters`` and a ``samples`` list (``TimedCall``), to which every burst's
    dict (``burst``) is appended. ``on_round(r)`` is called after each round (progress,
    keeping what finished).
    """
    rounds = check_positive_int("rounds", rounds)
    order = list(calls)
    for r in range(rounds):
        random.Random(seed * 1000 + r).shuffle(order)
        for call in order:
            call.samples.append(burst(call.fn, call.iters, device))
        if on_round is not None:
            on_round(r)
