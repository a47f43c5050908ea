"""``python -m relpos_core.lm --preset {tiny,book,full}``: train the byte-level language models, evaluate, extend.

Book: "Evidence from a language model" (chapters/13_language_model.ipynb).

Writes one results file (``--out``, default ``./relpos-results/lm-<preset>-<time>.json``)
with both stages (the base models of every scheme and seed, then the RoPE extension
methods) and provenance. The output path and the corpus are checked before any training
(``relpos_core.outputs``: nothing inside the package or ``data/`` unless named, nothing
replaced without ``--force``); each finished run is appended to ``<out>.partial.jsonl``
at once; Ctrl-C (or ``kill <pid>``) writes the finished runs marked ``"complete": false``;
``--resume`` trains only the runs the partial file lacks. The trained RoPE weights the
extension stage starts from are kept beside the output (``<out stem>-models/``).
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
from ..provenance import git_commit, load_average
from .presets import PRESETS, get_preset


MACHINE_FIELDS = ("cpu_model", "cpu_count", "cpu_capability", "torch", "platform", "date")


def _machine_summary(runs=()) -> dict:
    """Where runs are being trained now: the CPU and torch fields of the provenance, and the
    ids of ``runs`` (filled in when a later --resume records the earlier machine)."""
    from relpos_core.provenance import machine

    m = machine("cpu", commit="")
    return {**{k: m[k] for k in MACHINE_FIELDS}, "runs": list(runs)}


def _head_of(p: dict) -> dict:
    """The partial file's head, rebuilt from an interrupted results file's provenance."""
    return dict(preset=p["preset"], command=p["command"], git_commit=p["git_commit"],
                load_start=p.get("load_average_start"), resumed_at_commits=p.get("resumed_at_commits", []),
                machine={k: p.get(k) for k in MACHINE_FIELDS}, earlier_machines=p.get("earlier_machines", []))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m relpos_core.lm",
        description="Train byte-level language models on CPython's standard library that differ only in their "
                    "position scheme; evaluate bits per byte and a passkey probe at 1x-16x the training length; "
                    "then extend the RoPE models (interpolation, NTK, YaRN, ...) zero-shot and fine-tuned.")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="book",
                    help="tiny: pipeline check (seconds); book: a small run (minutes); full: the committed run")
    ap.add_argument("--out", default=None, metavar="FILE.json",
                    help="results file (default: ./relpos-results/lm-<preset>-<time>.json); a file inside the "
                         "package or data/ is written only when named here")
    ap.add_argument("--force", action="store_true", help="replace an existing results file")
    ap.add_argument("--resume", action="store_true", help="continue the interrupted run of --out")
    ap.add_argument("--workers", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"),
                    default=min(2, os.cpu_count() or 1), help="runs at a time, one process each (default 2)")
    ap.add_argument("--threads", type=integer_in(1, os.cpu_count() or 1, "this machine's CPU count"), default=1,
                    help="torch threads per run (default 1)")
    ap.add_argument("--allow-other-corpus", action="store_true",
                    help="train on this machine's standard library even where it differs from the pinned corpus "
                         "(the result records the difference)")
    return ap


def _missing_runs(preset_name: str):
    """The run ids of ``preset_name`` that finished rows lack (a finished run whose preset grew)."""
    from .train import job_id, jobs_of, record_id

    wanted = {job_id(j) for j in jobs_of(get_preset(preset_name))}
    return lambda rows: wanted - {record_id(r) for r in rows}


def main(argv=None) -> dict:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.resume and args.out is None:
        ap.error("argument --resume: name the interrupted run's results file with --out")
    tool = f"lm-{args.preset}"
    head, done = {}, []
    if args.resume:
        output = Output.from_argument(args.out, tool=tool, force=True)
        try:
            head, done = read_unfinished(output, _head_of, missing=_missing_runs(args.preset))
        except ValueError as err:
            ap.error(f"argument --resume: {err}")
        if head.get("preset") != args.preset:
            ap.error(f"argument --resume: {output.partial} is a run of preset {head.get('preset')!r}, "
                     f"not {args.preset!r}")
        try:
            output.check()
        except ValueError as err:
            ap.error(f"argument --out: {err}")
    else:
        output = Output.for_command_line(ap, args.out, tool=tool, force=args.force)
    preset = get_preset(args.preset)

    from . import results
    from .corpus import CorpusMismatch, load_corpus
    from .train import job_id, jobs_of, record_id, run_jobs

    corpus_kwargs = dict(allow_other_corpus=args.allow_other_corpus)
    try:
        corpus = load_corpus(**corpus_kwargs)
    except CorpusMismatch as err:
        ap.error(str(err))
    command = "python -m relpos_core.lm " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    commit = head.get("git_commit") if args.resume else git_commit()
    load_start = head.get("load_start") if args.resume else load_average()
    resumed = list(head.get("resumed_at_commits", [])) + ([git_commit()] if args.resume else [])
    # a resumed run keeps where its earlier runs were trained: the machine of each earlier part
    earlier_machines = list(head.get("earlier_machines", []))
    if args.resume and head.get("machine"):
        before = {rid for m in earlier_machines for rid in m.get("runs", [])}
        earlier_machines.append({**head["machine"], "runs": [record_id(r) for r in done if record_id(r) not in before]})
    output.begin(dict(preset=preset.name, command=command, git_commit=commit, load_start=load_start,
                      machine=_machine_summary(), earlier_machines=earlier_machines,
                      corpus_hash=corpus.record["hash"], resumed_at_commits=resumed))
    for row in done:
        output.add(row)
    jobs = jobs_of(preset)
    order = {job_id(j): i for i, j in enumerate(jobs)}
    finished = {record_id(r) for r in done}
    todo = [j for j in jobs if job_id(j) not in finished]
    models_dir = output.path.parent / f"{output.path.stem}-models"
    earlier = sum(r.get("wall_s", 0) for r in done) / max(1, args.workers)
    start = time.perf_counter()
    print(f"relpos lm ({preset.name}): {len(todo)} of {len(jobs)} runs to train, {args.workers} worker(s)",
          flush=True)

    def finish(runs, complete):
        runs = sorted(runs, key=lambda r: order.get(record_id(r), len(order)))
        res = results.build_results(preset, runs, corpus=corpus.record, command=command, commit=commit,
                                    wall_s=time.perf_counter() - start + earlier, workers=args.workers,
                                    threads=args.threads, load_start=load_start, complete=complete)
        res["provenance"]["resumed_at_commits"] = resumed  # the code of each --resume (the runs record theirs)
        res["provenance"]["earlier_machines"] = earlier_machines  # where the runs finished before each --resume ran
        output.finish(res, text=results.results_text(res))
        return res

    def on_record(record):
        output.add(record)
        print(f"  done {record_id(record)} in {record['wall_s']:.0f} s "
              f"({len(read_partial(output.partial)[1])} of {len(jobs)})", flush=True)

    previous = signal.signal(signal.SIGTERM, terminate_as_interrupt)
    try:
        new = run_jobs(preset, todo, corpus, workers=args.workers, threads_per_run=args.threads,
                       models_dir=models_dir, on_record=on_record, corpus_kwargs=corpus_kwargs)
    except KeyboardInterrupt:
        rows = read_partial(output.partial)[1]
        finish(rows, complete=False)
        print(f"\ninterrupted: wrote the {len(rows)} finished run(s) of {len(jobs)} to {output.path} "
              f"(complete: false); continue with --resume", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    res = finish(done + new, complete=True)
    lengths = preset.eval_lengths
    print("\nbits per byte (non-overlapping), mean ± t half-width over seeds")
    print(results.table_markdown(results.bpb_table(res), "scheme", lengths))
    print("\npasskey digit accuracy (teacher-forced), all depths")
    print(results.table_markdown(results.passkey_table(res), "scheme", lengths))
    for stage in ("zero_shot", "finetuned"):
        rows = results.extension_table(res, stage=stage)
        if rows:
            print(f"\nextension, {stage}: bits per byte")
            print(results.table_markdown(rows, "method", lengths))
    p = res["provenance"]
    print(f"\n{len(res['runs'])} runs in {p['wall_s']:.0f} s wall, {p['cpu_s']:.0f} s CPU; wrote {output.path}")
    return res


if __name__ == "__main__":
    main()
