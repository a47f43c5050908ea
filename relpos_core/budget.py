"""The memory budget: refuse, before allocating, a tensor bigger than the budget.

Book: "What it costs" (chapters/11_what_it_costs.ipynb), and "Failure modes"
(chapters/12_failure_modes.ipynb). This is the ground floor of the
library: it imports nothing from relpos_core but argument checks, so every builder that
makes a tensor growing with Lq Lk (offsets, biases, index tensors, gathered tables) calls
``check_memory`` before allocating. ``rp.attend`` counts a whole path's bytes with the
ledger of ``relpos_core.measure.analytic`` and, over budget, suggests a cheaper path
(``relpos_core.measure.guard``, which sits above the registry).

The budget is module-level and configurable: ``set_memory_budget(nbytes)``, the
``memory_budget(nbytes)`` context manager, or the environment variable
``RELPOS_MEMORY_BUDGET``: a whole number of bytes >= 1, or "none" for no limit. The
variable is read when a budget is first needed (not at import, so a bad value cannot
break ``import relpos_core``); a bad value raises a ValueError that names it.
"""
from __future__ import annotations

import contextlib
import os

import torch

from relpos_core._validate import check_int

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAX_BUDGET",
    "MemoryBudgetError",
    "check_memory",
    "dtype_size",
    "parse_budget",
    "format_bytes",
    "get_memory_budget",
    "memory_budget",
    "set_memory_budget",
]

DEFAULT_MEMORY_BUDGET = 16 * 2**30  # 16 GiB: one dense fp32 bias of 16 heads at L = 16384 just fits


class MemoryBudgetError(ValueError):
    """A kernel path would materialise more bytes than the memory budget allows."""


_UNSET = object()
MAX_BUDGET = 2**62  # beyond any machine; keeps byte arithmetic exact


def parse_budget(raw: str, *, name: str = "RELPOS_MEMORY_BUDGET") -> int | None:
    """A budget from text: a whole number of bytes in [1, 2**62] (underscores allowed), or "none"."""
    text = str(raw).strip().replace("_", "")
    if text.lower() == "none":
        return None
    if not text.isdigit():
        raise ValueError(f"{name} must be a whole number of bytes in [1, 2**62] or 'none', got {raw!r}")
    value = int(text)
    if not 1 <= value <= MAX_BUDGET:
        raise ValueError(f"{name} must be a whole number of bytes in [1, 2**62] or 'none', got {raw!r}")
    return value


def _budget_from_env():
    raw = os.environ.get("RELPOS_MEMORY_BUDGET")
    if raw is None or raw.strip() == "":
        return DEFAULT_MEMORY_BUDGET
    return parse_budget(raw)


_BUDGET = [_UNSET]


def format_bytes(nbytes: int | float) -> str:
    """1536 -> '1.5 KiB'; binary units, one decimal."""
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def get_memory_budget() -> int | None:
    """The current budget in bytes (None: unlimited)."""
    if _BUDGET[0] is _UNSET:
        _BUDGET[0] = _budget_from_env()
    return _BUDGET[0]


def set_memory_budget(nbytes: int | None) -> int | None:
    """Set the budget (bytes in [1, 2**62], or None for no limit); returns the previous one."""
    if nbytes is not None:
        nbytes = check_int("nbytes", nbytes, min_value=1, max_value=MAX_BUDGET)
    previous = get_memory_budget()
    _BUDGET[0] = nbytes
    return previous


@contextlib.contextmanager
def memory_budget(nbytes: int | None):
    """``with memory_budget(2**30): ...`` limits every guarded path inside to 1 GiB."""
    previous = set_memory_budget(nbytes)
    try:
        yield nbytes
    finally:
        _BUDGET[0] = previous


def dtype_size(dtype: torch.dtype) -> int:
    """Bytes per element of a torch dtype (no tensor is created: safe inside torch.compile)."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype, got {dtype!r}")
    return dtype.itemsize


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16",
            torch.int64: "int64", torch.int32: "int32"}.get(dtype, str(dtype).replace("torch.", ""))


def check_memory(
    nbytes: int,
    *,
    what: str,
    shape: tuple[int, ...] | list[int],
    dtype: torch.dtype,
    alternative: str | None = None,
    alternative_bytes: int | None = None,
) -> None:
    """Raise ``MemoryBudgetError`` if ``nbytes`` exceeds the budget; call BEFORE allocating.

    ``what`` names the path ("naive Shaw"), ``shape``/``dtype`` the tensor it would build,
    ``alternative`` the path that avoids it and ``alternative_bytes`` what that one needs.
    """
    budget = get_memory_budget()
    if budget is None or nbytes <= budget:
        return
    dims = ", ".join(str(int(s)) for s in shape)
    msg = (f"{what} would materialise {format_bytes(nbytes)} for [{dims}] {_dtype_name(dtype)}, "
           f"over the memory budget of {format_bytes(budget)}")
    if alternative is not None:
        extra = f" ({format_bytes(alternative_bytes)})" if alternative_bytes is not None else ""
        msg += f"; use {alternative}{extra}"
    msg += " (or raise the budget with relpos_core.budget.memory_budget(nbytes))"
    raise MemoryBudgetError(msg)
