"""The peer benchmark's runner: every contender of a row checked against float64, then timed side by side.

A row is (scheme, kind, mode, L): ``kind`` "kernel" (q, k, v (B, H, L, d) in, the attention out)
or "module" (a Hugging Face layer's hidden states in and out, projections included), ``mode``
"forward" or "train" (forward + backward into q, k, v and the bias tables; kernel rows;
FlexAttention, which has no CPU backward, only forward).
Its contenders: every registry path of the scheme on ``rp.attend`` and the peers'
implementations (``relpos_core.bench.peers``), all given the same q, k, v (or hidden states)
and the same bias parameters (the row's T5 table and ALiBi slopes are copied into each).

1. **Checked first**: each contender's output (and in a train row its gradients into
   q, k, v) is compared with relpos_core's float64 computation of the same call
   (``rp.attend`` on the eager backend in float64, with the contender's RoPE pairing;
   module rows: the same module built in float64). Over the tolerance it is refused
   from the round, with the difference as its reason.
2. **Timed in one run**: the bursts of every accepted contender of every row are
   interleaved in shuffled rounds (``relpos_core.measure.timing.interleaved``), process CPU
   time as the clock; each contender's ``x_fastest`` is its median over the row's fastest.

Nothing process-wide is left changed (torch's thread count is restored).
"""
from __future__ import annotations

import importlib
import math
import time
from dataclasses import dataclass

import torch

import relpos_core.registry as registry
from relpos_core.attend import attend
from relpos_core.bench import stats as bench_stats
from relpos_core.bench.peers.common import Built, Contender, Row, kernel_causal, kernel_term
from relpos_core.budget import MemoryBudgetError, memory_budget
from relpos_core.measure.timing import TimedCall, burst, interleaved
from relpos_core.provenance import git_commit, machine

__all__ = ["PEER_MODULES", "peer_contenders", "relpos_contenders", "make_row", "check_contender",
           "run_peers", "SCHEMA", "tolerance"]

SCHEMA = "relpos-bench-peers/1"
# one adapter file per peer library; each has contenders() (ImportError when its library is missing)
PEER_MODULES = ("relpos_core.bench.peers.xtransformers", "relpos_core.bench.peers.hf",
                "relpos_core.bench.peers.rotary_embedding_torch")


def tolerance(dtype: torch.dtype) -> float:
    """Largest |output - float64 reference| accepted, relative to max(1, |reference|max)."""
    return 1e-4 if dtype == torch.float32 else 1e-9 if dtype == torch.float64 else 5e-2


def peer_contenders() -> tuple[list[Contender], dict]:
    """(every installed peer's contenders, {adapter: why it is missing})."""
    found, missing = [], {}
    for name in PEER_MODULES:
        try:
            found += importlib.import_module(name).contenders()
        except ImportError as e:
            missing[name.rsplit(".", 1)[1]] = f"not installed ({e}): pip install 'relpos_core[bench]'"
    return found, missing


def _hf():
    from relpos_core.bench.peers import hf

    return hf


def relpos_contenders(scheme: str, kind: str, *, flex: bool, compiled: bool) -> list[Contender]:
    """Every registry path of the scheme on rp.attend (FlexAttention when ``flex``); RoPE in both pairings."""
    out = []
    for path in registry.paths(scheme):
        if path.backend == "flex" and not flex:
            continue
        pairings = ("rotate_half", "interleaved") if kind == "kernel" and _rotates(scheme) else (None,)
        for pairing in pairings:
            name = f"relpos_core {path.form}/{path.backend}" + (f" ({pairing})" if pairing else "")
            build = _kernel_build(path.form, path.backend, pairing, compiled) if kind == "kernel" else \
                _module_build(path.form, path.backend, compiled)
            out.append(Contender(name, "relpos_core", scheme, kind, build, pairing=pairing))
    return out


def _rotates(scheme: str) -> bool:
    """Whether the scheme's term rotates q and k (RoPE: then both pairings are contenders)."""
    return registry.example_term(scheme, num_heads=1, head_dim=2, k=4, device="meta").rotary is not None


def _kernel_build(form, backend, pairing, compiled):
    def build(row: Row) -> Built:
        term, leaves = kernel_term(row, row.dtype, pairing=pairing, learnable=True)  # the train rows reach leaves
        opts = dict(compiled=compiled) if backend == "flex" else {}

        def fn(q, k, v):
            return attend(q, k, v, term, form=form, backend=backend, causal=row.causal, **opts)  # (B, H, L, d)
        return Built(fn, leaves)
    return build


