"""Training steps per second of two checkouts side by side: the lab's step and the language model's.

    .venv/bin/python tools/train_step_speed.py --base ../speed-base [--rounds 7] [--steps 8]
        [--schemes none rope t5 alibi kerple_log fire] [--json out.json]

Issue 21 (a faster training step): one process per checkout (``--base``, a ``git worktree``
of the commit before, and this checkout), each importing its own ``relpos_core``, one torch
thread each. Every round times a burst of ``--steps`` training steps of every case in both
processes, one process at a time, in a shuffled order (seeded), so load from other
processes lands on both sides alike; the table gives the median process CPU time per step
over the rounds and the ratio base / this checkout (> 1: this checkout is faster), and the
same ratio of each side's fastest burst (load only ever adds time).

A step is what the trainers do per step: forward, loss, ``zero_grad``, backward, gradient
clipping at 1, the optimiser's step and the loss read back. The update and the optimiser are
each checkout's own (``train._update`` where it has one, else the steps its trainer wrote
inline); the optimiser (``relpos_core.lab.train._optimizer`` / ``relpos_core.lm.train._optimizer``
where the checkout has it; a checkout without the lab's builds the Adam its ``train_run``
built inline, betas 0.9 / 0.98). Cases, from the full presets:

* lab: the ``retrieval_gap`` task of the ``full`` preset (batch 32, 16 tokens, the preset's
  model: d_model 64, 2 layers, 4 heads, d_mlp 128), batches from the task's generator;
* lm: the ``full`` preset's model and batch (16 windows of 128 bytes, d_mlp 256), random bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCHEMES = ("none", "rope", "t5", "alibi", "kerple_log", "fire")


# -- the worker: one checkout's relpos_core ------------------------------------------------
def _update(train, model, opt, loss):
    """The checkout's own update (``train._update``), or the steps its trainer wrote inline."""
    import torch

    if hasattr(train, "_update"):
        return train._update(model, opt, loss)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def _lab_case(scheme):
    import torch

    from relpos_core.lab import presets, train
    from relpos_core.lab.tasks import make_task

    preset = presets.PRESETS["full"]
    setup = preset.tasks["retrieval_gap"]
    task = make_task(setup.task, **setup.options)
    spec = presets.RunSpec("retrieval_gap", scheme, scheme)
    model = train.build_model(train._model_config(preset, setup, task, spec), seed=0)
    if hasattr(train, "_optimizer"):
        opt = train._optimizer(model, 1e-3)
    else:  # the base's train_run built it inline
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(0)

    def step():
        batch = task.sample(setup.batch_size, setup.train_length, g)
        loss, correct = train._loss_and_correct(model, batch.tokens, batch.targets)
        _update(train, model, opt, loss)
        return loss.item(), int(correct.sum())

    return step


def _lm_case(scheme):
    import torch
    import torch.nn.functional as F

    from relpos_core.lab.models import build_model
    from relpos_core.lm import presets, train

    preset = presets.PRESETS["full"]
    model = build_model(train.model_config(preset, scheme), seed=0)
    opt = train._optimizer(model, preset.lr)
    g = torch.Generator().manual_seed(0)
    B, L = preset.batch_size, preset.train_length

    def step():
        x = torch.randint(0, 256, (B, L + 1), generator=g)  # (B, L + 1)
        logits = model(x[:, :-1])  # (B, L, 256)
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        _update(train, model, opt, loss)
        return loss.item()

    return step


def worker() -> None:
    """Read ``{"case": [family, scheme], "steps": n}`` lines; answer the CPU ms per step of one burst."""
    import torch

    torch.set_num_threads(1)
    steps = {}
    for line in sys.stdin:
        req = json.loads(line)
        family, scheme = req["case"]
        key = (family, scheme)
        if key not in steps:
            steps[key] = (_lab_case if family == "lab" else _lm_case)(scheme)
            for _ in range(3):  # warm-up: first-call work and the allocator
                steps[key]()
        fn, n = steps[key], int(req["steps"])
        t0 = time.process_time()
        for _ in range(n):
            fn()
        ms = (time.process_time() - t0) * 1e3 / n
        print(json.dumps({"ms": ms}), flush=True)


# -- the driver ------------------------------------------------------------------------------
def _start(tree: Path):
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], cwd=str(tree), env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _ask(proc, case, steps) -> float:
    proc.stdin.write(json.dumps({"case": case, "steps": steps}) + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the worker for case {case} ended without an answer (its error is above)")
    return json.loads(line)["ms"]


def _git(tree: Path, *args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--base", type=Path, help="the checkout to compare against (a git worktree of the commit before)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=8, help="training steps per burst")
    ap.add_argument("--schemes", nargs="+", default=list(DEFAULT_SCHEMES))
    ap.add_argument("--families", nargs="+", default=["lab", "lm"], choices=["lab", "lm"])
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return 0
    if args.base is None or not (args.base / "relpos_core").is_dir():
        ap.error(f"--base must be a checkout holding relpos_core/, got {args.base}")
    if not 1 <= args.rounds <= 100 or not 1 <= args.steps <= 1000:
        ap.error("rounds must be in [1, 100] and steps in [1, 1000]")
    trees = {"base": args.base.resolve(), "new": ROOT}
    procs = {name: _start(tree) for name, tree in trees.items()}
    cases = [(f, s) for f in args.families for s in args.schemes]
    samples = {(side, c): [] for side in trees for c in cases}
    rng = random.Random(0)
    load = [os.getloadavg()[0]]
    try:
        for r in range(args.rounds):
            order = [(side, c) for c in cases for side in trees]
            rng.shuffle(order)
            for side, case in order:
                samples[(side, case)].append(_ask(procs[side], case, args.steps))
            load.append(os.getloadavg()[0])
            print(f"round {r + 1}/{args.rounds} done (load average {load[-1]:.2f})", file=sys.stderr, flush=True)
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=60)
    rows = []
    print(f"{'case':<22}{'base ms/step':>14}{'new ms/step':>14}{'base / new':>12}{'of the fastest':>16}")
    for case in cases:
        b, n = samples[("base", case)], samples[("new", case)]
        base, new = statistics.median(b), statistics.median(n)
        rows.append({"family": case[0], "scheme": case[1], "base_ms": round(base, 3), "new_ms": round(new, 3),
                     "speedup": round(base / new, 3), "speedup_of_fastest": round(min(b) / min(n), 3),
                     "base_samples": [round(x, 3) for x in b], "new_samples": [round(x, 3) for x in n]})
        print(f"{case[0] + ' ' + case[1]:<22}{base:>14.2f}{new:>14.2f}{base / new:>12.2f}{min(b) / min(n):>16.2f}")
    out = {"rows": rows, "rounds": args.rounds, "steps_per_burst": args.steps, "threads": 1,
           "load_average": {"min": min(load), "max": max(load), "samples": [round(x, 2) for x in load]},
           "cpu_count": os.cpu_count(), "base_commit": _git(trees["base"], "rev-parse", "HEAD"),
           "new_commit": _git(ROOT, "rev-parse", "HEAD"), "new_dirty": bool(_git(ROOT, "status", "--porcelain")),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"load average during the run: {min(load):.2f} - {max(load):.2f} on {os.cpu_count()} CPUs")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
