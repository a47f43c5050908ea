"""What each path costs: peak memory, time, analytic bytes, the memory guard, SDPA backends,
and the device to measure on (``device.pick()``)."""
from . import analytic, backends, device, guard, memory, timing
from .analytic import analytic_bytes
from .backends import detect_sdpa_backend, force_sdpa_backend
from .guard import MemoryBudgetError, memory_budget
from .memory import measure_peak_memory
from .timing import measure_time

__all__ = [
    "analytic",
    "backends",
    "device",
    "guard",
    "memory",
    "timing",
    "analytic_bytes",
    "detect_sdpa_backend",
    "force_sdpa_backend",
    "MemoryBudgetError",
    "memory_budget",
    "measure_peak_memory",
    "measure_time",
]