def _module_build(form, backend, compiled):
    def build(row: Row) -> Built:
        spec = _hf().module_spec(row, row.dtype)
        opts = dict(compiled=compiled) if backend == "flex" else {}

        def fn(hidden):  # (B, L, H d)
            q, k, v, term = spec.prepare(hidden)  # (B, H, L, d) each, the module's term
            ctx = attend(q, k, v, term, form=form, backend=backend, causal=row.causal, **opts)
            return spec.finish(ctx, hidden)  # (B, L, H d)
        return Built(fn, [])
    return build


def make_row(scheme: str, kind: str, L: int, p: dict, device, seed: int = 0) -> Row:
    """The row's sizes and parameters (a seeded T5 table; ALiBi's slopes from the paper's rule)."""
    from relpos_core.schemes import alibi

    g = torch.Generator().manual_seed(seed)
    causal = kernel_causal(scheme) if kind == "kernel" else _hf().module_causal(scheme)
    table = (torch.randn(32, p["H"], generator=g) * 0.5).to(device)  # (num_buckets, H)
    return Row(scheme=scheme, kind=kind, L=L, B=p["B"], H=p["H"], d=p["d"], device=torch.device(device),
               dtype=getattr(torch, p["dtype"]), causal=causal, t5_table=table,
               alibi_slopes=alibi.alibi_slopes(p["H"]).to(device), att_span=min(p.get("att_span", 256), L))


@dataclass
class _Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    hidden: torch.Tensor


def _inputs(row: Row, dtype, seed: int = 0) -> _Inputs:
    g = torch.Generator().manual_seed(seed + row.L)

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=row.device, dtype=dtype)

    B, H, L, d = row.B, row.H, row.L, row.d
    return _Inputs(rnd(B, H, L, d), rnd(B, H, L, d), rnd(B, H, L, d), rnd(B, L, H * d))


def _reference(row: Row, contender: Contender, x64: _Inputs) -> torch.Tensor:
    """relpos_core's float64 computation of the row (eager backend), with the contender's pairing."""
    if row.kind == "kernel":
        term, _ = kernel_term(row, torch.float64, pairing=contender.pairing)
        return attend(x64.q, x64.k, x64.v, term, backend="eager", causal=row.causal)  # (B, H, L, d)
    spec = _hf().module_spec(row, torch.float64)
    q, k, v, term = spec.prepare(x64.hidden)
    return spec.finish(attend(q, k, v, term, backend="eager", causal=row.causal), x64.hidden)  # (B, L, H d)


def _call(built: Built, row: Row, x: _Inputs):
    return built.fn(x.q, x.k, x.v) if row.kind == "kernel" else built.fn(x.hidden)


def _rel_diff(got: torch.Tensor, ref: torch.Tensor) -> float:
    if got.shape != ref.shape:
        return math.inf
    return float((got.double() - ref).abs().max()) / max(1.0, float(ref.abs().max()))


