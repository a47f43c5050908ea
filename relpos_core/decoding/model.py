"""A small decoder per position scheme, decoded step by step with a KV cache.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

``Decoder(DecoderConfig(scheme=...))`` is a pre-norm transformer decoder (token
embedding, ``num_layers`` blocks of attention and MLP, a final norm and an output layer)
whose attention is ``rp.attend`` with the scheme's position term, so the same weights run
on every kernel path (``form``, ``backend``) of ``relpos_core.registry``:

* ``absolute``: sinusoidal (Vaswani et al., 2017) or learned vectors added to the
  token embeddings; attention without a position term;
* ``shaw``: Shaw et al. (2018), key and value tables per layer (the value term needs
  the eager backend);
* ``t5``: Raffel et al. (2020), causal buckets, one table shared by all layers;
* ``alibi``: Press et al. (2022), fixed slopes;
* ``rope``: Su et al. (2021); the cache holds keys rotated at write time
  (``rope_layout="rotated"``) or unrotated keys rotated at read time ("unrotated");
* ``transformer_xl``: Dai et al. (2019); the cache is the segment memory (each layer's
  input states) and keys and values are recomputed from it at every step; the relative
  rows cover distances 0 .. ``max_positions`` - 1.

DeBERTa (He et al., 2021) is not decoded: it is an encoder, pre-trained bidirectionally
by masked language modelling, with no causal form in the paper (``NOT_DECODED``).

``forward(tokens, cache)`` appends the new tokens to the cache, attends from them to
every kept token at the kept tokens' positions (``key_positions``), then lets the cache
evict. ``recompute(tokens, sinks=, window=)`` computes the same logits with no cache at
all: every layer's keys and values are rebuilt from the layer's inputs and each query
attends to the tokens a sink + window cache would have kept, at their original (or
renumbered) positions. Cached decoding equals it token by token (tests/test_decoding.py).
Sign conventions: each scheme's own; positions as in ``relpos_core.positions``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.attend import attend
from relpos_core.decoding.cache import POSITION_FRAMES, ROPE_LAYOUTS, KVCache
from relpos_core.schemes import absolute as absolute_mod
from relpos_core.schemes import alibi as alibi_mod
from relpos_core.schemes import rope as rope_mod
from relpos_core.schemes import shaw as shaw_mod
from relpos_core.schemes import t5 as t5_mod
from relpos_core.schemes import transformer_xl as txl_mod

__all__ = ["SCHEMES", "REGISTRY_NAMES", "NOT_DECODED", "DecoderConfig", "Decoder", "decode_paths",
           "kept_positions"]

SCHEMES = ("absolute", "shaw", "t5", "alibi", "rope", "transformer_xl")
REGISTRY_NAMES = dict(absolute="none", shaw="shaw", t5="t5", alibi="alibi", rope="rope",
                      transformer_xl="transformer_xl")
NOT_DECODED = {
    "deberta": "an encoder: pre-trained bidirectionally by masked language modelling, every token "
               "attending to keys on both sides (c2p and p2c both read offsets of either sign); the "
               "paper has no causal form to decode with",
}
MODEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass
class DecoderConfig:
    """Sizes of a ``Decoder``; ``scheme`` is one of ``SCHEMES``.

    ``max_positions``: rows of the absolute table, and the distances 0 .. max_positions - 1
    Transformer-XL's relative rows cover. ``max_relative_position``: Shaw's clip k.
    ``num_buckets``, ``max_distance``: T5's causal buckets. ``head_dim`` defaults to
    d_model // num_heads.
    """

    scheme: str
    vocab_size: int = 64
    d_model: int = 32
    num_heads: int = 4
    head_dim: int | None = None
    num_layers: int = 2
    d_mlp: int | None = None
    max_positions: int = 256
    absolute_embedding: str = "sinusoidal"
    max_relative_position: int = 8
    num_buckets: int = 32
    max_distance: int = 128
    rope_base: float = 10000.0

    def __post_init__(self):
        if self.scheme in NOT_DECODED:
            raise ValueError(f"scheme {self.scheme!r} is not decoded: {NOT_DECODED[self.scheme]}")
        check_choice("scheme", self.scheme, SCHEMES)
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "max_positions",
                     "max_relative_position"):
            check_positive_int(name, getattr(self, name))
        if self.head_dim is None:
            if self.d_model % self.num_heads:
                raise ValueError(f"d_model must be divisible by num_heads when head_dim is None, got "
                                 f"d_model={self.d_model}, num_heads={self.num_heads}")
            self.head_dim = self.d_model // self.num_heads
        check_positive_int("head_dim", self.head_dim)
        if self.scheme in ("rope", "transformer_xl") and self.head_dim % 2:
            raise ValueError(f"head_dim must be even for {self.scheme} (pairs / sin-cos halves), got {self.head_dim}")
        if self.scheme == "transformer_xl" and self.d_model % 2:
            raise ValueError(f"d_model must be even for transformer_xl (its sinusoid), got {self.d_model}")
        self.d_mlp = 4 * self.d_model if self.d_mlp is None else check_positive_int("d_mlp", self.d_mlp)
        check_choice("absolute_embedding", self.absolute_embedding, ("sinusoidal", "learned"))
        check_int("num_buckets", self.num_buckets, min_value=2)
        check_int("max_distance", self.max_distance, min_value=self.num_buckets // 2 + 1)
        rope_mod.position_term(base=self.rope_base)  # checks the base


def decode_paths(scheme: str, *, evicted: bool = False) -> list[tuple[str, str]]:
    """Every (form, backend) of the registry that decodes ``scheme`` (Lq != Lk).

    ``evicted=True`` keeps only the paths that take explicit, gapped key positions (the
    skew form needs contiguous ones: a renumbered cache is contiguous, an evicted
    original-position cache is not).
    """
    from relpos_core import registry

    check_choice("scheme", scheme, SCHEMES)
    out = []
    for p in registry.paths(REGISTRY_NAMES[scheme]):
        if evicted and p.positions != "any":
            continue
        out.append((p.form, p.backend))
    return out


def kept_positions(step: int, *, sinks: int, window: int | None) -> torch.Tensor:
    """Original positions a sink + window cache lets the token at ``step`` attend to (itself included).

    Decoding one token per call: the cache kept positions < sinks and the last ``window``
    positions before ``step`` (``KVCache.evict`` after the previous call), then appended
    ``step``. Returns an int64 (K,) tensor, increasing.
    """
    step = check_int("step", step, min_value=0)
    sinks = check_int("sinks", sinks, min_value=0)
    all_positions = torch.arange(step + 1)  # (step + 1,)
    if window is None:
        return all_positions
    window = check_positive_int("window", window)
    return all_positions[(all_positions < sinks) | (all_positions >= step - window)]  # (K,)


def _check_finite(*tensors: torch.Tensor) -> None:
    """The new tokens' queries, keys and values (or memory states) must be finite."""
    for t in tensors:
        if not bool(torch.isfinite(t).all()):
            raise ValueError("the new tokens' queries, keys or values hold non-finite values (NaN or inf): "
                             "check the weights and the inputs")


