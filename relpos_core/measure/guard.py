"""The path guard: refuse a kernel path over the memory budget, and name one that fits.

Book: "What it costs" (chapters/11_what_it_costs.ipynb), and "Failure modes"
(chapters/12_failure_modes.ipynb). The failure mode "a materialised bias
runs out of memory" (an fp32 bias of 16 heads at L = 16384 is 16 GiB) becomes an early,
explained error: ``rp.attend`` counts the bytes a path will allocate
(``relpos_core.measure.analytic.peak_bytes``) before allocating any of them, and over
the budget raises ``MemoryBudgetError`` naming the bytes, the budget and the cheapest
path that fits *and accepts the same call* (same dtype, device, causality, positions
and gradients: the rules of ``relpos_core.registry.call_refusal``, which ``rp.attend``
applies too), counted with the same ledger.

The budget itself (``memory_budget``, ``set_memory_budget``, ``RELPOS_MEMORY_BUDGET``)
lives on the ground floor, ``relpos_core.budget``; its names are re-exported here.
"""
from __future__ import annotations

from relpos_core.budget import (DEFAULT_MEMORY_BUDGET, MAX_BUDGET, MemoryBudgetError, check_memory, format_bytes,
                                get_memory_budget, memory_budget, parse_budget, set_memory_budget)
from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.measure.analytic import peak_bytes
from relpos_core.registry import Call, call_refusal

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAX_BUDGET",
    "MemoryBudgetError",
    "check_memory",
    "check_path_memory",
    "cheapest_path",
    "format_bytes",
    "get_memory_budget",
    "memory_budget",
    "parse_budget",
    "set_memory_budget",
]


def cheapest_path(term, call: Call, *, budget: int | None, exclude=()) -> tuple[int, str, str] | None:
    """(bytes, form, backend) of the cheapest path that accepts ``call`` and fits ``budget``, or None."""
    options = []
    for form in FORMS:
        for backend in BACKENDS:
            if (form, backend) in exclude or call_refusal(term, form, backend, call) is not None:
                continue
            options.append((peak_bytes(term, form, backend, **call.ledger_sizes(backend)), form, backend))
    fits = sorted(o for o in options if budget is None or o[0] <= budget)
    return fits[0] if fits else None


def check_path_memory(nbytes: int, *, term, form: str, backend: str, call: Call) -> None:
    """``check_memory`` for one ``rp.attend`` path, suggesting the cheapest accepting path that fits."""
    budget = get_memory_budget()
    if budget is None or nbytes <= budget:
        return
    best = cheapest_path(term, call, budget=budget, exclude=((form, backend),))
    if best is None:
        cheapest = cheapest_path(term, call, budget=None)
        least = "" if cheapest is None else (f" (the cheapest, form={cheapest[1]!r}, backend={cheapest[2]!r}, "
                                             f"needs {format_bytes(cheapest[0])})")
        raise MemoryBudgetError(
            f"{term.scheme} with form={form!r}, backend={backend!r} would materialise {format_bytes(nbytes)} for "
            f"[{call.B}, {call.H}, {call.Lq}, {call.Lk}], over the memory budget of {format_bytes(budget)}; no path "
            f"that accepts this call fits the budget{least}: shorten the call or raise the budget with "
            f"relpos_core.budget.memory_budget(nbytes)")
    check_memory(nbytes, what=f"{term.scheme} with form={form!r}, backend={backend!r}",
                 shape=(call.B, call.H, call.Lq, call.Lk), dtype=call.dtype,
                 alternative=f"form={best[1]!r}, backend={best[2]!r}", alternative_bytes=best[0])
