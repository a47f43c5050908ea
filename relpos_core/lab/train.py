"""Train one lab model on one task, evaluate it at 1x, 2x, 4x and 8x its training length.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

Everything random is seeded: the model's initial parameters by (seed, run id), the
training batches by (seed, task), the evaluation rows by (seed, task, length). So every
model of a task sees the same batches and is scored on the same rows, and the same seed
gives the same numbers again (same torch version, same thread count; see
``run_preset``). Seeds are derived with crc32, not Python's salted ``hash``.

Optimiser: Adam (no weight decay, so rows of a learned table that never get a gradient
keep their initial values), linear warm-up then cosine decay to zero, gradient norm
clipped at 1. The loss is cross-entropy over the labelled positions only.
"""
from __future__ import annotations

import contextlib
import math
import time
import zlib

import torch
import torch.nn.functional as F

from relpos_core._validate import check_int, check_positive_int

from relpos_core.models import Transformer, TransformerConfig

from .models import build_model, lab_config, untrained_position_rows
from .presets import Preset, RunSpec, TaskSetup
from .tasks import IGNORE, Task, make_task

__all__ = ["derive_seed", "train_run", "evaluate", "run_preset", "threads"]


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


def _model_config(preset: Preset, setup: TaskSetup, task: Task, spec: RunSpec) -> TransformerConfig:
    return lab_config(spec.scheme, vocab_size=task.vocab_size, num_classes=task.num_classes,
                      max_positions=setup.train_length * max(setup.multipliers), causal=task.causal,
                      position=spec.position, **preset.model)


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _loss_and_correct(model: Transformer, tokens, targets):
    logits = model(tokens)  # (B, L, C)
    labelled = targets != IGNORE  # (B, L)
    picked = logits[labelled]  # (N, C)
    loss = F.cross_entropy(picked, targets[labelled])
    correct = picked.argmax(-1) == targets[labelled]  # (N,)
    return loss, correct, labelled


