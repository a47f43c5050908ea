"""Compile every (scheme, form, backend) path of the registry whole, run it and compare it with eager.

    .venv/bin/python tools/compile_sweep.py            # forward, every path (about 10-60 s each on 2 cores)
    .venv/bin/python tools/compile_sweep.py --grad     # and the gradients of every path that trains on CPU
    .venv/bin/python tools/compile_sweep.py --paths t5:gather:flex alibi:naive:flex

``torch.compile(fullgraph=True)`` (inductor, CPU) of a function calling ``rp.attend`` with the default
arguments (finiteness check on), Lq = 5 queries over L = 12 keys: the compiled output must equal the eager
one, a NaN key must be refused with the eager ValueError, and with ``--grad`` the gradients of q, k, v and
the term's tables must match. tests/test_compile.py does the same (gradients on one path of each kernel
structure). Prints one line per path and a summary; exit status 1 when any path fails.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch._dynamo as dynamo  # noqa: E402

import relpos_core as rp  # noqa: E402

H, D, L, LQ = 2, 8, 12, 5


def check(path, grad: bool) -> None:
    causal = path.causal == "required" or path.form == "skew"
    results = []
    for compile_it in (False, True):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, H, n, D, generator=g, requires_grad=grad) for n in (LQ, L, L))
        distance = rp.schemes.lookup(path.scheme).scheme.distance
        term = rp.registry.example_term(path.scheme, num_heads=H, head_dim=D, generator=g,
                                        k=L if distance is not None and distance.follows_length else 4)
        leaves = [q, k, v] + ([t.requires_grad_(True) for _, t in term.tensors() if t.is_floating_point()
                               and t.is_leaf] if grad else [])

        def step(q, k, v):
            return rp.attend(q, k, v, term, form=path.form, backend=path.backend, causal=causal)

        if compile_it:
            dynamo.reset()
            step = torch.compile(step, fullgraph=True)
        with torch.set_grad_enabled(grad):
            out = step(q, k, v)
            results.append([out, *torch.autograd.grad(out.square().sum(), leaves)] if grad else [out])
        if compile_it:
            bad = k.detach().clone()
            bad[0, 1, 3, 2] = float("nan")
            try:
                with torch.no_grad():
                    step(q.detach(), bad, v.detach())
            except ValueError as e:
                if not str(e).startswith("k holds non-finite values"):
                    raise
            else:
                raise AssertionError("the compiled call let a NaN key through")
    for eager, compiled in zip(*results):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grad", action="store_true", help="gradients too, on the paths that train on CPU")
    ap.add_argument("--paths", nargs="+", help="scheme:form:backend (default: every path)")
    args = ap.parse_args(argv)
    paths = rp.registry.paths()
    if args.paths:
        known = {f"{p.scheme}:{p.form}:{p.backend}": p for p in paths}
        unknown = [s for s in args.paths if s not in known]
        if unknown:
            ap.error(f"unknown paths {unknown}: each must be scheme:form:backend of rp.registry.paths()")
        paths = [known[s] for s in args.paths]
    warnings.simplefilter("ignore", UserWarning)  # the flex CPU backward fallback's note; failures still raise
    failed = {}
    for p in paths:
        name = f"{p.scheme}:{p.form}:{p.backend}"
        t0 = time.perf_counter()
        try:
            check(p, args.grad and p.backward_cpu != "no")
            print(f"{name:<34} ok ({time.perf_counter() - t0:.0f} s)", flush=True)
        except Exception as e:  # every failure reported and counted
            failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            print(f"{name:<34} FAILED {failed[name]}", flush=True)
    print(f"{len(paths)} paths compiled, {len(paths) - len(failed)} built, ran and matched eager")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
