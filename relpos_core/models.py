"""One transformer for every position scheme: the decoder of "The KV cache" and the lab's
models of "Synthetic tasks".

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb) and "Synthetic tasks"
(chapters/14_experiments_length.ipynb).

``Transformer(TransformerConfig(scheme=..., position={...}))`` is a pre-norm transformer
(token embedding, ``num_layers`` blocks of attention and MLP, a final norm and a linear
head giving ``num_outputs`` logits per position). The scheme is any registry name
(``relpos_core.schemes.names()``): its declaration builds a ``PositionModule`` that owns
the scheme's tables for the whole model and hands each layer its ``PositionTerm``; the
attention of every layer is ``rp.attend`` with that term, so the same weights run on
every kernel path (``form``, ``backend``) of ``relpos_core.registry``. The model never
asks which scheme it holds.

Decoding (``causal=True``): ``forward(tokens, cache)`` appends the new tokens' keys and
values to a ``KVCache`` (``new_cache``), attends from them to every kept token, then lets
the cache evict; ``recompute(tokens, sinks=, window=)`` gives the same logits with no
cache at all. ``decode`` (teacher-forced) and ``generate`` (greedy) run step by step.
Training (the lab): ``forward(tokens)`` with gradients, on the path ``default_path()``
picks (a dense SDPA path where the scheme has one: FlexAttention has no CPU backward).

A forward builds a dense SDPA bias once for the layers whose terms hold the same tables
(T5's one table, ALiBi's slopes: ``relpos_core.kernels.memo.shared_biases``), as Hugging
Face's T5 computes its position bias once per stack, wherever no gradient reaches those tables
(evaluation, decoding, fixed slopes); a term that reads q or k is built per layer.

Positions follow ``relpos_core.positions``: the new tokens are the last of the keys;
``forward(tokens, positions=p)`` places a sequence explicitly (randomised positions).

Layers that differ (``relpos_core.layers``): ``TransformerConfig(layers=pattern(
"rope@window=4096", repeat=3, then="none"))`` gives each layer its own scheme, options and
sliding window (``scheme`` is then None). Every path, the cache (a window layer keeps its
window only) and ``recompute`` follow the layer's spec.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from relpos_core import registry, schemes
from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.attend import attend
from relpos_core.cache import POSITION_FRAMES, ROPE_LAYOUTS, KVCache, weights_identity
from relpos_core.kernels import memo
from relpos_core.kernels.rotary import rotate
from relpos_core.layers import HybridPosition, LayerSpec, pattern_label
from relpos_core.schemes.declaration import ModelShape

__all__ = ["TransformerConfig", "Transformer", "Attention", "Block", "decode_paths", "kept_positions",
           "MODEL_DTYPES"]

MODEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class TransformerConfig:
    """Sizes of a ``Transformer`` and its scheme.

    ``scheme``: a registry name; ``position``: the scheme's options (its declaration's
    options dataclass; unknown names are refused). ``num_outputs``: logits per position
    (default ``vocab_size``, a language model). ``head_dim`` defaults to
    d_model // num_heads, ``d_mlp`` to 4 d_model. ``max_positions``: the longest sequence
    or cache the position module is built for (absolute tables, relative rows).
    ``num_layers`` defaults to 2, or to ``len(layers)``.

    ``layers``: instead of ``scheme`` and ``position``, one ``relpos_core.layers.LayerSpec``
    (or its string, ``"rope@window=4096"``) per layer: each layer's scheme, options and
    sliding window (``relpos_core.layers.pattern`` spells the repeating ones).
    """

    scheme: str | None = None
    position: dict = field(default_factory=dict)
    vocab_size: int = 64
    num_outputs: int | None = None
    d_model: int = 32
    num_heads: int = 4
    head_dim: int | None = None
    num_layers: int | None = None
    d_mlp: int | None = None
    causal: bool = True
    max_positions: int = 256
    layers: tuple | None = None

    def __post_init__(self):
        if self.layers is None:
            if self.num_layers is None:
                self.num_layers = 2
            entry = schemes.lookup(self.scheme)  # ValueError listing the names
        else:
            if self.scheme is not None or self.position:
                raise ValueError(f"pass either scheme and position (every layer alike) or layers (one spec per "
                                 f"layer), not both: got scheme={self.scheme!r} and {len(self.layers)} layers")
            if isinstance(self.layers, (str, LayerSpec)) or not self.layers:
                raise ValueError(f"layers must be a non-empty sequence of LayerSpec or 'scheme[@option=value]' "
                                 f"strings, got {self.layers!r}")
            self.layers = tuple(LayerSpec.parse(spec) for spec in self.layers)
            if self.num_layers is None:
                self.num_layers = len(self.layers)
            if self.num_layers != len(self.layers):
                raise ValueError(f"num_layers must equal len(layers) = {len(self.layers)} (or be None), "
                                 f"got {self.num_layers}")
            entry = None
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_positions"):
            check_positive_int(name, getattr(self, name))
        check_choice("causal", self.causal, (False, True))
        if not isinstance(self.position, dict):
            raise ValueError(f"position must be a dict of {self.scheme}'s options, got {type(self.position).__name__}")
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(f"d_model must be divisible by num_heads when head_dim is None, got "
                                 f"d_model={self.d_model}, num_heads={self.num_heads}")
            self.head_dim = self.d_model // self.num_heads
        check_positive_int("head_dim", self.head_dim)
        self.num_outputs = self.vocab_size if self.num_outputs is None else check_positive_int(
            "num_outputs", self.num_outputs)
        self.d_mlp = 4 * self.d_model if self.d_mlp is None else check_positive_int("d_mlp", self.d_mlp)
        for spec in self.layer_specs:
            if spec.entry.scheme.causal_only and not self.causal:
                raise ValueError(f"scheme {spec.scheme!r} is decoder-only (its paper defines it for causal "
                                 f"attention): pass causal=True")
            if spec.window is not None and not self.causal:
                raise ValueError(f"layers: a sliding window (window={spec.window}) needs a decoder: pass causal=True")
        if entry is not None:
            entry.options(self.position)  # checks the options

    def record(self) -> dict:
        """The fields as JSON values (results files): a single-scheme config as it always was (no
        ``layers`` key); one whose layers differ records them as its pattern string (``label``)."""
        out = dict(vars(self))
        if self.layers is None:
            del out["layers"]
        else:
            out["layers"] = self.label
        return out

    @property
    def hybrid(self) -> bool:
        """True when the layers are given one by one (``layers``)."""
        return self.layers is not None

    @property
    def layer_specs(self) -> tuple[LayerSpec, ...]:
        """Every layer's ``LayerSpec`` (for a single-scheme model: ``num_layers`` alike, no window)."""
        if self.layers is not None:
            return self.layers
        return (LayerSpec(self.scheme, dict(self.position)),) * self.num_layers

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Every layer's sliding window (None: global)."""
        return tuple(spec.window for spec in self.layer_specs)

    @property
    def label(self) -> str:
        """The scheme's name, or the layers' pattern (``"rope@window=4 x3, none"``)."""
        return self.scheme if self.layers is None else pattern_label(self.layers)

    @property
    def entry(self) -> schemes.Entry:
        if self.layers is not None:
            raise ValueError(f"this model's layers differ ({self.label}): there is no one scheme; read layer_specs")
        return schemes.lookup(self.scheme)

    @property
    def entries(self) -> list[schemes.Entry]:
        """The registry entries of the layers' schemes, each once, in layer order."""
        names = list(dict.fromkeys(spec.scheme for spec in self.layer_specs))
        return [schemes.lookup(n) for n in names]

    @property
    def options(self):
        return self.entry.options(self.position)

    def position_module(self):
        """The model's position module: the scheme's own, or a ``HybridPosition`` for ``layers``."""
        if self.layers is None:
            return self.entry.scheme.module(self.shape, self.options)
        return HybridPosition(self.shape, self.layers)

    @property
    def shape(self) -> ModelShape:
        return ModelShape(num_layers=self.num_layers, num_heads=self.num_heads, head_dim=self.head_dim,
                          d_model=self.d_model, causal=self.causal, max_positions=self.max_positions)


