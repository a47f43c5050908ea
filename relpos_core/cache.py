"""The KV cache: what a decoder keeps between steps, and how it forgets.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb).

One ``KVCache`` serves every layer of one ``relpos_core.models.Transformer`` (made by
``model.new_cache()``, which records the model it belongs to). Per layer it holds keys
and values, each (B, H, K, d), for every scheme: none of them depends on the query, and
the position signal is added when they are read (a bias, a vector term, a rotation) or
was added once to the token (absolute positions). All layers keep the same K tokens, so
one int64 vector ``positions`` (K,) says where each kept token sits.

Eviction (``sinks`` and ``window``): after each forward call the cache keeps the first
``sinks`` tokens (attention sinks) and the last ``window`` ones and drops the middle (a
FIFO memory when ``sinks == 0``). Two position frames:

* ``positions="cache"`` (StreamingLLM's, Xiao et al. 2024, section 3.2): positions are
  assigned *within the cache*: after an eviction the kept tokens are renumbered
  0 .. K - 1 and the next token comes at K, so every distance stays inside the range
  the model was trained on. RoPE keys cached *after* rotation are re-rotated by
  (new - old) on eviction (``rope_layout="rotated"``); keys cached *before* rotation are
  rotated at read time and need nothing. This is the frame that keeps working.
* ``positions="original"``: kept tokens keep the positions they were written at and the
  next token continues the original count; ``rp.attend`` receives the kept positions as
  ``key_positions``. Distances to the sinks grow without bound (an ALiBi sink 32k tokens
  back gets a penalty of thousands of logits): kept to show how it fails.

Layers that differ (``relpos_core.layers``): ``layer_windows`` gives each layer's sliding
window. A window layer of window W keeps at most its last W - 1 tokens after each call
(the next query sees itself and those: nothing else is needed) and evicts on its own;
its tokens are always the latest ones, at original positions (``layer_positions``). The
other (global) layers keep every token; the sink + window policy above is then refused
(a window layer's mask is in original positions). Each layer may rotate its own way or
not at all (``rotary``: one per layer). ``layer_nbytes`` gives the bytes per layer and
``relpos_core.layers.cache_bytes`` the formula they follow.

A cache refuses a model it was
not made for, and a step that fails (a refused path, a budget error) is rolled back, so
the cache stays as it was. Sign convention: positions are absolute integers; offsets
are formed by the kernels as ``key_minus_query`` (``relpos_core.positions``).
"""
from __future__ import annotations

import contextlib

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor

__all__ = ["KVCache", "POSITION_FRAMES", "ROPE_LAYOUTS", "POSITION_BYTES", "weights_identity"]

POSITION_FRAMES = ("cache", "original")
ROPE_LAYOUTS = ("rotated", "unrotated")
POSITION_BYTES = 8  # one int64 per kept token


def weights_identity(module: torch.nn.Module) -> tuple:
    """Which weights a cache was filled with: the module's id and, per parameter, its storage and version.

    Two models with the same config but other weights differ here, and so does one model
    whose weights were changed in place (an optimiser step) since the cache was filled:
    the cached keys and values would mix two models. Costs no device read.
    """
    return (id(module),) + tuple((p.data_ptr(), p._version) for p in module.parameters())


