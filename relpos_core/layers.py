"""Layers that differ: a per-layer position scheme and sliding window for one ``Transformer``.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb): what a window layer keeps.

Models of 2025-26 mix layers: Command A (Cohere 2) runs RoPE on a sliding window in three
layers of four and a global layer without positions in the fourth (Yang et al. 2025,
"Rope to Nope and Back Again"); Gemma 3 runs five local RoPE layers (base 10k) per global
one (base 1M); SmolLM3 and Llama 4 drop RoPE from every fourth layer. A model says so with
``TransformerConfig(layers=...)``: one ``LayerSpec`` per layer, each with

* ``scheme``: a registry name (``relpos_core.schemes.names()``) and ``position``: its options;
* ``window``: None (global attention) or a sliding window W >= 1: the query at position i
  sees the keys at i - W + 1 .. i (itself and the W - 1 before it; Hugging Face's
  ``sliding_window``). The window is a mask applied by ``rp.attend(..., window=W)`` on
  every kernel path, and the KV cache keeps at most W - 1 tokens of such a layer between
  steps (the next query needs no more).

A pattern is spelled ``"scheme[@option=value,...]"``, ``window`` being the layer's own
option and every other the scheme's (values parsed as None, True, False, int or float, else
kept as the string; an option whose value is a dict is spelled field by field with a dotted
name: ``"rope@length_scaling.type=log_length,length_scaling.train_length=16"`` is RoPE with
``length_scaling={"type": "log_length", "train_length": 16}``; an option named twice, an
unknown option or one of the wrong kind is a ValueError naming it):
``pattern("rope@window=4096", repeat=3, then="none", cycles=2)`` is eight layers, three
windowed RoPE layers and one global NoPE layer, twice. The same model as one string
(its ``TransformerConfig.label``, what the lab and the language-model lab take where
they take a scheme name): ``"rope@window=4096 x3, none, rope@window=4096 x3, none"``
(``parse_pattern``). ``cache_bytes`` is the cache's size by formula, which
``KVCache.nbytes`` is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn as nn

from relpos_core import schemes
from relpos_core._validate import check_int, check_positive_int
from relpos_core.cache import POSITION_BYTES
from relpos_core.schemes.declaration import ModelShape, PositionModule

__all__ = ["LayerSpec", "pattern", "parse_pattern", "is_pattern", "pattern_label", "HybridPosition", "cache_bytes",
           "bytes_per_token"]


_LITERALS = {"None": None, "True": True, "False": False}


def _value(text: str):
    """A pattern's option value: None, True, False, an int, a float, else the string itself."""
    if text in _LITERALS:
        return _LITERALS[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _spell(value, spec: str) -> str:
    """The pattern spelling of one option value (``_value``'s inverse)."""
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, str) and value and _value(value) == value and not any(c in value for c in ",=@ "):
        return value
    raise ValueError(f"the option {spec} of a layer has no pattern spelling: values are numbers, True, False, "
                     f"None, plain strings (no ',', '=', '@' or space) or dicts of them, got {value!r}")


def _flat(options: dict, prefix: str = "") -> list[tuple[str, object]]:
    """``{"length_scaling": {"type": "log_length"}}`` as ``[("length_scaling.type", "log_length")]``."""
    out = []
    for key, value in options.items():
        if isinstance(value, dict):
            if not value:
                raise ValueError(f"the option {prefix}{key} of a layer is an empty dict, which has no pattern spelling")
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _options(rest: str, spec: str) -> dict:
    """The options of ``"scheme@rest"``: ``option=value`` items joined by ",", a dotted name
    (``length_scaling.type=log_length``) setting one field of a dict-valued option."""
    options: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, text = item.partition("=")
        path = key.strip().split(".")
        if not eq or not all(path):
            raise ValueError(f"layer options must be spelled option=value or option.field=value, got {item!r} "
                             f"in {spec!r}")
        target = options
        for part in path[:-1]:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ValueError(f"layer option {part!r} is given both a value and fields ({key.strip()!r}) in "
                                 f"{spec!r}")
        if path[-1] in target:
            raise ValueError(f"layer option {key.strip()!r} is given twice in {spec!r}")
        target[path[-1]] = _value(text.strip())
    return options


