"""Which SDPA backend actually ran: read from the profiler, never assumed.

Book: "What it costs" (chapters/11_what_it_costs.ipynb) and "Failure modes"
(chapters/12_failure_modes.ipynb): a silent kernel fallback, where a dense
bias pushes ``scaled_dot_product_attention`` onto the slow, quadratic-memory math path.
Forcing a backend (so that a fallback raises instead) sits beside the SDPA kernel path,
in ``relpos_core.kernels.sdpa_backends``; its names are re-exported here.
"""
from __future__ import annotations

from relpos_core.kernels import sdpa_backends
from relpos_core.kernels.sdpa_backends import (BACKEND_OPS, SDPA_BACKENDS, SdpaBackendError, active_forced_backend,
                                               available_sdpa_backends, check_backend_supports, force_sdpa_backend)
from relpos_core.measure._profiler import quiet_profile

__all__ = [*sdpa_backends.__all__, "detect_sdpa_backend"]


def detect_sdpa_backend(fn, *args, **kwargs) -> tuple[object, str]:
    """Run ``fn(*args, **kwargs)`` under the profiler; return (fn's result, backend).

    backend is one of ``SDPA_BACKENDS``, or "none" if no SDPA op ran, or "+"-joined names if
    several different backends ran.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    from torch.profiler import ProfilerActivity

    with quiet_profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn(*args, **kwargs)
    found: list[str] = []
    for e in prof.events():
        for op, backend in BACKEND_OPS:
            if op in e.name:
                if backend not in found:
                    found.append(backend)
                break
    return out, ("+".join(found) if found else "none")
