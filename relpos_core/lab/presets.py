"""Presets: what the lab trains, how long, and on which tasks.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

* ``tiny``: every run of the book preset, a few steps each: a pipeline check for pytest
  and nbval (well under 30 s on 2 CPU cores). Its accuracies mean nothing.
* ``book``: the chapter's preset: every model of every experiment, trained long enough
  that the good schemes are near perfect at the training length (about 4 minutes for one
  seed on 2 CPU cores with the default two worker processes).
* ``full``: the same runs with four times the steps and larger evaluation sets, for a
  longer CPU run or a GPU.

A preset is a list of :class:`RunSpec` (one model on one task) plus the task settings
and the training hyperparameters they share. Runs are identified by ``task/variant``;
an experiment reads the runs it needs by that id, so a run shared by two experiments
(Shaw with k = 8 on the marker task is in the length table and on the clipping slider)
is trained once.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from relpos_core import schemes

__all__ = ["TaskSetup", "RunSpec", "Preset", "PRESETS", "get_preset", "MAIN_SCHEMES", "MULTIPLIERS",
           "schemes_for"]

MULTIPLIERS = (1, 2, 4, 8)
# every declared scheme and variant; DeBERTa's EMD variant belongs to the position experiment
MAIN_SCHEMES = tuple(n for n in schemes.names() if n not in ("deberta_emd",))


def schemes_for(causal: bool) -> tuple[str, ...]:
    """The main schemes a task can train: decoder-only schemes only on causal tasks."""
    return tuple(n for n in MAIN_SCHEMES if causal or not schemes.lookup(n).scheme.causal_only)


@dataclass(frozen=True)
class TaskSetup:
    """One task's generator options, training length and budget."""

    task: str
    options: dict
    train_length: int
    steps: int
    batch_size: int
    eval_rows: int  # rows per evaluation length
    multipliers: tuple = MULTIPLIERS


@dataclass(frozen=True)
class RunSpec:
    """One model (``scheme`` + its ``position`` options) trained on one task; ``variant`` names it."""

    task: str
    variant: str
    scheme: str
    position: dict = field(default_factory=dict)
    keep_tables: bool = False  # store Shaw's layer-0 key table (initial and trained) in the results

    @property
    def run_id(self) -> str:
        return f"{self.task}/{self.variant}"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    model: dict  # d_model, num_layers, num_heads, d_mlp: the family's shared shape
    lr: float
    warmup_steps: int
    log_points: int  # points on each training curve
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


SHAW_KS = (2, 4, 8, 16)  # the clipping slider; 8 is the main grid's k
T5_MAX_DISTANCES = (16, 32, 128)  # the bucket slider; 128 (T5's default) is the main grid's
EMD_SCHEMES = ("learned", "rope", "deberta", "deberta_emd")


_CAUSAL = {"retrieval": True, "copy": True, "marker": False, "position": False}  # as the tasks are defined


def _runs() -> tuple:
    runs = []
    for task in ("retrieval", "copy", "marker"):
        runs += [RunSpec(task, s, s) for s in schemes_for(_CAUSAL[task])]
    runs += [RunSpec("marker", f"shaw-k{k}", "shaw", {"max_relative_position": k}, keep_tables=(k == 16))
             for k in SHAW_KS if k != 8]
    runs += [RunSpec("marker", f"t5-md{md}", "t5", {"max_distance": md}) for md in T5_MAX_DISTANCES if md != 128]
    runs.append(RunSpec("marker", "shaw-k16-sinusoidal", "shaw", {"max_relative_position": 16, "init": "sinusoidal"},
                        keep_tables=True))
    runs += [RunSpec("position", s, s) for s in EMD_SCHEMES]
    return tuple(runs)


def _experiments() -> dict:
    clip = ["marker/shaw" if k == 8 else f"marker/shaw-k{k}" for k in SHAW_KS]
    buckets = ["marker/t5" if md == 128 else f"marker/t5-md{md}" for md in T5_MAX_DISTANCES]
    return {
        "length": [f"{t}/{s}" for t in ("retrieval", "copy", "marker") for s in schemes_for(_CAUSAL[t])],
        "clipping": clip + buckets,
        "shaw_value": [f"{t}/{s}" for t in ("retrieval", "copy", "marker") for s in ("shaw", "shaw_key")],
        "band": ["marker/shaw-k16", "marker/shaw-k16-sinusoidal"],
        "emd": [f"position/{s}" for s in EMD_SCHEMES],
    }


_MODEL = dict(d_model=64, num_layers=2, num_heads=4, d_mlp=128)

_BOOK_TASKS = {
    "retrieval": TaskSetup("retrieval", dict(num_pairs=3, num_keys=8, num_values=8, num_filler=4),
                           train_length=16, steps=300, batch_size=64, eval_rows=128),
    "copy": TaskSetup("copy", dict(num_symbols=64, min_fraction=0.25),
                      train_length=16, steps=300, batch_size=64, eval_rows=64),
    "marker": TaskSetup("marker", dict(max_offset=16, num_filler=1),
                        train_length=32, steps=200, batch_size=32, eval_rows=48),
    "position": TaskSetup("position", dict(num_positions=32, num_filler=16),
                          train_length=32, steps=200, batch_size=32, eval_rows=32, multipliers=(1,)),
}

PRESETS = {
    "book": Preset(
        name="book",
        description="the chapter's preset: every model of every experiment, about 4 minutes per seed on 2 CPU cores",
        model=dict(_MODEL), lr=3e-3, warmup_steps=30, log_points=20, seeds=(0,),
        tasks=_BOOK_TASKS, runs=_runs(), experiments=_experiments(),
    ),
}
PRESETS["tiny"] = replace(
    PRESETS["book"], name="tiny",
    description="pipeline check: the book preset's runs with a few steps and small evaluation sets (seconds)",
    warmup_steps=2, log_points=4,
    tasks={k: replace(t, steps=4, batch_size=8, eval_rows=4) for k, t in _BOOK_TASKS.items()},
)
PRESETS["full"] = replace(
    PRESETS["book"], name="full",
    description="the book preset's runs with 4x the steps and 4x the evaluation rows, three seeds "
                "(a long CPU run or a GPU)",
    seeds=(0, 1, 2),
    tasks={k: replace(t, steps=4 * t.steps, eval_rows=4 * t.eval_rows) for k, t in _BOOK_TASKS.items()},
)


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
