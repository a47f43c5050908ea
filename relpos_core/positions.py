"""Where the queries and keys sit: the one rule every scheme, builder and kernel path follows.

Book: "The KV cache" (chapters/08_the_kv_cache.ipynb); the rule is first used
in "Why relative positions" (chapters/01_why_relative_positions.ipynb).

**The rule.** Key j sits at position j, and the Lq queries are the *last* Lq of the Lk
keys: query i sits at position ``Lk - Lq + i``. That is self-attention when Lq == Lk and
a decoder step when Lq == 1 (the new token attends to its whole cache, itself included).
A call says otherwise in one of three ways:

* ``query_offset=o``: query i sits at ``o + i`` (keys still at 0 .. Lk - 1);
* ``query_positions``: a 1-D integer tensor, one position per query;
* ``key_positions``: a 1-D integer tensor, one position per key (the keys a KV cache kept
  after evicting others); the queries are then the last Lq of *those* positions unless
  ``query_offset`` or ``query_positions`` is given too.

``causal=True`` then means: key j is visible to query i iff key_pos[j] <= query_pos[i].
A sliding window of ``W`` (``rp.attend(..., window=W)``, a layer of a hybrid model)
narrows that to ``query_pos[i] - W < key_pos[j] <= query_pos[i]``: the query itself and
the W - 1 positions before it (Hugging Face's ``sliding_window`` and Mistral's convention).
Offsets are ``key_pos[j] - query_pos[i]`` (``key_minus_query``); schemes that speak of
``query_minus_key`` flip the sign where they read them. Every builder of the library
(``relative_offsets``, the schemes' index and bias builders) places its queries with
``query_key_positions`` below, so a builder and ``rp.attend`` agree on every call.

**Host values.** With the default rule or ``query_offset`` every position is known in
Python from the shapes: resolving them reads nothing from the device (no host sync, no
graph break under ``torch.compile``). Explicit position tensors cost exactly one read
of four numbers (their range and whether each is a run of consecutive integers), done
here once per call; nothing else in ``rp.attend`` reads a device value.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from relpos_core._validate import check_int, check_tensor

__all__ = ["Positions", "resolve_positions", "query_key_positions", "MAX_POSITION"]

# Positions are int64 and offsets are differences of two of them: keep both far from overflow.
MAX_POSITION = 2**40
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


@dataclass(frozen=True)
class Positions:
    """Query and key positions of one attention call.

    ``query`` (Lq,) and ``key`` (Lk,) int64 tensors on the call's device. ``query_start``
    and ``key_start`` hold the first value of each when it is a run of consecutive
    integers (None otherwise), so kernels use index arithmetic instead of lookups.
    ``min_query``, ``max_query``, ``min_key``, ``max_key`` are Python ints.
    """

    query: torch.Tensor  # (Lq,) int64
    key: torch.Tensor  # (Lk,) int64
    query_start: int | None  # query[i] == query_start + i, or None
    key_start: int | None  # key[j] == key_start + j, or None
    min_query: int
    max_query: int
    min_key: int
    max_key: int
    window: int | None = None  # sliding window: key visible iff query - window < key <= query (causal only)

    def with_window(self, window: int | None) -> "Positions":
        """The same positions with a sliding window of ``window`` keys (None: none)."""
        return self if window is None else dataclasses.replace(self, window=window)

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
        return self.min_key - self.max_query

    @property
    def max_offset(self) -> int:
        """The largest key_pos - query_pos of the call."""
        return self.max_key - self.min_query

    @property
    def num_offsets(self) -> int:
        return self.max_offset - self.min_offset + 1

    def offsets(self) -> torch.Tensor:
        """key_pos[j] - query_pos[i] for every pair: (Lq, Lk) int64, ``key_minus_query``.

        Allocates 8 Lq Lk bytes: kernel paths that can avoid it do.
        """
        return self.key[None, :] - self.query[:, None]  # (Lq, Lk)

    def visible(self) -> torch.Tensor:
        """The causal mask: (Lq, Lk) bool, True where key_pos[j] <= query_pos[i] (and, with a
        window W, query_pos[i] - W < key_pos[j])."""
        seen = self.key[None, :] <= self.query[:, None]  # (Lq, Lk)
        if self.window is not None:
            seen &= self.key[None, :] > self.query[:, None] - self.window  # (Lq, Lk)
        return seen

    @property
    def leading_empty_rows(self) -> int | None:
        """Contiguous positions: how many first queries see no key under the causal mask
        (their output is 0), known without reading the device. None otherwise."""
        if not self.contiguous:
            return None
        leading = max(0, min(self.query_len, self.key_start - self.query_start))
        if self.window is not None and self.max_query - self.window >= self.max_key:
            return None  # the last queries' windows lie past every key: rows_without_visible_key finds them
        return leading

    def rows_without_visible_key(self) -> torch.Tensor:
        """(Lq,) bool: queries for which the causal mask hides every key (their output is 0)."""
        if self.window is not None:
            return ~self.visible().any(-1)  # (Lq,)
        return self.query < self.min_key  # (Lq,)


def _check_positions(name: str, t, length_name: str, length: int) -> torch.Tensor:
    check_tensor(name, t, ndim=1, dtype=INT_DTYPES)
    if t.shape[0] != length:
        raise ValueError(f"{name} must hold one position per {length_name} ({length}), got shape {tuple(t.shape)}")
    return t.to(torch.int64)


def _summary(t: torch.Tensor) -> torch.Tensor:
    """(min, max, is a run of consecutive integers) of a 1-D int64 tensor, as a (3,) tensor."""
    run = (t[1:] - t[:-1] == 1).all() if t.numel() > 1 else torch.ones((), dtype=torch.bool, device=t.device)
    return torch.stack([t.min(), t.max(), run.to(torch.int64)])


def _read_explicit(query: torch.Tensor | None, key: torch.Tensor | None) -> dict:
    """The one host read for explicit positions: ranges and runs of both, checked against MAX_POSITION."""
    parts = [p for p in (query, key) if p is not None]
    values = torch.cat([_summary(p) for p in parts]).tolist()  # the call's only device read
    out = {}
    for name, t in (("query_positions", query), ("key_positions", key)):
        if t is None:
            continue
        lo, hi, run = values[:3]
        values = values[3:]
        if lo < -MAX_POSITION or hi > MAX_POSITION:
            raise ValueError(f"{name} must lie in [-2**40, 2**40], got range [{lo}, {hi}]")
        out[name] = (int(lo), int(hi), bool(run))
    return out


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
    length, not integers, out of [-2**40, 2**40], or when ``query_offset`` and
    ``query_positions`` are both given.
    """
    Lq = check_int("query_len", query_len, min_value=1)
    Lk = check_int("key_len", key_len, min_value=1)
    if query_offset is not None and query_positions is not None:
        raise ValueError("query_offset and query_positions must not both be given: pass one of them")
    if query_offset is not None:
        if isinstance(query_offset, torch.Tensor):
            raise ValueError(f"query_offset must be a Python or numpy integer, got a tensor {tuple(query_offset.shape)}")
        query_offset = check_int("query_offset", query_offset, min_value=-MAX_POSITION, max_value=MAX_POSITION)
    if query_positions is None and query_offset is None and key_positions is None and Lq > Lk:
        raise ValueError(
            f"q must not be longer than k when the queries are the last Lq keys (Lq = {Lq} > Lk = {Lk}); "
            f"pass query_offset or query_positions to place the queries explicitly")

    qp = None if query_positions is None else _check_positions("query_positions", query_positions, "query", Lq)
    kp = None if key_positions is None else _check_positions("key_positions", key_positions, "key", Lk)
    if kp is not None and qp is None and query_offset is None and Lq > Lk:
        raise ValueError(
            f"q must not be longer than k when the queries are the last Lq keys (Lq = {Lq} > Lk = {Lk}); "
            f"pass query_offset or query_positions to place the queries explicitly")
    key = torch.arange(Lk, device=device) if kp is None else kp.to(device)  # (Lk,)
    if qp is not None:
        query = qp.to(device)  # (Lq,)
    elif query_offset is not None:
        query = torch.arange(Lq, device=device) + query_offset  # (Lq,)
    else:
        query = key[Lk - Lq:]  # (Lq,) the last Lq key positions (a view)
    # what is not known from the shapes is read from the device, once
    explicit_query = qp is not None or (kp is not None and query_offset is None)
    read = _read_explicit(query if explicit_query else None, kp) if (explicit_query or kp is not None) else {}
    if kp is None:
        key_start, min_key, max_key = 0, 0, Lk - 1
    else:
        min_key, max_key, run = read["key_positions"]
        key_start = min_key if run else None
    if explicit_query:
        min_query, max_query, run = read["query_positions"]
        query_start = min_query if run else None
    elif query_offset is not None:
        query_start, min_query, max_query = query_offset, query_offset, query_offset + Lq - 1
    else:
        query_start, min_query, max_query = Lk - Lq, Lk - Lq, Lk - 1
    return Positions(query=query, key=key, query_start=query_start, key_start=key_start, min_query=min_query,
                     max_query=max_query, min_key=min_key, max_key=max_key)


def query_key_positions(query_len: int, key_len: int | None = None, *, query_offset: int | None = None,
                        key_positions: torch.Tensor | None = None, device=None) -> Positions:
    """The rule for a builder that takes ``(query_len, key_len)``: ``key_len`` defaults to
    ``query_len`` (or to ``key_positions``' length), and the queries are the last
    ``query_len`` keys unless ``query_offset`` places them."""
    if key_positions is not None:
        check_tensor("key_positions", key_positions, ndim=1, dtype=INT_DTYPES)
        if key_len is not None and key_len != key_positions.numel():
            raise ValueError(f"key_positions must hold one position per key (key_len = {key_len}), "
                             f"got shape {tuple(key_positions.shape)}")
        key_len = key_positions.numel()
        if key_len == 0:
            raise ValueError("key_positions must hold at least one position, got an empty tensor")
    key_len = query_len if key_len is None else key_len
    return resolve_positions(query_len, key_len, query_offset=query_offset, key_positions=key_positions,
                             device=device)
