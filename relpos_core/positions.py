"""Where the queries and keys sit: the one rule every scheme and kernel path follows.

Book: chapter 7, "The KV cache" (chapters/07_the_kv_cache.ipynb); the rule is first used
in chapter 1 (chapters/01_why_relative_positions.ipynb).

**The rule.** Key j sits at position j, and the Lq queries are the *last* Lq of the Lk
keys: query i sits at position ``Lk - Lq + i``. That is self-attention when Lq == Lk and
a decoder step when Lq == 1 (the new token attends to its whole cache, itself included).
A call says otherwise in one of three ways:

* ``query_offset=o``: query i sits at ``o + i`` (keys still at 0 .. Lk - 1);
* ``query_positions``: a 1-D integer tensor, one position per query;
* ``key_positions``: a 1-D integer tensor, one position per key (the keys a KV cache kept
  after evicting others, at their original positions); the queries are then the last Lq
  of *those* positions unless ``query_offset`` or ``query_positions`` is given too.

``causal=True`` then means: key j is visible to query i iff key_pos[j] <= query_pos[i].
Offsets are ``key_pos[j] - query_pos[i]`` (``key_minus_query``); schemes that speak of
``query_minus_key`` flip the sign where they read them.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core._validate import check_int, check_tensor

__all__ = ["Positions", "resolve_positions", "MAX_POSITION"]

# Positions are int64 and offsets are differences of two of them: keep both far from overflow.
MAX_POSITION = 2**40
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@dataclass(frozen=True)
class Positions:
    """Query and key positions of one attention call.

    ``query`` (Lq,) and ``key`` (Lk,) int64 tensors on the call's device. When both are
    runs of consecutive integers (the common case), ``query_start`` and ``key_start``
    hold their first values and kernels use index arithmetic instead of lookups.
    """

    query: torch.Tensor  # (Lq,) int64
    key: torch.Tensor  # (Lk,) int64
    query_start: int | None  # query[i] == query_start + i, or None
    key_start: int | None  # key[j] == key_start + j, or None

    @property
    def query_len(self) -> int:
        return self.query.shape[0]

    @property
    def key_len(self) -> int:
        return self.key.shape[0]

    @property
    def contiguous(self) -> bool:
        """True when queries and keys are both runs of consecutive positions."""
        return self.query_start is not None and self.key_start is not None

    @property
    def shift(self) -> int:
        """query_start - key_start (contiguous only): key j is visible to query i iff j <= i + shift."""
        if not self.contiguous:
            raise ValueError("shift is defined only for contiguous positions (both runs of consecutive integers)")
        return self.query_start - self.key_start

    @property
    def min_offset(self) -> int:
        """The smallest key_pos - query_pos of the call."""
        return int(self.key.min()) - int(self.query.max())

    @property
    def max_offset(self) -> int:
        """The largest key_pos - query_pos of the call."""
        return int(self.key.max()) - int(self.query.min())

    def offsets(self) -> torch.Tensor:
        """key_pos[j] - query_pos[i] for every pair: (Lq, Lk) int64, ``key_minus_query``.

        Allocates 8 Lq Lk bytes: kernel paths that can avoid it do.
        """
        return self.key[None, :] - self.query[:, None]  # (Lq, Lk)

    def visible(self) -> torch.Tensor:
        """The causal mask: (Lq, Lk) bool, True where key_pos[j] <= query_pos[i]."""
        return self.key[None, :] <= self.query[:, None]  # (Lq, Lk)

    def rows_without_visible_key(self) -> torch.Tensor:
        """(Lq,) bool: queries for which the causal mask hides every key (their output is 0)."""
        return self.query < self.key.min()  # (Lq,)


def _arange_start(t: torch.Tensor) -> int | None:
    """t[0] when t is t[0], t[0] + 1, ..., else None."""
    if t.numel() == 1:
        return int(t[0])
    step = t[1:] - t[:-1]
    return int(t[0]) if bool((step == 1).all()) else None


def _check_positions(name: str, t, length_name: str, length: int) -> torch.Tensor:
    check_tensor(name, t, ndim=1, dtype=INT_DTYPES)
    if t.shape[0] != length:
        raise ValueError(f"{name} must hold one position per {length_name} ({length}), got shape {tuple(t.shape)}")
    if t.numel() and (int(t.min()) < -MAX_POSITION or int(t.max()) > MAX_POSITION):
        raise ValueError(f"{name} must lie in [-2**40, 2**40], got range [{int(t.min())}, {int(t.max())}]")
    return t.to(torch.int64)


def resolve_positions(
    query_len: int,
    key_len: int,
    *,
    query_offset: int | None = None,
    query_positions: torch.Tensor | None = None,
    key_positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> Positions:
    """Apply the rule (module docstring) and return the call's ``Positions``.

    Raises ValueError naming the parameter when positions are missing, of the wrong
    length, not integers, or when ``query_offset`` and ``query_positions`` are both given.
    """
    Lq = check_int("query_len", query_len, min_value=1)
    Lk = check_int("key_len", key_len, min_value=1)
    if query_offset is not None and query_positions is not None:
        raise ValueError("query_offset and query_positions must not both be given: pass one of them")
    if query_offset is not None:
        if isinstance(query_offset, torch.Tensor):
            raise ValueError(f"query_offset must be a Python or numpy integer, got a tensor {tuple(query_offset.shape)}")
        query_offset = check_int("query_offset", query_offset, min_value=-MAX_POSITION, max_value=MAX_POSITION)

    if key_positions is None:
        key = torch.arange(Lk, device=device)  # (Lk,)
        key_start = 0
    else:
        key = _check_positions("key_positions", key_positions, "key", Lk).to(device)  # (Lk,)
        key_start = _arange_start(key)

    if query_positions is not None:
        query = _check_positions("query_positions", query_positions, "query", Lq).to(device)  # (Lq,)
        query_start = _arange_start(query)
    elif query_offset is not None:
        query = torch.arange(Lq, device=device) + query_offset  # (Lq,)
        query_start = query_offset
    else:
        if Lq > Lk:
            raise ValueError(
                f"q must not be longer than k when the queries are the last Lq keys (Lq = {Lq} > Lk = {Lk}); "
                f"pass query_offset or query_positions to place the queries explicitly")
        query = key[Lk - Lq:]  # (Lq,) the last Lq key positions
        query_start = Lk - Lq if key_positions is None else _arange_start(query)
    return Positions(query=query, key=key, query_start=query_start, key_start=key_start)