@dataclass(frozen=True)
class LayerSpec:
    """One layer: its scheme (a registry name), the scheme's options, and its sliding window."""

    scheme: str
    position: dict = field(default_factory=dict)
    window: int | None = None

    def __post_init__(self):
        entry = schemes.lookup(self.scheme)  # ValueError listing the names
        if not isinstance(self.position, dict):
            raise ValueError(f"position must be a dict of {self.scheme}'s options, got "
                             f"{type(self.position).__name__}")
        entry.options(self.position)  # unknown or bad options are refused here
        if self.window is not None:
            check_positive_int("window", self.window)

    @classmethod
    def parse(cls, spec) -> "LayerSpec":
        """A ``LayerSpec`` from itself or from ``"scheme[@option=value,...]"`` (module docstring)."""
        if isinstance(spec, LayerSpec):
            return spec
        if not isinstance(spec, str) or not spec:
            raise ValueError(f"a layer must be a LayerSpec or a string 'scheme[@option=value,...]', got {spec!r}")
        name, _, rest = spec.partition("@")
        options = _options(rest, spec)
        window = options.pop("window", None)
        return cls(name.strip(), options, window)

    @property
    def entry(self) -> schemes.Entry:
        return schemes.lookup(self.scheme)

    @property
    def options(self):
        return self.entry.options(self.position)

    def __str__(self) -> str:
        items = [f"{k}={_spell(v, k)}" for k, v in _flat(self.position)]
        items += [] if self.window is None else [f"window={self.window}"]
        return self.scheme + ("@" + ",".join(items) if items else "")


def pattern(layer, *, repeat: int = 1, then=(), cycles: int = 1) -> tuple[LayerSpec, ...]:
    """``repeat`` copies of ``layer``, then the layers of ``then`` (one or a sequence), all ``cycles`` times.

    ``pattern("rope@window=4", repeat=3, then="none")``: 3 windowed RoPE layers and a global NoPE layer.
    """
    repeat = check_positive_int("repeat", repeat)
    cycles = check_positive_int("cycles", cycles)
    tail = (then,) if isinstance(then, (str, LayerSpec)) else tuple(then)
    block = (LayerSpec.parse(layer),) * repeat + tuple(LayerSpec.parse(t) for t in tail)
    return block * cycles


def pattern_label(layers) -> str:
    """One string for a sequence of layers: runs of equal layers as ``"spec xN"``, joined by ", "."""
    runs = []
    for spec in (str(LayerSpec.parse(layer)) for layer in layers):
        if runs and runs[-1][0] == spec:
            runs[-1][1] += 1
        else:
            runs.append([spec, 1])
    return ", ".join(spec if n == 1 else f"{spec} x{n}" for spec, n in runs)


def is_pattern(name) -> bool:
    """True when ``name`` is a pattern string (``"rope@window=8 x3, none"``), not one registry name."""
    return isinstance(name, str) and name not in schemes.names() and any(c in name for c in "@, ")


