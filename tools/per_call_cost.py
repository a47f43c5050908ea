"""Issue 25's per-call costs before and after, as ratios from one interleaved run.

    .venv/bin/python tools/per_call_cost.py [--lengths 256 1024 2048] [--repeats 7]

B=1, H=8, d=64, float32, one thread, process CPU time. Rows, each at every length:

* the finiteness scan of q, k, v: ``isfinite(t).all()`` stacked and read once (before) and
  ``rp.attend``'s one ``aminmax`` pass per tensor (after);
* a RoPE ``rp.attend`` call (causal, SDPA) with the old scan, with the new scan, and with
  ``check_finite=False``;
* ALiBi's dense bias for gather/sdpa: the per-offset values read through an int64 column per
  pair (before, ``_OffsetScalar.logits``) and slope x distance from the positions (after),
  and the whole causal ``rp.attend`` call with each, next to naive/sdpa.

``--fixed`` times the fixed cost of a call instead (issue 25's target: ``rp.attend`` within
2x of bare SDPA at L = 16): B=1, H=8, d=64, causal, at each length, bare
``scaled_dot_product_attention`` beside ``rp.attend`` with no term, RoPE, T5 (gather) and
ALiBi (gather), each with ``check_finite=False`` and with the default scan, and each with
the per-shape caches (``relpos_core.kernels.memo``: call plans, cos / sin tables) and with
them switched off (before).

Before and after run in the same process, their bursts interleaved, so the ratios compare
like with like; on a loaded machine the absolute times mean little.
"""
from __future__ import annotations

import argparse
import importlib
import math
import sys
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import relpos_core as rp  # noqa: E402
attend_module = importlib.import_module("relpos_core.attend")  # the module (rp.attend is the function)
from relpos_core.bench import stats  # noqa: E402
from relpos_core.kernels import memo  # noqa: E402
from relpos_core.measure.timing import burst, interleaved  # noqa: E402
from relpos_core.pieces.scalars import ScalarSlopes, _OffsetScalar  # noqa: E402
from relpos_core.positions import resolve_positions  # noqa: E402


def old_scan(tensors):
    """The scan before issue 25: isfinite per tensor (|t| and three boolean masks), one read."""
    ok = torch.stack([torch.isfinite(t).all() for _, t in tensors]).tolist()
    if not all(ok):
        raise ValueError("non-finite")


class Timed:
    def __init__(self, name, L, fn, min_ms=20.0):
        self.name, self.L, self.fn, self.samples = name, L, fn, []
        fn()
        self.iters = max(1, math.ceil(min_ms / max(burst(fn, 1, "cpu")["cpu_ms"], 1e-3)))


def rows_at(L):
    B, H, d = 1, 8, 64
    g = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, d, generator=g) for _ in range(3))
    qkv = [("q", q), ("k", k), ("v", v)]
    rope = rp.schemes.rope.position_term()
    alibi = rp.schemes.alibi.position_term(H)
    (slopes,) = alibi.scalars
    pos = resolve_positions(L, L)

    def rope_call(**kw):
        return lambda: rp.attend(q, k, v, rope, causal=True, **kw)

    def rope_old_scan():
        with mock.patch.object(attend_module, "_check_finite", old_scan):
            return rp.attend(q, k, v, rope, causal=True)

    def alibi_call(form, old=False):
        def fn():
            if old:
                with mock.patch.object(ScalarSlopes, "logits", _OffsetScalar.logits):
                    return rp.attend(q, k, v, alibi, form=form, backend="sdpa", causal=True)
            return rp.attend(q, k, v, alibi, form=form, backend="sdpa", causal=True)
        return fn

    return [
        Timed("scan: isfinite (before)", L, lambda: old_scan(qkv)),
        Timed("scan: aminmax (after)", L, lambda: attend_module._check_finite(qkv)),
        Timed("RoPE attend, isfinite scan (before)", L, rope_old_scan),
        Timed("RoPE attend, aminmax scan (after)", L, rope_call()),
        Timed("RoPE attend, check_finite=False", L, rope_call(check_finite=False)),
        Timed("ALiBi dense bias: int64 column per pair (before)", L,
              lambda: _OffsetScalar.logits(slopes, "gather", q, k, pos, torch.float32)),
        Timed("ALiBi dense bias: slope x distance (after)", L,
              lambda: slopes.logits("gather", q, k, pos, torch.float32)),
        Timed("ALiBi gather/sdpa attend, causal (before)", L, alibi_call("gather", old=True)),
        Timed("ALiBi gather/sdpa attend, causal (after)", L, alibi_call("gather")),
        Timed("ALiBi naive/sdpa attend, causal", L, alibi_call("naive")),
    ]


