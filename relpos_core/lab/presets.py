"""Presets: what the lab trains, on which tasks, how long, and with how many seeds and learning rates.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb).

* ``tiny``: a few runs of every task, a few steps each: a pipeline check for pytest and
  nbval (seconds). Its accuracies mean nothing.
* ``book``: the chapter's experiments on a smaller pool of schemes, one seed, one learning
  rate and a quarter of the cap: about two minutes on two CPU cores. A reader runs it to
  see the pipeline end to end; most of its models do not solve their tasks in that budget.
* ``full``: the runs the chapters read (committed as ``relpos_core/data/lab-full.json``,
  read through ``relpos_core.resources``): the schemes the chapters' claims are about on
  every task, the long-input schemes on retrieval with a gap, five seeds and two learning
  rates, each run trained to its solve criterion or to four times the cap, evaluated up to
  512 tokens. Hours on two CPU cores: the committed file's provenance has its wall and CPU
  time.
* ``hybrid``: designs of 2025-26 models (``hybrid_designs``: layer patterns, p-RoPE, partial
  rotation, log-length scaling) with RoPE and no position as controls, on retrieval with a
  gap, three seeds and both learning rates (``relpos_core/data/lab-hybrid.json``);
  ``hybrid_tiny`` is its pipeline check.

A preset is a list of :class:`RunSpec` (one model on one task) plus the task settings
(:class:`TaskSetup`: generator options, training length, cap, evaluation ``probes``) and
the training settings they share. Runs are identified by ``task/variant``; an experiment
reads the runs it needs by that id, so a run shared by two experiments is trained once.
The schemes come from the declarations (``relpos_core.schemes.names()``): a new scheme
file is in the lab's grids without any change here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from relpos_core import schemes

__all__ = ["Probe", "TaskSetup", "RunSpec", "Preset", "PRESETS", "get_preset", "MAIN_SCHEMES", "schemes_for",
           "ladder", "LONGEST", "subset", "hybrid_designs", "HYBRID_TASK"]

LONGEST = 512  # every length test reaches at least this many tokens
# every declared scheme and variant that trains on the language tasks (a variant made for one
# experiment declares language_tasks=False: DeBERTa's EMD belongs to the position experiment)
MAIN_SCHEMES = tuple(n for n in schemes.names()
                     if schemes.lookup(n).variant is None or schemes.lookup(n).variant.language_tasks)


def schemes_for(causal: bool, pool=MAIN_SCHEMES) -> tuple[str, ...]:
    """The schemes of ``pool`` a task can train: decoder-only schemes only on causal tasks, and
    no "none" on a bidirectional one (without positions a bidirectional model gives every
    filler token the same answer: its score is the task's floor, computed, not trained)."""
    out = []
    for n in pool:
        scheme = schemes.lookup(n).scheme
        if scheme.causal_only and not causal:
            continue
        if not scheme.has_positions and not causal:
            continue
        out.append(n)
    return tuple(out)


def ladder(train_length: int, longest: int = LONGEST) -> tuple[int, ...]:
    """Evaluation lengths: the training length, doubled until ``longest`` is reached."""
    out = [train_length]
    while out[-1] < longest:
        out.append(out[-1] * 2)
    return tuple(out)


@dataclass(frozen=True)
class Probe:
    """One evaluation condition: rows of ``length`` tokens, task options changed by ``options``."""

    name: str
    length: int
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSetup:
    """One task: generator and options, training length, batch, cap (steps of the first budget), probes."""

    task: str
    options: dict
    train_length: int
    cap: int
    batch_size: int
    eval_rows: int  # rows per probe
    probes: tuple  # Probe; the first is the training condition

    @property
    def max_length(self) -> int:
        return max(p.length for p in self.probes)

    def lengths(self) -> tuple[int, ...]:
        """Lengths of the probes that change only the length (the length ladder)."""
        return tuple(p.length for p in self.probes if not p.options)


@dataclass(frozen=True)
class RunSpec:
    """One model (``scheme`` + its ``position`` options, ``model`` shape overrides) trained on one
    task; ``variant`` names it."""

    task: str
    variant: str
    scheme: str
    position: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)  # e.g. {"num_layers": 1}
    keep_tables: bool = False  # store Shaw's layer-0 key table (initial and trained) in the results

    @property
    def run_id(self) -> str:
        return f"{self.task}/{self.variant}"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    model: dict  # d_model, num_layers, num_heads, d_mlp: the family's shared shape
    lrs: tuple  # learning rates; every run is trained with each
    budgets: tuple  # multiples of each task's cap; the largest ends training
    solve_threshold: float  # training accuracy that counts as solved ...
    solve_window: int  # ... pooled over this many last steps
    warmup_steps: int
    log_points: int  # curve points per cap
    seeds: tuple
    tasks: dict  # task name -> TaskSetup
    runs: tuple  # RunSpec, in training order
    experiments: dict = field(default_factory=dict)  # experiment -> run ids it reads

    def to_dict(self) -> dict:
        d = asdict(self)
        d["runs"] = [dict(asdict(r), run_id=r.run_id) for r in self.runs]
        return d

    def run(self, run_id: str) -> RunSpec:
        for r in self.runs:
            if r.run_id == run_id:
                return r
        raise ValueError(f"run_id must be one of {[r.run_id for r in self.runs]}, got {run_id!r}")


