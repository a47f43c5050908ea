"""The memory guard: refuse, before allocating, a tensor bigger than the budget.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). The seed's failure mode
"materialised bias blows memory" (an fp32 bias of 16 heads at L = 16384 is 16 GiB) is
turned into an early, explained error: a path that would materialise more than the budget
raises ``MemoryBudgetError`` naming the bytes it needs and the path that avoids them.

The budget is module-level and configurable: ``set_memory_budget(nbytes)``, the
``memory_budget(nbytes)`` context manager, or the environment variable
``RELPOS_MEMORY_BUDGET`` (bytes, read at import). ``None`` means no limit.
"""
from __future__ import annotations

import contextlib
import os

import torch

from relpos_core._validate import check_int

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MemoryBudgetError",
    "check_memory",
    "format_bytes",
    "get_memory_budget",
    "memory_budget",
    "set_memory_budget",
]

DEFAULT_MEMORY_BUDGET = 16 * 2**30  # 16 GiB: one dense fp32 bias of 16 heads at L = 16384 just fits


class MemoryBudgetError(ValueError):
    """A kernel path would materialise more bytes than the memory budget allows."""


def _budget_from_env():
    raw = os.environ.get("RELPOS_MEMORY_BUDGET")
    if raw is None or raw.strip() == "":
        return DEFAULT_MEMORY_BUDGET
    if raw.strip().lower() in ("none", "inf", "unlimited"):
        return None
    try:
        return int(float(raw))
    except ValueError:  # a bad variable must not break the import: say so and keep the default
        import warnings

        warnings.warn(f"RELPOS_MEMORY_BUDGET={raw!r} is not a byte count; using {DEFAULT_MEMORY_BUDGET}")
        return DEFAULT_MEMORY_BUDGET


_BUDGET = [_budget_from_env()]


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
    return _BUDGET[0]


def set_memory_budget(nbytes: int | None) -> int | None:
    """Set the budget (bytes >= 1, or None for no limit); returns the previous one."""
    if nbytes is not None:
        nbytes = check_int("nbytes", nbytes, min_value=1)
    previous, _BUDGET[0] = _BUDGET[0], nbytes
    return previous


@contextlib.contextmanager
def memory_budget(nbytes: int | None):
    """``with memory_budget(2**30): ...`` limits every guarded path inside to 1 GiB."""
    previous = set_memory_budget(nbytes)
    try:
        yield nbytes
    finally:
        _BUDGET[0] = previous


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
    budget = _BUDGET[0]
    if budget is None or nbytes <= budget:
        return
    dims = ", ".join(str(int(s)) for s in shape)
    msg = (f"{what} would materialise {format_bytes(nbytes)} for [{dims}] {_dtype_name(dtype)}, "
           f"over the memory budget of {format_bytes(budget)}")
    if alternative is not None:
        extra = f" ({format_bytes(alternative_bytes)})" if alternative_bytes is not None else ""
        msg += f"; use {alternative}{extra}"
    msg += " (or raise the budget with relpos_core.measure.guard.memory_budget(nbytes))"
    raise MemoryBudgetError(msg)
