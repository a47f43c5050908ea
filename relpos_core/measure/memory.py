"""Peak memory of one call, measured (not a formula): CUDA allocator stats or the CPU profiler.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Both devices report
the same quantity: the highest number of bytes allocated *during* the call above what
was allocated just before it (inputs that already exist are excluded; the call's output
is included while it is alive).

* CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus
  ``memory_allocated`` before the call.
* CPU: ``torch.profiler`` with ``profile_memory=True`` records every allocation and free
  as a "[memory]" event with its signed size; the running sum in time order is the live
  byte count, and its maximum is the peak. This sees every tensor allocation made through
  PyTorch's CPU allocator (not scratch memory a kernel takes from elsewhere).
"""
from __future__ import annotations

import gc

import torch

from relpos_core.measure._profiler import quiet_profile
from relpos_core.measure.timing import infer_device

__all__ = ["measure_peak_memory"]


def _cpu_peak(fn, args, kwargs) -> int:
    from torch.profiler import ProfilerActivity

    with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*args, **kwargs)
        del out
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    if not events:
        return 0
    cpu = [e for e in events if e.device_type() == torch.device("cpu").type or str(e.device_type()).endswith("CPU")]
    live = peak = 0
    for e in sorted(cpu or events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return int(peak)


def measure_peak_memory(fn, *args, device=None, **kwargs) -> int:
    """Peak extra bytes allocated while ``fn(*args, **kwargs)`` runs (see module docstring).

    The device is ``device`` or that of the first tensor argument (CPU if none).
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    dev = torch.device(device) if device is not None else infer_device(args, kwargs)
    if dev.type == "cpu":
        # The profiler counts what is allocated and freed *during* the call: keep Python's cyclic
        # garbage collector out of it (freeing older objects mid-call would lower the count), rather
        # than collecting first, which takes seconds once a large library such as transformers is loaded.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return _cpu_peak(fn, args, kwargs)
        finally:
            if enabled:
                gc.enable()
    if dev.type != "cuda":
        raise ValueError(f"device must be a CPU or CUDA device, got {dev}")
    gc.collect()  # CUDA: the allocator's own statistics, from what is allocated after collecting
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = fn(*args, **kwargs)
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - before
    del out
    return int(max(peak, 0))
