"""Presets of the language-model lab: model shape, schemes, training, evaluation and the extension stage.

Book: "Evidence from a language model" (chapters/13_language_model.ipynb).

* ``tiny``: a pipeline check (seconds): three schemes, a few steps, short lengths. Its
  numbers mean nothing.
* ``book``: a small run a reader trains in a few minutes on two cores (a few schemes,
  one seed, a few hundred steps, evaluated to 512 tokens, two extension methods).
* ``full``: the committed run (``relpos_core/data/lm-full.json``): every decodable scheme
  with a scalar or a rotation per offset (``SCALAR_OR_ROTATION``; the vector-term schemes are
  left out for time, see below), three seeds, evaluated at 1x-16x the training length, then the context-extension stage
  on the RoPE models (zero-shot on every seed, fine-tuned on seed 0: the machine was shared
  and time was short).
* ``hybrid``: models whose layers differ (``HYBRID_PATTERNS``: a windowed rotary layer under a
  global one without positions, a rotary layer and one without, windowed rotary only, p-RoPE at
  a quarter and a half of the pairs) beside rotary and no position, at the full run's model,
  budget and evaluation, 3 seeds, no extension stage (``relpos_core/data/lm-hybrid.json``).
* ``full_lr1e-3``: the full run at a second learning rate (Adam 1e-3), without the extension
  stage (``relpos_core/data/lm-full-lr1e-3.json``), for every scheme of the full run. Its first
  part trained the six schemes whose verdicts the language-model page stated first (those that
  hold, RoPE, FIRE and no position); the others were added by ``--resume`` under the same
  settings (the file's provenance records both parts).
* ``long``: the full run at four times its training budget (4800 steps) for seven schemes
  (``LONG_SCHEMES``), no extension stage (``relpos_core/data/lm-long.json``).
* ``hybrid_lr1e-3``: the hybrid preset at the same second learning rate
  (``relpos_core/data/lm-hybrid-lr1e-3.json``).

The full run's sizes (chosen by measuring step times here first, then shrunk when the shared
machine gave each worker about a third of a core): d_model 64, 2 layers, 4 heads, d_mlp 256
(about 0.1 M parameters); 1200 steps of 16 windows of 128 bytes (2.46 M training bytes), Adam at
3e-3 with 100 warm-up steps and a cosine decay to 10 %. Evaluation budget per length: 8
held-out segments of 2048 bytes (16,384 scored bytes, the same bytes at every length), the first
4 of them (8,192 bytes) again with a sliding window of stride L / 2; 24 passkey rows per length
and seed (8 per depth). Extension: every method at factor 4 (512 / 128) at every length,
fine-tuned for 150 steps of 16 windows of 512 bytes (1.23 M bytes) at 1e-3.

The schemes come from the declarations (``relpos_core.schemes``): every scheme a decoder
can run (``not_decoded`` is None, as ``relpos_core.decoding.SCHEMES``), so a new scheme file
joins the full preset without a change here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from relpos_core import schemes

__all__ = ["Extension", "LMPreset", "PRESETS", "get_preset", "DECODABLE", "SCALAR_OR_ROTATION", "EXTENSIONS", "extension_methods",
           "HYBRID_PATTERNS"]

DECODABLE: tuple[str, ...] = tuple(n for n in schemes.names() if schemes.lookup(n).scheme.not_decoded is None)
# The full preset's schemes: every decodable scheme except those adding a vector per offset to the
# logits (Shaw, Shaw key-only, Music Transformer, Transformer-XL). Their (B, H, L, L, d)-sized term
# runs on the gather or eager path and made a training step 2-4x RoPE's on this 2-core machine
# (step times measured before the committed run: RoPE 49 ms, Shaw 83 ms, Transformer-XL 73 ms, Music
# Transformer 147 ms at batch 16 x 128 tokens, one thread); with the machine shared, the full run
# would not have fitted its time. Any of them trains here when a preset names it.
def _adds_vectors(name: str) -> bool:
    """Whether the scheme's term has a piece of the "vector" stage (read from its pieces, not a label)."""
    from relpos_core.registry import stages

    return "vector" in stages(name)


SCALAR_OR_ROTATION: tuple[str, ...] = tuple(n for n in DECODABLE if not _adds_vectors(n))
# the extension stage's scheme: the one whose declaration says the extension methods start from it
EXTENDED: str = next(s for s in DECODABLE if schemes.lookup(s).lab.extended)
NOPE: str = schemes.baseline()  # the scheme without positions
HYBRID_WINDOW = 32  # a quarter of the training length (128)
# The hybrid preset's patterns (relpos_core.layers.parse_pattern), built from the rotary scheme and
# the baseline: layer 1 first.
HYBRID_PATTERNS: tuple[str, ...] = (
    f"{EXTENDED}@window={HYBRID_WINDOW}, {NOPE}",  # RNoPE-SWA (Yang et al. 2025; Command A)
    f"{EXTENDED}, {NOPE}",  # a rotary layer and a layer without positions (SmolLM3, Llama 4)
    f"{EXTENDED}@window={HYBRID_WINDOW} x2",  # sliding-window rotary only (the window's own effect)
    f"{EXTENDED}@keep_fraction=0.25 x2",  # p-RoPE (Barbero et al. 2025): a quarter of the pairs turn
    f"{EXTENDED}@keep_fraction=0.5 x2",
)


