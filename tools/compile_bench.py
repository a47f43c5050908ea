"""Compiled over eager, path by path: ``torch.compile(fullgraph=True)`` of a call to ``rp.attend`` against the call.

    .venv/bin/python tools/compile_bench.py                   # one path of each (form, backend) + T5, DeBERTa
    .venv/bin/python tools/compile_bench.py --all             # every path of the registry (about 1 min each)
    .venv/bin/python tools/compile_bench.py --paths t5:gather:sdpa deberta:gather:sdpa --length 512
    .venv/bin/python tools/compile_bench.py --paths t5:gather:sdpa --before t5:gather:sdpa

B=1, H=8, d=64, float32, CPU, one thread, process CPU time, no gradient, the default arguments
(finiteness check on). Each path's eager call and its compiled call are checked equal first
(``assert_close``), compiled once (the compile time is printed apart), then timed in bursts
interleaved with every other call of the run (``relpos_core.measure.timing.interleaved``), so the
ratio compiled / eager compares like with like; on a loaded machine the absolute times mean little.
``--before PATH...`` adds, for those paths, a third call compiled without
``relpos_core.compile_ops.computed_once`` (inductor then fuses the per-offset bias into the
(H, Lq, Lk) loop that reads it, as before issue 25): the patch is held around each of its calls
(about 20 us a call). Exit status 1 when a path fails to build or run, or is slower compiled by
more than ``--limit``.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import relpos_core as rp  # noqa: E402
from relpos_core.bench import stats  # noqa: E402
from relpos_core.kernels.flex import recompile_limits  # noqa: E402
from relpos_core.measure.timing import TimedCall, burst, interleaved  # noqa: E402

# the two slow ones first, then one path of each (form, backend)
DEFAULT_PATHS = ("t5:gather:sdpa", "deberta:gather:sdpa")


def default_paths():
    chosen, kinds = list(DEFAULT_PATHS), set()
    for p in rp.registry.paths():
        if (p.form, p.backend) not in kinds and p.scheme not in ("none", "absolute"):
            kinds.add((p.form, p.backend))
            chosen.append(f"{p.scheme}:{p.form}:{p.backend}")
    return list(dict.fromkeys(chosen))


def _without_computed_once(fn):
    """fn with ``computed_once`` an identity while it runs (traced and called so: no recompile)."""
    def call():
        with mock.patch("relpos_core.pieces.scalars.computed_once", lambda t: t), \
                mock.patch("relpos_core.kernels.rotary.computed_once", lambda t: t):
            return fn()
    return call


def prepare(spec: str, L: int, min_ms: float, before: bool = False):
    scheme, form, backend = spec.split(":")
    path = next(p for p in rp.registry.paths() if (p.scheme, p.form, p.backend) == (scheme, form, backend))
    B, H, d = 1, 8, 64
    g = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, d, generator=g) for _ in range(3))  # (B, H, L, d)
    distance = rp.schemes.lookup(scheme).scheme.distance
    term = rp.registry.example_term(scheme, num_heads=H, head_dim=d,
                                    k=L if distance is not None and distance.follows_length else 16, generator=g)
    causal = path.causal == "required" or form == "skew"

    def eager():
        return rp.attend(q, k, v, term, form=form, backend=backend, causal=causal)

    compiled_fn = torch.compile(lambda: eager(), fullgraph=True)
    t0 = time.perf_counter()
    got = compiled_fn()
    compile_s = time.perf_counter() - t0
    torch.testing.assert_close(got, eager(), rtol=1e-4, atol=1e-4)
    kinds = [("eager", eager), ("compiled", compiled_fn)]
    if before:
        old = _without_computed_once(torch.compile(lambda: eager(), fullgraph=True))
        torch.testing.assert_close(old(), got, rtol=1e-4, atol=1e-4)
        kinds.append(("before", old))
    calls = []
    for kind, fn in kinds:
        iters = max(1, math.ceil(min_ms / max(burst(fn, 1, "cpu")["cpu_ms"], 1e-3)))
        calls.append(TimedCall(dict(path=spec, kind=kind), fn, iters))
    return calls, compile_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", nargs="+", help="scheme:form:backend (default: one per form and backend)")
    ap.add_argument("--all", action="store_true", help="every path of the registry")
    ap.add_argument("--before", nargs="+", default=[], help="paths also timed compiled without computed_once")
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--min-ms", type=float, default=20.0, help="least CPU time of one burst")
    ap.add_argument("--limit", type=float, default=1.05, help="the largest compiled / eager ratio accepted")
    args = ap.parse_args(argv)
    if not 1 <= args.length <= 8192 or not 1 <= args.repeats <= 100 or not 0 < args.min_ms <= 1e4:
        ap.error("length must be in [1, 8192], repeats in [1, 100] and min-ms in (0, 1e4]")
    known = {f"{p.scheme}:{p.form}:{p.backend}" for p in rp.registry.paths()}
    specs = sorted(known) if args.all else (args.paths or default_paths())
    unknown = [s for s in [*specs, *args.before] if s not in known]
    if unknown:
        ap.error(f"unknown paths {unknown}: each must be scheme:form:backend of rp.registry.paths()")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore", UserWarning)  # flex's own notes; failures still raise
    timed, compile_s, failed = [], {}, {}
    with torch.no_grad(), recompile_limits(4 * len(specs) + 64):
        for spec in specs:  # no dynamo.reset(): it would drop the graphs compiled so far, to be rebuilt while timed
            try:
                calls, compile_s[spec] = prepare(spec, args.length, args.min_ms, spec in args.before)
            except Exception as e:  # reported and counted, never skipped silently
                failed[spec] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"{spec:<34} FAILED {failed[spec]}", flush=True)
                continue
            timed += calls
            print(f"{spec:<34} compiled in {compile_s[spec]:.1f} s", flush=True)
        interleaved(timed, args.repeats, torch.device("cpu"))
    ms = {(t.row["path"], t.row["kind"]): stats.summarize([s["cpu_ms"] for s in t.samples]) for t in timed}
    print(f"\nB=1 H=8 d=64 L={args.length} float32 CPU 1 thread, torch {torch.__version__}, "
          f"{args.repeats} interleaved rounds, process CPU ms (median, spread)")
    print(f"{'path':<34} {'eager ms':>10} {'compiled ms':>12} {'compiled/eager':>15}"
          + (f" {'before/eager':>13}" if args.before else ""))
    slow = []
    for spec in specs:
        if spec in failed:
            continue
        e, c = ms[(spec, "eager")], ms[(spec, "compiled")]
        ratio = c["median"] / e["median"]
        if ratio > args.limit:
            slow.append(spec)
        old = ms.get((spec, "before"))
        before = f" {old['median'] / e['median']:13.3f}" if old else (" " * 14 if args.before else "")
        print(f"{spec:<34} {e['median']:10.3f} {c['median']:12.3f} {ratio:15.3f}{before}"
              f"   (spread {e['spread']:.2f} / {c['spread']:.2f})")
    print(f"\n{len(specs) - len(failed)} of {len(specs)} paths built and ran; "
          f"{len(slow)} slower compiled than {args.limit}x eager: {slow}; failed: {sorted(failed)}")
    return 1 if failed or slow else 0


if __name__ == "__main__":
    sys.exit(main())