@torch.inference_mode()
def evaluate(model: Transformer, task: Task, length: int, rows: int, *, seed: int, chunk_tokens: int = 16384) -> dict:
    """Accuracy over ``rows`` fresh rows of ``length``, and per ``detail`` value.

    Returns ``{"accuracy": float, "labels": int, "by_detail": {detail: [correct, total]}}``.
    """
    rows = check_positive_int("rows", rows)
    length = task.check_length(length)
    seed = check_int("seed", seed, min_value=0, max_value=2**63 - 1)
    g = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    per_chunk = max(1, chunk_tokens // length)
    correct_total, labels = 0, 0
    by_detail: dict[int, list[int]] = {}
    done = 0
    while done < rows:
        b = task.sample(min(per_chunk, rows - done), length, g)
        done += b.tokens.shape[0]
        pred = model(b.tokens).argmax(-1)  # (B, L)
        labelled = b.targets != IGNORE  # (B, L)
        hit = (pred == b.targets)[labelled]  # (N,)
        correct_total += int(hit.sum())
        labels += int(labelled.sum())
        det = b.detail[labelled]  # (N,)
        for value, h in zip(det.tolist(), hit.tolist()):
            entry = by_detail.setdefault(value, [0, 0])
            entry[0] += int(h)
            entry[1] += 1
    model.train(was_training)
    return {"accuracy": correct_total / max(1, labels), "labels": labels,
            "by_detail": {k: by_detail[k] for k in sorted(by_detail)}}


def train_run(preset: Preset, spec: RunSpec, seed: int, *, progress=None) -> tuple[dict, Transformer]:
    """Train ``spec`` under ``preset`` with ``seed``; return (its result record, the trained model).

    ``progress(n_steps, loss)``, if given, is called after every step.
    """
    seed = check_int("seed", seed, min_value=0, max_value=2**31 - 1)
    if spec.task not in preset.tasks:
        raise ValueError(f"spec.task must be one of the preset's tasks {sorted(preset.tasks)}, got {spec.task!r}")
    setup = preset.tasks[spec.task]
    task = make_task(setup.task, **setup.options)
    config = _model_config(preset, setup, task, spec)
    model = build_model(config, seed=derive_seed(seed, "init", spec.run_id))
    initial_tables = _tables(model) if spec.keep_tables else None
    optimizer = torch.optim.Adam(model.parameters(), lr=preset.lr, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(derive_seed(seed, "train", spec.task))
    steps, every = setup.steps, max(1, setup.steps // preset.log_points)
    curve, window_loss, window_correct, window_labels = [], 0.0, 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = preset.lr * _lr_factor(step, preset.warmup_steps, steps)
        batch = task.sample(setup.batch_size, setup.train_length, g)
        loss, correct, _ = _loss_and_correct(model, batch.tokens, batch.targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        window_loss += loss.item()
        window_correct += int(correct.sum())
        window_labels += correct.numel()
        if (step + 1) % every == 0 or step + 1 == steps:
            n = (step % every) + 1
            curve.append([step + 1, round(window_loss / n, 5), round(window_correct / max(1, window_labels), 5)])
            window_loss, window_correct, window_labels = 0.0, 0, 0
        if progress is not None:
            progress(1, loss.item())
    train_s = time.perf_counter() - start
    evals = {}
    for m in setup.multipliers:
        L = setup.train_length * m
        evals[str(m)] = evaluate(model, task, L, setup.eval_rows, seed=derive_seed(seed, "eval", spec.task, L))
        if m != 1:  # per-detail counts are kept at the training length only (small files)
            evals[str(m)].pop("by_detail")
    record = {
        "run_id": spec.run_id, "task": spec.task, "variant": spec.variant, "scheme": spec.scheme, "seed": seed,
        "model": dict(vars(config)), "parameters": sum(p.numel() for p in model.parameters()),
        "train_length": setup.train_length, "steps": steps, "batch_size": setup.batch_size,
        "curve": curve, "eval": evals,
        "train_s": round(train_s, 3), "eval_s": round(time.perf_counter() - start - train_s, 3),
        "cpu_s": round(time.process_time() - cpu_start, 3),
    }
    rows = untrained_position_rows(model, setup.train_length)
    if rows:
        record["untrained_position_rows"] = [rows.start, rows.stop]
    if initial_tables is not None:
        record["tables"] = {"initial": initial_tables, "trained": _tables(model)}
    return record, model


def _tables(model: Transformer) -> dict:
    """Layer 0's Shaw key table (2k + 1, d), rounded, rows for offsets -k .. k."""
    table = model.position.rel_key[0].detach()  # (2k + 1, d)
    k = model.config.options.max_relative_position
    return {"rel_key": [[round(v, 6) for v in row] for row in table.tolist()], "k": k}


def run_preset(preset: Preset, seeds=None, *, progress: bool = True, threads_per_run: int | None = 1,
               workers: int = 1, keep_models: bool = False, on_record=None) -> dict:
    """Train every run of ``preset`` for every seed.

    ``workers > 1`` trains that many runs at a time in separate processes (spawned, each
    with ``threads_per_run`` torch threads). Every run is seeded on its own, so the
    records are the same whichever process trains them, and they come back in the
    preset's order. ``on_record(record)`` is called as each run finishes (in finishing
    order), so a caller can keep it before the whole preset is done. Returns
    ``{"runs": [...], "wall_s", "cpu_s", "threads", "workers"}``, ``cpu_s`` being the CPU
    time of all runs summed (plus ``"models"`` keyed by (run_id, seed) when
    ``keep_models``, which needs ``workers == 1``).
    """
    seeds = tuple(preset.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("seeds must hold at least one seed, got none")
    for seed in seeds:
        check_int("seed", seed, min_value=0, max_value=2**31 - 1)
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    if threads_per_run is not None:
        check_positive_int("threads_per_run", threads_per_run)
    workers = check_positive_int("workers", workers)
    if keep_models and workers > 1:
        raise ValueError("keep_models needs workers == 1 (models stay in the process that trained them)")
    jobs = [(spec, seed) for seed in seeds for spec in preset.runs]
    total = sum(preset.tasks[spec.task].steps for spec, _ in jobs)
    bar = _progress_bar(total, f"relpos lab ({preset.name})") if progress else None
    start = time.perf_counter()
    models = {}
    if workers == 1:
        runs = []
        with threads(threads_per_run):
            for spec, seed in jobs:
                if bar is not None:
                    bar.set_description(f"{spec.run_id} seed {seed}")
                    tick = lambda n, loss: (bar.update(n), bar.set_postfix(loss=f"{loss:.3f}", refresh=False))
                else:
                    tick = None
                record, model = train_run(preset, spec, seed, progress=tick)
                runs.append(record)
                if on_record is not None:
                    on_record(record)
                if keep_models:
                    models[(spec.run_id, seed)] = model
    else:
        runs = _run_in_processes(preset, jobs, workers, threads_per_run, bar, on_record)
    if bar is not None:
        bar.close()
    out = {"runs": runs, "wall_s": round(time.perf_counter() - start, 2),
           "cpu_s": round(sum(r["cpu_s"] for r in runs), 2), "threads": threads_per_run, "workers": workers}
    if keep_models:
        out["models"] = models
    return out


def _worker_init(threads_per_run):
    if threads_per_run is not None:
        torch.set_num_threads(threads_per_run)


def _train_job(preset: Preset, spec: RunSpec, seed: int) -> dict:
    record, _ = train_run(preset, spec, seed)
    return record


def _run_in_processes(preset, jobs, workers, threads_per_run, bar, on_record=None) -> list[dict]:
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # fork is unsafe once torch has started threads
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                  initializer=_worker_init, initargs=(threads_per_run,))
    try:
        futures = [pool.submit(_train_job, preset, spec, seed) for spec, seed in jobs]
        steps = {f: preset.tasks[spec.task].steps for f, (spec, _) in zip(futures, jobs)}
        names = {f: f"{spec.run_id} seed {seed}" for f, (spec, seed) in zip(futures, jobs)}
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            if on_record is not None:
                on_record(record)
            if bar is not None:
                bar.set_description(f"done {names[future]}")
                bar.update(steps[future])
        return [f.result() for f in futures]
    except BaseException:  # Ctrl-C or a failed run: stop the others now, keep what finished (on_record)
        pool.shutdown(wait=False, cancel_futures=True)
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
        print(f"{desc}: {total} training steps (install tqdm for a progress bar)", flush=True)

    def set_description(self, text):
        self.desc = text

    def set_postfix(self, **kw):
        pass

    def update(self, n):
        self.n += n
        if self.n >= self.next:
            print(f"  {100 * self.n // self.total}% ({self.desc})", flush=True)
            self.next += self.total / 10

    def close(self):
        pass