class DecoderAttention(nn.Module):
    """One layer's attention: projections, the scheme's learned position tables, ``rp.attend``."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        D, H, dh = config.d_model, config.num_heads, config.head_dim
        self.wq = nn.Linear(D, H * dh, bias=False)
        self.wk = nn.Linear(D, H * dh, bias=False)
        self.wv = nn.Linear(D, H * dh, bias=False)
        self.wo = nn.Linear(H * dh, D, bias=False)
        if config.scheme == "shaw":
            rows = 2 * config.max_relative_position + 1
            self.rel_key = nn.Parameter(torch.zeros(rows, dh))  # (2k + 1, dh): a^K, shared by heads
            self.rel_value = nn.Parameter(torch.zeros(rows, dh))  # (2k + 1, dh): a^V
        if config.scheme == "transformer_xl":
            self.r_net = nn.Linear(D, H * dh, bias=False)  # W_kR
            self.u = nn.Parameter(torch.zeros(H, dh))  # global content bias
            self.v = nn.Parameter(torch.zeros(H, dh))  # global position bias

    def heads(self, x: torch.Tensor, proj: nn.Linear) -> torch.Tensor:
        """(B, n, D) -> (B, H, n, dh) through ``proj``."""
        B, n, _ = x.shape
        return proj(x).view(B, n, self.config.num_heads, self.config.head_dim).transpose(1, 2)

    def position_term(self, shared: dict):
        """This layer's ``PositionTerm`` (None for absolute); ``shared`` holds model-level tables."""
        cfg = self.config
        if cfg.scheme == "shaw":
            return shaw_mod.position_term(rel_key=self.rel_key, rel_value=self.rel_value,
                                          max_relative_position=cfg.max_relative_position)
        if cfg.scheme == "transformer_xl":
            R = txl_mod.sinusoidal_relative_encoding(cfg.max_positions, cfg.d_model, dtype=self.u.dtype,
                                                     device=self.u.device)  # (D, d_model), distances D-1 .. 0
            r_k = self.r_net(R).view(cfg.max_positions, cfg.num_heads, cfg.head_dim).transpose(0, 1)  # (H, D, dh)
            return txl_mod.position_term(r_k, self.u, self.v)
        return shared.get(cfg.scheme)

    def forward(self, x, *, layer: int, cache: KVCache | None, q_pos, k_pos, term, form, backend, compiled):
        """x (B, n, D) -> (B, n, D): the n new tokens attend to the kept ones and to each other."""
        cfg = self.config
        B, n, _ = x.shape
        q = self.heads(x, self.wq)  # (B, H, n, dh)
        if cfg.scheme == "transformer_xl":
            states = x if cache is None else cache.append_memory(layer, x)  # (B, K + n, D): the memory
            k, v = self.heads(states, self.wk), self.heads(states, self.wv)  # (B, H, K + n, dh), recomputed
        else:
            k, v = self.heads(x, self.wk), self.heads(x, self.wv)  # (B, H, n, dh): the new tokens only
            rotated = cfg.scheme == "rope" and cache is not None and cache.rope_layout == "rotated"
            if rotated:
                k = rope_mod.apply_rope(k, q_pos, base=cfg.rope_base)  # (B, H, n, dh) rotated once, at write
                q = rope_mod.apply_rope(q, q_pos, base=cfg.rope_base)  # (B, H, n, dh)
                term = None  # positions are already inside q and k
            if cache is not None:
                k, v = cache.append_kv(layer, k, v)  # (B, H, K + n, dh)
        # what enters the cache is checked once, when written; rp.attend would rescan the whole cache
        _check_finite(q, x if cfg.scheme == "transformer_xl" else k[:, :, -n:], v[:, :, -n:])
        out = attend(q, k, v, term, form=form, backend=backend, causal=True, query_positions=q_pos,
                     key_positions=k_pos, compiled=compiled, check_finite=False)  # (B, H, n, dh)
        return self.wo(out.transpose(1, 2).reshape(B, n, -1))  # (B, n, D)


