"""What a scheme file declares, once: ``SCHEME = Scheme(...)``.

Book: the list of schemes in every chapter table, the benchmark, the decoder and the lab
are all read from these declarations (CONTRIBUTING.md, "Adding a scheme"); the
sign-convention table of "Why relative positions" is built from them
(chapters/01_why_relative_positions.ipynb).

A scheme file in ``relpos_core/schemes`` (one per scheme; ``relpos_core.schemes`` finds
it by itself) holds the scheme's maths (its ``position_term`` built from the pieces of
``relpos_core.terms``), a ``PositionModule`` that owns its learned tables inside a model
and returns each layer's term (the x-transformers pattern), and a ``Scheme`` record with
everything the rest of the library needs to know about it:

* who: ``name`` (the registry's name), ``display`` (figures and tables) and ``short`` (crowded
  figures), ``paper`` and
  ``cite`` (the key in references.bib), ``chapter`` (the notebook that teaches it);
* its offsets: ``convention`` ("key_minus_query", "query_minus_key" or "none") and
  ``formula`` (the sign-convention table of "Why relative positions" is built from these);
* how it enters attention: ``injects`` (input, scalar on the logit, vector on the
  logit, output, rotation of q and k, nothing: a phrase for tables, never a switch) and
  ``causal_only``; what the code switches on is declared as flags: ``has_positions``
  (False: the model sees no position at all) and ``positions_in_tokens`` (positions are
  added to the token embeddings, so every cached key and value carries its own);
* its distance parameter (``Distance``): which option it is and what the benchmark's
  presets give it, so no preset needs a per-scheme value;
* ``example(num_heads, head_dim, options, *, device, dtype, generator)``: a term with
  random tables for an instance of ``options`` (the registry, the benchmark, the memory
  ledger on the meta device);
* ``options``: the dataclass of the module's settings (defaults included) and ``module``:
  the ``PositionModule`` subclass; ``variants``: named settings that behave like a
  scheme of their own (Shaw with the key table only is ``shaw_key``);
* ``caches``: what a KV cache keeps per token for it (the table of "The KV cache"), and
  ``not_decoded``: why a decoder cannot use it (None when it can);
* ``lab`` (``Lab``): the lab's tasks it trains on and whether the book preset has it; a
  variant's ``language_tasks=False`` keeps it to its own experiment;
* ``benchmark_module`` (optional): the dotted path of a function (in
  ``relpos_core.oracles``, above this layer) that builds the Hugging Face module of the
  scheme and the same module with its attention on ``rp.attend`` (``BenchmarkModule``),
  which the benchmark times side by side (``load_benchmark_module()``).
"""
from __future__ import annotations

import dataclasses
import importlib
import numbers
import re
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int

__all__ = ["Scheme", "Variant", "Distance", "Lab", "LabRun", "Bench", "ModelShape", "PositionModule",
           "BenchmarkModule", "INJECTS", "ROLES",
           "PRESET_SIZES", "make_options"]

#: what a scheme's colour stands for in the concept figures (``relpos_core.figures.concepts``)
ROLES = ("rotation", "segment memory", "relative table", "absolute positions")
INJECTS = ("nothing", "input", "scalar on the logit", "vector on the logit", "output", "rotation of q and k")
CONVENTIONS = ("key_minus_query", "query_minus_key", "none")
PRESET_SIZES = ("small", "medium", "large")  # the benchmark's quick, cpu and gpu presets


@dataclass(frozen=True)
class Distance:
    """A scheme's distance parameter: the option it is, what it means, and what presets give it.

    ``small``, ``medium``, ``large``: the value for the benchmark's quick, cpu and gpu
    presets. ``follows_length``: the parameter is the sequence length itself (one row per
    distance: Transformer-XL, the Music Transformer), whatever the preset. ``label``: how a
    figure names a setting, formatted with the options' fields (default "<name> = <value>").
    """

    name: str
    meaning: str
    small: int = 4
    medium: int = 16
    large: int = 64
    follows_length: bool = False
    minimum: int = 1
    label: str = ""

    def describe(self, options) -> str:
        """The figure label of ``options`` (an instance of the scheme's options dataclass)."""
        values = dataclasses.asdict(options)
        return self.label.format(**values) if self.label else f"{self.name} = {values[self.name]}"

    def for_preset(self, size: str, length: int) -> int:
        """The value a preset of ``size`` uses at sequence length ``length``."""
        check_choice("size", size, PRESET_SIZES)
        if self.follows_length:
            return max(self.minimum, check_int("length", length, min_value=1))
        return max(self.minimum, getattr(self, size))