def parse_pattern(text: str) -> tuple[LayerSpec, ...]:
    """The layers of a pattern string (``pattern_label``'s inverse): ``"rope@window=8 x3, none"``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a pattern must be a string such as 'rope@window=8 x3, none', got {text!r}")
    layers = []
    for part in text.split(", "):
        spec, _, count = part.strip().rpartition(" x")
        if not spec or not count.isdigit():
            spec, count = part.strip(), "1"
        layers += [LayerSpec.parse(spec)] * check_positive_int(f"the repeat count of {part!r}", int(count))
    return tuple(layers)


class HybridPosition(PositionModule):
    """The position modules of a model whose layers differ: one per distinct (scheme, options).

    Each group's module is built for the layers of that group (its ``num_layers`` is the
    group's size, its layer index the layer's rank within the group), so a learned table
    is shared or per layer as its scheme does it, among the layers of that scheme. Schemes
    that add positions to the tokens or change how blocks run are whole-model designs
    and are refused here with the reason.
    """

    def __init__(self, shape: ModelShape, layers: tuple[LayerSpec, ...]):
        super().__init__(shape, None)
        keys, self.slots = [], []  # slots[layer] = (group, rank within the group)
        for spec in layers:
            key = (spec.scheme, repr(spec.options))
            if key not in keys:
                keys.append(key)
            group = keys.index(key)
            self.slots.append((group, sum(1 for g, _ in self.slots if g == group)))
        modules = []
        for group, (name, _) in enumerate(keys):
            spec = layers[next(i for i, (g, _) in enumerate(self.slots) if g == group)]
            scheme = spec.entry.scheme
            if scheme.positions_in_tokens:
                raise ValueError(f"layers: {name} adds its positions to the tokens, which every layer then sees: "
                                 f"it cannot be the scheme of some layers only")
            count = sum(1 for g, _ in self.slots if g == group)
            module = scheme.module(ModelShape(num_layers=count, num_heads=shape.num_heads, head_dim=shape.head_dim,
                                              d_model=shape.d_model, causal=shape.causal,
                                              max_positions=shape.max_positions), spec.options)
            for hook in ("embed", "run_blocks", "training_positions"):
                if getattr(type(module), hook) is not getattr(PositionModule, hook):
                    raise ValueError(f"layers: {name} overrides PositionModule.{hook} (a whole-model design): it "
                                     f"cannot be the scheme of some layers only")
            modules.append(module)
        self.groups = nn.ModuleList(modules)

    def term(self, layer: int, attention: nn.Module):
        group, rank = self.slots[layer]
        return self.groups[group].term(rank, attention)

    @torch.no_grad()
    def init_parameters(self, generator: torch.Generator) -> None:
        for module in self.groups:
            module.init_parameters(generator)

    def table_elements(self) -> int:
        return max((getattr(m, "table_elements", lambda: 0)() for m in self.groups), default=0)


def _held(window: int | None, context: int) -> int:
    """Tokens a layer's cache holds after a step, ``context`` tokens in."""
    return context if window is None else min(context, window - 1)


def cache_bytes(windows, context: int, *, num_heads: int, head_dim: int, dtype: torch.dtype = torch.float32,
                batch: int = 1) -> dict:
    """Bytes of a ``KVCache`` after ``context`` tokens, by formula, for layers with these ``windows``.

    ``windows``: one entry per layer, None (global: keeps every token) or W (keeps the
    last W - 1). Per layer: 2 (key and value) x batch x heads x head_dim x bytes per
    element x tokens held; plus one int64 position per token the cache has seen
    (``POSITION_BYTES``). Returns ``{"layers": [...], "keys": ..., "values": ..., "positions": ...}``.
    """
    context = check_int("context", context, min_value=0)
    for name, value in (("num_heads", num_heads), ("head_dim", head_dim), ("batch", batch)):
        check_positive_int(name, value)
    size = torch.empty(0, dtype=dtype).element_size()
    each = [batch * num_heads * head_dim * size * _held(w, context) for w in windows]  # keys (= values) per layer
    return dict(layers=[2 * b for b in each], keys=sum(each), values=sum(each), positions=POSITION_BYTES * context)


def bytes_per_token(windows, *, num_heads: int, head_dim: int, dtype: torch.dtype = torch.float32,
                    batch: int = 1) -> int:
    """What one more token adds to the cache once every window is full: the global layers' keys and
    values (2 x batch x heads x head_dim x bytes each) and its position; window layers add nothing."""
    size = torch.empty(0, dtype=dtype).element_size()
    glob = sum(1 for w in windows if w is None)
    return 2 * glob * batch * num_heads * head_dim * size + POSITION_BYTES

