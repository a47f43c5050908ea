"""``python -m relpos_core.lab --preset {tiny,book,full}``: train the lab's models and write results.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb).

Writes a results file (``--out``, default ``./relpos-results/lab-<preset>-<time>.json``)
with provenance and PNG plots beside it. Every argument and the output path are checked
before any training starts (``relpos_core.outputs``: nothing inside the package or
``data/`` unless named, nothing replaced without ``--force``); every finished run is kept
in ``<out>.partial.jsonl`` at once, and Ctrl-C writes the finished runs, marked
``"complete": false`` (so does ``kill <pid>``: the worker processes stop too). ``--resume`` continues an interrupted run from its partial file
(same preset, seeds and learning rates), training only the runs it lacks. ``--runs``
trains only some runs of the preset (a re-check of the claims that read them on new
seeds, ``--seeds 10 11 12``); the results file's preset then lists only those runs.
"""
from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time

from ..cli import integer_in
from ..outputs import Output, read_partial, read_unfinished, terminate_as_interrupt
from ..provenance import load_average
from .presets import PRESETS, get_preset, subset

MAX_SEEDS = 16
MAX_SEED = 2**31 - 1


def _learning_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1), got {text}")
    return value


def _head_of(p: dict) -> dict:
    """The partial file's head, rebuilt from an interrupted results file's provenance."""
    return dict(preset=p["preset"], seeds=p["seeds"], lrs=p["lrs"], git_commit=p["git_commit"],
                load_start=p.get("load_average_start"), runs=p.get("runs"))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m relpos_core.lab",
        description="Train tiny transformers that differ only in their position scheme until they solve each task "
                    "(or a cap); evaluate up to 512 tokens; write JSON results with provenance and PNG plots.",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="book",
                    help="tiny: pipeline check (seconds); book: the chapter's experiments on a reduced grid "
                         "(about 5 minutes on 2 cores); full: what the chapter reads (about an hour) (default: book)")
    ap.add_argument("--seeds", type=integer_in(0, MAX_SEED), nargs="+", default=None, metavar="SEED",
                    help=f"seeds to run, integers in [0, {MAX_SEED}], at most {MAX_SEEDS} (default: the preset's)")
    ap.add_argument("--lrs", type=_learning_rate, nargs="+", default=None, metavar="LR",
                    help="learning rates, numbers in (0, 1) (default: the preset's)")
    ap.add_argument("--runs", nargs="+", default=None, metavar="TASK/VARIANT",
                    help="train only these runs of the preset (run ids such as retrieval_gap/fire; default: "
                         "all): a re-check of some claims on new seeds. The results file's preset lists only "
                         "these runs")
    ap.add_argument("--out", default=None, metavar="FILE.json",
                    help="results file; PNG plots are written beside it (default: ./relpos-results/"
                         "lab-<preset>-<time>.json). A file inside the package or data/ is written only when "
                         "named here")
    ap.add_argument("--force", action="store_true", help="replace an existing results file and its plots")
    ap.add_argument("--resume", action="store_true",
                    help="continue the interrupted run whose partial file (<out>.partial.jsonl) is there")
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
    if args.lrs is not None and len(set(args.lrs)) != len(args.lrs):
        ap.error(f"argument --lrs: learning rates must be distinct, got {args.lrs}")
    if args.resume and args.out is None:
        ap.error("argument --resume: name the interrupted run's results file with --out")
    tool = f"lab-{args.preset}"
    done: list[dict] = []
    head: dict = {}
    if args.resume:  # the partial file must be there: read it, then check the output allowing it
        output = Output.from_argument(args.out, tool=tool, force=True)
        try:
            head, done = read_unfinished(output, _head_of)
            if head.get("preset") != args.preset:
                raise ValueError(f"--resume: {output.partial} is a run of preset "
                                 f"{head.get('preset')!r}, not {args.preset!r}")
            output.check()
        except ValueError as err:
            ap.error(f"argument --out: {err}")
    else:
        output = Output.for_command_line(ap, args.out, tool=tool, force=args.force)
    if not args.no_plots and not (args.force or args.resume) and any(
            output.path.parent.glob(f"{output.path.stem}-*.png")):
        ap.error(f"argument --out: plots named {output.path.stem}-*.png exist beside {output.path}: "
                 f"pass --force to replace them")
    preset = get_preset(args.preset)
    if args.runs is not None:
        known = [r.run_id for r in preset.runs]
        unknown = [r for r in args.runs if r not in known]
        if unknown or len(set(args.runs)) != len(args.runs):
            ap.error(f"argument --runs: distinct run ids of preset {preset.name!r} ({', '.join(known)}), "
                     f"got {args.runs}")
        preset = subset(preset, args.runs)
    if args.resume and head.get("runs") != args.runs:
        ap.error(f"argument --resume: the partial run trained runs {head.get('runs') or 'all'}; pass the same")
    seeds = tuple(args.seeds) if args.seeds is not None else preset.seeds
    lrs = tuple(args.lrs) if args.lrs is not None else preset.lrs
    if args.resume and (list(seeds) != head.get("seeds") or list(lrs) != head.get("lrs")):
        ap.error(f"argument --resume: the partial run used seeds {head.get('seeds')} and learning rates "
                 f"{head.get('lrs')}; pass the same")

    from . import figures, results
    from .train import jobs_of, run_preset

    command = "python -m relpos_core.lab " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    commit = head["git_commit"] if args.resume else results.git_commit()  # the code at the start
    load_start = head.get("load_start") if args.resume else load_average()
    new_head = dict(preset=preset.name, seeds=list(seeds), lrs=list(lrs), command=command, git_commit=commit,
                    load_start=load_start, runs=args.runs)
    order = {(s.run_id, seed, lr): i for i, (s, seed, lr) in enumerate(jobs_of(preset, seeds, lrs))}
    skip = [(r["run_id"], r["seed"], r["lr"]) for r in done]
    earlier_wall = sum(r.get("train_s", 0) + r.get("eval_s", 0) for r in done) / max(1, args.workers)
    start = time.perf_counter()

    def finish(runs: list[dict], complete: bool) -> dict:
        runs = sorted(runs, key=lambda r: order[(r["run_id"], r["seed"], r["lr"])])
        run = dict(runs=runs, wall_s=round(time.perf_counter() - start + earlier_wall, 2),
                   cpu_s=round(sum(r["cpu_s"] for r in runs), 2), threads=args.threads, workers=args.workers,
                   load_start=load_start)
        res = results.build_results(preset, seeds, lrs, run, command=command, commit=commit)
        res["complete"] = complete
        output.finish(res, text=results.results_text(res))
        return res

    # armed before the partial file is touched: an interrupt from here on writes what finished
    previous = signal.signal(signal.SIGTERM, terminate_as_interrupt)  # kill <pid>: the same as Ctrl-C
    try:
        if args.resume:  # rewritten beside the old one and renamed: the old stays whole until then
            output.restart(new_head, done)
        else:
            output.begin(new_head)
        run = run_preset(preset, seeds, lrs, progress=not args.no_progress, threads_per_run=args.threads,
                         workers=args.workers, on_record=output.add, skip=skip)
    except KeyboardInterrupt:
        before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the result short
        try:
            finished = read_partial(output.partial)[1] if output.partial.is_file() else done
            finish(finished, complete=False)
        finally:
            signal.signal(signal.SIGINT, before)
        print(f"\ninterrupted: wrote the {len(finished)} finished run(s) of {len(order)} to {output.path} "
              f"(marked complete: false); continue with --resume", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    res = finish(done + run["runs"], complete=True)
    plots = [] if args.no_plots else figures.save_plots(res, output.path.parent, output.path.stem)
    budget = max(res["preset"]["budgets"])
    for task in res["preset"]["tasks"]:
        if not any(r["task"] == task for r in res["preset"]["runs"]):
            continue
        print(f"\n{task} (trained at L = {res['preset']['tasks'][task]['train_length']}, largest budget): accuracy, "
              f"mean (min-max over the solved runs beyond the training length)")
        print(results.length_table_markdown(res, task, budget=budget))
    p = res["provenance"]
    print(f"\n{len(res['runs'])} runs in {p['wall_s']:.0f} s wall, {p['cpu_s']:.0f} s CPU "
          f"({args.workers} process(es) of {args.threads} thread(s)), load average {load_start} at the start")
    print(f"wrote {output.path}" + "".join(f"\nwrote {p}" for p in plots))
    return res


if __name__ == "__main__":
    main()