_MODEL = dict(d_model=64, num_layers=2, num_heads=4, d_mlp=128)


def _setup(task, options, train_length, cap, batch_size, eval_rows, extra=()) -> TaskSetup:
    probes = tuple(Probe(f"L{L}", L) for L in ladder(train_length)) + tuple(extra)
    return TaskSetup(task, options, train_length, cap, batch_size, eval_rows, probes)


def _tasks(scale: float = 1.0) -> dict:
    cap = max(1, int(200 * scale))
    retrieval = dict(num_pairs=3, num_keys=8, num_values=8, num_filler=4, min_pairs=1)
    return {
        # causal; the value right after its key: order is enough
        "retrieval": _setup("retrieval", retrieval, 16, cap, 32, 32),
        # causal; the value two tokens after its key, a decoy value between: needs an offset
        "retrieval_gap": _setup("retrieval", dict(retrieval, gap=2), 16, cap, 32, 32),
        # causal; the block at a random place; "longer n" at the training row length, then in a longer row
        "copy": _setup("copy", dict(num_symbols=64, min_copy=2, max_copy=8), 32, cap, 32, 32,
                       extra=(Probe("n9-15", 32, dict(min_copy=9, max_copy=15)),
                              Probe("n16-31", 64, dict(min_copy=16, max_copy=31)))),
        # the marker task, causal (distance to the marker behind) and bidirectional (sign and distance)
        "marker_causal": _setup("marker", dict(max_offset=16, num_filler=1, causal=True), 32, cap, 32, 32),
        "marker": _setup("marker", dict(max_offset=16, num_filler=1, causal=False), 32, cap, 32, 32),
        # bidirectional; every token names its absolute position (no longer probes: the classes are positions)
        "position": TaskSetup("position", dict(num_positions=64, num_filler=16), 64, cap, 16, 32,
                              (Probe("L64", 64),)),
    }


_CAUSAL = {"marker": False, "marker_causal": True, "retrieval": True, "copy": True, "retrieval_gap": True}
# The full preset trains each declared scheme on the tasks its declaration names (``Lab.tasks``: the
# schemes the chapters' claims are about on every task, the schemes designed for longer inputs on the
# task that ranks length generalisation, retrieval_gap, which is also where a new scheme goes by
# default). Any declared scheme trains in the lab (tests/test_lab.py runs them all); the declarations
# only keep the full preset near an hour on two cores. Within a seed the runs go in this order, so a
# run stopped early has whole experiments.
CORE = {task: tuple(n for n in MAIN_SCHEMES if task in schemes.lookup(n).lab.tasks) for task in _CAUSAL}


def _declared_runs(name: str) -> tuple:
    """(LabRun, RunSpec) for each run the declaration of ``name`` adds (``Lab.runs``)."""
    out = []
    for spec in schemes.lookup(name).lab.runs:
        variant = f"{name}-{spec.suffix}" if spec.suffix else name
        out.append((spec, RunSpec(spec.task, variant, name, dict(spec.position), dict(spec.model),
                                  keep_tables=spec.keep_tables)))
    return tuple(out)


def _in_pool(name: str, task: str, pool) -> bool:
    """Whether ``name`` brings its declared runs on ``task`` to a preset of ``pool``: its scheme is in
    the pool (a variant made for one experiment follows its scheme) and it can train the task."""
    entry = schemes.lookup(name)
    if name not in pool and (entry.variant is None or entry.scheme.name not in pool):
        return False
    return name in schemes_for(_CAUSAL.get(task, False), (name,))