@dataclass(frozen=True)
class LabRun:
    """A run a scheme brings to one of the lab's experiments (``Lab.runs``).

    ``experiment``: the experiment that reads it (e.g. "clipping": one layer against two on
    the marker task); ``task``: the lab task; ``suffix``: the run's variant is
    ``<name>-<suffix>`` (empty: the scheme's own run on that task, trained once even when
    the grids have it too); ``position`` and ``model``: option and model-shape overrides;
    ``keep_tables``: the results keep the learned table (``recorded_tables``); ``full``:
    in the full and book presets (False: a run of its own, trained on request); ``tiny``:
    in the pipeline-check preset.
    """

    experiment: str
    task: str
    suffix: str = ""
    position: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)
    keep_tables: bool = False
    full: bool = True
    tiny: bool = False


@dataclass(frozen=True)
class Lab:
    """Where the lab (chapters/14_experiments_length.ipynb, ``relpos_core.lab.presets``) trains a scheme.

    ``tasks``: the full preset's language tasks it trains on ("marker", "marker_causal",
    "retrieval", "copy", "retrieval_gap"; a task it cannot train, such as a bidirectional one
    for a decoder-only scheme, is skipped). The default puts a new scheme on the task that
    ranks length generalisation; ``tasks=()`` keeps it out of the full preset (it still
    trains in the tests). ``book``: also in the book preset's smaller pool. ``tiny``: the
    tasks where the pipeline-check preset trains it. ``runs`` and ``experiments``: the
    experiments it defines or joins (``LabRun``). ``language_model``: the smaller presets
    of the language-model lab (``relpos_core.lm.presets``: "book", "tiny") it trains in
    (the full one trains every scheme that adds no vectors); ``extended``: the models the
    extension stage (context-extension methods) starts from.
    """

    tasks: tuple[str, ...] = ("retrieval_gap",)
    book: bool = False
    tiny: tuple[str, ...] = ()  # tasks on which the pipeline-check preset keeps its run
    runs: tuple[LabRun, ...] = ()  # the runs its experiments add (LabRun)
    experiments: tuple[str, ...] = ()  # experiments that read all its runs on the language tasks
    language_model: tuple[str, ...] = ()  # the language-model lab's small presets that train it
    extended: bool = False  # the language-model lab's context-extension stage starts from it


@dataclass(frozen=True)
class Bench:
    """What the kernel benchmark (``relpos_core.bench.presets``) times of a scheme beyond its paths.

    ``train``: the preset sizes ("small", "medium", "large") that time its training step;
    ``block_skip``: the sizes that time FlexAttention's block skipping on its default form.
    """

    train: tuple[str, ...] = ()
    block_skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelShape:
    """What a position module needs to know of the model it sits in."""

    num_layers: int
    num_heads: int
    head_dim: int
    d_model: int
    causal: bool
    max_positions: int  # the longest sequence (or cache) the model is built for