def decode_paths(scheme: str, *, evicted: bool = False) -> list[tuple[str, str]]:
    """Every (form, backend) of the registry that decodes ``scheme`` (Lq != Lk).

    ``evicted=True`` keeps only the paths that take explicit, gapped key positions (the
    skew form needs consecutive ones).
    """
    entry = schemes.lookup(scheme)
    if entry.scheme.not_decoded:
        raise ValueError(f"scheme {scheme!r} is not decoded: {entry.scheme.not_decoded}")
    return [(p.form, p.backend) for p in registry.paths(scheme) if not (evicted and p.positions != "any")]


def kept_positions(step: int, *, sinks: int, window: int | None) -> torch.Tensor:
    """Original positions a sink + window cache lets the token at ``step`` attend to (itself included).

    Decoding one token per call: the cache kept positions < sinks and the last ``window``
    positions before ``step`` (``KVCache.evict`` after the previous call), then appended
    ``step``. Returns an int64 (K,) tensor, increasing.
    """
    step = check_int("step", step, min_value=0)
    sinks = check_int("sinks", sinks, min_value=0)
    if window is None:
        return torch.arange(step + 1)  # (step + 1,)
    window = check_positive_int("window", window)
    # the sinks, then the last window positions before step and step itself: at most sinks + window + 1
    # positions, built without the step + 1 in between (kept_positions(10**12, ...) is 5 numbers, not 8 TB)
    head = torch.arange(min(sinks, step + 1))  # (<= sinks,)
    tail = torch.arange(max(min(sinks, step + 1), step - window), step + 1)  # (<= window + 1,)
    return torch.cat([head, tail])  # (K,) increasing


