"""Trace every (scheme, form, backend) path of the registry with torch._dynamo.explain and count graph breaks.

    .venv/bin/python tools/compile_sweep.py        # prints the paths with a break, then a summary

tests/test_compile.py traces every eager and SDPA path and one FlexAttention path of each kernel
structure (about 2.5 s of CPU each); this sweep traces all of them (a few minutes on 2 cores).
Exit status 1 when any path breaks the graph.
"""
from __future__ import annotations

import sys
import warnings

import torch
import torch._dynamo as dynamo

import relpos_core as rp


def main() -> int:
    warnings.simplefilter("ignore")
    H, d, L = 2, 8, 12
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, n, d, generator=g) for n in (1, L, L))  # a decode step
    broken = {}
    paths = rp.registry.paths()
    for p in paths:
        distance = rp.schemes.lookup(p.scheme).scheme.distance
        term = rp.registry.example_term(p.scheme, num_heads=H, head_dim=d,
                                        k=L if distance is not None and distance.follows_length else 4, generator=g)
        causal = p.causal == "required" or p.form == "skew"

        def step(q, k, v):
            return rp.attend(q, k, v, term, form=p.form, backend=p.backend, causal=causal, check_finite=False)

        dynamo.reset()
        explained = dynamo.explain(step)(q, k, v)
        if explained.graph_break_count:
            broken[(p.scheme, p.form, p.backend)] = [str(b.reason).splitlines()[0] for b in explained.break_reasons]
    for key, reasons in broken.items():
        print(key, reasons)
    print(f"{len(paths)} paths traced, {len(paths) - len(broken)} without a graph break")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
