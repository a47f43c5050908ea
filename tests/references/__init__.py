"""Float64 references for rp.attend, one file per scheme, found by name.

Each module here (but ``common``) defines ``CASES``: registry name -> ``Case`` with

* ``reference(q, k, v, params, qpos, kpos, causal)``: (B, H, Lq, d) in float64, every
  logit built pair by pair from the paper's formula (no kernel code reused), query i at
  position qpos[i] and key j at kpos[j]; a query whose causal mask hides every key gets
  a zero row (the library's documented rule);
* ``make_params(H, d, k, generator)``: random float64 parameters (a dict of tensors and
  settings; ``k`` the scheme's distance parameter);
* ``term(params)``: the library's ``PositionTerm`` built from those parameters (cast them
  first for another dtype; leaves that require grad stay leaves).

``tests/test_scheme_declarations.py`` fails for a registered scheme without a case here.
"""
from __future__ import annotations

import importlib
import pkgutil

from .common import Case

__all__ = ["CASES", "Case"]


def _discover() -> dict[str, Case]:
    cases = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in ("common",) or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, case in getattr(module, "CASES", {}).items():
            if name in cases:
                raise ImportError(f"tests/references: {name!r} has two reference files")
            cases[name] = case
    return cases


CASES: dict[str, Case] = _discover()