@dataclass(frozen=True)
class _Run:
    """How one forward call runs attention: the path, and where queries and keys sit."""

    form: str | None
    backend: str
    compiled: bool
    positions: dict  # rp.attend's position arguments ({} for the default rule)
    query: torch.Tensor  # (n,) positions of the new tokens
    rotated_cache: bool = False  # keys are stored rotated: rotate q and new k here, attend without rotation


class Attention(nn.Module):
    """One layer's attention: projections ``wq``, ``wk``, ``wv``, ``wo`` and ``rp.attend``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.windows = config.windows  # each layer's sliding window (None: global)
        D, H, dh = config.d_model, config.num_heads, config.head_dim
        self.wq = nn.Linear(D, H * dh, bias=False)
        self.wk = nn.Linear(D, H * dh, bias=False)
        self.wv = nn.Linear(D, H * dh, bias=False)
        self.wo = nn.Linear(H * dh, D, bias=False)

    def heads(self, x: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
        """(B, n, D) -> (B, H, n, dh) through ``proj``."""
        B, n, _ = x.shape
        return proj(x).view(B, n, self.config.num_heads, self.config.head_dim).transpose(1, 2)

    def forward(self, x_q, x_kv, *, term, run: _Run, layer: int, cache: KVCache | None) -> torch.Tensor:
        """Queries from x_q (B, n, D), keys and values from x_kv (B, m, D): returns (B, n, D)."""
        B, n, _ = x_q.shape
        q = self.heads(x_q, self.wq)  # (B, H, n, dh)
        k, v = self.heads(x_kv, self.wk), self.heads(x_kv, self.wv)  # (B, H, m, dh)
        if run.rotated_cache and term is not None and term.rotary is not None:
            # rotated once, at write time (RoPE); the term keeps no rotation
            q = rotate(q, run.query, term.rotary)  # (B, H, n, dh)
            k = rotate(k, run.query, term.rotary)  # (B, H, n, dh)
            term = term.without_rotary()
        positions = run.positions
        if cache is not None:
            k, v = cache.append(layer, k, v)  # (B, H, K_layer + n, dh)
            if k.shape[2] != len(cache) + n:  # a window layer keeps only its last tokens
                positions = dict(query_positions=run.query, key_positions=cache.layer_positions(layer, n, k.device))
        # check_finite=False (no scan per layer and step): a NaN or inf in the inputs then reaches the output as
        # each kernel propagates it, and not only in the rows that see it: on SDPA with a bias, a NaN key that
        # the causal mask hides still poisons the earlier rows (the NaN score enters the masked sum)
        out = attend(q, k, v, term, form=run.form, backend=run.backend, causal=self.config.causal,
                     compiled=run.compiled, check_finite=False, window=self.windows[layer],
                     **positions)  # (B, H, n, dh)
        return self.wo(out.transpose(1, 2).reshape(B, n, -1))  # (B, n, D)


class Block(nn.Module):
    """Pre-norm block: h + attention(norm(h)), then h + MLP(norm(h)).

    ``query`` (B, n, D), when given, is the input of the queries and of the residual,
    with keys and values from ``h`` (DeBERTa's Enhanced Mask Decoder drives it so).
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_mlp), nn.GELU(),
                                 nn.Linear(config.d_mlp, config.d_model))

    def forward(self, h, *, query=None, **attention):
        x = self.norm1(h)  # (B, m, D)
        residual = h if query is None else query
        x_q = x if query is None else self.norm1(query)
        h = residual + self.attention(x_q, x, **attention)  # (B, n, D)
        return h + self.mlp(self.norm2(h))  # (B, n, D)