def _runs(pool=MAIN_SCHEMES) -> tuple:
    runs = []
    for task in ("marker", "marker_causal"):
        runs += [RunSpec(task, s, s) for s in schemes_for(_CAUSAL[task], pool) if s in CORE[task]]
    # the runs the declarations' experiments add (clipping: one layer against two; the EMD's
    # position task), each once
    for name in schemes.names():
        for spec, run in _declared_runs(name):
            if spec.full and _in_pool(name, spec.task, pool) and run not in runs:
                runs.append(run)
    for task in ("retrieval", "copy", "retrieval_gap"):
        runs += [RunSpec(task, s, s) for s in schemes_for(_CAUSAL[task], pool) if s in CORE[task]]
    return tuple(runs)


def _own_runs() -> tuple:
    """The declared runs of their own (``LabRun(full=False)``: not in the full preset), e.g. the
    learned relative tables from a random and from a smooth (sinusoidal) start."""
    return tuple(run for name in schemes.names() for spec, run in _declared_runs(name) if not spec.full)


def _tiny_ids() -> set:
    """The pipeline check's runs: each scheme's declared ``Lab.tiny`` tasks and ``LabRun(tiny=True)``."""
    ids = {f"{task}/{name}" for name in schemes.names() for task in schemes.lookup(name).lab.tiny}
    return ids | {run.run_id for name in schemes.names() for spec, run in _declared_runs(name) if spec.tiny}


def _experiments(runs) -> dict:
    ids = [r.run_id for r in runs]
    main = [i for i in ids if i.split("/")[1] in schemes.names()]
    members = {}  # experiment -> run ids its declarations name
    for name in schemes.names():
        for spec, run in _declared_runs(name):
            members.setdefault(spec.experiment, set()).add(run.run_id)
        for experiment in schemes.lookup(name).lab.experiments:
            members.setdefault(experiment, set()).update(i for i in main if i.split("/")[1] == name)
    out = {"length": [i for i in main if i.split("/")[0] in _CAUSAL]}
    out.update({e: [i for i in ids if i in m] for e, m in members.items()})
    return out


_FULL_RUNS = _runs()
# the book preset: a smaller pool on the tasks that rank schemes, plus the experiments' extra runs
_BOOK_POOL = tuple(n for n in MAIN_SCHEMES if schemes.lookup(n).lab.book)  # declared: Lab(book=True)
_BOOK_RUNS = tuple(r for r in _runs(_BOOK_POOL)
                   if r.task in ("retrieval_gap", "copy", "marker_causal", "marker", "position"))

PRESETS = {
    "full": Preset(
        name="full",
        description="the schemes of the chapters' claims on every task, 5 seeds x 2 learning rates, trained to "
                    "99% training accuracy or 4x the cap, evaluated to 512 tokens (about an hour on 2 CPU cores)",
        model=dict(_MODEL), lrs=(1e-3, 3e-3), budgets=(1, 4), solve_threshold=0.99, solve_window=50,
        warmup_steps=30, log_points=10, seeds=(0, 1, 2, 3, 4), tasks=_tasks(), runs=_FULL_RUNS,
        experiments=_experiments(_FULL_RUNS),
    ),
}
PRESETS["book"] = replace(
    PRESETS["full"], name="book",
    description="the chapter's experiments on a smaller pool of schemes, one seed and one learning rate, a "
                "quarter of the cap (about 2 minutes on 2 CPU cores)",
    lrs=(3e-3,), seeds=(0,), tasks=_tasks(0.25), runs=_BOOK_RUNS, experiments=_experiments(_BOOK_RUNS),
)
_TINY_TASKS = {k: replace(t, cap=3, batch_size=4, eval_rows=2,
                           probes=t.probes[:2] + tuple(p for p in t.probes if p.options))
               for k, t in _tasks().items()}
_TINY_RUNS = tuple(r for r in _FULL_RUNS + _own_runs() if r.run_id in _tiny_ids())
PRESETS["tiny"] = replace(
    PRESETS["full"], name="tiny",
    description="pipeline check: one or two runs of every task, 3 steps per budget, tiny evaluation sets (seconds)",
    lrs=(3e-3, 1e-3), seeds=(0,), solve_window=2, warmup_steps=2, log_points=3, tasks=_TINY_TASKS,
    runs=_TINY_RUNS, experiments=_experiments(_TINY_RUNS),
)


# -- the hybrid preset: designs of 2025-26 models on the task that ranks length generalisation ------------
# Built from the declared schemes (the rotary scheme the context-extension stage starts from, and the
# baseline without positions) and from the task and model sizes, so nothing here names a scheme.
HYBRID_TASK = "retrieval_gap"


