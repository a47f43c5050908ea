"""Synthetic tasks for the lab: seeded generators whose labels are right by construction.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb).

Every task draws a batch with ``sample(batch_size, length, generator)`` and returns a
:class:`Batch`: ``tokens`` (B, L) int64, ``targets`` (B, L) int64 holding the class to
predict at the positions that carry a label and ``IGNORE`` (-100) everywhere else, and
``detail`` (B, L) int64, the quantity each labelled position is analysed by (distance to
the answer, offset to the marker, position), ``IGNORE`` elsewhere. All randomness comes
from the ``torch.Generator`` passed in, so a seed fixes the data.

* ``retrieval`` (causal): key-value pairs scattered in filler, then every key again as a
  query; the label at a query is the value that followed that key. It needs the content
  match (which key) and one exact offset (the token right after it), at any distance.
* ``copy`` (causal): n distinct tokens, a separator, then the same tokens again; at every
  position from the separator on, the label is the next token of the copy. n changes
  from row to row, so no fixed offset solves it.
* ``marker`` (bidirectional): filler with one marker token; every token within D of it is
  labelled with its signed offset r = marker - token, one class per offset. A clip at k
  or a shared bucket makes offsets beyond it look the same.
* ``position`` (bidirectional): random filler; every token is labelled with its own
  absolute position. Relative-only attention sees it exactly only near the ends of the
  row; absolute positions give it directly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from relpos_core._validate import check_int, check_positive_int

__all__ = ["IGNORE", "Batch", "Task", "RetrievalTask", "CopyTask", "MarkerTask", "PositionTask", "make_task", "TASKS"]

IGNORE = -100


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, L) int64
    targets: torch.Tensor  # (B, L) int64, IGNORE where no label
    detail: torch.Tensor  # (B, L) int64, IGNORE where no label


def _randperm_rows(batch: int, n: int, generator: torch.Generator) -> torch.Tensor:
    """(B, n) int64: an independent random permutation of 0..n-1 per row."""
    return torch.rand(batch, n, generator=generator).argsort(dim=1)  # (B, n)


class Task:
    """Base class: name, whether attention is causal, vocabulary and label sizes."""

    name: str = ""
    causal: bool = False
    vocab_size: int = 0
    num_classes: int = 0
    detail_name: str = ""

    def min_length(self) -> int:
        raise NotImplementedError

    def check_length(self, length) -> int:
        return check_int("length", length, min_value=self.min_length())

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> Batch:
        batch_size = check_positive_int("batch_size", batch_size)
        length = self.check_length(length)
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        return self._sample(batch_size, length, generator)

    def _sample(self, B: int, L: int, g: torch.Generator) -> Batch:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "causal": self.causal, "vocab_size": self.vocab_size,
                "num_classes": self.num_classes, "detail": self.detail_name}


class RetrievalTask(Task):
    """Key-value retrieval (causal). Tokens: filler [0, F), keys [F, F + K), values [F + K, F + K + V).

    Layout of a length-L row: a context of L - P tokens (filler, with P pairs "key value" at
    random non-overlapping places) followed by the P keys again in a random order. The
    label at each query is its value; ``detail`` is the distance from the query back to that
    value. Keys in a row are distinct, values are drawn with replacement.
    """

    name = "retrieval"
    causal = True
    detail_name = "distance from the query back to its value"

    def __init__(self, num_pairs: int = 4, num_keys: int = 16, num_values: int = 16, num_filler: int = 8):
        self.num_pairs = check_positive_int("num_pairs", num_pairs)
        self.num_keys = check_int("num_keys", num_keys, min_value=num_pairs)
        self.num_values = check_int("num_values", num_values, min_value=2)
        self.num_filler = check_positive_int("num_filler", num_filler)
        self.vocab_size = self.num_filler + self.num_keys + self.num_values
        self.num_classes = self.vocab_size

    def min_length(self) -> int:
        return 3 * self.num_pairs + 1  # pairs, queries, at least one filler

    def _sample(self, B, L, g):
        P, F, K = self.num_pairs, self.num_filler, self.num_keys
        C = L - P  # context length
        tokens = torch.randint(0, F, (B, L), generator=g)  # (B, L) filler
        slots = _randperm_rows(B, C - P, g)[:, :P].sort(dim=1).values  # (B, P) distinct, sorted
        starts = slots + torch.arange(P)  # (B, P) key positions, at least 2 apart, last <= C - 2
        keys = F + _randperm_rows(B, K, g)[:, :P]  # (B, P) distinct keys
        values = F + K + torch.randint(0, self.num_values, (B, P), generator=g)  # (B, P)
        rows = torch.arange(B)[:, None]  # (B, 1)
        tokens[rows, starts] = keys
        tokens[rows, starts + 1] = values
        order = _randperm_rows(B, P, g)  # (B, P) which pair each query asks for
        query_pos = C + torch.arange(P)  # (P,)
        tokens[:, query_pos] = keys.gather(1, order)
        targets = torch.full((B, L), IGNORE, dtype=torch.long)
        detail = torch.full((B, L), IGNORE, dtype=torch.long)
        targets[:, query_pos] = values.gather(1, order)
        detail[:, query_pos] = query_pos - (starts + 1).gather(1, order)  # (B, P) distance back to the value
        return Batch(tokens, targets, detail)


class CopyTask(Task):
    """Copying (causal). Tokens: PAD 0, SEP 1, symbols [2, V + 2).

    A row of length L is PAD x (L - 2n), x_1 .. x_n, SEP, x_1 .. x_{n-1}: n distinct
    symbols, a separator and the same symbols again. The label at SEP is x_1 and at the
    copy of x_t it is x_{t+1}; ``detail`` is the index t - 1 of the label in the copy.
    n is uniform over [ceil(min_fraction * L), L // 2] per row, so the distance from a
    symbol to its copy (n + 1) changes from row to row: no single offset solves the task
    at the training length. What works at every length is to find the previous occurrence
    of the current token and read the token after it.
    """

    name = "copy"
    causal = True
    detail_name = "index of the label within the copy"
    PAD, SEP = 0, 1

    def __init__(self, num_symbols: int = 64, min_fraction: float = 0.25):
        self.num_symbols = check_int("num_symbols", num_symbols, min_value=2)
        if not isinstance(min_fraction, (int, float)) or not 0 < min_fraction <= 0.5:
            raise ValueError(f"min_fraction must be a number in (0, 0.5], got {min_fraction!r}")
        self.min_fraction = float(min_fraction)
        self.vocab_size = self.num_symbols + 2
        self.num_classes = self.vocab_size

    def min_length(self) -> int:
        return 4

    def check_length(self, length) -> int:
        return check_int("length", length, min_value=4, max_value=2 * self.num_symbols)

    def copy_sizes(self, length: int) -> tuple[int, int]:
        """(smallest, largest) n for rows of this length."""
        hi = length // 2
        return min(hi, max(2, math.ceil(self.min_fraction * length))), hi

    def _sample(self, B, L, g):
        lo, hi = self.copy_sizes(L)
        n = torch.randint(lo, hi + 1, (B,), generator=g)  # (B,) copy sizes
        x = 2 + _randperm_rows(B, self.num_symbols, g)[:, :hi]  # (B, hi) distinct symbols
        start = L - 2 * n  # (B,) first symbol; PAD before it
        col = torch.arange(L)[None, :]  # (1, L)
        t = col - start[:, None]  # (B, L) index in x_1 .. x_n (0-based), then n for SEP, then the copy
        in_x = (t >= 0) & (t < n[:, None])  # (B, L)
        in_copy = t > n[:, None]  # (B, L)
        copy_t = (t - n[:, None] - 1).clamp(min=0)  # (B, L) 0-based index of the token being copied
        src = torch.where(in_copy, copy_t, t.clamp(min=0, max=hi - 1))  # (B, L)
        symbols = x.gather(1, src.clamp(max=hi - 1))  # (B, L)
        tokens = torch.full((B, L), self.PAD, dtype=torch.long)
        tokens = torch.where(in_x | in_copy, symbols, tokens)
        tokens = torch.where(t == n[:, None], torch.full_like(tokens, self.SEP), tokens)
        labelled = t >= n[:, None]  # (B, L) SEP and the copy
        label_t = (t - n[:, None]).clamp(min=0, max=hi - 1)  # (B, L) the label is x_{label_t + 1}
        targets = torch.where(labelled, x.gather(1, label_t), IGNORE)  # (B, L)
        detail = torch.where(labelled, t - n[:, None], IGNORE)  # (B, L)
        return Batch(tokens, targets, detail)


class MarkerTask(Task):
    """Signed offset to a marker (bidirectional). Tokens: filler [0, F), MARKER = F.

    One marker per row, at a uniform position m. Every token i with 1 <= |m - i| <= D is
    labelled with its offset r = m - i (``key_minus_query``: the marker position minus the
    token's own), as class r + D for r < 0 and r + D - 1 for r > 0 (2D classes); tokens
    further away and the marker itself carry no label. ``detail`` is r. Telling r from
    r + 1 needs the two offsets to look different to attention; a clip at k or a shared
    bucket makes them look the same.
    """

    name = "marker"
    causal = False
    detail_name = "offset r = marker - token"

    def __init__(self, max_offset: int = 16, num_filler: int = 16):
        self.max_offset = check_positive_int("max_offset", max_offset)
        self.num_filler = check_positive_int("num_filler", num_filler)
        self.marker_token = self.num_filler
        self.vocab_size = self.num_filler + 1
        self.num_classes = 2 * self.max_offset

    def min_length(self) -> int:
        return self.max_offset + 1

    def offset_to_class(self, r: torch.Tensor) -> torch.Tensor:
        """Class of offset r in [-D, D] without 0: r + D below zero, r + D - 1 above."""
        return torch.where(r < 0, r + self.max_offset, r + self.max_offset - 1)

    def class_to_offset(self, c: torch.Tensor) -> torch.Tensor:
        return torch.where(c < self.max_offset, c - self.max_offset, c - self.max_offset + 1)

    def _sample(self, B, L, g):
        D = self.max_offset
        tokens = torch.randint(0, self.num_filler, (B, L), generator=g)  # (B, L) filler
        m = torch.randint(0, L, (B,), generator=g)  # (B,) marker positions
        tokens[torch.arange(B), m] = self.marker_token
        r = m[:, None] - torch.arange(L)  # (B, L) marker minus token
        labelled = (r != 0) & (r.abs() <= D)  # (B, L)
        targets = torch.where(labelled, self.offset_to_class(r), IGNORE)  # (B, L)
        detail = torch.where(labelled, r, IGNORE)  # (B, L)
        return Batch(tokens, targets, detail)


class PositionTask(Task):
    """Where am I (bidirectional)? Tokens: filler [0, F).

    Every token is labelled with its own absolute position i (``num_positions`` classes;
    rows may be at most that long); ``detail`` is i as well. Relative-only attention sees
    offsets, not positions: it can tell exactly where it is only near the two ends of the
    row (as far as its clip reaches), and elsewhere only roughly, from how many keys there
    are on each side. Absolute positions give the answer directly.
    """

    name = "position"
    causal = False
    detail_name = "absolute position i"

    def __init__(self, num_positions: int = 32, num_filler: int = 16):
        self.num_positions = check_int("num_positions", num_positions, min_value=2)
        self.num_filler = check_positive_int("num_filler", num_filler)
        self.vocab_size = self.num_filler
        self.num_classes = self.num_positions

    def min_length(self) -> int:
        return 2

    def check_length(self, length) -> int:
        return check_int("length", length, min_value=2, max_value=self.num_positions)

    def _sample(self, B, L, g):
        tokens = torch.randint(0, self.num_filler, (B, L), generator=g)  # (B, L)
        i = torch.arange(L).expand(B, L).clone()  # (B, L)
        return Batch(tokens, i, i.clone())


TASKS = {"retrieval": RetrievalTask, "copy": CopyTask, "marker": MarkerTask, "position": PositionTask}


def make_task(name: str, **options) -> Task:
    """A task by name with its options (see each class)."""
    if name not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")
    return TASKS[name](**options)
