"""Decode throughput per scheme and kernel path, measured in one run.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

    python -m relpos_core.decoding --bench                  # CPU preset, writes data/kv_decode_cpu.json
    python -m relpos_core.decoding --bench --preset gpu     # CUDA, bf16, longer contexts

For every scheme of ``relpos_core.decoding.SCHEMES`` (both RoPE cache layouts) and every
(form, backend) that decodes it (``decode_paths``), at every context length of the
preset: one ``Decoder`` with the preset's sizes is prefilled to the context length
(once per scheme, layout and length, on a dense path; the cache's contents do not depend
on the path), then one decode step (one new token attending to the whole cache) is timed
repeatedly, the cache rolled back after each step (``KVCache.truncate``). The cases of
one context are timed in rounds, each case once per round, and each keeps its best
round, so every ratio compares samples taken side by side. Every case uses the same
model sizes and cache lengths, so tokens/s can be compared as ratios within the run;
the absolute numbers belong to the machine in the provenance. The
cache appends with ``torch.cat`` (a copy per step, as Hugging Face's dynamic cache does)
for every scheme alike. FlexAttention is compiled (``torch.compile``); its compilation
happens in the warm-up calls and is not timed.

The JSON holds ``provenance`` (device, torch, date, git commit, sizes, threads, load)
and ``results`` (one row per case: ms per step, tokens/s, cache bytes, status).
Failures are recorded with their reason, never dropped.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import torch

from relpos_core._validate import check_choice, check_positive_int
from relpos_core.kernels.forms import BACKENDS
from relpos_core.decoding.model import SCHEMES, Decoder, DecoderConfig, decode_paths
from relpos_core.measure import guard
from relpos_core.measure.timing import measure_time
from relpos_core.provenance import git_commit, load_average, machine

__all__ = ["PRESETS", "benchmark_cases", "run_decode_benchmark", "default_output", "load_result",
           "throughput_ratios", "main"]

PRESETS = {
    "cpu": dict(batch=1, num_layers=2, d_model=256, num_heads=4, head_dim=64, vocab_size=256,
                contexts=[256, 1024, 4096], dtype="float32", warmup=2, iters=5, repeats=5, threads=1),
    "gpu": dict(batch=1, num_layers=4, d_model=1024, num_heads=16, head_dim=64, vocab_size=1024,
                contexts=[1024, 4096, 16384], dtype="bfloat16", warmup=3, iters=20, repeats=3, threads=None),
    "tiny": dict(batch=1, num_layers=1, d_model=32, num_heads=2, head_dim=16, vocab_size=64,
                 contexts=[16], dtype="float32", warmup=1, iters=2, repeats=1, threads=1),
}
BASELINE = ("absolute", None, "none", "sdpa")  # the ratios' denominator: no relative term, SDPA
ROOT = Path(__file__).resolve().parents[2]
# The CPU presets run on one thread: a decode step of these sizes is dominated by small
# operations, where a second thread on a machine shared with other processes costs more
# (waiting at each parallel region) than it gives. ``--threads`` overrides it.


def benchmark_cases(schemes=None, backends=None) -> list[tuple[str, str | None, str, str]]:
    """(scheme, rope_layout, form, backend) for every decodable path, in ``SCHEMES`` order
    (optionally only some schemes and backends)."""
    schemes = list(SCHEMES) if schemes is None else [check_choice("scheme", s, SCHEMES) for s in schemes]
    backends = BACKENDS if backends is None else [check_choice("backend", b, BACKENDS) for b in backends]
    cases = []
    for scheme in schemes:
        layouts = ["rotated", "unrotated"] if scheme == "rope" else [None]
        for layout in layouts:
            cases += [(scheme, layout, form, backend) for form, backend in decode_paths(scheme)
                      if backend in backends]
    return cases


def _prefill_path(scheme: str) -> tuple[str, str]:
    """A dense path for the prefill: gather on SDPA where it exists (eager for Shaw's value term)."""
    paths = decode_paths(scheme)
    for want in (("gather", "sdpa"), ("none", "sdpa"), ("gather", "eager")):
        if want in paths:
            return want
    return paths[0]




def _provenance(preset: str, p: dict, device: torch.device, compiled: bool, load_start, seconds: float,
                commit: str) -> dict:
    return dict(**machine(device, commit=commit),
                preset=preset, sizes=dict(p), threads=torch.get_num_threads(),
                load_average_start=load_start, load_average_end=load_average(), wall_seconds=round(seconds, 1),
                flex_compiled=compiled,
                timing=("per context, every case is timed once per round (repeats rounds, side by side); "
                        "a round is the mean of iters decode steps (warmup calls before round 1); a case's "
                        "time is its best round, the one least disturbed by other processes "
                        "(CUDA events on GPU, perf_counter on CPU); one step = one token for each of the "
                        "batch's sequences, against a cache of `context` tokens"))


def run_decode_benchmark(preset: str = "cpu", *, device=None, schemes=None, backends=None, contexts=None,
                         compiled: bool = True, threads: int | None = None, progress: bool = True,
                         seed: int = 0, dtype=None) -> dict:
    """Run every case at every context length; returns ``dict(provenance=..., results=[...])``.

    ``threads``: torch's CPU threads during the run (default: the preset's; restored after).
    ``dtype``: instead of the preset's (a GPU below sm80 takes float16, not bfloat16:
    ``rp.measure.device.pick().dtype``); recorded in the provenance's sizes.
    """
    check_choice("preset", preset, tuple(PRESETS))
    p = dict(PRESETS[preset])
    if dtype is not None:
        p["dtype"] = check_choice("dtype", str(dtype).replace("torch.", ""),
                                  ("float32", "float64", "float16", "bfloat16"))
    if contexts is not None:
        p["contexts"] = [check_positive_int("contexts[i]", int(c)) for c in contexts]
    device = torch.device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False: use preset 'cpu'")
    dtype = getattr(torch, p["dtype"])
    if threads is not None:
        p["threads"] = check_positive_int("threads", threads)
    previous_threads = torch.get_num_threads()
    if p["threads"] is not None:
        torch.set_num_threads(p["threads"])
    load_start, start, commit = load_average(), time.perf_counter(), git_commit()  # the code that runs
    try:
        results = _run_cases(p, device, dtype, benchmark_cases(schemes, backends), compiled, progress, seed)
        provenance = _provenance(preset, p, device, compiled, load_start, time.perf_counter() - start, commit)
    finally:
        torch.set_num_threads(previous_threads)
    return dict(provenance=provenance, results=results)


def _run_cases(p, device, dtype, cases, compiled, progress, seed):
    """Per context: prefill one model per (scheme, layout), then time every case in rounds.

    Round r times every case once (the warm-up calls in round 0), so each case gets one
    sample from each stretch of the run and the ratios compare samples taken side by
    side; a case's time is its best round.
    """
    groups = {}
    for scheme, layout, form, backend in cases:
        groups.setdefault((scheme, layout), []).append((form, backend))
    results = []
    g = torch.Generator().manual_seed(seed)
    for context in p["contexts"]:
        tokens = torch.randint(0, p["vocab_size"], (p["batch"], context + 1), generator=g).to(device)
        new_token = tokens[:, context:context + 1]  # (B, 1)
        rows, steps = [], []
        for (scheme, layout), paths in groups.items():
            cfg = DecoderConfig(scheme=scheme, vocab_size=p["vocab_size"], d_model=p["d_model"],
                                num_heads=p["num_heads"], head_dim=p["head_dim"], num_layers=p["num_layers"],
                                max_positions=max(p["contexts"]) + 8)
            model = Decoder(cfg, seed=seed, dtype=dtype, device=device)
            cache = model.new_cache(rope_layout=layout)
            form0, backend0 = _prefill_path(scheme)
            model(tokens[:, :context], cache, form=form0, backend=backend0)  # prefill: context tokens
            terms = model.position_terms()
            for form, backend in paths:
                rows.append(dict(scheme=scheme, layout=layout, form=form, backend=backend, context=context,
                                 label=_label(scheme, layout, form, backend), batch=p["batch"],
                                 cache_bytes=sum(cache.nbytes().values()), ms_rounds=[]))

                def step(model=model, cache=cache, terms=terms, form=form, backend=backend):
                    model(new_token, cache, form=form, backend=backend, compiled=compiled, terms=terms)
                    cache.truncate(context)

                steps.append((step, cache))
        for r in range(p["repeats"]):
            for row, (step, cache) in zip(rows, steps):
                if row.get("status") not in (None, "ok"):
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", UserWarning)
                        row["ms_rounds"].append(measure_time(step, warmup=p["warmup"] if r == 0 else 0,
                                                             iters=p["iters"], device=device))
                    row["status"] = "ok"
                except guard.MemoryBudgetError as e:
                    row.update(status="skipped", reason=str(e).splitlines()[0])
                except Exception as e:  # recorded, never dropped
                    row.update(status="error", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
                    cache.truncate(context)
            if progress:
                print(f"L={context:6d}: round {r + 1}/{p['repeats']} of {len(rows)} cases done", flush=True)
        for row in rows:
            if row["status"] == "ok":
                ms = min(row["ms_rounds"])
                row.update(ms_per_step=ms, tokens_per_s=1e3 * p["batch"] / ms)
            results.append(row)
        del rows, steps
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return results


def _label(scheme, layout, form, backend) -> str:
    name = f"rope ({layout})" if layout else scheme.replace("_", "-")
    return f"{name}: {form}/{backend}"


def default_output(preset: str = "cpu") -> Path:
    """``data/kv_decode_<preset>.json`` in the repository."""
    return ROOT / "data" / f"kv_decode_{check_choice('preset', preset, tuple(PRESETS))}.json"


def load_result(path=None) -> dict:
    """A saved benchmark (default: the committed CPU run, ``kv_decode_cpu.json`` shipped with the
    package, see ``relpos_core.resources``); ValueError naming the path when missing."""
    if path is None:
        from relpos_core import resources

        return resources.load_json("kv_decode_cpu.json")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must name a saved benchmark; {path} does not exist "
                         f"(run: python -m relpos_core.decoding --bench)")
    return json.loads(path.read_text())


def throughput_ratios(result: dict) -> dict[tuple[str, int], float]:
    """(label, context) -> tokens/s divided by the baseline's (absolute, SDPA) at the same context."""
    rows = [r for r in result["results"] if r["status"] == "ok"]
    base = {r["context"]: r["tokens_per_s"] for r in rows
            if (r["scheme"], r["layout"], r["form"], r["backend"]) == BASELINE}
    return {(r["label"], r["context"]): r["tokens_per_s"] / base[r["context"]] for r in rows if r["context"] in base}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m relpos_core.decoding", description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="run the decode throughput benchmark")
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--device", default=None)
    parser.add_argument("--contexts", type=int, nargs="+", default=None)
    parser.add_argument("--schemes", nargs="+", default=None, choices=SCHEMES)
    parser.add_argument("--backends", nargs="+", default=None, choices=BACKENDS)
    parser.add_argument("--eager-flex", action="store_true", help="FlexAttention's eager reference, not compiled")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: the preset's)")
    parser.add_argument("--out", default=None, help="JSON path (default data/kv_decode_<preset>.json)")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.error("nothing to do: pass --bench")
    result = run_decode_benchmark(args.preset, device=args.device, schemes=args.schemes, backends=args.backends,
                                  contexts=args.contexts,
                                  compiled=not args.eager_flex, threads=args.threads)
    out = Path(args.out) if args.out else default_output(args.preset)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return result