@dataclass(frozen=True)
class Extension:
    """One way to run a RoPE model past its training length: RoPE options replacing the trained ones.

    ``scaling``: a dict like Hugging Face's ``rope_scaling`` (``relpos_core.kernels.rope_scaling``),
    None for none; ``base``: a new base frequency (None: the trained one). ``factor`` in a
    scaling dict is filled from the preset (the fine-tuning length over the training length)."""

    name: str
    display: str
    scaling: dict | None = None
    base: float | None = None

    def position(self, factor: float, train_length: int) -> dict:
        """The RoPE ``position`` options of this method at ``factor`` for a model trained at ``train_length``."""
        out = {}
        if self.scaling is not None:
            spec = dict(self.scaling, factor=float(factor))
            if spec["rope_type"] != "linear" and spec["rope_type"] != "ntk":
                spec["original_max_position_embeddings"] = int(train_length)
            out["scaling"] = spec
        if self.base is not None:
            out["base"] = float(self.base)
        return out


# RoPE itself (the control: fine-tuned at the longer length with nothing changed), then the methods
EXTENSIONS = (
    Extension(EXTENDED, f"{schemes.lookup(EXTENDED).display} (nothing changed)"),  # the control
    Extension("linear", "position interpolation (Chen et al. 2023)", {"rope_type": "linear"}),
    Extension("ntk", "NTK-aware (bloc97 2023)", {"rope_type": "ntk"}),
    Extension("dynamic", "dynamic NTK (emozilla 2023)", {"rope_type": "dynamic"}),
    Extension("yarn", "YaRN (Peng et al. 2024)", {"rope_type": "yarn"}),
    Extension("llama3", "Llama 3.1 scaling (Grattafiori et al. 2024)", {"rope_type": "llama3"}),
    Extension("abf", "raised base 500,000 (Xiong et al. 2023)", None, 500000.0),
)


def extension_methods(names=None) -> tuple:
    if names is None:
        return EXTENSIONS
    by = {e.name: e for e in EXTENSIONS}
    for n in names:
        if n not in by:
            raise ValueError(f"extension method must be one of {sorted(by)}, got {n!r}")
    return tuple(by[n] for n in names)


@dataclass(frozen=True)
class LMPreset:
    name: str
    description: str
    model: dict  # d_model, num_layers, num_heads, d_mlp
    schemes: tuple
    seeds: tuple
    train_length: int
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    min_lr_factor: float  # cosine decay from lr to lr * this
    eval_lengths: tuple  # the first is the training length
    segments: int  # held-out segments of max(eval_lengths) bytes scored at every length (non-overlapping)
    sliding_segments: int  # the first of them, scored again with a sliding window
    sliding_stride: float  # stride as a fraction of the window (each window scores its last stride tokens)
    bins: int  # loss per position in the context: bins per window
    probe_rows: int  # passkey rows per length (cycling the depths)
    log_every: int
    # the extension stage (on the trained RoPE models)
    extension_scheme: str = EXTENDED
    extensions: tuple = ()
    extension_seeds: tuple = ()  # evaluated zero-shot
    finetune_seeds: tuple = ()  # of those, also fine-tuned
    finetune_length: int = 512
    finetune_steps: int = 0
    finetune_batch: int = 8
    finetune_lr: float = 1e-3
    finetune_warmup: int = 10

    @property
    def max_length(self) -> int:
        return max(self.eval_lengths)

    @property
    def factor(self) -> float:
        """The extension factor: fine-tuning length over training length."""
        return self.finetune_length / self.train_length

    def to_dict(self) -> dict:
        d = asdict(self)
        d["extensions"] = [asdict(e) for e in self.extensions]
        d["eval_tokens"] = self.segments * self.max_length
        d["sliding_tokens"] = self.sliding_segments * self.max_length
        d["train_tokens"] = self.steps * self.batch_size * self.train_length
        d["finetune_tokens"] = self.finetune_steps * self.finetune_batch * self.finetune_length
        return d


_FULL = LMPreset(
    name="full",
    description="every decodable scheme, 3 seeds, a 2-layer d=64 byte model trained at 128 tokens, evaluated at "
                "128-2048 tokens; then the context-extension methods on the RoPE models, zero-shot and after a "
                "fine-tune at 512 tokens",
    model=dict(d_model=64, num_layers=2, num_heads=4, d_mlp=256), schemes=SCALAR_OR_ROTATION, seeds=(0, 1, 2),
    train_length=128, steps=1200, batch_size=16, lr=3e-3, warmup_steps=100, min_lr_factor=0.1,
    eval_lengths=(128, 256, 512, 1024, 2048), segments=8, sliding_segments=4, sliding_stride=0.5, bins=16,
    probe_rows=24, log_every=50,
    extensions=EXTENSIONS, extension_seeds=(0, 1, 2), finetune_seeds=(0,), finetune_length=512, finetune_steps=150, finetune_batch=16,
    finetune_lr=1e-3, finetune_warmup=10,
)


