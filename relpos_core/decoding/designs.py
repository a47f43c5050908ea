"""The cache of 2025-26 designs: hybrid layer patterns, partial RoPE, quantised caches and
tensor-parallel replication, with published configurations as presets.

Book: "Position in current models" (chapters/10_position_in_current_models.ipynb).

Every count here is exact integer arithmetic (``fractions.Fraction`` for shares), per
sequence, for a cache of ``context`` tokens. A layer caches a key and a value of
``head_dim`` numbers for each of its ``num_kv_heads`` heads and each token it keeps:

* **hybrid patterns** (``Layer``, ``repeat``): a *global* layer keeps every token; a
  *window* layer (sliding window of W, Mistral, Gemma, Command A) keeps the last
  min(n, W); a *chunk* layer (Llama 4's chunked attention of C) attends within its chunk
  of C tokens and keeps at most min(n, C) (a server allocates C). The share a pattern
  saves against the same layers all global is ``share_saved``; it does not depend on the
  heads or the element type when every layer caches the same per-token size.
* **partial RoPE** (``rotary_split``): a key cached after rotation stores its first r
  dimensions rotated and the other d - r as they were computed, in one (d,) row: the same
  bytes as a fully rotated or an unrotated key, a different layout. MLA
  (``relpos_core.mla``) instead caches a shared decoupled rotary key of d_R beside its
  latent of d_c.
* **quantised caches** (``quantized_bytes``): b-bit elements plus a scale (and, when the
  quantiser is asymmetric, a zero point) per group of ``group_size`` elements, both of
  ``meta_bytes``; KIVI's full-precision residual of recent tokens is ``kivi_bytes``.
* **tensor parallelism** (``per_rank_bytes``): with T ranks, GQA's G key-value heads are
  split G/T per rank when T <= G and replicated T/G times (one head per rank) when
  T > G; an MLA latent is needed by every head, so every rank keeps all of it.

Presets (``PATTERNS``): which layers carry which scheme and window in published models,
each value with its source (``Published``: a references.bib key and where in it) or None
where this library could not confirm it. Sign conventions: not applicable (sizes only).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from fractions import Fraction

from relpos_core._validate import check_choice, check_int, check_positive_int

__all__ = ["LAYER_KINDS", "Layer", "repeat", "kept_tokens", "layer_bytes", "cache_bytes",
           "bytes_per_token", "share_saved", "rotary_split", "quantized_bytes", "kivi_bytes",
           "QUANT_FORMATS", "per_rank_bytes", "replication", "Published", "Pattern", "PATTERNS"]

LAYER_KINDS = ("global", "window", "chunk")


@dataclass(frozen=True)
class Layer:
    """One attention layer: ``kind`` (``LAYER_KINDS``), ``span`` (W or C; None for a global
    layer) and whether it rotates (``rotary``: RoPE; False: no positions, NoPE)."""

    kind: str = "global"
    span: int | None = None
    rotary: bool = True

    def __post_init__(self):
        check_choice("kind", self.kind, LAYER_KINDS)
        if self.kind == "global":
            if self.span is not None:
                raise ValueError(f"span must be None for a global layer (it keeps every token), got {self.span!r}")
        else:
            check_positive_int("span", self.span)
        if not isinstance(self.rotary, bool):
            raise ValueError(f"rotary must be True or False, got {self.rotary!r}")

    @property
    def label(self) -> str:
        """"RoPE, window 4096", "NoPE, global", ...: what the layer is, for a figure."""
        scheme = "RoPE" if self.rotary else "NoPE"
        return f"{scheme}, global" if self.kind == "global" else f"{scheme}, {self.kind} {self.span}"


def repeat(block, num_layers: int) -> tuple[Layer, ...]:
    """``block`` (a sequence of ``Layer``) repeated to ``num_layers`` layers, the last repeat
    cut short (Gemma 3 1B: 26 layers of a 6-layer block)."""
    block = tuple(block)
    if not block or not all(isinstance(x, Layer) for x in block):
        raise ValueError(f"block must be a non-empty sequence of Layer, got {block!r}")
    n = check_positive_int("num_layers", num_layers)
    return tuple(block[i % len(block)] for i in range(n))


def _layers(layers) -> tuple[Layer, ...]:
    layers = tuple(layers)
    if not layers or not all(isinstance(x, Layer) for x in layers):
        raise ValueError(f"layers must be a non-empty sequence of Layer, got {layers!r}")
    return layers


def kept_tokens(layer: Layer, context: int) -> int:
    """Tokens ``layer`` keeps in its cache after ``context`` tokens: n, or min(n, span)."""
    if not isinstance(layer, Layer):
        raise ValueError(f"layer must be a Layer, got {type(layer).__name__}")
    n = check_int("context", context, min_value=0)
    return n if layer.kind == "global" else min(n, layer.span)


def _element_bytes(element_bytes) -> Fraction:
    """Bytes of one cached element: a positive number (0.5 for 4 bits), as an exact Fraction."""
    if isinstance(element_bytes, bool) or not isinstance(element_bytes, numbers.Rational | float) \
            or not 0 < element_bytes <= 8:
        raise ValueError(f"element_bytes must be a number in (0, 8] (bytes of one cached element), "
                         f"got {element_bytes!r}")
    return Fraction(element_bytes)


def layer_bytes(layer: Layer, context: int, *, num_kv_heads: int, head_dim: int, element_bytes=2,
                batch: int = 1) -> Fraction:
    """2 G d_h K bytes-per-element for ``batch`` sequences: K = ``kept_tokens(layer, context)``."""
    G = check_positive_int("num_kv_heads", num_kv_heads)
    d = check_positive_int("head_dim", head_dim)
    B = check_positive_int("batch", batch)
    return 2 * G * d * kept_tokens(layer, context) * B * _element_bytes(element_bytes)


def cache_bytes(layers, context: int, *, num_kv_heads: int, head_dim: int, element_bytes=2,
                batch: int = 1) -> Fraction:
    """Bytes of the whole cache: the sum of ``layer_bytes`` over ``layers``."""
    return sum((layer_bytes(x, context, num_kv_heads=num_kv_heads, head_dim=head_dim,
                            element_bytes=element_bytes, batch=batch) for x in _layers(layers)), Fraction(0))


def bytes_per_token(layers, context: int, **sizes) -> Fraction:
    """``cache_bytes`` / ``context``: falls with the context while window layers are full."""
    context = check_positive_int("context", context)
    return cache_bytes(layers, context, **sizes) / context


def share_saved(layers, context: int) -> Fraction:
    """1 - (tokens kept by ``layers``) / (tokens kept were every layer global): the share of
    the cache a pattern saves, for layers that cache the same per-token size."""
    layers = _layers(layers)
    context = check_positive_int("context", context)
    kept = sum(kept_tokens(x, context) for x in layers)
    return 1 - Fraction(kept, len(layers) * context)


# -- partial RoPE -------------------------------------------------------------------------
def rotary_split(head_dim: int, rotary_dim: int | None = None) -> dict[str, int]:
    """What one cached key of ``head_dim`` holds when its first ``rotary_dim`` dimensions are
    rotated (None: all of them): ``rotated`` and ``unrotated`` dimensions, the ``pairs``
    turned, and the ``elements`` cached, always ``head_dim`` (the layout differs, not the size)."""
    d = check_int("head_dim", head_dim, min_value=2)
    r = d if rotary_dim is None else check_int("rotary_dim", rotary_dim, min_value=2, max_value=d)
    if r % 2:
        raise ValueError(f"rotary_dim must be even (dimensions are rotated in pairs), got {r}")
    return dict(rotated=r, unrotated=d - r, pairs=r // 2, elements=d)


# -- quantised caches -----------------------------------------------------------------------
#: bits per element, and whether a zero point is stored next to each group's scale
QUANT_FORMATS = {"bf16": (16, False), "fp8": (8, False), "int8": (8, True), "int4": (4, True),
                 "int2": (2, True)}


def quantized_bytes(elements: int, fmt: str, *, group_size: int | None = None, meta_bytes: int = 2) -> Fraction:
    """Bytes of ``elements`` cached numbers in ``fmt`` (``QUANT_FORMATS``), with a scale (and a
    zero point for the integer formats) of ``meta_bytes`` per group of ``group_size`` elements.

    bf16 has no groups (``group_size`` must be None); fp8 and the integer formats need one
    (fp8 with a per-tensor scale: ``group_size=elements``). A last, shorter group still
    carries its own scale: ceil(elements / group_size) groups.
    """
    n = check_int("elements", elements, min_value=0)
    bits, zero_point = QUANT_FORMATS[check_choice("fmt", fmt, tuple(QUANT_FORMATS))]
    meta = check_int("meta_bytes", meta_bytes, min_value=1, max_value=8)
    if fmt == "bf16":
        if group_size is not None:
            raise ValueError(f"group_size must be None for bf16 (no scales), got {group_size!r}")
        return Fraction(n * bits, 8)
    g = check_positive_int("group_size", group_size)
    groups = -(-n // g)  # ceil
    return Fraction(n * bits, 8) + groups * meta * (2 if zero_point else 1)


def kivi_bytes(context: int, *, num_layers: int, num_kv_heads: int, head_dim: int, bits: int = 2,
               group_size: int = 32, residual: int = 128, meta_bytes: int = 2, full_bytes: int = 2) -> Fraction:
    """Bytes of a KIVI-style cache of ``context`` tokens (Liu et al. 2024), all layers.

    Keys are quantised per channel: a group is one channel over ``group_size`` tokens.
    Values are quantised per token: a group is ``group_size`` channels of one token. Every
    group has a scale and a zero point of ``meta_bytes``. New tokens wait in a
    full-precision residual (``full_bytes`` per element) until ``residual`` of them have
    arrived, and are then quantised together, so n mod R tokens are in full precision
    (the paper's rule for keys, used here for values too). ``residual`` must be a
    multiple of ``group_size``, so only whole key groups are quantised.
    """
    n = check_int("context", context, min_value=0)
    L = check_positive_int("num_layers", num_layers)
    G = check_positive_int("num_kv_heads", num_kv_heads)
    d = check_positive_int("head_dim", head_dim)
    b = check_choice("bits", bits, (2, 4, 8))
    g = check_positive_int("group_size", group_size)
    R = check_positive_int("residual", residual)
    if R % g:
        raise ValueError(f"residual must be a multiple of group_size = {g} (whole key groups), got {R}")
    meta = check_int("meta_bytes", meta_bytes, min_value=1, max_value=8)
    full_bytes = check_int("full_bytes", full_bytes, min_value=1, max_value=8)
    q = n // R * R  # tokens quantised; n - q wait in the residual
    keys = Fraction(q * d * b, 8) + (q // g) * d * 2 * meta  # (q / g) groups per channel
    values = Fraction(q * d * b, 8) + q * -(-d // g) * 2 * meta  # ceil(d / g) groups per token
    residual_part = 2 * (n - q) * d * full_bytes  # keys and values, full precision
    return L * G * (keys + values + residual_part)


# -- tensor parallelism ---------------------------------------------------------------------
def per_rank_bytes(kind: str, *, tp: int, num_layers: int, head_dim: int | None = None,
                   num_kv_heads: int | None = None, kv_lora_rank: int | None = None,
                   qk_rope_head_dim: int | None = None, element_bytes=2) -> Fraction:
    """Bytes per token one of ``tp`` tensor-parallel ranks caches.

    GQA (``kind="GQA"``, MHA and MQA included): 2 l ceil(G / T) d_h; T and G must divide
    one another (T > G replicates each head on T / G ranks). MLA: l (d_c + d_R) on every rank.
    """
    kind = check_choice("kind", kind, ("GQA", "MLA"))
    T = check_positive_int("tp", tp)
    L = check_positive_int("num_layers", num_layers)
    e = _element_bytes(element_bytes)
    if kind == "MLA":
        d_c = check_positive_int("kv_lora_rank", kv_lora_rank)
        d_r = check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
        return L * (d_c + d_r) * e
    G = check_positive_int("num_kv_heads", num_kv_heads)
    d = check_positive_int("head_dim", head_dim)
    if G % T and T % G:
        raise ValueError(f"tp must divide num_kv_heads = {G} or be a multiple of it (heads are split "
                         f"evenly or replicated evenly), got {T}")
    return 2 * L * max(G // T, 1) * d * e


def replication(kind: str, *, tp: int, **sizes) -> Fraction:
    """Bytes all ``tp`` ranks cache together, over the bytes of one unsharded copy."""
    one = per_rank_bytes(kind, tp=1, **sizes)
    return tp * per_rank_bytes(kind, tp=tp, **sizes) / one


# -- presets ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Published:
    """A value and where it is published: ``cite`` (a references.bib key) and ``where``."""

    value: object
    cite: str
    where: str


@dataclass(frozen=True)
class Pattern:
    """A published model's layer pattern: ``block`` repeats over ``num_layers`` layers.

    ``num_layers``, ``num_kv_heads``, ``head_dim``: a ``Published`` value, or None where it
    could not be confirmed (the share saved over whole blocks needs none of them);
    ``block`` and ``pattern``: the layers and the source that describes them;
    ``bases``: RoPE's base per kind of layer, as published.
    """

    name: str
    block: tuple[Layer, ...]
    pattern: Published
    num_layers: Published | None = None
    num_kv_heads: Published | None = None
    head_dim: Published | None = None
    bases: dict = field(default_factory=dict)
    context: Published | None = None

    def __post_init__(self):
        _layers(self.block)
        for name in ("num_layers", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if value is not None:
                check_positive_int(f"{self.name}.{name}", value.value)

    @property
    def sized(self) -> bool:
        """Whether layers, key-value heads and head size are all confirmed."""
        return None not in (self.num_layers, self.num_kv_heads, self.head_dim)

    def layers(self, num_layers: int | None = None) -> tuple[Layer, ...]:
        """The model's layers (``num_layers``: another count, e.g. one block, or the published one)."""
        if num_layers is None:
            if self.num_layers is None:
                raise ValueError(f"{self.name}: its number of layers is not confirmed; pass num_layers")
            num_layers = self.num_layers.value
        return repeat(self.block, num_layers)

    def cache_bytes(self, context: int, *, element_bytes=2, batch: int = 1) -> Fraction:
        """Bytes of one model's cache (refused when a size is not confirmed)."""
        if not self.sized:
            missing = [n for n in ("num_layers", "num_kv_heads", "head_dim") if getattr(self, n) is None]
            raise ValueError(f"{self.name}: {', '.join(missing)} not confirmed, so no byte count")
        return cache_bytes(self.layers(), context, num_kv_heads=self.num_kv_heads.value,
                           head_dim=self.head_dim.value, element_bytes=element_bytes, batch=batch)

    def sources(self) -> list[tuple[str, str, object, str]]:
        """(model, field, value, source) rows; a value not confirmed reads "not confirmed"."""
        rows = [(self.name, "layer pattern", self.pattern.value, f"{self.pattern.cite}: {self.pattern.where}")]
        for name in ("num_layers", "num_kv_heads", "head_dim", "context"):
            p = getattr(self, name)
            rows.append((self.name, name, "not confirmed" if p is None else p.value,
                         "" if p is None else f"{p.cite}: {p.where}"))
        for kind, p in self.bases.items():
            rows.append((self.name, f"RoPE base ({kind})", p.value, f"{p.cite}: {p.where}"))
        return rows


_HF = "transformers 5.24"  # the configuration classes whose defaults are the named checkpoints

PATTERNS: dict[str, Pattern] = {p.name: p for p in [
    Pattern("Command A", (Layer("window", 4096),) * 3 + (Layer("global", rotary=False),),
            Published("3 sliding-window RoPE layers : 1 global NoPE layer", "cohere2025commanda",
                      "architecture: interleaved sliding-window (RoPE) and full (NoPE) attention, 3:1; "
                      "window 4096 as in Hugging Face's Cohere2Config and the Command R7B config (a model "
                      "the report calls architecturally similar)"),
            context=Published(262144, "cohere2025commanda", "model card: context length 256K")),
    Pattern("Gemma 3", (Layer("window", 1024),) * 5 + (Layer("global"),),
            Published("5 local layers (window 1024) : 1 global layer", "gemmateam2025gemma3",
                      "section 2 (attention): 5:1 interleaving, local span 1024"),
            bases={"local": Published(10_000, "gemmateam2025gemma3", "section 2 (long context)"),
                   "global": Published(1_000_000, "gemmateam2025gemma3", "section 2 (long context)")}),
    Pattern("Llama 4 Scout", (Layer("chunk", 8192),) * 3 + (Layer("global", rotary=False),),
            Published("iRoPE: 3 chunked RoPE layers (chunk 8192) : 1 global NoPE layer", "meta2025llama4",
                      f"iRoPE; Llama4TextConfig defaults ({_HF}): attention_chunk_size 8192, "
                      "no_rope_layer_interval 4"),
            num_layers=Published(48, "meta2025llama4", f"Llama4TextConfig default ({_HF}, Llama-4-Scout)"),
            num_kv_heads=Published(8, "meta2025llama4", f"Llama4TextConfig default ({_HF})"),
            head_dim=Published(128, "meta2025llama4", f"Llama4TextConfig default ({_HF})"),
            bases={"RoPE": Published(500_000, "meta2025llama4", f"Llama4TextConfig default ({_HF})")}),
    Pattern("SmolLM3 3B", (Layer("global"),) * 3 + (Layer("global", rotary=False),),
            Published("3 global RoPE layers : 1 global NoPE layer", "bakouch2025smollm3",
                      f"NoPE every 4th layer; SmolLM3Config default no_rope_layer_interval 4 ({_HF})"),
            num_layers=Published(36, "bakouch2025smollm3", f"SmolLM3Config default ({_HF}, SmolLM3-3B)"),
            num_kv_heads=Published(4, "bakouch2025smollm3", f"SmolLM3Config default ({_HF})"),
            head_dim=Published(128, "bakouch2025smollm3", f"SmolLM3Config default: 2048 / 16 heads ({_HF})"),
            bases={"RoPE": Published(2_000_000, "bakouch2025smollm3", f"SmolLM3Config default ({_HF})")}),
]}