def _input_grads(fn, x: _Inputs, kind: str) -> list[torch.Tensor]:
    """Gradients of out.sum() with respect to q, k, v (kernel rows) or the hidden states (module rows)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in ((x.q, x.k, x.v) if kind == "kernel" else (x.hidden,))]
    with torch.enable_grad():
        fn(*leaves).sum().backward()
    return [torch.zeros_like(t) if t.grad is None else t.grad for t in leaves]  # None: no gradient reached it


def check_contender(row: Row, contender: Contender, built: Built, x: _Inputs, x64: _Inputs,
                    mode: str = "forward") -> tuple[float, str | None]:
    """(max |result - float64 reference| relative to max(1, |ref|), the refusal reason or None).

    The result is the output; for a ``train`` row also the gradients into q, k, v (hidden)."""
    with torch.no_grad():
        diff = _rel_diff(_call(built, row, x), _reference(row, contender, x64))
    what = "output"
    if mode == "train" and diff <= tolerance(row.dtype):
        def ref_fn(*leaves):
            inputs = _Inputs(*leaves, x64.hidden) if row.kind == "kernel" else _Inputs(x64.q, x64.k, x64.v, *leaves)
            return _reference(row, contender, inputs)
        got = _input_grads(built.fn, x, row.kind)
        ref = _input_grads(ref_fn, x64, row.kind)
        for t in built.params:  # the contender's own tables: their gradients are not compared, only reset
            t.grad = None
        grad_diff = max(_rel_diff(g, r) for g, r in zip(got, ref))
        if not grad_diff <= diff:
            diff, what = grad_diff, "gradient"
    tol = tolerance(row.dtype)
    if not diff <= tol:  # NaN refused too
        return diff, (f"its {what} differs from relpos_core's float64 reference by {diff:.3g} (relative to "
                      f"max(1, |ref|); tolerance {tol:g}): refused from the round")
    return diff, None


def _timed_fn(built: Built, row: Row, x: _Inputs, mode: str):
    if mode == "forward":
        def forward():
            with torch.no_grad():
                return _call(built, row, x)
        return forward
    leaves = _Inputs(*(t.detach().clone().requires_grad_(True) for t in (x.q, x.k, x.v, x.hidden)))
    params = [t for t in built.params if t.requires_grad]

    def train():
        with torch.enable_grad():
            _call(built, row, leaves).float().sum().backward()
        for t in (leaves.q, leaves.k, leaves.v, leaves.hidden, *params):
            t.grad = None
    return train


def _rows_of(p: dict, contenders: list[Contender]) -> list[tuple[str, str, str]]:
    """(scheme, kind, mode): a row for every (scheme, kind) some peer implements, in the preset's
    modes (module rows: forward only), in the order the adapters list them."""
    rows = []
    for c in contenders:
        for mode in (p["modes"] if c.kind == "kernel" else ["forward"]):
            if (c.scheme, c.kind, mode) not in rows:
                rows.append((c.scheme, c.kind, mode))
    return rows


def run_peers(preset: dict, *, device="cpu", log=print, contenders: list[Contender] | None = None) -> dict:
    """Run a peers preset (``relpos_core.bench.presets``, already resolved); returns the result.

    ``contenders``: the peers to run (default: every installed adapter's, ``peer_contenders``);
    relpos_core's own are always added.
    """
    p = preset
    device = torch.device(device)
    missing = {}
    if contenders is None:
        contenders, missing = peer_contenders()
    for name, why in missing.items():
        log(f"peer {name}: {why}")
    threads_before = torch.get_num_threads()
    if p.get("threads"):
        torch.set_num_threads(int(p["threads"]))
    commit = git_commit()
    start = time.perf_counter()
    records, timed = [], []
    try:
        with memory_budget(p["budget"]):
            for L in p["lengths"]:
                for scheme, kind, mode in _rows_of(p, contenders):
                    row = make_row(scheme, kind, L, p, device, seed=p.get("seed", 0))
                    x, x64 = _inputs(row, row.dtype), _inputs(row, torch.float64)
                    ours = relpos_contenders(scheme, kind, flex=p["flex"] and mode == "forward",
                                             compiled=p["compiled"])
                    theirs = [c for c in contenders if c.scheme == scheme and c.kind == kind]
                    for c in ours + theirs:
                        rec = dict(scheme=scheme, kind=kind, mode=mode, L=L, B=row.B, H=row.H, d=row.d,
                                   causal=row.causal, contender=c.name, library=c.library, pairing=c.pairing)
                        records.append(rec)
                        try:
                            built = c.build(row)
                            diff, reason = check_contender(row, c, built, x, x64, mode)
                            rec["max_rel_diff_vs_float64"] = diff
                            if reason is not None:
                                rec.update(status="refused", reason=reason)
                                continue
                            fn = _timed_fn(built, row, x, mode)
                            t0 = time.perf_counter()
                            fn()  # first call: compile, caches
                            rec["first_call_s"] = time.perf_counter() - t0
                            est = max(burst(fn, 1, device)["cpu_ms"], 1e-3)
                        except MemoryBudgetError as e:  # the path refuses this size: not a failure
                            rec.update(status="refused", reason=f"{type(e).__name__}: {str(e).strip()[:300]}")
                            continue
                        except Exception as e:  # noqa: BLE001 - recorded with its reason
                            rec.update(status="error", reason=f"{type(e).__name__}: {str(e).strip()[:300]}")
                            continue
                        rec["status"] = "ok"
                        timed.append(TimedCall(rec, fn, max(1, min(1000, math.ceil(p["min_burst_ms"] / est)))))
                    done = [r for r in records if _row_key(r) == (scheme, kind, mode, L)]
                    log(f"L={L} {scheme} {kind} {mode}: {sum(r['status'] == 'ok' for r in done)} of "
                        f"{len(done)} contenders accepted")
            interleaved(timed, p["repeats"], device, seed=0)
    finally:
        torch.set_num_threads(threads_before)
    for t in timed:
        t.row["iters"] = t.iters
        t.row["time_ms"] = bench_stats.summarize([s["cpu_ms"] for s in t.samples])
        t.row["ms"] = t.row["time_ms"]["median"]
        t.row["noisy"] = t.row["time_ms"]["spread"] > p["spread_threshold"]  # (q3 - q1) / median
    _add_ratios(records)
    provenance = dict(**machine(device, commit=commit), preset=p["name"],
                      sizes={k: v for k, v in p.items() if k not in ("budget", "name")},
                      threads=int(p["threads"]) if p.get("threads") else threads_before,
                      peers_missing=missing, versions=_versions(),
                      clock="process CPU time of the bursts; every accepted contender of every row interleaved in "
                            f"{p['repeats']} shuffled rounds; noisy: spread (q3 - q1) / median over "
                            f"{p['spread_threshold']}",
                      check=f"each contender's output against relpos_core's float64 computation, tolerance "
                            f"{tolerance(getattr(torch, p['dtype'])):g} relative to max(1, |reference|)")
    return dict(schema=SCHEMA, complete=True, provenance=provenance, rows=records, summary=summarize_rows(records),
                wall_s=time.perf_counter() - start)


def _row_key(r: dict) -> tuple:
    return (r["scheme"], r["kind"], r["mode"], r["L"])


def _add_ratios(records: list[dict]) -> None:
    best = {}
    for r in records:
        if r.get("status") == "ok":
            key = _row_key(r)
            best[key] = min(best.get(key, math.inf), r["ms"])
    for r in records:
        if r.get("status") == "ok":
            r["x_fastest"] = r["ms"] / best[_row_key(r)]


def summarize_rows(records: list[dict]) -> list[dict]:
    """Per row: the fastest contender, relpos_core's best path and the best peer, as ratios to the fastest."""
    out = {}
    for r in records:
        if r.get("status") != "ok":
            continue
        s = out.setdefault(_row_key(r), dict(scheme=r["scheme"], kind=r["kind"], mode=r["mode"], L=r["L"]))
        side = "relpos_core" if r["library"] == "relpos_core" else "peer"
        if r["x_fastest"] < s.get(f"{side}_x", math.inf):
            s[f"{side}_x"], s[f"{side}_best"] = r["x_fastest"], r["contender"]
        if r["x_fastest"] == 1.0:
            s["fastest"] = r["contender"]
    return list(out.values())


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "x-transformers", "rotary-embedding-torch", "einops"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def format_peers(result: dict) -> str:
    """Plain-text table: every contender of every row, then the per-row summary."""
    lines = [f"{'L':>5} {'row':<22} {'contender':<58} {'status':<8} {'ms':>9} {'x fastest':>9}"]
    for r in sorted(result["rows"], key=lambda r: (r["scheme"], r["kind"], r["mode"], r["L"], r.get("ms", 1e30))):
        row = f"{r['scheme']} {r['kind']} {r['mode']}"
        ms = f"{r['ms']:.3f}" if "ms" in r else "-"
        x = f"{r['x_fastest']:.2f}" if "x_fastest" in r else "-"
        flag = "*" if r.get("noisy") else " "
        lines.append(f"{r['L']:>5} {row:<22} {r['contender'][:58]:<58} {r['status']:<8} {ms:>9}{flag}{x:>9}")
        if r["status"] != "ok":
            lines.append(f"{'':>5}   -> {r['reason'][:200]}")
    lines.append("* noisy: the bursts' spread (q3 - q1) / median is over the preset's threshold")
    lines.append("")
    lines.append(f"{'L':>5} {'row':<22} {'relpos_core best (x fastest)':<44} {'best peer (x fastest)':<44}")
    for s in result["summary"]:
        ours = f"{s.get('relpos_core_best', '-')[:34]} {s.get('relpos_core_x', math.nan):.2f}"
        peer = f"{s.get('peer_best', '-')[:34]} {s.get('peer_x', math.nan):.2f}"
        lines.append(f"{s['L']:>5} {s['scheme'] + ' ' + s['kind'] + ' ' + s['mode']:<22} {ours:<44} {peer:<44}")
    return "\n".join(lines)