def _declared(preset: str) -> tuple[str, ...]:
    """The decodable schemes whose declarations put them in the small ``preset`` (``Lab.language_model``)."""
    return tuple(s for s in DECODABLE if preset in schemes.lookup(s).lab.language_model)

_BOOK_SCHEMES = _declared("book")
# The long preset's schemes: three that hold in the full run (ALiBi, forgetting attention, and Kerple-log,
# the choice guide's first choice for a decoder past its training length), the rotary scheme the
# extension methods start from, no position, and two that rise (T5's buckets, FIRE).
LONG_SCHEMES: tuple[str, ...] = tuple(s for s in ("alibi", "forgetting", EXTENDED, NOPE, "t5", "fire", "kerple_log")
                                      if s in DECODABLE)
PRESETS = {
    "full": _FULL,
    "book": replace(_FULL, name="book",
                    description="five schemes, one seed, a smaller model and budget, evaluated to 512 tokens; two "
                                "extension methods (a few minutes on 2 cores)",
                    model=dict(d_model=32, num_layers=2, num_heads=4, d_mlp=128), schemes=_BOOK_SCHEMES, seeds=(0,),
                    steps=300, eval_lengths=(128, 256, 512), segments=4, sliding_segments=2, probe_rows=12,
                    extensions=tuple(e for e in EXTENSIONS if e.name in (EXTENDED, "linear", "yarn")),
                    extension_seeds=(0,), finetune_seeds=(0,), finetune_steps=40, finetune_batch=8),
    # The full run's models and budget at a second learning rate (a third of the full run's), no
    # extension stage: a finding of the full run is stated only where it holds at both rates.
    "full_lr1e-3": replace(_FULL, name="full_lr1e-3",
                           description="the full run's schemes, seeds, model and budget at Adam 1e-3 instead of "
                                       "3e-3 (no extension stage): the second learning rate of the full run's findings",
                           lr=1e-3, schemes=SCALAR_OR_ROTATION, extensions=(), extension_seeds=(),
                           finetune_seeds=(), finetune_steps=0),
    # Models whose layers differ (relpos_core.layers), against the two schemes they mix, at the
    # full run's model, budget and evaluation (two layers, so a pattern is one layer of each kind).
    "hybrid": replace(_FULL, name="hybrid",
                      description="layer patterns of 2025-26 models on the full run's two-layer model: a windowed "
                                  "rotary layer under a global layer without positions (Command A's RNoPE-SWA), a "
                                  "rotary layer and one without (SmolLM3, Llama 4), windowed rotary only, and p-RoPE "
                                  "at two fractions; with rotary and no position as controls, 3 seeds",
                      schemes=(NOPE, EXTENDED, *HYBRID_PATTERNS), extensions=(), extension_seeds=(),
                      finetune_seeds=(), finetune_steps=0),
    # The hybrid preset at the second learning rate: its verdicts are stated where they hold at both.
    "hybrid_lr1e-3": replace(_FULL, name="hybrid_lr1e-3",
                             description="the hybrid preset's patterns and controls at Adam 1e-3 instead of 3e-3: "
                                         "the second learning rate of its findings",
                             lr=1e-3, schemes=(NOPE, EXTENDED, *HYBRID_PATTERNS), extensions=(), extension_seeds=(),
                             finetune_seeds=(), finetune_steps=0),
    # The full run at four times its training budget for the schemes whose verdicts the book states
    # (three that hold, RoPE, and the ones that rise: no position, T5, FIRE), no extension stage: a
    # finding of the full run is stated only where it also holds after longer training.
    "long": replace(_FULL, name="long",
                    description="the full run's model, seeds, learning rate and evaluation for seven schemes at four "
                                "times the training budget (4800 steps, 9.8 M bytes), no extension stage",
                    schemes=LONG_SCHEMES, steps=4 * _FULL.steps, log_every=200, extensions=(), extension_seeds=(),
                    finetune_seeds=(), finetune_steps=0),
    "tiny": replace(_FULL, name="tiny", description="pipeline check: three schemes, a few steps (seconds)",
                    model=dict(d_model=16, num_layers=1, num_heads=2, d_mlp=32),
                    schemes=_declared("tiny"), seeds=(0,),
                    train_length=32, steps=3, batch_size=4, warmup_steps=1, eval_lengths=(32, 64, 128),
                    segments=2, sliding_segments=1, bins=4, probe_rows=3, log_every=1,
                    extensions=tuple(e for e in EXTENSIONS if e.name in (EXTENDED, "yarn")), extension_seeds=(0,),
                    finetune_seeds=(0,),
                    finetune_length=64, finetune_steps=2, finetune_batch=2, finetune_warmup=1),
}


def get_preset(name: str) -> LMPreset:
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]