class PositionModule(nn.Module):
    """A scheme's learned tables for one whole model, and each layer's position term.

    Subclasses take ``(shape: ModelShape, options)`` and override what they need:

    * ``embed(h, positions)``: position added to the token embeddings (absolute schemes);
    * ``term(layer, attention)``: the layer's ``PositionTerm`` (None: no term), built
      from the current weights; ``attention`` is the layer's attention module (its
      ``wq``, ``wk`` projections: DeBERTa projects its shared table with them);
    * ``run_blocks(blocks, h, run)``: how the model's blocks are applied (DeBERTa's
      Enhanced Mask Decoder re-runs the last one); ``run(block, h, query=None)``;
    * ``init_parameters(generator)``: draw every parameter (default N(0, 0.02));
    * ``training_positions(n, generator=None)``: the positions a training sequence of n
      tokens is placed at (None, the default: 0 .. n - 1). Randomised positions (Ruoss et
      al. 2023) return n sorted positions drawn from a longer range; the model asks for
      them when it trains without a cache and without explicit positions;
    * ``untrained_rows(train_length)`` and ``recorded_tables()``: what the lab reports of a
      learned table (rows training never reaches; the table itself, rounded).
    """

    def __init__(self, shape: ModelShape, options):
        super().__init__()
        self.shape = shape
        self.options = options

    def embed(self, h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return h  # (B, n, D)

    def term(self, layer: int, attention: nn.Module):
        return None

    def run_blocks(self, blocks, h: torch.Tensor, run) -> torch.Tensor:
        for block in blocks:
            h = run(block, h)
        return h

    @torch.no_grad()
    def init_parameters(self, generator: torch.Generator) -> None:
        for p in self.parameters():
            p.copy_(torch.randn(p.shape, generator=generator) * 0.02)

    def training_positions(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor | None:
        """(n,) int64 positions for a training sequence of ``n`` tokens, or None: 0 .. n - 1."""
        return None

    def untrained_rows(self, train_length: int) -> range:
        """Rows of a learned absolute table that training at ``train_length`` never reaches (default: none)."""
        return range(0)

    def recorded_tables(self) -> dict | None:
        """What the lab keeps of the learned tables when a run asks for them (``keep_tables``); None: nothing."""
        return None


@dataclass(frozen=True)
class BenchmarkModule:
    """A Hugging Face module (built from a config, random weights) and what the same module needs to run
    its attention on ``rp.attend`` (the benchmark calls ``rp.attend`` itself).

    ``hf(hidden)``: the module's output (B, L, H d) for hidden states (B, L, H d);
    ``prepare(hidden)``: (q, k, v, term) from the module's own projections and tables;
    ``finish(ctx, hidden)``: the module's output from the attention's (B, H, L, d) result.
    """

    label: str
    hf: Callable
    prepare: Callable
    finish: Callable


@dataclass(frozen=True)
class Variant:
    """Named settings of a scheme that the registry, the benchmark and the lab treat as a scheme.

    ``model_only``: the variant changes the model around attention (a learned absolute
    table instead of a sinusoid, DeBERTa's Enhanced Mask Decoder), not the attention call
    itself: it is a model of its own (decoder, lab) but not a kernel path of its own.
    ``language_tasks``: the lab trains it on its language tasks (retrieval, copying, the
    marker task); False for a variant made for one experiment only (DeBERTa's Enhanced Mask
    Decoder, an output decoder for masked language modelling: the position task).
    """

    name: str
    display: str
    options: dict
    summary: str = ""
    model_only: bool = False
    short: str = ""  # a compact label for crowded figures (default: ``display``)
    color: str = ""  # the book's colour for it, ``#rrggbb`` (default: the family's)
    language_tasks: bool = True
    lab: Lab | None = None  # where the lab trains it (None: as its scheme)


@dataclass(frozen=True)
class Scheme:
    """Everything the library knows about one scheme (module docstring)."""

    name: str
    display: str
    paper: str
    cite: str | None
    chapter: str | None
    convention: str
    formula: str
    code: str
    injects: str
    summary: str
    example: Callable
    options: type
    module: type
    distance: Distance | None = None
    causal_only: bool = False
    caches: str = "keys and values"
    not_decoded: str | None = None
    variants: tuple = ()
    order: int = 100
    benchmark_module: str | None = None  # dotted path of a function returning a BenchmarkModule
    has_positions: bool = True  # False: no position reaches the model (the lab skips it where that is moot)
    positions_in_tokens: bool = False  # positions added to the token embeddings: cached keys carry them
    lab: Lab = Lab()  # where the lab trains it
    short: str = ""  # a compact label for crowded figures (default: ``display``)
    color: str = "#8c8c8c"  # the one colour every figure of the book gives it, ``#rrggbb``
    bench: Bench = Bench()  # what the benchmark times of it beyond its paths
    roles: tuple[str, ...] = ()  # what its colour marks in the concept figures (ROLES)

    def __post_init__(self):
        check_choice("convention", self.convention, CONVENTIONS)
        for item in (self,) + tuple(self.variants):
            if item.color and not re.fullmatch(r"#[0-9a-f]{6}", item.color):
                raise ValueError(f"{item.name}: color must be '#rrggbb' in lower case, got {item.color!r}")
        check_choice("injects", self.injects, INJECTS)
        for role in self.roles:
            check_choice("roles", role, ROLES)
        for size in self.bench.train + self.bench.block_skip:
            check_choice("bench sizes", size, PRESET_SIZES)
        if not dataclasses.is_dataclass(self.options):
            raise ValueError(f"{self.name}: options must be a dataclass type, got {self.options!r}")
        if not (isinstance(self.module, type) and issubclass(self.module, PositionModule)):
            raise ValueError(f"{self.name}: module must be a PositionModule subclass, got {self.module!r}")
        if self.distance is not None and self.distance.name not in {f.name for f in dataclasses.fields(self.options)}:
            raise ValueError(f"{self.name}: the distance parameter {self.distance.name!r} must be an option")

    def load_benchmark_module(self) -> Callable:
        """The function ``benchmark_module`` names, imported (ValueError when the scheme has none)."""
        if self.benchmark_module is None:
            raise ValueError(f"scheme {self.name!r} declares no benchmark_module")
        module, _, attr = self.benchmark_module.rpartition(".")
        return getattr(importlib.import_module(module), attr)

    def names(self) -> tuple[str, ...]:
        """The scheme's registry names: its own and its variants'."""
        return (self.name,) + tuple(v.name for v in self.variants)

    def variant(self, name: str) -> Variant | None:
        return next((v for v in self.variants if v.name == name), None)


def make_options(scheme: Scheme, overrides: dict | None = None, *, variant: Variant | None = None):
    """The scheme's options dataclass: defaults, then the variant's settings, then ``overrides``.

    An unknown option name is a ValueError that lists the scheme's options; a value of the wrong
    kind for a field annotated ``int``, ``float``, ``str`` or ``bool`` (optionally ``| None``) is a
    ValueError naming the option (``_check_kind``), before the scheme's own checks of its range.
    """
    values = dict(variant.options if variant is not None else {})
    values.update(overrides or {})
    fields = {f.name: f for f in dataclasses.fields(scheme.options)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"position options {unknown} are not options of {scheme.name}: it has {sorted(fields)}")
    for name, value in values.items():
        _check_kind(scheme.name, name, fields[name].type, value)
    return scheme.options(**values)


# what a field annotated with each plain kind accepts (bool is an int to Python; not here)
_KINDS = {"int": (numbers.Integral, "an integer"), "float": (numbers.Real, "a number"), "str": (str, "a string"),
          "bool": (bool, "True or False")}


def _check_kind(scheme: str, name: str, annotation, value) -> None:
    """ValueError when ``value`` is not of the kind the options field ``name`` is annotated with
    (``"int"``, ``"float"``, ``"str"``, ``"bool"``, each optionally ``"| None"``; other annotations,
    such as ``object | None``, are left to the scheme's own checks)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    kinds = [k.strip() for k in text.split("|")]
    optional = "None" in kinds
    kinds = [k for k in kinds if k != "None"]
    if len(kinds) != 1 or kinds[0] not in _KINDS or (optional and value is None):
        return
    kind, wanted = _KINDS[kinds[0]]
    if isinstance(value, kind) and (kinds[0] == "bool" or not isinstance(value, bool)):
        return
    raise ValueError(f"position option {name} of {scheme} must be {wanted}{' or None' if optional else ''}, "
                     f"got {value!r}")