def hybrid_designs(train_length: int, head_dim: int) -> tuple[tuple[str, str], ...]:
    """(variant, pattern string) of each design the hybrid preset trains, layer 1 first.

    The window is a quarter of the training length (as the language-model lab's hybrid preset):
    on retrieval with a gap (the value 2 tokens after its key) it covers a key-value pair
    (W >= gap + 1) but not the distance from a query back to its value (up to the training
    length, and 32x that at the longest probe), so a model of window layers only cannot reach
    most values, and in a window-then-global pattern only the global layer can.
    """
    rotary = next(n for n in schemes.names() if schemes.lookup(n).lab.extended)
    nope = schemes.baseline()
    window = max(1, train_length // 4)
    log_length = f"length_scaling.type=log_length,length_scaling.train_length={train_length}"
    return (
        ("rnope_swa", f"{rotary}@window={window}, {nope}"),  # RNoPE-SWA (Yang et al. 2025; Command A)
        ("rope_nope", f"{rotary}, {nope}"),  # a rotary layer and one without positions (SmolLM3, Llama 4)
        ("swa_rope", f"{rotary}@window={window} x2"),  # windowed rotary only: the window's own effect
        ("prope_25", f"{rotary}@keep_fraction=0.25 x2"),  # p-RoPE (Barbero et al. 2025)
        ("prope_50", f"{rotary}@keep_fraction=0.5 x2"),
        ("rotary_half", f"{rotary}@rotary_dim={head_dim // 2} x2"),  # partial rotation (GPT-NeoX, GPT-J)
        ("rope_log", f"{rotary}@{log_length} x2"),  # log-length scaling (Chiang and Cholak 2022)
        ("none_log", f"{nope}@{log_length} x2"),
    )


def _hybrid_runs(setup: TaskSetup, model: dict) -> tuple:
    """The designs (``hybrid_designs``), then their controls: the rotary scheme and the baseline,
    as the full preset trains them (same run ids, so their records can be set beside the full run's)."""
    rotary = next(n for n in schemes.names() if schemes.lookup(n).lab.extended)
    designs = hybrid_designs(setup.train_length, model["d_model"] // model["num_heads"])
    return (tuple(RunSpec(HYBRID_TASK, v, pattern) for v, pattern in designs)
            + tuple(RunSpec(HYBRID_TASK, n, n) for n in (rotary, schemes.baseline())))


_HYBRID_TASKS = {HYBRID_TASK: _tasks()[HYBRID_TASK]}
_HYBRID_RUNS = _hybrid_runs(_HYBRID_TASKS[HYBRID_TASK], _MODEL)
PRESETS["hybrid"] = replace(
    PRESETS["full"], name="hybrid",
    description="layer patterns and RoPE options of 2025-26 models (RNoPE-SWA, a RoPE layer and a NoPE layer, "
                "windowed RoPE only, p-RoPE at 1/4 and 1/2, half-head rotation, log-length scaling on RoPE and "
                "on NoPE) with RoPE and NoPE as controls, on retrieval with a gap, 3 seeds x 2 learning rates, "
                "the full preset's budgets and evaluation to 512 tokens",
    seeds=(0, 1, 2), tasks=_HYBRID_TASKS, runs=_HYBRID_RUNS,
    experiments={"hybrid": [r.run_id for r in _HYBRID_RUNS]},
)
PRESETS["hybrid_tiny"] = replace(
    PRESETS["hybrid"], name="hybrid_tiny",
    description="pipeline check of the hybrid preset: its runs, 3 steps per budget, tiny evaluation sets (seconds)",
    seeds=(0,), lrs=(3e-3,), solve_window=2, warmup_steps=2, log_points=3,
    tasks={HYBRID_TASK: _TINY_TASKS[HYBRID_TASK]},
)


def subset(preset: Preset, run_ids) -> Preset:
    """``preset`` with only the runs ``run_ids`` (in the preset's order; the experiments keep
    only those): a re-check of some claims on new seeds trains just the runs they read."""
    ids = list(run_ids)
    known = [r.run_id for r in preset.runs]
    if not ids or any(i not in known for i in ids):
        raise ValueError(f"run_ids must be run ids of preset {preset.name!r} ({', '.join(known)}), got {ids}")
    runs = tuple(r for r in preset.runs if r.run_id in ids)
    experiments = {k: [i for i in v if i in ids] for k, v in preset.experiments.items()}
    return replace(preset, runs=runs, experiments=experiments)


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