# what each part's size comes from, for the error that refuses a model too large to build
_SIZED_BY = {"embed": "vocab_size", "head": "num_outputs", "blocks": "d_model, d_mlp and num_layers",
             "position": "max_positions (or the scheme's distance option)", "norm": "d_model"}


def _check_model_bytes(cfg: TransformerConfig, dtype: torch.dtype) -> None:
    """Size every parameter, buffer and per-forward table on the meta device (no memory) and check the
    largest against the memory budget, as every tensor a kernel path would materialise is checked."""
    from relpos_core.budget import check_memory

    with torch.device("meta"):
        parts = dict(embed=nn.Embedding(cfg.vocab_size, cfg.d_model),
                     position=cfg.position_module(),
                     blocks=nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers)),
                     norm=nn.LayerNorm(cfg.d_model),
                     head=nn.Linear(cfg.d_model, cfg.num_outputs, bias=False))
    size = torch.empty(0, dtype=dtype).element_size()
    tensors = [(part, name, tuple(t.shape)) for part, m in parts.items()
               for name, t in list(m.named_parameters()) + list(m.named_buffers())]
    # tables a scheme builds on every forward (Transformer-XL's relative rows), where it declares them
    table = getattr(parts["position"], "table_elements", lambda: 0)()
    if table:
        tensors.append(("position", "relative rows built per forward", (table,)))
    part, name, shape = max(tensors, key=lambda t: math.prod(t[2]))
    check_memory(math.prod(shape) * size, what=f"Transformer({cfg.label})'s {part} {name}, sized by "
                                               f"{_SIZED_BY[part]} (vocab_size={cfg.vocab_size}, "
                                               f"max_positions={cfg.max_positions}),",
                 shape=shape, dtype=dtype)


