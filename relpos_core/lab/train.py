"""Train one lab model until it solves its task (or a cap), evaluate it at every probe.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb).

Training stops when the training accuracy, pooled over the last ``solve_window`` steps,
reaches ``solve_threshold`` (``SolveTracker``; the record's ``solved`` and ``solved_at``).
That is a rule for stopping: the results read "solved" from the held-out evaluation
(``results.held_out_solved``), which the stopping rule misses for some runs. Otherwise it runs to
the largest budget, ``cap x max(budgets)`` steps (the cap and four times it by default).
The learning rate warms up linearly and then stays constant, so a run with a smaller
budget is the first part of the same run: one training gives every budget. At the end of
each budget an unsolved run is evaluated as it is then; a solved run stopped earlier and
is the same model for every later budget. The record keeps, per budget: the steps
trained, whether it was solved, and the evaluation at every probe of the task.

Everything random is seeded: the model's initial parameters by (seed, run id), the
training batches by (seed, task), the evaluation rows by (seed, task, probe). So every
model of a task sees the same batches and is scored on the same rows, whatever its
learning rate (the comparisons between schemes are paired), and the same seed gives the
same numbers again on the same machine (same CPU instruction set, torch build and
thread count; another CPU may differ in the last bits, which a long training run can
amplify: chapters/14_experiments_length.ipynb). Seeds are derived with crc32, not Python's salted ``hash``.

Optimiser: Adam (no weight decay, so rows of a learned table that never get a gradient
keep their initial values; ``foreach``, bit for bit the numbers of the per-parameter loop),
gradient norm clipped at 1. The loss is cross-entropy over
the labelled positions only.
"""
from __future__ import annotations

import collections
import contextlib
import math
import time
import zlib

import torch
import torch.nn.functional as F

from relpos_core._validate import check_int, check_positive_int
from relpos_core.models import Transformer, TransformerConfig

from .models import build_model, lab_config, untrained_position_rows
from .presets import Preset, Probe, RunSpec, TaskSetup
from .tasks import IGNORE, Task, make_task

__all__ = ["derive_seed", "train_run", "evaluate", "evaluate_probes", "run_preset", "threads", "SolveTracker",
           "jobs_of"]


def derive_seed(seed: int, *parts) -> int:
    """A 31-bit seed from ``seed`` and names/numbers, stable across processes."""
    text = "/".join(str(p) for p in (seed, *parts))
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