class KVCache:
    """Keys and values of every layer, with sink + window eviction (module docstring).

    ``num_layers``: layers of the model; ``sinks`` >= 0 and ``window`` >= 1 (or None:
    never evict). ``positions``: "cache" (renumbered after eviction) or "original".
    ``rope_layout``: "rotated" (keys stored after rotation, re-rotated when renumbered),
    "unrotated" (rotated at read time), or None for schemes without a rotation;
    ``rotary``: the model's rotation (``terms.Rotary``), needed to re-rotate, or a list of
    one per layer (None for a layer that rotates nothing). ``layer_windows``: None, or one
    sliding window per layer (None: global), see the module docstring.
    ``signature``: what the model that made the cache looks like (``model.new_cache``).
    """

    def __init__(self, num_layers: int, *, sinks: int = 0, window: int | None = None, positions: str = "cache",
                 rope_layout: str | None = None, rotary=None, signature: tuple | None = None,
                 layer_windows=None):
        self.num_layers = check_positive_int("num_layers", num_layers)
        if layer_windows is None:
            layer_windows = (None,) * self.num_layers
        layer_windows = tuple(layer_windows)
        if len(layer_windows) != self.num_layers:
            raise ValueError(f"layer_windows must hold one window per layer ({self.num_layers}), "
                             f"got {len(layer_windows)}")
        self.layer_windows = tuple(None if w is None else check_positive_int("layer_windows[i]", w)
                                   for w in layer_windows)
        if window is not None and any(w is not None for w in self.layer_windows):
            raise ValueError(f"window must be None when some layers have their own sliding window "
                             f"(layer_windows={self.layer_windows}), got {window}")
        self.sinks = check_int("sinks", sinks, min_value=0)
        self.window = None if window is None else check_positive_int("window", window)
        if self.window is None and self.sinks:
            raise ValueError(f"sinks must be 0 when window is None (nothing is evicted), got {self.sinks}")
        self.frame = check_choice("positions", positions, POSITION_FRAMES)
        self.rope_layout = check_choice("rope_layout", rope_layout, ROPE_LAYOUTS + (None,))
        rotaries = list(rotary) if isinstance(rotary, (list, tuple)) else [rotary] * self.num_layers
        if len(rotaries) != self.num_layers:
            raise ValueError(f"rotary must be one rotation or one per layer ({self.num_layers}), got {len(rotaries)}")
        if self.rope_layout == "rotated" and all(r is None for r in rotaries):
            raise ValueError("rope_layout='rotated' needs the model's rotary (to re-rotate kept keys)")
        self.rotaries = rotaries  # per layer: the rotation its keys carry, or None
        self.rotary = next((r for r in rotaries if r is not None), None)
        self.signature = signature
        self.weights: tuple | None = None  # weights_identity of the model (set by model.new_cache)
        self.keys: list[torch.Tensor | None] = [None] * self.num_layers  # (B, H, K, d) each
        self.values: list[torch.Tensor | None] = [None] * self.num_layers  # (B, H, K, d) each
        self.held = [0] * self.num_layers  # tokens each layer holds (a window layer: at most W - 1 between calls)
        self.layer_evicted = [0] * self.num_layers  # tokens each window layer has dropped so far
        self.positions = torch.empty(0, dtype=torch.int64)  # (K,) frame position of each kept token
        self.next_position = 0  # frame position of the next token
        self.contiguous = True  # the kept positions are 0 .. K - 1 (no gap): known without reading them
        self.seen = 0  # tokens written so far, evicted ones included
        self.evicted = 0  # tokens dropped so far
        self.rerotated = 0  # cached keys turned to a new position so far (per layer; cache frame, rotated)

    # -- reading -------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.positions.numel())

    @property
    def capacity(self) -> int | None:
        """Tokens kept after an eviction (sinks + window), or None (no eviction)."""
        return None if self.window is None else self.sinks + self.window

    @property
    def batch_size(self) -> int | None:
        held = next((t for t in self.keys if t is not None), None)
        return None if held is None else held.shape[0]

    def new_positions(self, count: int, device=None) -> torch.Tensor:
        """(count,) frame positions of the next ``count`` tokens."""
        count = check_positive_int("count", count)
        return torch.arange(self.next_position, self.next_position + count, device=device)  # (count,)

    def key_positions(self, count: int, device=None) -> torch.Tensor:
        """(K + count,): the kept tokens' positions followed by the next ``count`` ones."""
        return torch.cat([self.positions.to(device), self.new_positions(count, device)])  # (K + count,)

    def layer_positions(self, layer: int, count: int, device=None) -> torch.Tensor:
        """(held + count,): original positions of ``layer``'s kept tokens and the next ``count`` ones.

        A window layer holds the latest tokens only: they end where the cache ends.
        """
        if not self.contiguous:
            raise ValueError("layer_positions needs a cache that renumbered or dropped nothing (no sink + window "
                             "eviction)")
        end = self.next_position + check_positive_int("count", count)
        return torch.arange(end - self.held[layer] - count, end, device=device)  # (held + count,)

    def nbytes(self) -> dict[str, int]:
        """Bytes of every tensor the cache holds, by kind: keys, values, positions."""
        def total(tensors):
            return sum(t.numel() * t.element_size() for t in tensors if t is not None)

        return dict(keys=total(self.keys), values=total(self.values),
                    positions=self.positions.numel() * self.positions.element_size())

    def layer_nbytes(self) -> list[int]:
        """Bytes of each layer's keys and values (``relpos_core.layers.cache_bytes`` is the formula)."""
        return [sum(t.numel() * t.element_size() for t in (k, v) if t is not None)
                for k, v in zip(self.keys, self.values)]

    # -- writing (called by the model's layers) ------------------------------------------
    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, H, n, d) keys and values to ``layer``; returns the layer's (B, H, K + n, d) pair."""
        layer = check_int("layer", layer, min_value=0, max_value=self.num_layers - 1)
        check_tensor("k", k, ndim=4, floating=True)
        check_tensor("v", v, ndim=4, floating=True, shape={0: k.shape[0], 1: k.shape[1], 2: k.shape[2]})
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)  # (B, H, K + n, d)
            v = torch.cat([self.values[layer], v], dim=2)  # (B, H, K + n, d)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def commit(self, count: int) -> None:
        """Record that every layer appended ``count`` tokens at the next positions."""
        count = check_positive_int("count", count)
        self.positions = torch.cat([self.positions, self.new_positions(count)])  # (K + count,)
        self.next_position += count
        self.seen += count
        for layer, t in enumerate(self.keys):
            want = len(self) if self.layer_windows[layer] is None else self.held[layer] + count
            if t is not None and t.shape[2] != want:
                raise RuntimeError(f"layer {layer} holds {t.shape[2]} tokens, {want} expected: "
                                   f"every layer must append the same tokens before commit")
            self.held[layer] = want

    @contextlib.contextmanager
    def step(self):
        """A forward call's changes, undone if it raises: the cache is then as it was before."""
        saved = (list(self.keys), list(self.values), self.positions, self.next_position, self.contiguous,
                 self.seen, self.evicted, self.rerotated, list(self.held), list(self.layer_evicted))
        try:
            yield self
        except BaseException:
            (self.keys, self.values, self.positions, self.next_position, self.contiguous, self.seen, self.evicted,
             self.rerotated, self.held, self.layer_evicted) = saved
            raise

    def evict(self) -> int:
        """Keep the first ``sinks`` and the last ``window`` tokens; returns how many were dropped.

        ``positions="cache"``: the survivors become 0 .. K - 1 and rotated RoPE keys are
        turned by (new - old) so they equal keys rotated at their new positions.
        A window layer of window W keeps its last W - 1 tokens (the count returned is the
        global policy's only; ``layer_evicted`` counts each layer's).
        """
        for layer, w in enumerate(self.layer_windows):
            if w is not None and self.held[layer] > w - 1:
                drop = self.held[layer] - (w - 1)
                for store in (self.keys, self.values):  # a copy: the dropped rows are freed
                    store[layer] = store[layer][:, :, drop:].clone()
                self.held[layer] = w - 1
                self.layer_evicted[layer] += drop
        if self.window is None or len(self) <= self.capacity:
            return 0
        n = len(self)
        keep = torch.cat([torch.arange(self.sinks), torch.arange(n - self.window, n)])  # (sinks + window,)
        old = self.positions[keep]  # (K,)
        for store in (self.keys, self.values):
            for layer, t in enumerate(store):
                if t is not None:  # index_select copies: the evicted rows are freed
                    store[layer] = t.index_select(2, keep.to(t.device))
        if self.frame == "cache":
            new = torch.arange(keep.numel())  # (K,)
            if self.rope_layout == "rotated":
                self._rerotate(new - old)
            self.positions, self.next_position = new, int(keep.numel())
            self.held = [int(keep.numel())] * self.num_layers
        else:
            self.positions = old
            self.held = [int(keep.numel())] * self.num_layers
            # the kept positions are e.g. 36 .. 39 (a FIFO window) or 0, 1, 37 .. 39 (sinks): never 0 .. K - 1
            # again, so the model passes them to rp.attend explicitly
            self.contiguous = False
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
        if any(self.layer_evicted):
            raise ValueError(f"truncate needs every layer whole: window layers have dropped "
                             f"{self.layer_evicted} tokens, which a shorter cache would need again")
        length = check_int("length", length, min_value=0, max_value=len(self))
        for store in (self.keys, self.values):
            for layer, t in enumerate(store):
                if t is not None:
                    store[layer] = t.narrow(2, 0, length)
        dropped = len(self) - length
        self.held = [min(h, length) for h in self.held]
        self.positions = self.positions[:length]
        self.next_position -= dropped
        self.seen -= dropped

    # -- helpers -----------------------------------------------------------------------
    def _rerotate(self, delta: torch.Tensor) -> None:
        """Turn every cached key by ``delta`` (K,) positions: R(new) k = R(new - old) R(old) k."""
        from relpos_core.kernels.rotary import rotate

        moved = delta != 0  # (K,) only the keys whose number changed
        if not bool(moved.any()):
            return
        self.rerotated += int(moved.sum())
        for layer, k in enumerate(self.keys):
            if k is not None and self.rotaries[layer] is not None:
                k = k.clone()
                idx = moved.nonzero().squeeze(1).to(k.device)  # (M,)
                turned = rotate(k.index_select(2, idx), delta[moved].to(k.device), self.rotaries[layer],
                                attention_factor=False)  # (B, H, M, d), a pure rotation
                k.index_copy_(2, idx, turned)
                self.keys[layer] = k

    def __repr__(self) -> str:
        policy = "no eviction" if self.window is None else f"sinks={self.sinks}, window={self.window}"
        return (f"KVCache(keys and values of {self.num_layers} layers, {len(self)} tokens kept of {self.seen} seen, "
                f"{policy}, positions={self.frame!r}" + (f", rope_layout={self.rope_layout!r})"
                                                          if self.rope_layout else ")"))
