"""``python -m relpos_core.lab --preset {tiny,book,full}``: train the lab's models and write results.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

Writes a results file (``--out``, default ``./relpos-results/lab-<preset>-<time>.json``)
with provenance and PNG plots beside it. Every argument and the output path are checked
before any training starts (``relpos_core.outputs``: nothing inside the package or
``data/`` unless named, nothing replaced without ``--force``); every finished run is kept
in ``<out>.partial.jsonl`` at once, and Ctrl-C writes the finished runs, marked
``"complete": false``.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

from ..cli import integer_in
from ..outputs import Output, read_partial
from .presets import PRESETS, get_preset

MAX_SEEDS = 16
MAX_SEED = 2**31 - 1






def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m relpos_core.lab",
        description="Train tiny transformers that differ only in their position scheme; evaluate at 1x-8x "
                    "the training length; write JSON results with provenance and PNG plots.",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="book",
                    help="tiny: pipeline check (seconds); book: the chapter's runs; full: the long runs "
                         "(default: book)")
    ap.add_argument("--seeds", type=integer_in(0, MAX_SEED), nargs="+", default=None, metavar="SEED",
                    help=f"seeds to run, integers in [0, {MAX_SEED}], at most {MAX_SEEDS} (default: the preset's)")
    ap.add_argument("--out", default=None, metavar="FILE.json",
                    help="results file; PNG plots are written beside it (default: ./relpos-results/"
                         "lab-<preset>-<time>.json). A file inside the package or data/ is written only when "
                         "named here")
    ap.add_argument("--force", action="store_true", help="replace an existing results file and its plots")
    ap.add_argument("--threads", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"), default=1,
                    help="torch threads per run (default 1: fastest for these tiny models on 2 cores)")
    ap.add_argument("--workers", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"),
                    default=min(2, os.cpu_count() or 1),
                    help="runs trained at a time, each in its own process (default: 2, or 1 on a one-core "
                         "machine); results do not depend on it")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--no-plots", action="store_true", help="write the JSON only")
    return ap


def main(argv=None) -> dict:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.seeds is not None:
        if len(args.seeds) > MAX_SEEDS:
            ap.error(f"argument --seeds: at most {MAX_SEEDS} seeds, got {len(args.seeds)}")
        if len(set(args.seeds)) != len(args.seeds):
            ap.error(f"argument --seeds: seeds must be distinct, got {args.seeds}")
    output = Output.from_argument(args.out, tool=f"lab-{args.preset}", force=args.force)
    try:
        output.check()
        if not args.no_plots and not args.force and any(output.path.parent.glob(f"{output.path.stem}-*.png")):
            raise ValueError(f"plots named {output.path.stem}-*.png exist beside it: pass --force to replace them")
    except ValueError as err:
        ap.error(f"argument --out: {err}")
    preset = get_preset(args.preset)
    seeds = tuple(args.seeds) if args.seeds is not None else preset.seeds

    from . import figures, results
    from .train import run_preset

    command = "python -m relpos_core.lab " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    commit = results.git_commit()  # the code that runs is the code at the start
    output.begin(dict(preset=preset.name, seeds=list(seeds), command=command, git_commit=commit))
    start = time.perf_counter()
    try:
        run = run_preset(preset, seeds, progress=not args.no_progress, threads_per_run=args.threads,
                         workers=args.workers, on_record=output.add)
    except KeyboardInterrupt:
        finished = read_partial(output.partial)[1]
        partial = dict(runs=finished, wall_s=round(time.perf_counter() - start, 2),
                       cpu_s=round(sum(r["cpu_s"] for r in finished), 2), threads=args.threads, workers=args.workers)
        res = results.build_results(preset, seeds, partial, command=command, commit=commit)
        res["complete"] = False
        output.finish(res, text=results.results_text(res))
        print(f"\ninterrupted: wrote the {len(finished)} finished run(s) of {len(preset.runs) * len(seeds)} to "
              f"{output.path} (marked complete: false)", file=sys.stderr)
        raise SystemExit(130) from None
    res = results.build_results(preset, seeds, run, command=command, commit=commit)
    res["complete"] = True
    output.finish(res, text=results.results_text(res))
    plots = [] if args.no_plots else figures.save_plots(res, output.path.parent, output.path.stem)
    for task, setup in res["preset"]["tasks"].items():
        variants = [r["variant"] for r in res["preset"]["runs"] if r["task"] == task]
        print(f"\n{task} (trained at L = {setup['train_length']}): accuracy, mean (min-max over seeds)")
        print(results.length_table_markdown(res, task, variants))
    print(f"\n{len(res['runs'])} runs in {run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU "
          f"({args.workers} process(es) of {args.threads} thread(s))")
    print(f"wrote {output.path}" + "".join(f"\nwrote {p}" for p in plots))
    return res


if __name__ == "__main__":
    main()