@contextlib.contextmanager
def threads(n: int | None):
    """``torch.set_num_threads(n)`` inside the block, the previous value restored after."""
    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(check_positive_int("threads", n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class SolveTracker:
    """Training accuracy pooled over the last ``window`` steps; ``solved`` once it reaches ``threshold``.

    ``add(correct, total)`` after each step returns whether the window (full) has reached
    the threshold. A window shorter than ``window`` steps never counts as solved.
    """

    def __init__(self, threshold: float, window: int):
        if not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
            raise ValueError(f"threshold must be a number in (0, 1], got {threshold!r}")
        self.threshold = float(threshold)
        self.window = check_positive_int("window", window)
        self.steps: collections.deque = collections.deque(maxlen=self.window)
        self.correct = 0
        self.total = 0

    def add(self, correct: int, total: int) -> bool:
        if len(self.steps) == self.window:
            c, t = self.steps[0]
            self.correct -= c
            self.total -= t
        self.steps.append((int(correct), int(total)))
        self.correct += int(correct)
        self.total += int(total)
        return self.solved

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def solved(self) -> bool:
        return len(self.steps) == self.window and self.accuracy >= self.threshold


def _model_config(preset: Preset, setup: TaskSetup, task: Task, spec: RunSpec) -> TransformerConfig:
    shape = dict(preset.model, **spec.model)
    return lab_config(spec.scheme, vocab_size=task.vocab_size, num_classes=task.num_classes,
                      max_positions=setup.max_length, causal=task.causal, position=spec.position, **shape)


def _update(model: Transformer, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimiser step on ``loss``: gradients, their norm clipped at 1 (``foreach``: the same numbers
    bit for bit as the per-parameter loop, in one call), the step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()


def _optimizer(model: Transformer, lr: float) -> torch.optim.Adam:
    """Adam, betas 0.9 / 0.98, no weight decay, ``foreach``: one call per operation over all the parameters
    instead of a loop over them, with the same numbers bit for bit as the loop the committed runs used
    (the fused kernel is faster still but rounds differently: its losses part from these by about 3e-7
    relative within 60 steps, which a long run can amplify)."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), foreach=True)


def _lr_factor(step: int, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then constant (so budgets are prefixes of one run)."""
    return min(1.0, (step + 1) / max(1, warmup))


def _loss_and_correct(model: Transformer, tokens, targets):
    logits = model(tokens)  # (B, L, C)
    labelled = targets != IGNORE  # (B, L)
    picked = logits[labelled]  # (N, C)
    loss = F.cross_entropy(picked, targets[labelled])
    correct = picked.argmax(-1) == targets[labelled]  # (N,)
    return loss, correct


@torch.inference_mode()
def evaluate(model: Transformer, task: Task, length: int, rows: int, *, seed: int, chunk_tokens: int = 16384,
             by_detail: bool = True) -> dict:
    """Accuracy over ``rows`` fresh rows of ``length``, its parts, the position-free floor, per ``detail`` value.

    The rows are placed where the model's position module puts them
    (``training_positions`` with the evaluation's generator: randomised positions are
    drawn at test time as in Ruoss et al.'s code; every other scheme uses 0 .. L - 1).
    Returns ``{"accuracy", "labels", "floor", "parts": {name: accuracy}, "by_detail":
    {detail: [correct, total]}}`` (``by_detail`` only when asked).
    """
    rows = check_positive_int("rows", rows)
    length = task.check_length(length)
    seed = check_int("seed", seed, min_value=0, max_value=2**63 - 1)
    g = torch.Generator().manual_seed(seed)  # the rows: the same for every model
    g_positions = torch.Generator().manual_seed(derive_seed(seed, "positions"))  # drawn positions, if any
    was_training = model.training
    model.eval()
    per_chunk = max(1, chunk_tokens // length)
    correct_total, labels, floor_sum, done = 0, 0, 0.0, 0
    parts: dict[str, int] = {}
    details: dict[int, list[int]] = {}
    while done < rows:
        b = task.sample(min(per_chunk, rows - done), length, g)
        done += b.tokens.shape[0]
        positions = model.position.training_positions(length, g_positions)  # None: 0 .. L - 1
        pred = model(b.tokens, positions=positions).argmax(-1)  # (B, L)
        labelled = b.targets != IGNORE  # (B, L)
        n = int(labelled.sum())
        hit = (pred == b.targets)[labelled]  # (N,)
        correct_total += int(hit.sum())
        labels += n
        floor_sum += task.position_free_floor(b) * n
        for name, right in task.parts(pred[labelled], b.targets[labelled]).items():
            parts[name] = parts.get(name, 0) + int(right.sum())
        if by_detail:
            for value, h in zip(b.detail[labelled].tolist(), hit.tolist()):
                entry = details.setdefault(value, [0, 0])
                entry[0] += int(h)
                entry[1] += 1
    model.train(was_training)
    out = {"accuracy": round(correct_total / max(1, labels), 6), "labels": labels,
           "floor": round(floor_sum / max(1, labels), 6),
           "parts": {k: round(v / max(1, labels), 6) for k, v in parts.items()}}
    if by_detail:
        out["by_detail"] = {k: details[k] for k in sorted(details)}
    return out


def _probe_task(setup: TaskSetup, probe: Probe) -> Task:
    return make_task(setup.task, **dict(setup.options, **probe.options))


def evaluate_probes(model: Transformer, setup: TaskSetup, task_name: str, seed: int) -> dict:
    """Every probe of a task: ``{probe name: evaluate(...)}``, per-detail counts at the first probe only."""
    out = {}
    for i, probe in enumerate(setup.probes):
        task = _probe_task(setup, probe)
        out[probe.name] = evaluate(model, task, probe.length, setup.eval_rows, by_detail=(i == 0),
                                   seed=derive_seed(seed, "eval", task_name, probe.name))
    return out


@torch.no_grad()
def _input_table_check(model: Transformer, setup: TaskSetup, task_name: str, seed: int) -> dict:
    """For a scheme that adds its positions to the input: how large the trained rows are next
    to the token embeddings, and the accuracy at the first probe with the table zeroed."""
    tables = [t for t in list(model.position.parameters()) + list(model.position.buffers()) if t.dim() == 2]
    if not tables:
        return {}
    table = tables[0]
    train_rows = table[: setup.train_length]  # (L, D) the rows training reached
    token_norm = model.embed.weight.norm(dim=1).mean().item()
    saved = [t.detach().clone() for t in tables]
    for t in tables:
        t.zero_()
    probe = setup.probes[0]
    zeroed = evaluate(model, _probe_task(setup, probe), probe.length, setup.eval_rows, by_detail=False,
                      seed=derive_seed(seed, "eval", task_name, probe.name))["accuracy"]
    for t, s in zip(tables, saved):
        t.copy_(s)
    return {"row_norm": round(train_rows.norm(dim=1).mean().item(), 4), "token_norm": round(token_norm, 4),
            "accuracy_zeroed": zeroed}


def train_run(preset: Preset, spec: RunSpec, seed: int, lr: float, *, progress=None) -> tuple[dict, Transformer]:
    """Train ``spec`` under ``preset`` with ``seed`` and learning rate ``lr`` until solved or the
    largest budget; return (its result record, the trained model). ``progress(n_steps, loss)``,
    if given, is called after every step."""
    seed = check_int("seed", seed, min_value=0, max_value=2**31 - 1)
    if not isinstance(lr, (int, float)) or not 0 < lr < 1:
        raise ValueError(f"lr must be a number in (0, 1), got {lr!r}")
    if spec.task not in preset.tasks:
        raise ValueError(f"spec.task must be one of the preset's tasks {sorted(preset.tasks)}, got {spec.task!r}")
    setup = preset.tasks[spec.task]
    task = make_task(setup.task, **setup.options)
    config = _model_config(preset, setup, task, spec)
    model = build_model(config, seed=derive_seed(seed, "init", spec.run_id))
    initial_tables = _tables(model) if spec.keep_tables else None
    optimizer = _optimizer(model, lr)
    g = torch.Generator().manual_seed(derive_seed(seed, "train", spec.task))
    budgets = sorted(preset.budgets)
    ends = {b: setup.cap * b for b in budgets}  # step at which each budget ends
    last = ends[budgets[-1]]
    tracker = SolveTracker(preset.solve_threshold, preset.solve_window)
    every = max(1, setup.cap // preset.log_points)
    curve, window_loss, window_correct, window_labels, in_window = [], 0.0, 0, 0, 0
    results, solved_at = {}, None
    start, cpu_start = time.perf_counter(), time.process_time()
    eval_s = 0.0
    model.train()
    step = 0
    while step < last:
        for group in optimizer.param_groups:
            group["lr"] = lr * _lr_factor(step, preset.warmup_steps)
        batch = task.sample(setup.batch_size, setup.train_length, g)
        loss, correct = _loss_and_correct(model, batch.tokens, batch.targets)
        _update(model, optimizer, loss)
        step += 1
        value, n_correct = loss.item(), int(correct.sum())
        window_loss += value
        window_correct += n_correct
        window_labels += correct.numel()
        in_window += 1
        solved = tracker.add(n_correct, correct.numel())
        if step % every == 0 or solved or step == last:
            curve.append([step, round(window_loss / in_window, 5), round(window_correct / max(1, window_labels), 5)])
            window_loss, window_correct, window_labels, in_window = 0.0, 0, 0, 0
        if progress is not None:
            progress(1, value)
        if solved:
            solved_at = step
            break
        for b in budgets[:-1]:  # an unsolved run is evaluated at the end of each smaller budget
            if step == ends[b]:
                t0 = time.perf_counter()
                results[str(b)] = {"steps": step, "solved": False,
                                   "eval": evaluate_probes(model, setup, spec.task, seed)}
                eval_s += time.perf_counter() - t0
    train_s = time.perf_counter() - start - eval_s
    t0 = time.perf_counter()
    final = evaluate_probes(model, setup, spec.task, seed)
    first_final = None  # the final model's evaluation is stored once; later budgets point to it
    for b in budgets:
        if str(b) in results:
            continue
        results[str(b)] = {"steps": step, "solved": solved_at is not None}
        if first_final is None:
            results[str(b)]["eval"], first_final = final, str(b)
        else:
            results[str(b)]["eval_of"] = first_final
    record = {
        "run_id": spec.run_id, "task": spec.task, "variant": spec.variant, "scheme": spec.scheme, "seed": seed,
        "lr": lr, "model": config.record(), "parameters": sum(p.numel() for p in model.parameters()),
        "train_length": setup.train_length, "cap": setup.cap, "steps": step, "solved_at": solved_at,
        "curve": curve, "budgets": results,
    }
    if any(entry.scheme.positions_in_tokens for entry in model.config.entries):
        record["input_table"] = _input_table_check(model, setup, spec.task, seed)
    rows = untrained_position_rows(model, setup.train_length)
    if rows:
        record["untrained_position_rows"] = [rows.start, rows.stop]
    if initial_tables is not None:
        record["tables"] = {"initial": initial_tables, "trained": _tables(model)}
    eval_s += time.perf_counter() - t0
    record.update(train_s=round(train_s, 3), eval_s=round(eval_s, 3),
                  cpu_s=round(time.process_time() - cpu_start, 3))
    return record, model


def _tables(model: Transformer) -> dict:
    """The learned tables the scheme's position module reports (``recorded_tables``; Shaw: layer 0's key table)."""
    tables = model.position.recorded_tables()
    if tables is None:
        raise ValueError(f"keep_tables: {model.config.scheme} reports no learned table (its PositionModule's "
                         f"recorded_tables() is None)")
    return tables


def jobs_of(preset: Preset, seeds=None, lrs=None) -> list[tuple[RunSpec, int, float]]:
    """Every (run, seed, learning rate) of ``preset``, in training order (checked): seed by seed,
    and within a seed every learning rate, so that a run stopped early holds whole seeds."""
    seeds = tuple(preset.seeds if seeds is None else seeds)
    lrs = tuple(preset.lrs if lrs is None else lrs)
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    for seed in seeds:
        check_int("seed", seed, min_value=0, max_value=2**31 - 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    if not lrs or len(set(lrs)) != len(lrs) or not all(isinstance(x, (int, float)) and 0 < x < 1 for x in lrs):
        raise ValueError(f"lrs must be distinct numbers in (0, 1), got {list(lrs)}")
    # seed by seed, both learning rates: a run stopped early has whole seeds, every learning rate
    return [(spec, seed, lr) for seed in seeds for lr in lrs for spec in preset.runs]


def run_preset(preset: Preset, seeds=None, lrs=None, *, progress: bool = True, threads_per_run: int | None = 1,
               workers: int = 1, keep_models: bool = False, on_record=None, skip=()) -> dict:
    """Train every run of ``preset`` for every seed and learning rate.

    ``workers > 1`` trains that many runs at a time in separate processes (spawned, each
    with ``threads_per_run`` torch threads). Every run is seeded on its own, so the
    records are the same whichever process trains them, and they come back in the
    preset's order. ``on_record(record)`` is called as each run finishes (in finishing
    order), so a caller can keep it before the whole preset is done. ``skip``: (run_id,
    seed, lr) triples already done (a resumed run). Returns ``{"runs": [...], "wall_s",
    "cpu_s", "threads", "workers"}``, ``cpu_s`` being the CPU time of all runs summed (plus
    ``"models"`` keyed by (run_id, seed, lr) when ``keep_models``, which needs ``workers == 1``).
    """
    jobs = [j for j in jobs_of(preset, seeds, lrs) if (j[0].run_id, j[1], j[2]) not in set(skip)]
    if threads_per_run is not None:
        check_positive_int("threads_per_run", threads_per_run)
    workers = check_positive_int("workers", workers)
    if keep_models and workers > 1:
        raise ValueError("keep_models needs workers == 1 (models stay in the process that trained them)")
    total = sum(preset.tasks[spec.task].cap * max(preset.budgets) for spec, _, _ in jobs)
    bar = _progress_bar(total, f"relpos lab ({preset.name})") if progress else None
    start = time.perf_counter()
    models = {}
    if workers == 1:
        runs = []
        with threads(threads_per_run):
            for spec, seed, lr in jobs:
                if bar is not None:
                    bar.set_description(f"{spec.run_id} seed {seed} lr {lr:g}")
                    tick = lambda n, loss: (bar.update(n), bar.set_postfix(loss=f"{loss:.3f}", refresh=False))
                else:
                    tick = None
                record, model = train_run(preset, spec, seed, lr, progress=tick)
                if bar is not None:  # a solved run skips the rest of its steps
                    bar.update(preset.tasks[spec.task].cap * max(preset.budgets) - record["steps"])
                runs.append(record)
                if on_record is not None:
                    on_record(record)
                if keep_models:
                    models[(spec.run_id, seed, lr)] = model
    else:
        runs = _run_in_processes(preset, jobs, workers, threads_per_run, bar, on_record)
    if bar is not None:
        bar.close()
    out = {"runs": runs, "wall_s": round(time.perf_counter() - start, 2),
           "cpu_s": round(sum(r["cpu_s"] for r in runs), 2), "threads": threads_per_run, "workers": workers}
    if keep_models:
        out["models"] = models
    return out


def _end_with_parent() -> None:
    """A worker ends when the process that started it does, even on a SIGKILL of that process (which
    runs no clean-up): Linux's PR_SET_PDEATHSIG, and elsewhere a thread that checks the parent's pid."""
    import ctypes
    import multiprocessing
    import os
    import signal
    import sys
    import threading

    parent = multiprocessing.parent_process()
    parent_pid = parent.pid if parent is not None else os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):  # pragma: no cover - a libc without prctl: the thread below
            pass
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)

    def watch():
        import time

        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def _worker_init(threads_per_run):
    _end_with_parent()
    if threads_per_run is not None:
        torch.set_num_threads(threads_per_run)


def _train_job(preset: Preset, spec: RunSpec, seed: int, lr: float) -> dict:
    record, _ = train_run(preset, spec, seed, lr)
    return record


def _run_in_processes(preset, jobs, workers, threads_per_run, bar, on_record=None) -> list[dict]:
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # fork is unsafe once torch has started threads
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                  initializer=_worker_init, initargs=(threads_per_run,))
    try:
        futures = [pool.submit(_train_job, preset, spec, seed, lr) for spec, seed, lr in jobs]
        steps = {f: preset.tasks[spec.task].cap * max(preset.budgets) for f, (spec, _, _) in zip(futures, jobs)}
        names = {f: f"{spec.run_id} seed {seed} lr {lr:g}" for f, (spec, seed, lr) in zip(futures, jobs)}
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            if on_record is not None:
                on_record(record)
            if bar is not None:
                bar.set_description(f"done {names[future]}")
                bar.update(steps[future])
        return [f.result() for f in futures]
    except BaseException:  # Ctrl-C, SIGTERM or a failed run: stop the others now, keep what finished (on_record)
        running = list((getattr(pool, "_processes", None) or {}).values())  # before shutdown forgets them
        pool.shutdown(wait=False, cancel_futures=True)
        for process in running:  # the jobs in progress too: no orphaned workers left computing
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True)


def _progress_bar(total: int, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, unit="step", smoothing=0.05)


class _PlainProgress:
    """A stand-in for tqdm when it is not installed: one line per 10% of the steps."""

    def __init__(self, total, desc):
        self.total, self.n, self.next = total, 0, total / 10
        self.desc = desc
        print(f"{desc}: at most {total} training steps (install tqdm for a progress bar)", flush=True)

    def set_description(self, text):
        self.desc = text

    def set_postfix(self, **kw):
        pass

    def update(self, n):
        self.n += n
        if self.n >= self.next:
            print(f"  {100 * self.n // max(1, self.total)}% ({self.desc})", flush=True)
            self.next += self.total / 10

    def close(self):
        pass
