"""Decode throughput per scheme and kernel path, measured side by side in one run.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb).

    python -m relpos_core.decoding --bench --out FILE.json             # CPU preset
    python -m relpos_core.decoding --bench --preset gpu --out FILE.json  # CUDA, bf16, longer contexts

For every scheme a decoder can use (``relpos_core.decoding.SCHEMES``, from the scheme
declarations), every cache layout it decodes with (``ledger.layouts``) and every
(form, backend) that decodes it (``decode_paths``), at every context length of the preset:
one ``Transformer`` with the preset's sizes is prefilled to the context length (once per
scheme, layout and length, on its default dense path; the cache's contents do not depend
on the path), then one decode step (one new token attending to the whole cache) is timed
repeatedly, the cache rolled back after each step (``KVCache.truncate``). The steps of
one context are timed with the kernel benchmark's harness (``rp.measure.timing.interleaved``:
a burst of every case per round, in a shuffled order) and summarised the same way
(median, quartiles and the spread (q3 - q1) / median, ``relpos_core.bench.stats``); the
peak memory of one step comes from one profiler session per context
(``rp.measure.profile``). The absolute numbers belong to the machine in the provenance;
ratios within the run compare samples taken side by side.

Every case's failure is recorded with its reason (a prefill over the memory budget marks
its cases ``skipped``), never dropped. The output is checked before anything runs and
never written into the package or ``data/`` unless named (``relpos_core.outputs``); the
rows of each finished context are kept in ``<out>.partial.jsonl`` at once, and Ctrl-C
writes what finished, marked ``"complete": false``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

from relpos_core import schemes
from relpos_core._validate import check_choice, check_positive_int
from relpos_core.bench import stats as bench_stats
from relpos_core.budget import MemoryBudgetError
from relpos_core.cli import integer_in
from relpos_core.decoding import ledger
from relpos_core.decoding.model import SCHEMES, decode_paths
from relpos_core.models import Transformer, TransformerConfig
from relpos_core.kernels.forms import BACKENDS
from relpos_core.measure.profile import batched_cpu_profile
from relpos_core.measure.timing import TimedCall, burst, interleaved
from relpos_core.measure.device import check_device
from relpos_core.outputs import Output
from relpos_core.provenance import git_commit, load_average, machine

__all__ = ["PRESETS", "MAX_CONTEXT", "benchmark_cases", "run_decode_benchmark", "load_result",
           "throughput_ratios", "main"]

PRESETS = {
    "cpu": dict(batch=1, num_layers=2, d_model=256, num_heads=4, head_dim=64, vocab_size=256,
                contexts=[256, 1024, 4096], dtype="float32", rounds=7, min_burst_ms=20.0, threads=1),
    "gpu": dict(batch=1, num_layers=4, d_model=1024, num_heads=16, head_dim=64, vocab_size=1024,
                contexts=[1024, 4096, 16384], dtype="bfloat16", rounds=5, min_burst_ms=20.0, threads=None),
    "tiny": dict(batch=1, num_layers=1, d_model=32, num_heads=2, head_dim=16, vocab_size=64,
                 contexts=[16], dtype="float32", rounds=2, min_burst_ms=0.2, threads=1),
}
MAX_CONTEXT = 2**17  # beyond the GPU preset's longest context 8 times over
BASELINE = (schemes.baseline(), None, "none", "sdpa")  # the ratios' denominator: no position term, SDPA
# The CPU presets run on one thread: a decode step of these sizes is many small operations,
# where a second thread on a machine shared with other processes costs more (waiting at
# each parallel region) than it gives. ``--threads`` overrides it.


def benchmark_cases(schemes=None, backends=None) -> list[tuple[str, str | None, str, str]]:
    """(scheme, rope_layout, form, backend) for every decodable path, in declaration order
    (optionally only some schemes and backends)."""
    schemes = list(SCHEMES) if schemes is None else [check_choice("scheme", s, SCHEMES) for s in schemes]
    backends = BACKENDS if backends is None else [check_choice("backend", b, BACKENDS) for b in backends]
    cases = []
    for scheme in schemes:
        for layout in ledger.layouts(scheme):
            cases += [(scheme, layout, form, backend) for form, backend in decode_paths(scheme)
                      if backend in backends]
    return cases


def _label(scheme, layout, form, backend) -> str:
    name = f"{scheme} ({layout})" if layout else scheme
    return f"{name}: {form}/{backend}"


def _provenance(preset: str, p: dict, device: torch.device, compiled: bool, load_start, seconds: float,
                commit: str, threads: int) -> dict:
    return dict(**machine(device, commit=commit),
                preset=preset, sizes=dict(p), threads=threads,
                load_average_start=load_start, load_average_end=load_average(), wall_seconds=round(seconds, 1),
                flex_compiled=compiled,
                timing=("per context, every case is timed in rounds, one burst of `iters` decode steps per case "
                        "per round in a shuffled order (the kernel benchmark's harness); ms_per_step summarises "
                        "the rounds (median, quartiles, spread = (q3 - q1) / median); CUDA events on GPU, "
                        "process CPU time on CPU; one step = one token for each of the batch's sequences, against "
                        "a cache of `context` tokens"),
                peak=("the most bytes a step allocates above what exists before it (the cache included "
                      "only where the step copies it: torch.cat appends)"))


def run_decode_benchmark(preset: str = "cpu", *, device=None, schemes=None, backends=None, contexts=None,
                         compiled: bool = True, threads: int | None = None, progress: bool = True,
                         seed: int = 0, on_row=None, dtype=None) -> dict:
    """Run every case at every context length; returns ``dict(complete=, provenance=, results=[...])``.

    ``threads``: torch's CPU threads during the run (default: the preset's; restored after).
    ``dtype``: instead of the preset's (a GPU below sm80 takes float16, not bfloat16:
    ``rp.measure.device.pick().dtype``); recorded in the provenance's sizes.
    ``on_row(row)``: every row as soon as its context is done. Ctrl-C ends the run with the
    contexts that finished (and the current one's rounds so far), ``"complete": False``.
    """
    check_choice("preset", preset, tuple(PRESETS))
    p = dict(PRESETS[preset])
    if dtype is not None:
        p["dtype"] = check_choice("dtype", str(dtype).replace("torch.", ""),
                                  ("float32", "float64", "float16", "bfloat16"))
    if contexts is not None:
        p["contexts"] = [check_positive_int("contexts[i]", int(c), max_value=MAX_CONTEXT) for c in contexts]
    device = torch.device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False: use preset 'cpu'")
    dtype = getattr(torch, p["dtype"])
    if threads is not None:
        p["threads"] = check_positive_int("threads", threads)
    cases = benchmark_cases(schemes, backends)
    on_row = on_row or (lambda row: None)
    previous_threads = torch.get_num_threads()
    if p["threads"] is not None:
        torch.set_num_threads(p["threads"])
    threads_used = torch.get_num_threads()  # read before the finally below restores it
    load_start, start, commit = load_average(), time.perf_counter(), git_commit()  # the code that runs
    results, complete = [], True
    try:
        for context in p["contexts"]:
            rows, finished = _run_context(p, device, dtype, cases, context, compiled, progress, seed)
            results += rows
            for row in rows:
                on_row(row)
            if not finished:
                complete = False
                break
    except KeyboardInterrupt:  # while prefilling: the contexts that finished are kept
        complete = False
    finally:
        torch.set_num_threads(previous_threads)
    provenance = _provenance(preset, p, device, compiled, load_start, time.perf_counter() - start, commit,
                             threads_used)
    return dict(complete=complete, provenance=provenance, results=results)


def _prefill(p, device, dtype, scheme, layout, context, tokens, seed):
    """A model of the preset's sizes and its cache, prefilled with ``context`` tokens (or the reason it could not)."""
    cfg = TransformerConfig(scheme=scheme, vocab_size=p["vocab_size"], d_model=p["d_model"], num_heads=p["num_heads"],
                        head_dim=p["head_dim"], num_layers=p["num_layers"], max_positions=max(p["contexts"]) + 8)
    model = Transformer(cfg, seed=seed, dtype=dtype, device=device)
    cache = model.new_cache(rope_layout=layout)
    with torch.no_grad():
        model(tokens[:, :context], cache)  # the model's default dense path
    return model, cache


def _run_context(p, device, dtype, cases, context, compiled, progress, seed):
    """Every case at one context: (rows, finished); finished is False when Ctrl-C stopped the rounds."""
    g = torch.Generator().manual_seed(seed + context)
    tokens = torch.randint(0, p["vocab_size"], (p["batch"], context + 1), generator=g).to(device)
    new_token = tokens[:, context:context + 1]  # (B, 1)
    groups = {}
    for scheme, layout, form, backend in cases:
        groups.setdefault((scheme, layout), []).append((form, backend))
    rows, steps = [], []
    for (scheme, layout), paths in groups.items():
        try:
            model, cache = _prefill(p, device, dtype, scheme, layout, context, tokens, seed)
            failure = None
        except MemoryBudgetError as e:
            failure = ("skipped", f"prefill: {str(e).splitlines()[0]}")
        except Exception as e:  # noqa: BLE001 - recorded, never dropped
            failure = ("error", f"prefill: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        for form, backend in paths:
            row = dict(scheme=scheme, layout=layout, form=form, backend=backend, context=context,
                       label=_label(scheme, layout, form, backend), batch=p["batch"])
            rows.append(row)
            if failure is not None:
                row.update(status=failure[0], reason=failure[1])
                continue
            row["cache_bytes"] = sum(cache.nbytes().values())
            terms = model.position_terms()

            def step(model=model, cache=cache, terms=terms, form=form, backend=backend):
                with torch.no_grad():
                    model(new_token, cache, form=form, backend=backend, compiled=compiled, terms=terms)
                cache.truncate(context)

            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
                    step()  # compile, warm up
                    ms = max(burst(step, 1, device)["wall_ms" if device.type == "cuda" else "cpu_ms"], 1e-3)
                row["status"] = "ok"
                steps.append(TimedCall(row, step, iters=max(1, min(1000, int(p["min_burst_ms"] / ms) + 1))))
            except MemoryBudgetError as e:
                row.update(status="skipped", reason=str(e).splitlines()[0])
            except Exception as e:  # noqa: BLE001 - recorded, never dropped
                row.update(status="error", reason=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
                cache.truncate(context)
    if device.type == "cpu" and steps:
        for s, (peak, _) in zip(steps, batched_cpu_profile([s.fn for s in steps])):
            s.row["step_peak_bytes"] = peak
    finished = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            interleaved(steps, p["rounds"], device, seed=seed,
                        on_round=(lambda r: print(f"L={context:6d}: round {r + 1}/{p['rounds']} of {len(steps)} "
                                                  f"cases done", flush=True)) if progress else None)
    except KeyboardInterrupt:
        finished = False
    key = "wall_ms" if device.type == "cuda" else "cpu_ms"
    for s in steps:
        if not s.samples:
            s.row.update(status="interrupted", reason="Ctrl-C before this case was timed")
            continue
        s.row.update(iters=s.iters, ms_per_step=bench_stats.summarize([x[key] for x in s.samples]))
        s.row["wall_ms_per_step"] = bench_stats.summarize([x["wall_ms"] for x in s.samples])
        s.row["tokens_per_s"] = 1e3 * p["batch"] / s.row["ms_per_step"]["median"]
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows, finished


def load_result(path=None) -> dict:
    """A saved benchmark (default: the committed CPU run, ``kv_decode_cpu.json`` shipped with the
    package, see ``relpos_core.resources``); ValueError naming the path when missing."""
    if path is None:
        from relpos_core import resources

        return resources.load_json("kv_decode_cpu.json")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must name a saved benchmark; {path} does not exist "
                         f"(run: python -m relpos_core.decoding --bench --out FILE.json)")
    return json.loads(path.read_text())


def throughput_ratios(result: dict) -> dict[tuple[str, int], float]:
    """(label, context) -> tokens/s divided by the baseline's (no position, SDPA) at the same context."""
    rows = [r for r in result["results"] if r["status"] == "ok" and "tokens_per_s" in r]
    base = {r["context"]: r["tokens_per_s"] for r in rows
            if (r["scheme"], r["layout"], r["form"], r["backend"]) == BASELINE}
    return {(r["label"], r["context"]): r["tokens_per_s"] / base[r["context"]] for r in rows if r["context"] in base}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m relpos_core.decoding", description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="run the decode throughput benchmark")
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda for the gpu preset)")
    parser.add_argument("--contexts", type=integer_in(1, MAX_CONTEXT), nargs="+", default=None, metavar="N",
                        help=f"override the preset's context lengths (integers in [1, {MAX_CONTEXT}])")
    parser.add_argument("--schemes", nargs="+", default=None, choices=SCHEMES)
    parser.add_argument("--backends", nargs="+", default=None, choices=BACKENDS)
    parser.add_argument("--eager-flex", action="store_true", help="FlexAttention's eager reference, not compiled")
    parser.add_argument("--threads", type=integer_in(1, 4096), default=None, help="CPU threads (default: the preset's)")
    parser.add_argument("--out", default=None, metavar="FILE.json",
                        help="result file (default: ./relpos-results/kv-decode-<preset>-<time>.json); a file "
                             "inside the package or data/ is written only when named here")
    parser.add_argument("--force", action="store_true", help="replace an existing result file")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.error("nothing to do: pass --bench")
    if args.device is not None:  # checked before the partial file is written (it would block the same --out)
        try:
            args.device = str(check_device(args.device))
        except ValueError as err:
            parser.error(f"argument --device: {err}")
    output = Output.for_command_line(parser, args.out, tool=f"kv-decode-{args.preset}", force=args.force)
    output.begin(dict(preset=args.preset, command=" ".join(sys.argv)))
    result = run_decode_benchmark(args.preset, device=args.device, schemes=args.schemes, backends=args.backends,
                                  contexts=args.contexts, compiled=not args.eager_flex, threads=args.threads,
                                  progress=not args.no_progress, on_row=output.add)
    output.finish(result, text=json.dumps(result, indent=1) + "\n")
    print(f"wrote {output.path}")
    if not result["complete"]:
        print("the run was interrupted: the file holds what finished (complete: false)", file=sys.stderr)
        raise SystemExit(130)
    return result
