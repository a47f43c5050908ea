"""The KV cache: what a decoder keeps between steps, and how it forgets.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb).

One ``KVCache`` serves every layer of one ``relpos_core.decoding.Decoder``. Per layer it
holds either keys and values, each (B, H, K, d), or, for Transformer-XL, the segment
memory of Dai et al. (2019): the layer's input states (B, K, d_model), from which keys
and values are recomputed at every step. All layers keep the same K tokens, so one
int64 vector ``positions`` (K,) says where each kept token sits.

Eviction (``sinks`` and ``window``): after each forward call the cache keeps the first
``sinks`` tokens (attention sinks) and the last ``window`` ones and drops the middle, a
FIFO memory when ``sinks == 0`` (Transformer-XL's ``mem_len``). Two position frames:

* ``positions="original"``: kept tokens stay at the positions they were written at and
  the next token continues the original count. Offset-only schemes (T5, ALiBi, Shaw,
  Transformer-XL) and RoPE's rotated keys need nothing rewritten; ``rp.attend`` receives
  the kept positions as ``key_positions``.
* ``positions="renumbered"``: after an eviction the kept tokens are renumbered
  0 .. K - 1 (keeping every offset inside a trained range). Nothing that stores content
  only changes; RoPE keys cached *after* rotation must be re-rotated by (new - old), which
  ``evict`` does (``rope_layout="rotated"``); keys cached *before* rotation are rotated
  at read time and need nothing.

Sign convention: positions are absolute integers; offsets are formed by the kernels as
``key_minus_query`` (``relpos_core.positions``).
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor

__all__ = ["KVCache", "POSITION_FRAMES", "ROPE_LAYOUTS"]

POSITION_FRAMES = ("original", "renumbered")
ROPE_LAYOUTS = ("rotated", "unrotated")
POSITION_BYTES = 8  # one int64 per kept token


class KVCache:
    """Keys and values (or Transformer-XL's memory) of every layer, with sink + window eviction.

    ``num_layers``: layers of the decoder; ``stores``: "kv" (keys and values) or
    "memory" (Transformer-XL's layer inputs). ``sinks`` >= 0 and ``window`` >= 1 (or
    None: never evict). ``positions``: "original" or "renumbered" (module docstring).
    ``rope_layout``: "rotated" (keys stored after RoPE, re-rotated when renumbered),
    "unrotated" (rotated at read time), or None for schemes without RoPE.
    """

    def __init__(self, num_layers: int, *, stores: str = "kv", sinks: int = 0, window: int | None = None,
                 positions: str = "original", rope_layout: str | None = None, rope_base: float = 10000.0,
                 rope_pairing: str = "rotate_half"):
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.stores = check_choice("stores", stores, ("kv", "memory"))
        self.sinks = check_int("sinks", sinks, min_value=0)
        self.window = None if window is None else check_positive_int("window", window)
        if self.window is None and self.sinks:
            raise ValueError(f"sinks must be 0 when window is None (nothing is evicted), got {self.sinks}")
        self.frame = check_choice("positions", positions, POSITION_FRAMES)
        self.rope_layout = check_choice("rope_layout", rope_layout, ROPE_LAYOUTS + (None,))
        self.rope_base = float(rope_base)
        self.rope_pairing = rope_pairing
        self.keys: list[torch.Tensor | None] = [None] * self.num_layers  # (B, H, K, d) each
        self.values: list[torch.Tensor | None] = [None] * self.num_layers  # (B, H, K, d) each
        self.memory: list[torch.Tensor | None] = [None] * self.num_layers  # (B, K, d_model) each
        self.positions = torch.empty(0, dtype=torch.int64)  # (K,) frame position of each kept token
        self.next_position = 0  # frame position of the next token
        self.seen = 0  # tokens written so far, evicted ones included
        self.evicted = 0  # tokens dropped so far
        self.rerotated = 0  # cached keys turned to a new position so far (per layer; renumbered, rotated)

    # -- reading -------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.positions.numel())

    @property
    def capacity(self) -> int | None:
        """Tokens kept after an eviction (sinks + window), or None (no eviction)."""
        return None if self.window is None else self.sinks + self.window

    def new_positions(self, count: int, device=None) -> torch.Tensor:
        """(count,) frame positions of the next ``count`` tokens."""
        count = check_positive_int("count", count)
        return torch.arange(self.next_position, self.next_position + count, device=device)  # (count,)

    def key_positions(self, count: int, device=None) -> torch.Tensor:
        """(K + count,): the kept tokens' positions followed by the next ``count`` ones."""
        return torch.cat([self.positions.to(device), self.new_positions(count, device)])  # (K + count,)

    def nbytes(self) -> dict[str, int]:
        """Bytes of every tensor the cache holds, by kind: keys, values, memory, positions."""
        def total(tensors):
            return sum(t.numel() * t.element_size() for t in tensors if t is not None)

        return dict(keys=total(self.keys), values=total(self.values), memory=total(self.memory),
                    positions=self.positions.numel() * self.positions.element_size())

    # -- writing (called by the decoder's layers) --------------------------------------
    def append_kv(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, H, n, d) keys and values to ``layer``; returns the layer's (B, H, K + n, d) pair."""
        layer = self._check_layer(layer, "kv")
        check_tensor("k", k, ndim=4, floating=True)
        check_tensor("v", v, ndim=4, floating=True, shape={0: k.shape[0], 1: k.shape[1], 2: k.shape[2]})
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)  # (B, H, K + n, d)
            v = torch.cat([self.values[layer], v], dim=2)  # (B, H, K + n, d)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def append_memory(self, layer: int, states: torch.Tensor) -> torch.Tensor:
        """Append (B, n, d_model) layer inputs to ``layer``; returns its (B, K + n, d_model) memory."""
        layer = self._check_layer(layer, "memory")
        check_tensor("states", states, ndim=3, floating=True)
        if self.memory[layer] is not None:
            states = torch.cat([self.memory[layer], states], dim=1)  # (B, K + n, d_model)
        self.memory[layer] = states
        return states

    def commit(self, count: int) -> None:
        """Record that every layer appended ``count`` tokens at the next positions."""
        count = check_positive_int("count", count)
        self.positions = torch.cat([self.positions, self.new_positions(count)])  # (K + count,)
        self.next_position += count
        self.seen += count
        for name, store in (("keys", self.keys), ("memory", self.memory)):
            for layer, t in enumerate(store):
                n = t.shape[2 if name == "keys" else 1] if t is not None else None
                if n is not None and n != len(self):
                    raise RuntimeError(f"layer {layer} holds {n} tokens, the cache {len(self)}: "
                                       f"every layer must append the same tokens before commit")

    def evict(self) -> int:
        """Keep the first ``sinks`` and the last ``window`` tokens; returns how many were dropped.

        ``positions="renumbered"``: the survivors become 0 .. K - 1 and rotated RoPE keys
        are turned by (new - old) so they equal keys rotated at their new positions.
        """
        if self.window is None or len(self) <= self.capacity:
            return 0
        n = len(self)
        keep = torch.cat([torch.arange(self.sinks), torch.arange(n - self.window, n)])  # (sinks + window,)
        old = self.positions[keep]  # (K,)
        for store, dim in ((self.keys, 2), (self.values, 2), (self.memory, 1)):
            for layer, t in enumerate(store):
                if t is not None:  # index_select copies: the evicted rows are freed
                    store[layer] = t.index_select(dim, keep.to(t.device))
        if self.frame == "renumbered":
            new = torch.arange(keep.numel())  # (K,)
            if self.rope_layout == "rotated":
                self._rerotate(new - old)
            self.positions, self.next_position = new, int(keep.numel())
        else:
            self.positions = old
        dropped = n - int(keep.numel())
        self.evicted += dropped
        return dropped

    def truncate(self, length: int) -> None:
        """Drop every token after the first ``length`` (a rejected draft, a benchmark rollback).

        Only before any eviction (positions are then 0 .. K - 1): position ``length`` comes next.
        """
        if self.evicted:
            raise ValueError(f"truncate needs a cache that has evicted nothing (positions 0 .. K - 1); "
                             f"this one has evicted {self.evicted} tokens")
        length = check_int("length", length, min_value=0, max_value=len(self))
        for store, dim in ((self.keys, 2), (self.values, 2), (self.memory, 1)):
            for layer, t in enumerate(store):
                if t is not None:
                    store[layer] = t.narrow(dim, 0, length)
        dropped = len(self) - length
        self.positions = self.positions[:length]
        self.next_position -= dropped
        self.seen -= dropped

    # -- helpers -----------------------------------------------------------------------
    def _check_layer(self, layer, stores: str) -> int:
        layer = check_int("layer", layer, min_value=0, max_value=self.num_layers - 1)
        if self.stores != stores:
            raise ValueError(f"this cache stores {self.stores!r}, not {stores!r}")
        return layer

    def _rerotate(self, delta: torch.Tensor) -> None:
        """Turn every cached key by ``delta`` (K,) positions: R(new) k = R(new - old) R(old) k."""
        from relpos_core.schemes.rope import apply_rope

        moved = delta != 0  # (K,) only the keys whose number changed
        if not bool(moved.any()):
            return
        self.rerotated += int(moved.sum())
        for layer, k in enumerate(self.keys):
            if k is not None:
                k = k.clone()
                idx = moved.nonzero().squeeze(1).to(k.device)  # (M,)
                turned = apply_rope(k.index_select(2, idx), delta[moved].to(k.device), base=self.rope_base,
                                    pairing=self.rope_pairing)  # (B, H, M, d)
                k.index_copy_(2, idx, turned)
                self.keys[layer] = k

    def __repr__(self) -> str:
        kind = "memory" if self.stores == "memory" else "keys and values"
        policy = "no eviction" if self.window is None else f"sinks={self.sinks}, window={self.window}"
        return (f"KVCache({kind} of {self.num_layers} layers, {len(self)} tokens kept of {self.seen} seen, "
                f"{policy}, positions={self.frame!r}" + (f", rope_layout={self.rope_layout!r})"
                                                          if self.rope_layout else ")"))