class DecoderBlock(nn.Module):
    """Pre-norm block: h + attention(norm(h)), then h + MLP(norm(h))."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model)
        self.attention = DecoderAttention(config)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_mlp), nn.GELU(),
                                 nn.Linear(config.d_mlp, config.d_model))

    def finish(self, h: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        h = h + attended  # (B, n, D)
        return h + self.mlp(self.norm2(h))  # (B, n, D)


class Decoder(nn.Module):
    """A small decoder for one scheme; see the module docstring. Weights are drawn from ``seed``."""

    def __init__(self, config: DecoderConfig, *, seed: int = 0, dtype: torch.dtype = torch.float32,
                 device: torch.device | str | None = None):
        super().__init__()
        if not isinstance(config, DecoderConfig):
            raise ValueError(f"config must be a DecoderConfig, got {type(config).__name__}")
        check_int("seed", seed, min_value=0)
        check_choice("dtype", dtype, MODEL_DTYPES)
        self.config = cfg = config
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        if cfg.scheme == "absolute":
            if cfg.absolute_embedding == "learned":
                self.wpe = absolute_mod.LearnedPositionEmbedding(cfg.max_positions, cfg.d_model)
            else:
                self.register_buffer("pe", absolute_mod.sinusoidal_position_embeddings(cfg.max_positions, cfg.d_model),
                                     persistent=False)  # (max_positions, D)
        if cfg.scheme == "t5":
            self.t5_table = nn.Parameter(torch.zeros(cfg.num_buckets, cfg.num_heads))  # (buckets, H), all layers
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights(seed)
        self.to(device=device, dtype=dtype)
        self.eval()

    @torch.no_grad()
    def _init_weights(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if "norm" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            elif p.dim() == 2 and name.endswith(("wq.weight", "wk.weight", "wv.weight", "wo.weight",
                                                  "r_net.weight", "head.weight", "0.weight", "2.weight")):
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))  # variance 1 / fan_in
            elif name.endswith("bias"):
                p.zero_()
            else:  # embeddings, position tables, u and v
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 if "embed" in name or "t5" in name else 0.5))

    # -- positions ------------------------------------------------------------------
    def position_terms(self) -> list:
        """One ``PositionTerm`` (or None) per layer, built from the current weights.

        Built once per decoding run and passed to every step (``terms=``): Transformer-XL's
        relative rows W_kR R cost a (max_positions, d_model) x (d_model, H dh) product.
        """
        cfg = self.config
        shared = {}
        if cfg.scheme == "t5":
            shared["t5"] = t5_mod.position_term(self.t5_table, bidirectional=False, max_distance=cfg.max_distance)
        elif cfg.scheme == "alibi":
            shared["alibi"] = alibi_mod.position_term(cfg.num_heads, device=self.head.weight.device)
        elif cfg.scheme == "rope":
            shared["rope"] = rope_mod.position_term(base=cfg.rope_base)
        return [block.attention.position_term(shared) for block in self.blocks]

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)  # (B, n, D)
        cfg = self.config
        if cfg.scheme == "absolute":
            if int(positions.max()) >= cfg.max_positions:
                raise ValueError(f"absolute positions must be < max_positions = {cfg.max_positions} (the table's "
                                 f"rows), got {int(positions.max())}")
            table = self.wpe.weight if cfg.absolute_embedding == "learned" else self.pe
            h = h + table[positions.to(h.device)].to(h.dtype)  # (B, n, D): the position enters the token
        return h

    def _check_tokens(self, tokens) -> torch.Tensor:
        check_tensor("tokens", tokens, ndim=2, dtype=(torch.int32, torch.int64))
        if tokens.shape[1] < 1 or tokens.shape[0] < 1:
            raise ValueError(f"tokens must be (B, n) with B, n >= 1, got shape {tuple(tokens.shape)}")
        V = self.config.vocab_size
        if int(tokens.min()) < 0 or int(tokens.max()) >= V:
            raise ValueError(f"tokens must lie in [0, {V - 1}] (vocab_size {V}), got range "
                             f"[{int(tokens.min())}, {int(tokens.max())}]")
        return tokens

    # -- the cache --------------------------------------------------------------------
    def new_cache(self, *, sinks: int = 0, window: int | None = None, positions: str = "original",
                  rope_layout: str | None = None) -> KVCache:
        """An empty ``KVCache`` for this model (``rope_layout`` only for RoPE, default "rotated")."""
        cfg = self.config
        check_choice("positions", positions, POSITION_FRAMES)
        if cfg.scheme == "rope":
            rope_layout = "rotated" if rope_layout is None else check_choice("rope_layout", rope_layout, ROPE_LAYOUTS)
        elif rope_layout is not None:
            raise ValueError(f"rope_layout applies to scheme 'rope' only, this model is {cfg.scheme!r}: pass None")
        if cfg.scheme == "absolute" and positions == "renumbered":
            raise ValueError("positions='renumbered' cannot be used with absolute positions: each cached key and "
                             "value already contains its position vector, and renumbering would mean recomputing "
                             "them from the tokens; use positions='original'")
        return KVCache(cfg.num_layers, stores="memory" if cfg.scheme == "transformer_xl" else "kv", sinks=sinks,
                       window=window, positions=positions, rope_layout=rope_layout, rope_base=cfg.rope_base)

    def _check_cache(self, cache, batch: int) -> None:
        if not isinstance(cache, KVCache):
            raise ValueError(f"cache must be a KVCache (from model.new_cache()) or None, got {type(cache).__name__}")
        if cache.num_layers != self.config.num_layers:
            raise ValueError(f"cache must have num_layers = {self.config.num_layers}, got {cache.num_layers}")
        want = "memory" if self.config.scheme == "transformer_xl" else "kv"
        if cache.stores != want:
            raise ValueError(f"cache must store {want!r} for {self.config.scheme}, got {cache.stores!r}")
        held = next((t for t in cache.keys + cache.memory if t is not None), None)
        if held is not None and held.shape[0] != batch:
            raise ValueError(f"tokens must have the cache's batch size {held.shape[0]}, got {batch}")

    # -- running ----------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, cache: KVCache | None = None, *, form: str | None = None,
                backend: str = "sdpa", compiled: bool = True, terms: list | None = None) -> torch.Tensor:
        """Logits (B, n, vocab) of the n new ``tokens`` (B, n).

        Without a cache the tokens sit at 0 .. n - 1 and attend causally to each other (one
        ``rp.attend`` call per layer, Lq = Lk = n). With a cache they come next after the
        kept tokens, are appended to it, and the cache evicts after the call.
        """
        tokens = self._check_tokens(tokens)
        B, n = tokens.shape
        if cache is None:
            q_pos = k_pos = torch.arange(n, device=tokens.device)  # (n,)
        else:
            self._check_cache(cache, B)
            q_pos = cache.new_positions(n, tokens.device)  # (n,)
            k_pos = cache.key_positions(n, tokens.device)  # (K + n,)
        terms = self.position_terms() if terms is None else terms
        h = self._embed(tokens, q_pos)  # (B, n, D)
        for layer, (block, term) in enumerate(zip(self.blocks, terms)):
            attended = block.attention(block.norm1(h), layer=layer, cache=cache, q_pos=q_pos, k_pos=k_pos,
                                       term=term, form=form, backend=backend, compiled=compiled)
            h = block.finish(h, attended)  # (B, n, D)
        if cache is not None:
            cache.commit(n)
            cache.evict()
        return self.head(self.norm(h))  # (B, n, vocab)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, cache: KVCache, *, prefill: int = 1, form: str | None = None,
               backend: str = "sdpa", compiled: bool = True) -> torch.Tensor:
        """Teacher-forced decoding: the first ``prefill`` tokens in one call, then one call per token.

        Returns the logits (B, T, vocab) of every position, collected step by step.
        """
        tokens = self._check_tokens(tokens)
        T = tokens.shape[1]
        prefill = check_int("prefill", prefill, min_value=1, max_value=T)
        terms = self.position_terms()
        run = dict(form=form, backend=backend, compiled=compiled, terms=terms)
        logits = [self(tokens[:, :prefill], cache, **run)]  # (B, prefill, vocab)
        for t in range(prefill, T):
            logits.append(self(tokens[:, t:t + 1], cache, **run))  # (B, 1, vocab)
        return torch.cat(logits, dim=1)  # (B, T, vocab)

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, cache: KVCache | None = None, *,
                 form: str | None = None, backend: str = "sdpa", compiled: bool = True) -> torch.Tensor:
        """Greedy generation: (B, P + max_new_tokens) tokens.

        With a cache: the prompt in one call, then one call per new token. Without one:
        the whole sequence is recomputed for every new token (no state kept between steps).
        """
        tokens = self._check_tokens(prompt)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        terms = self.position_terms()
        run = dict(form=form, backend=backend, compiled=compiled, terms=terms)
        step_input = tokens
        for _ in range(max_new_tokens):
            logits = self(step_input if cache is not None else tokens, cache, **run)  # (B, n, vocab)
            nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, nxt], dim=1)
            step_input = nxt
        return tokens

    @torch.no_grad()
    def recompute(self, tokens: torch.Tensor, *, sinks: int = 0, window: int | None = None,
                  positions: str = "original", form: str | None = None, backend: str = "sdpa",
                  compiled: bool = True) -> torch.Tensor:
        """Logits (B, T, vocab) computed from scratch, with no cache.

        ``window=None``: ``forward(tokens)`` (causal, one call per layer). Otherwise the
        attention of a sink + window cache decoded one token per call: every layer's
        keys and values are rebuilt from that layer's inputs, and the token at t attends
        to ``kept_positions(t, sinks, window)``, at those original positions, or
        (``positions="renumbered"``) at 0 .. K - 1 with the query at K - 1.
        """
        tokens = self._check_tokens(tokens)
        check_choice("positions", positions, POSITION_FRAMES)
        if window is None:
            return self(tokens, form=form, backend=backend, compiled=compiled)
        if self.config.scheme == "absolute" and positions == "renumbered":
            raise ValueError("positions='renumbered' cannot be used with absolute positions (see new_cache)")
        B, T = tokens.shape
        dev = tokens.device
        terms = self.position_terms()
        h = self._embed(tokens, torch.arange(T, device=dev))  # (B, T, D): original positions
        rows = [kept_positions(t, sinks=sinks, window=window).to(dev) for t in range(T)]
        for block, term in zip(self.blocks, terms):
            attn = block.attention
            x = block.norm1(h)  # (B, T, D)
            q, k, v = attn.heads(x, attn.wq), attn.heads(x, attn.wk), attn.heads(x, attn.wv)  # (B, H, T, dh)
            outs = []
            for t, kept in enumerate(rows):
                if positions == "original":
                    kpos, qpos = kept, kept[-1:]  # (K,), (1,)
                else:
                    kpos = torch.arange(kept.numel(), device=dev)  # (K,) renumbered
                    qpos = kpos[-1:]
                outs.append(attend(q[:, :, t:t + 1], k[:, :, kept], v[:, :, kept], term, form=form,
                                   backend=backend, causal=True, query_positions=qpos, key_positions=kpos,
                                   compiled=compiled))  # (B, H, 1, dh)
            out = torch.cat(outs, dim=2)  # (B, H, T, dh)
            h = block.finish(h, attn.wo(out.transpose(1, 2).reshape(B, T, -1)))  # (B, T, D)
        return self.head(self.norm(h))  # (B, T, vocab)

    def extra_repr(self) -> str:
        c = self.config
        return (f"scheme={c.scheme!r}, layers={c.num_layers}, d_model={c.d_model}, heads={c.num_heads}, "
                f"head_dim={c.head_dim}")
