"""``python -m relpos_core.bench``: every kernel path for every scheme, measured in one run.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). For each sequence
length L the benchmark runs each (scheme, path) pair forward (and the learnable T5 table
forward + backward), records mean time (``measure_time``), measured peak memory
(``measure_peak_memory``), the analytic byte count (``analytic_bytes``) and, for SDPA
calls, the backend that actually ran (``detect_sdpa_backend``). Ratios are taken inside
the run: each path against FlexAttention with no bias and against SDPA with no bias at
the same L, because absolute times drift from machine to machine. A path the memory
guard refuses, or one that fails, is recorded as skipped / error with the reason, never
dropped.

A separate "Shaw key term" section repeats the H200 anchors' recipe (one head, fp32,
d = 64) and sweeps the clip distance k: the naive [L, L, d] gather, q @ a_K^T + gather,
and the skew. The main sweep varies L at the preset's k, T5 buckets and DeBERTa span.

Presets: ``tiny`` (tests), ``cpu`` (default without CUDA: about 95 s on 2 cores
with an empty compile cache, 40 s with a warm one), ``gpu`` (``--gpu``: L up to 16384, B=1, H=16, d=64,
bf16, the anchors' shapes). Output: JSON with provenance to ``--out`` (default
``bench_out/bench-<device>.json``) and a matplotlib PNG beside it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import warnings
from pathlib import Path

import torch

from relpos_core.kernels import flex, gather, naive, sdpa_bias, skew
from relpos_core.measure import guard
from relpos_core.measure.analytic import analytic_bytes
from relpos_core.measure.backends import detect_sdpa_backend
from relpos_core.measure.memory import measure_peak_memory
from relpos_core.measure.timing import measure_time

__all__ = ["PRESETS", "CASES", "run_benchmark", "main"]

PRESETS = {
    # shapes shared with tests/test_kernels_flex.py so compiled kernels are reused in one pytest run
    "tiny": dict(B=2, H=2, d=16, lengths=[32], shaw_k=4, t5_buckets=8, t5_max_distance=16, deberta_span=4,
                 dtype="float32", budget=None, warmup=1, iters=2, repeats=1,
                 anchor=dict(H=1, d=16, ks=[4], dtype="float32", lengths=[32])),
    # flex_lengths: on CPU each (score_mod, L) pair compiles its own static C++ kernel (about
    # 6 s on 2 cores; torch 2.13's dynamic-shape CPU template does not build), so the CPU
    # preset compiles the biased score_mods at its largest L only and records the others
    # as skipped; the no-bias flex baseline runs at every L. --lengths sweeps them all.
    "cpu": dict(B=1, H=4, d=32, lengths=[128, 256], flex_lengths=[256], shaw_k=16, t5_buckets=32,
                t5_max_distance=128, deberta_span=64, dtype="float32", budget=256 * 2**20, warmup=1, iters=3,
                repeats=3,
                anchor=dict(H=1, d=64, ks=[16, 64], dtype="float32", lengths=[256, 512])),
    "gpu": dict(B=1, H=16, d=64, lengths=[1024, 4096, 16384], shaw_k=64, t5_buckets=32, t5_max_distance=128,
                deberta_span=256, dtype="bfloat16", budget=20 * 2**30, warmup=3, iters=10, repeats=3,
                anchor=dict(H=1, d=64, ks=[16, 64, 256], dtype="float32", lengths=[2048, 4096])),
}

# (scheme, path): every pair the library implements. "t5_train" is forward + backward with a learnable table.
CASES = (
    ("none", "sdpa"), ("none", "flex"),
    ("rope", "sdpa"),
    ("t5", "naive"), ("t5", "gather"), ("t5", "sdpa_bias"), ("t5", "flex"),
    ("t5_clamped", "flex"), ("t5_bucket_ids", "flex"),
    ("alibi", "naive"), ("alibi", "sdpa_bias"), ("alibi", "flex"),
    ("shaw", "naive"), ("shaw", "gather"), ("shaw", "skew"), ("shaw", "sdpa_bias"), ("shaw", "flex"),
    ("deberta", "naive"), ("deberta", "sdpa_bias"), ("deberta", "flex"),
    ("transformer_xl", "naive"), ("transformer_xl", "sdpa_bias"), ("transformer_xl", "flex"),
    ("t5_train", "sdpa_bias"), ("t5_train", "flex"),
)
ANCHOR_CASES = (("shaw_key_term", "naive"), ("shaw_key_term", "gather"), ("shaw_key_term", "skew"))


def _inputs(p, L, device, dtype, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    B, H, d = p["B"], p["H"], p["d"]

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dtype)

    S, K = p["deberta_span"], p["shaw_k"]
    return dict(
        q=rnd(B, H, L, d), k=rnd(B, H, L, d), v=rnd(B, H, L, d),
        t5_table=rnd(p["t5_buckets"], H), rel_key=rnd(2 * K + 1, d, scale=0.1),
        pos_key=rnd(H, 2 * S, d, scale=0.1), pos_query=rnd(H, 2 * S, d, scale=0.1),
        r_k=rnd(H, L, d, scale=0.1), u=rnd(H, d, scale=0.1), v_bias=rnd(H, d, scale=0.1),
    )


def _callable(scheme, path, x, p, device):
    """Return (fn, needs_grad) running one forward (or forward + backward) of (scheme, path)."""
    q, k, v = x["q"], x["k"], x["v"]
    K, S, M = p["shaw_k"], p["deberta_span"], p["t5_max_distance"]
    cuda = device.type == "cuda"
    fwd_opts = {"num_stages": 2} if cuda else None  # the anchors: default options run out of shared memory
    table = x["t5_table"]
    t5 = dict(bidirectional=True, max_distance=M)
    if scheme == "none":
        return (lambda: sdpa_bias.sdpa_attention(q, k, v)) if path == "sdpa" else (lambda: flex.no_bias_attention(q, k, v))
    if scheme == "rope":
        return lambda: sdpa_bias.rope_sdpa_attention(q, k, v)
    if scheme in ("t5", "t5_clamped", "t5_bucket_ids"):
        if path == "flex":
            form = {"t5": "offset", "t5_clamped": "clamped", "t5_bucket_ids": "bucket_ids"}[scheme]
            opts = fwd_opts if form != "bucket_ids" else None
            return lambda: flex.t5_attention(q, k, v, table, form=form, kernel_options=opts, **t5)
        mod = {"naive": naive, "gather": gather, "sdpa_bias": sdpa_bias}[path]
        return lambda: mod.t5_attention(q, k, v, table, **t5)
    if scheme == "alibi":
        mod = {"naive": naive, "sdpa_bias": sdpa_bias, "flex": flex}[path]
        return lambda: mod.alibi_attention(q, k, v, causal=True)
    if scheme == "shaw":
        rk = x["rel_key"]
        if path in ("naive", "gather", "skew"):
            mod = {"naive": naive, "gather": gather, "skew": skew}[path]
            return lambda: mod.shaw_attention(q, k, v, rel_key=rk, max_relative_position=K)
        mod = {"sdpa_bias": sdpa_bias, "flex": flex}[path]
        return lambda: mod.shaw_key_attention(q, k, v, rel_key=rk, max_relative_position=K)
    if scheme == "deberta":
        pk, pq = x["pos_key"], x["pos_query"]
        if path == "flex":
            return lambda: flex.deberta_attention(q, k, v, pk, pq, att_span=S, kernel_options=fwd_opts)
        mod = {"naive": naive, "sdpa_bias": sdpa_bias}[path]
        return lambda: mod.deberta_attention(q, k, v, pk, pq, att_span=S)
    if scheme == "transformer_xl":
        mod = {"naive": naive, "sdpa_bias": sdpa_bias, "flex": flex}[path]
        return lambda: mod.transformer_xl_attention(q, k, v, x["r_k"], x["u"], x["v_bias"])
    if scheme == "t5_train":
        learn = table.detach().float().clone().requires_grad_(True)
        bwd_opts = {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1} if cuda else None

        def step():
            with torch.enable_grad():
                if path == "flex":
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", flex.FlexCPUBackwardWarning)
                        out = flex.t5_attention(q, k, v, learn, kernel_options=bwd_opts, **t5)
                else:
                    out = sdpa_bias.t5_attention(q, k, v, learn.to(q.dtype), **t5)
                out.float().sum().backward()
            learn.grad = None
        return step
    raise ValueError(f"no benchmark case for scheme {scheme!r}, path {path!r}")


def _analytic(scheme, path, p, L, dtype):
    s = {"t5_train": "t5", "shaw_key_term": "shaw"}.get(scheme, scheme)
    pa = "sdpa_bias" if (scheme == "t5_train" and path == "sdpa_bias") else path
    kk = {"shaw": p.get("shaw_k", p.get("k")), "deberta": p.get("deberta_span"), "t5": p.get("t5_max_distance"),
          "t5_clamped": p.get("t5_max_distance")}.get(s, 1)
    try:
        return analytic_bytes(pa, s, p.get("B", 1), p["H"], L, L, p["d"], kk or 1, dtype)
    except ValueError:
        return None


def _note(scheme, path, device):
    if scheme == "t5_train" and path == "flex" and device.type == "cpu":
        return "FlexAttention has no backward on CPU: ran the dense SDPA fallback (FlexCPUBackwardWarning)"
    if scheme == "t5_train":
        return "forward + backward, learnable [num_buckets, H] table"
    if scheme in ("shaw", "shaw_key_term") and path in ("sdpa_bias", "flex"):
        return "key term only (the value term needs the gather path)"
    if scheme == "shaw" and path == "skew":
        return "key term only"
    return ""


def _run_case(fn, device, p, needs_backend):
    fn()  # warm-up and compile; raises MemoryBudgetError before allocating when over budget
    # median of `repeats` means: one burst from another process on a shared CPU cannot set the figure
    runs = sorted(measure_time(fn, warmup=p["warmup"] if i == 0 else 0, iters=p["iters"], device=device)
                  for i in range(p.get("repeats", 3)))
    ms = runs[len(runs) // 2]
    peak = measure_peak_memory(fn, device=device)
    backend = detect_sdpa_backend(fn)[0] if needs_backend else None
    return ms, peak, backend


def _progress(items, desc):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        print(f"[relpos bench] tqdm is not installed: plain loop over {len(items)} cases ({desc})", flush=True)
        return items
    return tqdm(items, desc=desc)


def _git_commit() -> str:
    """HEAD of the checkout (``-dirty`` with local changes), or ``RELPOS_GIT_COMMIT`` when the
    code runs from a copy without ``.git`` (a GPU machine that received the working tree)."""
    if os.environ.get("RELPOS_GIT_COMMIT"):
        return os.environ["RELPOS_GIT_COMMIT"] + " (from RELPOS_GIT_COMMIT)"
    try:
        root = Path(__file__).resolve().parents[1]
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + ("-dirty" if dirty else "")
        return "unknown (no commit: " + (out.stderr.strip().splitlines() or ["git failed"])[-1] + ")"
    except Exception as e:  # no git on the machine
        return f"unknown ({type(e).__name__})"


def _device_name(device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def _slug(device) -> str:
    if device.type == "cpu":
        return "cpu"
    return "".join(c if c.isalnum() else "-" for c in _device_name(device).lower()).strip("-")


def run_benchmark(preset: str = "cpu", *, device=None, lengths=None, budget="preset", progress: bool = True) -> dict:
    """Run the sweep; return the result dict (provenance, results, ratios). Sign conventions: n/a."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)}, got {preset!r}")
    p = dict(PRESETS[preset])
    device = torch.device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False; use --preset cpu")
    if lengths is not None:  # overrides both the main sweep and the Shaw key-term section
        p["lengths"] = [int(L) for L in lengths]
        p.pop("flex_lengths", None)
        p["anchor"] = dict(p["anchor"], lengths=list(p["lengths"]))
    dtype = getattr(torch, p["dtype"])
    limit = p["budget"] if budget == "preset" else budget
    results = []
    cases = [(L, s, pa, p["shaw_k"]) for L in p["lengths"] for s, pa in CASES]
    a = p["anchor"]
    anchor_cases = [(L, s, pa, kk) for L in a["lengths"] for kk in a["ks"] for s, pa in ANCHOR_CASES]
    items = cases + anchor_cases
    it = _progress(items, f"relpos bench ({preset}, {device.type})") if progress else items
    cache = {}
    with guard.memory_budget(limit), torch.no_grad():
        for L, scheme, path, kk in it:
            anchor = scheme == "shaw_key_term"
            q_p = dict(p, B=1, H=a["H"], d=a["d"], shaw_k=kk) if anchor else p
            dt = getattr(torch, a["dtype"]) if anchor else dtype
            key = (anchor, L, kk)
            if key not in cache:
                cache.clear()
                cache[key] = _inputs(q_p, L, device, dt)
            x = cache[key]
            rec = dict(L=L, scheme=scheme, path=path, B=q_p["B"], H=q_p["H"], d=q_p["d"], k=q_p["shaw_k"],
                       dtype=str(dt).replace("torch.", ""),
                       analytic_bytes=_analytic(scheme, path, q_p, L, dt), note=_note(scheme, path, device))
            flex_lengths = p.get("flex_lengths")
            if path == "flex" and scheme not in ("none", "t5_train") and flex_lengths and L not in flex_lengths:
                rec.update(status="skipped", reason=(
                    f"preset {preset!r} compiles biased FlexAttention score_mods at L in {flex_lengths} only "
                    "(one static kernel per (score_mod, L) on CPU); pass --lengths to sweep them"))
                results.append(rec)
                continue
            try:
                if anchor:
                    mod = {"naive": naive, "gather": gather, "skew": skew}[path]
                    extra = {}
                    if path in ("naive", "gather"):  # the (L, k) index is shared by layers: built outside the call
                        extra["index"] = gather.shaw_gather_index(L, max_relative_position=kk, device=device)
                    fn = (lambda mod=mod, x=x, kk=kk, extra=extra:
                          mod.shaw_key_logits(x["q"], x["rel_key"], max_relative_position=kk, **extra))
                else:
                    fn = _callable(scheme, path, x, q_p, device)
                ms, peak, backend = _run_case(fn, device, p, needs_backend=path in ("sdpa", "sdpa_bias"))
                rec.update(status="ok", ms=ms, peak_bytes=peak, backend=backend)
            except guard.MemoryBudgetError as e:
                rec.update(status="skipped", reason=str(e))
            except Exception as e:  # recorded, never dropped
                rec.update(status="error", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
            results.append(rec)
    _add_ratios(results)
    return dict(provenance=_provenance(preset, device, p, limit), results=results)


def _add_ratios(results):
    base = {}
    for r in results:
        if r["scheme"] == "none" and r["status"] == "ok":
            base[(r["L"], r["path"])] = r["ms"]
    by_gather = {(r["L"], r["k"]): r["ms"] for r in results
                 if r["scheme"] == "shaw_key_term" and r["path"] == "gather" and r["status"] == "ok"}
    for r in results:
        ok = r["status"] == "ok"
        if r["scheme"] == "shaw_key_term":
            g = by_gather.get((r["L"], r["k"]))
            r["x_gather"] = r["ms"] / g if ok and g else None
            r["x_flex_none"] = r["x_sdpa_none"] = None
            r["ratio_note"] = "different shapes from the main sweep: compared with the gather path"
            continue
        f, s = base.get((r["L"], "flex")), base.get((r["L"], "sdpa"))
        r["x_flex_none"] = r["ms"] / f if ok and f else None
        r["x_sdpa_none"] = r["ms"] / s if ok and s else None


def _provenance(preset, device, p, limit):
    return dict(
        device=device.type, device_name=_device_name(device), torch=torch.__version__,
        cuda=torch.version.cuda, python=platform.python_version(), platform=platform.platform(),
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), git_commit=_git_commit(),
        preset=preset, sizes={k: v for k, v in p.items() if k not in ("budget",)}, dtype=p["dtype"],
        threads=torch.get_num_threads(), memory_budget_bytes=limit,
        timing="median over repeats of the mean of iters calls after warmup (CUDA events on GPU, perf_counter on CPU)",
        peak="max bytes allocated during the call above what was allocated before (CUDA stats / CPU profiler)",
    )


