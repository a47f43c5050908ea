"""``python -m relpos_core.lab --preset {tiny,book,full}``: train the lab's models and write results.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

Writes ``<out>/lab-<preset>.json`` (results with provenance) and PNG plots beside it.
Every argument and the output folder are checked before any training starts.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from ..cli import integer_in
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
                    help="tiny: pipeline check (seconds); book: the chapter's runs (about 4 minutes per seed "
                         "on 2 CPU cores); full: 4x the steps, 3 seeds (default: book)")
    ap.add_argument("--seeds", type=integer_in(0, MAX_SEED), nargs="+", default=None, metavar="SEED",
                    help=f"seeds to run, integers in [0, {MAX_SEED}], at most {MAX_SEED and MAX_SEEDS} "
                         "(default: the preset's)")
    ap.add_argument("--out", default="lab_out", metavar="DIR",
                    help="output folder for lab-<preset>.json and the plots (default: lab_out)")
    ap.add_argument("--threads", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"), default=1,
                    help="torch threads per run (default 1: fastest for these tiny models on 2 cores)")
    ap.add_argument("--workers", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"), default=min(2, os.cpu_count() or 1),
                    help="runs trained at a time, each in its own process (default: 2, or 1 on a one-core "
                         "machine); results do not depend on it")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--no-plots", action="store_true", help="write the JSON only")
    return ap


def _check_out(ap: argparse.ArgumentParser, out: str) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        ap.error(f"argument --out: must be a folder (it is created if missing), got the file {out!r}")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as err:
        ap.error(f"argument --out: cannot write to the folder {out!r} ({err.strerror or err})")
    return path


def main(argv=None) -> dict:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.seeds is not None:
        if len(args.seeds) > MAX_SEEDS:
            ap.error(f"argument --seeds: at most {MAX_SEEDS} seeds, got {len(args.seeds)}")
        if len(set(args.seeds)) != len(args.seeds):
            ap.error(f"argument --seeds: seeds must be distinct, got {args.seeds}")
    out_dir = _check_out(ap, args.out)
    preset = get_preset(args.preset)
    seeds = tuple(args.seeds) if args.seeds is not None else preset.seeds

    from . import figures, results
    from .train import run_preset

    command = "python -m relpos_core.lab " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    commit = results.git_commit()  # the code that runs is the code at the start
    output = run_preset(preset, seeds, progress=not args.no_progress, threads_per_run=args.threads,
                        workers=args.workers)
    res = results.build_results(preset, seeds, output, command=command, commit=commit)
    stem = f"lab-{preset.name}"
    path = results.save_results(res, out_dir / f"{stem}.json")
    plots = [] if args.no_plots else figures.save_plots(res, out_dir, stem)
    for task, setup in res["preset"]["tasks"].items():
        variants = [r["variant"] for r in res["preset"]["runs"] if r["task"] == task]
        print(f"\n{task} (trained at L = {setup['train_length']}): accuracy, mean (min-max over seeds)")
        print(results.length_table_markdown(res, task, variants))
    print(f"\n{len(res['runs'])} runs in {output['wall_s']:.0f} s wall, {output['cpu_s']:.0f} s CPU "
          f"({args.workers} process(es) of {args.threads} thread(s))")
    print(f"wrote {path}" + "".join(f"\nwrote {p}" for p in plots))
    return res


if __name__ == "__main__":
    main()