def fixed_rows_at(L):
    B, H, d = 1, 8, 64
    g = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, d, generator=g) for _ in range(3))
    terms = {"no term": None, "RoPE": rp.schemes.rope.position_term(),
             "T5 gather": rp.registry.example_term("t5", num_heads=H, head_dim=d, k=None),
             "ALiBi gather": rp.schemes.alibi.position_term(H)}
    rows = [Timed("bare SDPA", L, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))]
    for name, term in terms.items():
        for scan in (False, True):
            def call(term=term, scan=scan):
                return rp.attend(q, k, v, term, causal=True, check_finite=scan)

            def before(call=call):
                memo.ENABLED = False  # every call checked, every table derived afresh
                try:
                    return call()
                finally:
                    memo.ENABLED = True
            label = f"{name}, {'scan' if scan else 'check_finite=False'}"
            rows += [Timed(f"{label}, no caches (before)", L, before), Timed(f"{label} (after)", L, call)]
    return rows


def fixed_pairs():
    out = []
    for name in ("no term", "RoPE", "T5 gather", "ALiBi gather"):
        for scan in ("check_finite=False", "scan"):
            out += [(f"{name}, {scan}, no caches (before)", f"{name}, {scan} (after)"),
                    (f"{name}, {scan} (after)", "bare SDPA")]
    return out


PAIRS = [("scan: isfinite (before)", "scan: aminmax (after)"),
         ("RoPE attend, isfinite scan (before)", "RoPE attend, aminmax scan (after)"),
         ("RoPE attend, isfinite scan (before)", "RoPE attend, check_finite=False"),
         ("ALiBi dense bias: int64 column per pair (before)", "ALiBi dense bias: slope x distance (after)"),
         ("ALiBi gather/sdpa attend, causal (before)", "ALiBi gather/sdpa attend, causal (after)"),
         ("ALiBi naive/sdpa attend, causal", "ALiBi gather/sdpa attend, causal (after)")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--fixed", action="store_true", help="the fixed cost per call (default lengths 16 and 64)")
    args = ap.parse_args(argv)
    if args.fixed and args.lengths == [256, 1024, 2048]:
        args.lengths = [16, 64]
    if any(not 1 <= L <= 8192 for L in args.lengths) or not 1 <= args.repeats <= 100:
        ap.error("lengths must be in [1, 8192] and repeats in [1, 100]")
    torch.set_num_threads(1)
    with torch.no_grad():
        timed = [t for L in args.lengths for t in (fixed_rows_at(L) if args.fixed else rows_at(L))]
        interleaved(timed, args.repeats, torch.device("cpu"))
    ms = {(t.name, t.L): stats.summarize([s["cpu_ms"] for s in t.samples]) for t in timed}
    for t in timed:
        m = ms[(t.name, t.L)]
        print(f"L={t.L:>5} {t.name:<56} {m['median']:9.3f} ms  spread {m['spread']:.2f}")
    print()
    for a, b in (fixed_pairs() if args.fixed else PAIRS):
        ratios = ", ".join(f"L={L}: {ms[(a, L)]['median'] / ms[(b, L)]['median']:.2f}" for L in args.lengths)
        print(f"{a} / {b}: {ratios}")


if __name__ == "__main__":
    main()