def _fmt_bytes(n):
    return "-" if n is None else guard.format_bytes(n)


def format_table(result: dict) -> str:
    """Plain-text table of every record (ratios from this one run)."""
    head = f"{'L':>6} {'k':>4} {'scheme':<15} {'path':<10} {'status':<8} {'ms':>9} {'x flex0':>8} {'x sdpa0':>8} " \
           f"{'peak':>10} {'analytic':>10} {'backend':<8}"
    lines = [head, "-" * len(head)]
    for r in result["results"]:
        def num(v, f="{:.2f}"):
            return "-" if v is None else f.format(v)
        ratio_f = r.get("x_flex_none")
        ratio_s = r.get("x_sdpa_none") if r["scheme"] != "shaw_key_term" else r.get("x_gather")
        lines.append(f"{r['L']:>6} {r['k']:>4} {r['scheme']:<15} {r['path']:<10} {r['status']:<8} {num(r.get('ms'), '{:.3f}'):>9} "
                     f"{num(ratio_f):>8} {num(ratio_s):>8} {_fmt_bytes(r.get('peak_bytes')):>10} "
                     f"{_fmt_bytes(r.get('analytic_bytes')):>10} {str(r.get('backend') or '-'):<8}")
        if r["status"] != "ok":
            lines.append(f"{'':>6}   -> {r['reason'][:160]}")
    lines.append("x flex0 / x sdpa0: time over FlexAttention / SDPA with no bias at the same L "
                 "(shaw_key_term rows: x sdpa0 column is time over the gather path)")
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [r for r in result["results"] if r["status"] == "ok" and r["scheme"] != "shaw_key_term"]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    series = {}
    for r in rows:
        series.setdefault(f"{r['scheme']}/{r['path']}", []).append((r["L"], r["ms"]))
    colors = plt.cm.tab20.colors
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name, color=colors[i % len(colors)],
                linestyle="-" if "flex" in name else "--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel("ms per call")
    pv = result["provenance"]
    ax.set_title(f"relpos kernel paths on {pv['device_name']} ({pv['dtype']}, torch {pv['torch']})", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m relpos_core.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="size preset (default: gpu with --gpu, else cpu)")
    ap.add_argument("--gpu", action="store_true", help="GPU sizes: L up to 16384, B=1, H=16, d=64, bf16")
    ap.add_argument("--device", default=None, help="torch device (default: cuda for the gpu preset, else cpu)")
    ap.add_argument("--lengths", type=int, nargs="+", default=None, help="override the preset's sequence lengths")
    ap.add_argument("--budget", default="preset",
                    help="memory budget in bytes for the guard ('none' for no limit; default: the preset's)")
    ap.add_argument("--out", default=None, help="JSON path (default bench_out/bench-<device>.json)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for CPU runs (default: torch's)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    preset = args.preset or ("gpu" if args.gpu else "cpu")
    if args.gpu and preset != "gpu":
        ap.error("--gpu and --preset disagree: use one")
    if args.threads is not None:
        if args.threads < 1:
            ap.error("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    budget = args.budget
    if budget != "preset":
        budget = None if str(budget).lower() == "none" else int(float(budget))
    result = run_benchmark(preset, device=args.device, lengths=args.lengths, budget=budget,
                           progress=not args.no_progress)
    device = torch.device(result["provenance"]["device"])
    out = Path(args.out) if args.out else Path("bench_out") / f"bench-{_slug(device)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    png = _plot(result, out.with_suffix(".png"))
    result["provenance"]["plot"] = png
    out.write_text(json.dumps(result, indent=2, default=str))
    print(format_table(result))
    print(f"wrote {out}" + (f" and {png}" if png else " (matplotlib missing: no plot)"))
    return result


if __name__ == "__main__":
    main()
