"""Wall-clock timing of one call: CUDA events on a GPU, perf_counter on a CPU.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). Absolute times drift
from machine to machine, so the book compares ratios taken in one run (see
``relpos_core.bench``).
"""
from __future__ import annotations

import time

import torch

from relpos_core._validate import check_int, check_positive_int

__all__ = ["measure_time", "infer_device"]


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
