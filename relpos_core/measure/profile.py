"""Peak memory and the SDPA backend of many calls, from one profiler session (the benchmarks').

Book: "What it costs" (chapters/11_what_it_costs.ipynb). The same quantity
``rp.measure.measure_peak_memory`` measures and the same backend
``rp.measure.detect_sdpa_backend`` reports, for a list of calls at once: starting the
profiler costs 0.05 to 0.3 s of CPU per session, so the kernel benchmark and the decode
benchmark profile every call of one size in a single session.
"""
from __future__ import annotations

import gc

from relpos_core.kernels.sdpa_backends import BACKEND_OPS
from relpos_core.measure._profiler import quiet_profile

__all__ = ["batched_cpu_profile"]


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
    from torch.profiler import ProfilerActivity, record_function

    enabled = gc.isenabled()
    gc.disable()
    try:
        with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
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