class Transformer(nn.Module):
    """A transformer for one scheme; see the module docstring. Weights are drawn from ``seed``."""

    def __init__(self, config: TransformerConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")
        check_int("seed", seed, min_value=0, max_value=2**63 - 1)
        check_choice("dtype", dtype, MODEL_DTYPES)
        self.config = cfg = config
        _check_model_bytes(cfg, dtype)  # before any allocation: a vocab_size or max_positions of 2**40 is refused
        with torch.random.fork_rng(devices=[]):  # the layers' default initialisation draws from the global RNG
            self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.position = cfg.position_module()
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
            self.norm = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.num_outputs, bias=False)
        self._init_weights(seed)  # every weight drawn again from its own generator: the caller's RNG is untouched
        self.to(device=device, dtype=dtype)
        self.eval()

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        """Linear weights N(0, 1 / fan_in), biases 0, norms 1, token embeddings N(0, 1); then the
        position module draws its own (``PositionModule.init_parameters``), from the same generator."""
        g = torch.Generator().manual_seed(seed)
        for module in [self.embed, *self.blocks, self.norm, self.head]:
            for sub in module.modules():
                if isinstance(sub, nn.Linear):
                    sub.weight.copy_(torch.randn(sub.weight.shape, generator=g) / math.sqrt(sub.weight.shape[1]))
                    if sub.bias is not None:
                        sub.bias.zero_()
                elif isinstance(sub, nn.LayerNorm):
                    sub.reset_parameters()
                elif isinstance(sub, nn.Embedding):
                    sub.weight.copy_(torch.randn(sub.weight.shape, generator=g))
        self.position.init_parameters(g)

    # -- positions ------------------------------------------------------------------
    def position_terms(self) -> list:
        """One ``PositionTerm`` (or None) per layer, built from the current weights.

        Decoding builds them once per run and passes them to every step (``terms=``).
        """
        return [self.position.term(layer, block.attention) for layer, block in enumerate(self.blocks)]

    def default_path(self) -> tuple[str, str]:
        """(form, backend) the model runs on when none is given: gather (or none) on SDPA, which
        trains on every device; the naive form where gather cannot compute the scheme; eager for a
        value term (Shaw's a^V)."""
        terms = [registry.example_term(entry.name, num_heads=self.config.num_heads, head_dim=self.config.head_dim,
                                       k=None, device="meta") for entry in self.config.entries]
        for form, backend in (("none", "sdpa"), ("gather", "sdpa"), ("naive", "sdpa"), ("gather", "eager"),
                              ("naive", "eager")):
            if all(registry.unsupported_reason(term, form, backend) is None for term in terms):
                return form, backend
        raise ValueError(f"no dense path computes {self.config.label}")  # pragma: no cover

    # -- the cache --------------------------------------------------------------------
    def cache_signature(self, rope_layout: str | None) -> tuple:
        """What a cache must match: the whole config (scheme and options, layers, heads, head size, vocabulary,
        MLP, max_positions), the dtype and the RoPE layout. The weights are checked apart
        (``relpos_core.cache.weights_identity``)."""
        c = self.config
        scheme = (c.scheme, repr(c.options)) if not c.hybrid else (
            c.label, repr(tuple((s.scheme, s.options, s.window) for s in c.layers)))
        return (*scheme, c.num_layers, c.num_heads, c.head_dim, str(self.head.weight.dtype),
                rope_layout, c.vocab_size, c.num_outputs, c.d_model, c.d_mlp, c.causal, c.max_positions)

    def _rotaries(self) -> list:
        """Each layer's rotation (``terms.Rotary``), or None for a layer that rotates nothing."""
        return [None if t is None else t.rotary for t in self.position_terms()]

    def _rotary(self):
        rotating = [r for r in self._rotaries() if r is not None]
        return rotating[0] if rotating else None

    def new_cache(self, *, sinks: int = 0, window: int | None = None, positions: str = "cache",
                  rope_layout: str | None = None) -> KVCache:
        """An empty ``KVCache`` for this model.

        ``positions``: "cache" (StreamingLLM's frame: renumbered after an eviction) or
        "original". ``rope_layout`` (rotating schemes only): "rotated" (the default where
        a rotated key stays right: keys rotated once, at write time) or "unrotated".
        """
        if not self.config.causal:
            raise ValueError("a KV cache needs a decoder: this model has causal=False")
        label = self.config.label
        for entry in self.config.entries:
            if entry.scheme.not_decoded:
                raise ValueError(f"scheme {entry.name!r} is not decoded: {entry.scheme.not_decoded}")
        check_choice("positions", positions, POSITION_FRAMES)
        rotaries = self._rotaries()
        rotating = [r for r in rotaries if r is not None]
        if rotating:
            cacheable = all(r.rotated_keys_cacheable for r in rotating)
            default = "rotated" if cacheable else "unrotated"
            rope_layout = default if rope_layout is None else check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
            if rope_layout == "rotated" and not cacheable:
                raise ValueError(f"rope_layout='rotated' cannot be used with {label}: a key rotated at "
                                 f"write time would not stay right (xPos's scale or a dynamic scaling changes with "
                                 f"the positions of each call); use rope_layout='unrotated'")
        elif rope_layout is not None:
            raise ValueError(f"rope_layout applies to rotating schemes only, this model is {label!r}: "
                             f"pass None")
        in_tokens = any(e.scheme.positions_in_tokens for e in self.config.entries)
        if in_tokens and window is not None and positions == "cache":
            raise ValueError(f"positions={positions!r} cannot be used with {label}: each cached key and "
                             f"value already contains its position vector, and renumbering would mean recomputing "
                             f"them from the tokens; use positions='original'")
        layer_windows = self.config.windows
        if window is not None and any(w is not None for w in layer_windows):
            raise ValueError(f"window={window} (the cache's sink + window eviction) cannot be combined with this "
                             f"model's sliding-window layers ({label}): each window layer already keeps only its "
                             f"window; pass window=None (global layers then keep every token)")
        rotary = rotaries if self.config.hybrid else (rotating[0] if rotating else None)
        cache = KVCache(self.config.num_layers, sinks=sinks, window=window, positions=positions,
                        rope_layout=rope_layout, rotary=rotary, signature=self.cache_signature(rope_layout),
                        layer_windows=layer_windows if self.config.hybrid else None)
        cache.weights = weights_identity(self)
        return cache

    def _check_cache(self, cache, batch: int) -> None:
        if not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a KVCache (from model.new_cache()) or None, got {type(cache).__name__}")
        want = self.cache_signature(cache.rope_layout)
        if cache.signature != want:
            raise ValueError(f"cache was made for another model: it expects {cache.signature}, this model is {want} "
                             f"(scheme and options, layers, heads, head size, dtype, RoPE layout); make one with "
                             f"model.new_cache()")
        if getattr(cache, "weights", None) != weights_identity(self):
            raise ValueError("cache was made for another model: the config matches but the weights are not the ones "
                             "the cache was filled with (another model, or these weights changed in place since); "
                             "make one with model.new_cache()")
        if cache.batch_size is not None and cache.batch_size != batch:
            raise ValueError(f"tokens must have the cache's batch size {cache.batch_size}, got {batch}")

    # -- running ----------------------------------------------------------------------
    def _check_tokens(self, tokens) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=2, dtype=(torch.int32, torch.int64))
        if tokens.shape[1] < 1 or tokens.shape[0] < 1:
            raise ValueError(f"tokens must be (B, n) with B, n >= 1, got shape {tuple(tokens.shape)}")
        V = self.config.vocab_size
        lo, hi = torch.stack([tokens.min(), tokens.max()]).tolist()
        if lo < 0 or hi >= V:
            raise ValueError(f"tokens must lie in [0, {V - 1}] (vocab_size {V}), got range [{lo}, {hi}]")
        return tokens

    def _run(self, n: int, cache, positions, form, backend, compiled, device) -> _Run:
        if backend is None:
            default_form, backend = self.default_path()
            form = default_form if form is None else form
        if cache is None:
            if positions is None:
                query = torch.arange(n, device=device)  # (n,)
                return _Run(form, backend, compiled, {}, query)
            check_tensor("positions", positions, ndim=1, dtype=(torch.int32, torch.int64), shape={0: n})
            positions = positions.to(device)
            return _Run(form, backend, compiled, dict(query_positions=positions, key_positions=positions), positions)
        if positions is not None:
            raise ValueError("positions must be None with a cache: the cache places the new tokens")
        query = cache.new_positions(n, device)  # (n,)
        if cache.contiguous:  # keys at 0 .. K + n - 1 and the new tokens last: the default rule
            run_positions = {}
        else:
            run_positions = dict(query_positions=query, key_positions=cache.key_positions(n, device))
        return _Run(form, backend, compiled, run_positions, query, rotated_cache=cache.rope_layout == "rotated")

    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None, *, positions: torch.Tensor | None = None,
                form: str | None = None, backend: str | None = None, compiled: bool = True,
                terms: list | None = None) -> torch.Tensor:
        """Logits (B, n, num_outputs) of the n new ``tokens`` (B, n).

        Without a cache the tokens sit at 0 .. n - 1 (or at ``positions``; in training mode
        at ``self.position.training_positions(n)`` where the scheme draws them, as
        randomised positions do) and attend to each other (causally in a decoder). With a cache they come next after the kept
        tokens, are appended to it, and the cache evicts after the call; if the call
        fails, the cache is left as it was.
        """
        tokens = self._check_tokens(tokens)
        B, n = tokens.shape
        if cache is not None:
            self._check_cache(cache, B)
        if self.training and cache is None and positions is None:  # a scheme may train at other positions
            positions = self.position.training_positions(n)
        run = self._run(n, cache, positions, form, backend, compiled, tokens.device)
        terms = self.position_terms() if terms is None else terms
        # a dense bias is built once for the layers that share its tables (kernels.memo.shared_biases)
        with (cache.step() if cache is not None else contextlib.nullcontext()), memo.shared_biases():
            h = self.position.embed(self.embed(tokens), run.query)  # (B, n, D)
            layers = {id(block): i for i, block in enumerate(self.blocks)}

            def apply(block, h, query=None):
                layer = layers[id(block)]
                return block(h, query=query, term=terms[layer], run=run, layer=layer, cache=cache)

            h = self.position.run_blocks(list(self.blocks), h, apply)  # (B, n, D)
            if cache is not None:
                cache.commit(n)
                cache.evict()
        return self.head(self.norm(h))  # (B, n, num_outputs)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, cache: KVCache, *, prefill: int = 1, form: str | None = None,
               backend: str | None = None, compiled: bool = True) -> torch.Tensor:
        """Teacher-forced decoding: the first ``prefill`` tokens in one call, then one call per token.

        Returns the logits (B, T, num_outputs) of every position, collected step by step.
        """
        tokens = self._check_tokens(tokens)
        T = tokens.shape[1]
        prefill = check_int("prefill", prefill, min_value=1, max_value=T)
        run = dict(form=form, backend=backend, compiled=compiled, terms=self.position_terms())
        logits = [self(tokens[:, :prefill], cache, **run)]  # (B, prefill, V)
        for t in range(prefill, T):
            logits.append(self(tokens[:, t:t + 1], cache, **run))  # (B, 1, V)
        return torch.cat(logits, dim=1)  # (B, T, V)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, cache: KVCache | None = None, *,
                 form: str | None = None, backend: str | None = None, compiled: bool = True) -> torch.Tensor:
        """Greedy generation: (B, P + max_new_tokens) tokens.

        With a cache: the prompt in one call, then one call per new token. Without one:
        the whole sequence is recomputed for every new token (no state kept between steps).
        """
        tokens = self._check_tokens(prompt)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        run = dict(form=form, backend=backend, compiled=compiled, terms=self.position_terms())
        step_input = tokens
        for _ in range(max_new_tokens):
            logits = self(step_input if cache is not None else tokens, cache, **run)  # (B, n, V)
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, nxt], dim=1)
            step_input = nxt
        return tokens

    @torch.no_grad()
    def recompute(self, tokens: torch.Tensor, *, sinks: int = 0, window: int | None = None,
                  positions: str = "cache", form: str | None = None, backend: str | None = None,
                  compiled: bool = True) -> torch.Tensor:
        """Logits (B, T, num_outputs) computed from scratch, with no cache.

        ``window=None``: ``forward(tokens)`` (one call per layer). Otherwise the attention
        of a sink + window cache decoded one token per call: every layer's keys and values
        are rebuilt from that layer's inputs, and the token at t attends to
        ``kept_positions(t, sinks, window)``, at those original positions, or (the cache
        frame) at 0 .. K - 1 with the query at K - 1.
        """
        tokens = self._check_tokens(tokens)
        check_choice("positions", positions, POSITION_FRAMES)
        if window is None:
            return self(tokens, form=form, backend=backend, compiled=compiled)
        if any(e.scheme.positions_in_tokens for e in self.config.entries) and positions != "original":
            raise ValueError(f"positions={positions!r} cannot be used with {self.config.label} (see new_cache)")
        if any(w is not None for w in self.config.windows):
            raise ValueError(f"window={window} (a sink + window cache) cannot be combined with this model's "
                             f"sliding-window layers ({self.config.label}); recompute with window=None")
        if backend is None:
            default_form, backend = self.default_path()
            form = default_form if form is None else form
        T, dev = tokens.shape[1], tokens.device
        terms = self.position_terms()
        steps = []  # for each token t: the keys it attends to and where queries and keys sit
        for t in range(T):
            kept = kept_positions(t, sinks=sinks, window=window).to(dev)  # (K,) original positions
            kpos = kept if positions == "original" else torch.arange(kept.numel(), device=dev)  # (K,)
            steps.append((kept, _Run(form, backend, compiled, dict(query_positions=kpos[-1:], key_positions=kpos),
                                     kpos[-1:])))
        layers = {id(block): i for i, block in enumerate(self.blocks)}

        def apply(block, h, query=None):  # the blocks forward() runs, one token at a time over its kept keys
            layer, queries = layers[id(block)], h if query is None else query
            return torch.cat([block(h[:, kept], query=queries[:, t:t + 1], term=terms[layer], run=run, layer=layer,
                                    cache=None) for t, (kept, run) in enumerate(steps)], dim=1)  # (B, T, D)

        h = self.position.embed(self.embed(tokens), torch.arange(T, device=dev))  # (B, T, D): original positions
        h = self.position.run_blocks(list(self.blocks), h, apply)  # (B, T, D)
        return self.head(self.norm(h))  # (B, T, num_outputs)

    def extra_repr(self) -> str:
        c = self.config
        return (f"scheme={c.label!r}, layers={c.num_layers}, d_model={c.d_model}, heads={c.num_heads}, "
                f"head_dim={c.head_dim}, causal={c.causal}")
