"""Synthetic tasks for the lab: seeded generators whose labels are right by construction.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb).

Every task draws a batch with ``sample(batch_size, length, generator)`` and returns a
:class:`Batch`: ``tokens`` (B, L) int64, ``targets`` (B, L) int64 holding the class to
predict at the positions that carry a label and ``IGNORE`` (-100) everywhere else, and
``detail`` (B, L) int64, the quantity each labelled position is analysed by (distance to
the answer, offset to the marker, position), ``IGNORE`` elsewhere. All randomness comes
from the ``torch.Generator`` passed in, so a seed fixes the data. Each task says what a
model without any position signal can reach (``position_free_floor``), so a result can be
read against it.

* ``retrieval`` (causal): key-value pairs scattered in filler, then keys again as
  queries; the label at a query is the value that followed that key. With ``gap = 1``
  (the value right after its key) the task needs token *order* only, which a causal
  mask already gives a model without positions (Kazemnejad et al. 2023). With
  ``gap > 1`` the tokens between a key and its value are decoy values: the answer is the
  value exactly ``gap`` tokens after the key, which needs a position (an offset), not
  only order. ``min_pairs`` < ``num_pairs`` varies the number of pairs (their density)
  from row to row.
* ``copy`` (causal): n distinct symbols, a separator, then the same symbols again; from
  the separator on, the label is the next symbol of the copy. n is uniform in
  ``[min_copy, max_copy]`` and the block sits at a random place among padding, so
  neither the separator's position nor the row length tells n. "Longer rows, same n"
  and "longer n, same row" are separate evaluations (the preset's probes).
* ``marker``: filler with one marker token; a token within D of it is labelled with its
  offset r = marker - token. Bidirectional (``causal=False``): every such token, 2D
  classes (sign and distance, scored apart by ``parts``); causal: only the tokens after
  the marker (which can see it), D classes (the distance).
* ``position`` (bidirectional): random filler; every token is labelled with its own
  absolute position. A relative-only encoder has no absolute position, but it can count
  its distance to the two ends of the row: the task measures how fast each model learns
  it (DeBERTa's Enhanced Mask Decoder adds absolute positions at the output).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int

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

    def parts(self, predicted: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named parts of a prediction scored apart: name -> (N,) bool, for (N,) predicted and
        target classes (none by default; the bidirectional marker task scores sign and distance)."""
        return {}

    def position_free_floor(self, batch: Batch) -> float:
        """Expected accuracy on ``batch`` of the best guess that uses no position at all."""
        raise NotImplementedError

    def describe(self) -> dict:
        return {"name": self.name, "causal": self.causal, "vocab_size": self.vocab_size,
                "num_classes": self.num_classes, "detail": self.detail_name}


def _mode_guess_accuracy(candidates: torch.Tensor, valid: torch.Tensor, targets: torch.Tensor,
                         num_classes: int) -> float:
    """Expected accuracy of guessing, for each row's queries, uniformly among the row's most
    frequent candidate tokens. candidates (B, C) tokens, valid (B, C) bool, targets (B, Q) with IGNORE."""
    counts = torch.zeros(candidates.shape[0], num_classes, dtype=torch.long)  # (B, V)
    counts.scatter_add_(1, candidates.clamp(min=0), valid.long())
    top = counts.max(dim=1, keepdim=True).values  # (B, 1)
    modes = (counts == top) & (top > 0)  # (B, V)
    labelled = targets != IGNORE  # (B, Q)
    hit = modes.gather(1, targets.clamp(min=0)) & labelled  # (B, Q)
    share = hit.float() / modes.sum(1, keepdim=True).clamp(min=1).float()  # (B, Q)
    return float(share.sum() / labelled.sum().clamp(min=1))


class RetrievalTask(Task):
    """Key-value retrieval (causal). Tokens: filler [0, F), keys [F, F + K), values [F + K, F + K + V).

    A length-L row holds a context of L - Q tokens (Q = ``num_pairs`` query slots at the
    end): filler, with P pairs (P uniform in [``min_pairs``, ``num_pairs``] per row) at
    random non-overlapping places. A pair is a key, ``gap - 1`` decoy values, then its
    value (``gap`` tokens after the key). The queries ask the row's keys in a random
    order (each once when P = Q, some twice when P < Q); the label at a query is its
    value and ``detail`` the distance from the query back to that value. Keys in a row are
    distinct; values and decoys are drawn with replacement.
    """

    name = "retrieval"
    causal = True
    detail_name = "distance from the query back to its value"

    def __init__(self, num_pairs: int = 3, num_keys: int = 8, num_values: int = 8, num_filler: int = 4,
                 gap: int = 1, min_pairs: int | None = None):
        self.num_pairs = check_positive_int("num_pairs", num_pairs)
        self.num_keys = check_int("num_keys", num_keys, min_value=num_pairs)
        self.num_values = check_int("num_values", num_values, min_value=2)
        self.num_filler = check_positive_int("num_filler", num_filler)
        self.gap = check_int("gap", gap, min_value=1, max_value=8)
        self.min_pairs = num_pairs if min_pairs is None else check_int("min_pairs", min_pairs, min_value=1,
                                                                          max_value=num_pairs)
        self.vocab_size = self.num_filler + self.num_keys + self.num_values
        self.num_classes = self.vocab_size

    def min_length(self) -> int:
        return (self.gap + 2) * self.num_pairs + 1  # pairs, queries, at least one filler

    def _sample(self, B, L, g):
        P, Q, F, K, G = self.num_pairs, self.num_pairs, self.num_filler, self.num_keys, self.gap
        C = L - Q  # context length
        tokens = torch.randint(0, F, (B, L), generator=g)  # (B, L) filler
        pairs = torch.randint(self.min_pairs, P + 1, (B,), generator=g)  # (B,) pairs in each row
        slots = _randperm_rows(B, C - P * G, g)[:, :P].sort(dim=1).values  # (B, P) distinct, sorted
        starts = slots + G * torch.arange(P)  # (B, P) key positions, pairs never overlap
        keys = F + _randperm_rows(B, K, g)[:, :P]  # (B, P) distinct keys
        values = F + K + torch.randint(0, self.num_values, (B, P), generator=g)  # (B, P)
        used = _randperm_rows(B, P, g) < pairs[:, None]  # (B, P) which of the P places hold a pair
        rows = torch.arange(B)[:, None]  # (B, 1)
        for step in range(1, G):  # decoy values between a key and its value
            decoys = F + K + torch.randint(0, self.num_values, (B, P), generator=g)  # (B, P)
            place = starts + step
            tokens[rows, place] = torch.where(used, decoys, tokens[rows, place])
        tokens[rows, starts] = torch.where(used, keys, tokens[rows, starts])
        tokens[rows, starts + G] = torch.where(used, values, tokens[rows, starts + G])
        order = (torch.rand(B, P, generator=g) + 2.0 * (~used)).argsort(dim=1)  # (B, P) pairs first, shuffled
        ask = order.gather(1, torch.arange(Q)[None, :] % pairs[:, None])  # (B, Q) each pair once, then again
        query_pos = C + torch.arange(Q)  # (Q,)
        tokens[:, query_pos] = keys.gather(1, ask)
        targets = torch.full((B, L), IGNORE, dtype=torch.long)
        detail = torch.full((B, L), IGNORE, dtype=torch.long)
        targets[:, query_pos] = values.gather(1, ask)
        detail[:, query_pos] = query_pos - (starts + G).gather(1, ask)  # (B, Q) distance back to the value
        return Batch(tokens, targets, detail)

    def position_free_floor(self, batch: Batch) -> float:
        """Guess the row's most frequent value token (decoys included): a model that cannot
        tell which value belongs to which key can do no better than the row's mode."""
        lo = self.num_filler + self.num_keys
        context = batch.tokens[:, : batch.tokens.shape[1] - self.num_pairs]  # (B, C)
        return _mode_guess_accuracy(context, context >= lo, batch.targets, self.vocab_size)

    def _context_values(self, batch: Batch) -> torch.Tensor:
        """(B, C) the value of every pair in the context at its key's place (the token ``gap``
        after a key), -1 elsewhere."""
        F, K, G = self.num_filler, self.num_keys, self.gap
        context = batch.tokens[:, : batch.tokens.shape[1] - self.num_pairs]  # (B, C)
        is_key = (context >= F) & (context < F + K)  # (B, C)
        out = torch.full_like(context, -1)  # (B, C)
        out[:, : context.shape[1] - G] = torch.where(is_key[:, :-G], context[:, G:], -1)
        return out

    def binding_free_floor(self, batch: Batch) -> float:
        """Expected accuracy of a model that knows which tokens are values (the token ``gap``
        after each key, decoys excluded) but not which key each belongs to: it names the
        row's most frequent value. Above ``position_free_floor`` whenever decoys are drawn,
        and 1 in a row with one pair: a score between the two needs no binding of keys
        to values."""
        values = self._context_values(batch)  # (B, C)
        return _mode_guess_accuracy(values.clamp(min=0), values >= 0, batch.targets, self.vocab_size)

    def order_rule_accuracy(self, batch: Batch) -> float:
        """Accuracy of a rule that uses order, never a position: find the query's key in the
        context and name the ``gap``-th value-type token after it. It is right on every
        query by construction (a pair is contiguous), so the task can be solved with order
        plus content matching; the position it needs is the local offset +``gap``."""
        lo = self.num_filler + self.num_keys
        C = batch.tokens.shape[1] - self.num_pairs
        hits, total = 0, 0
        for row, target in zip(batch.tokens.tolist(), batch.targets.tolist()):
            for q in range(C, len(row)):
                after = [t for t in row[row.index(row[q]) + 1: C] if t >= lo]
                hits += len(after) >= self.gap and after[self.gap - 1] == target[q]
                total += 1
        return hits / max(1, total)


class CopyTask(Task):
    """Copying (causal). Tokens: PAD 0, SEP 1, symbols [2, num_symbols + 2).

    A row of length L is PAD x a, x_1 .. x_n, SEP, x_1 .. x_n, PAD x b: n distinct symbols,
    a separator and the same symbols again, at a random place (a uniform in
    [0, L - 2n - 1], ``placement="random"``) or right-aligned (a = L - 2n - 1, b = 0,
    ``placement="right"``, where the separator's position gives n away). The label at SEP
    is x_1 and at the copy of x_t (t < n) it is x_{t+1}; ``detail`` is t (0 at SEP). n is
    uniform over [``min_copy``, ``max_copy``] per row, so no single offset solves the task.
    What works for any n and any row length is to find the previous occurrence of the
    current token and read the token after it (an induction head).
    """

    name = "copy"
    causal = True
    detail_name = "index of the label within the copy"
    PAD, SEP = 0, 1

    def __init__(self, num_symbols: int = 64, min_copy: int = 2, max_copy: int = 8, placement: str = "random"):
        self.num_symbols = check_int("num_symbols", num_symbols, min_value=2)
        self.min_copy = check_int("min_copy", min_copy, min_value=1, max_value=self.num_symbols)
        self.max_copy = check_int("max_copy", max_copy, min_value=self.min_copy, max_value=self.num_symbols)
        self.placement = check_choice("placement", placement, ("random", "right"))
        self.vocab_size = self.num_symbols + 2
        self.num_classes = self.vocab_size

    def min_length(self) -> int:
        return 2 * self.max_copy + 1

    def _sample(self, B, L, g):
        lo, hi = self.min_copy, self.max_copy
        n = torch.randint(lo, hi + 1, (B,), generator=g)  # (B,) copy sizes
        x = 2 + _randperm_rows(B, self.num_symbols, g)[:, :hi]  # (B, hi) distinct symbols
        room = L - 2 * n - 1  # (B,) padding in the row
        if self.placement == "random":
            start = (torch.rand(B, generator=g) * (room + 1).float()).long().clamp(max=room)  # (B,) in [0, room]
        else:
            start = room
        t = torch.arange(L)[None, :] - start[:, None]  # (B, L) 0..n-1: x, n: SEP, n+1..2n: the copy
        nn_ = n[:, None]
        in_x = (t >= 0) & (t < nn_)  # (B, L)
        in_copy = (t > nn_) & (t <= 2 * nn_)  # (B, L)
        src = torch.where(in_copy, t - nn_ - 1, t).clamp(min=0, max=hi - 1)  # (B, L) index into x
        tokens = torch.where(in_x | in_copy, x.gather(1, src), torch.full((B, L), self.PAD, dtype=torch.long))
        tokens = torch.where(t == nn_, torch.full_like(tokens, self.SEP), tokens)
        labelled = (t >= nn_) & (t < 2 * nn_)  # (B, L) SEP and the copy of x_1 .. x_{n-1}
        index = (t - nn_).clamp(min=0, max=hi - 1)  # (B, L) the label is x_{index + 1}
        targets = torch.where(labelled, x.gather(1, index), IGNORE)  # (B, L)
        detail = torch.where(labelled, t - nn_, IGNORE)  # (B, L)
        return Batch(tokens, targets, detail)

    def position_free_floor(self, batch: Batch) -> float:
        """Without positions a causal model still knows which symbols came before the
        separator and which it has copied already (content, not order): guessing among the
        n - t not yet copied gives 1 / (n - t) at label t."""
        labelled = batch.targets != IGNORE  # (B, L)
        n = labelled.sum(1, keepdim=True)  # (B, 1) labels per row = n
        left = (n - batch.detail).clamp(min=1).float()  # (B, L) symbols not yet copied
        return float((labelled.float() / left).sum() / labelled.sum().clamp(min=1))


class MarkerTask(Task):
    """Offset to a marker. Tokens: filler [0, F), MARKER = F.

    One marker per row, at a uniform position m; r = m - i is the marker position minus
    token i's (``key_minus_query``). Bidirectional (``causal=False``): every token with
    1 <= |r| <= D is labelled, class r + D for r < 0 and r + D - 1 for r > 0 (2D classes).
    Causal: only the tokens after the marker (r < 0, the marker among their keys), class
    |r| - 1 (D classes). ``detail`` is r. Telling r from r + 1 needs the two offsets to look
    different to attention; a clip at k or a shared bucket makes them look the same to one
    layer's position term.
    """

    name = "marker"
    detail_name = "offset r = marker - token"

    def __init__(self, max_offset: int = 16, num_filler: int = 1, causal: bool = False):
        self.max_offset = check_positive_int("max_offset", max_offset)
        self.num_filler = check_positive_int("num_filler", num_filler)
        self.causal = check_choice("causal", causal, (False, True))
        self.marker_token = self.num_filler
        self.vocab_size = self.num_filler + 1
        self.num_classes = self.max_offset if self.causal else 2 * self.max_offset

    def min_length(self) -> int:
        return self.max_offset + 1

    def offset_to_class(self, r: torch.Tensor) -> torch.Tensor:
        """Class of offset r (bidirectional: r in [-D, D] without 0; causal: r in [-D, -1])."""
        if self.causal:
            return -r - 1
        return torch.where(r < 0, r + self.max_offset, r + self.max_offset - 1)

    def class_to_offset(self, c: torch.Tensor) -> torch.Tensor:
        if self.causal:
            return -c - 1
        return torch.where(c < self.max_offset, c - self.max_offset, c - self.max_offset + 1)

    def parts(self, predicted, target):
        """Sign (which side the marker is on) and distance |r|, each right or wrong."""
        p, t = self.class_to_offset(predicted), self.class_to_offset(target)
        out = {"distance": p.abs() == t.abs()}
        if not self.causal:
            out["sign"] = torch.sign(p) == torch.sign(t)
        return out

    def _sample(self, B, L, g):
        D = self.max_offset
        tokens = torch.randint(0, self.num_filler, (B, L), generator=g)  # (B, L) filler
        m = torch.randint(0, L, (B,), generator=g)  # (B,) marker positions
        tokens[torch.arange(B), m] = self.marker_token
        r = m[:, None] - torch.arange(L)  # (B, L) marker minus token
        labelled = (r != 0) & (r.abs() <= D) & ((r < 0) if self.causal else True)  # (B, L)
        targets = torch.where(labelled, self.offset_to_class(r), IGNORE)  # (B, L)
        detail = torch.where(labelled, r, IGNORE)  # (B, L)
        return Batch(tokens, targets, detail)

    def position_free_floor(self, batch: Batch) -> float:
        """Without positions every labelled token looks the same (one filler token): the
        best constant guess is the most frequent class of the batch."""
        t = batch.targets[batch.targets != IGNORE]  # (N,)
        return float(torch.bincount(t, minlength=self.num_classes).max() / max(1, t.numel()))


class PositionTask(Task):
    """Where am I (bidirectional)? Tokens: filler [0, F).

    Every token is labelled with its own absolute position i (``num_positions`` classes;
    rows may be at most that long); ``detail`` is i as well. Absolute positions give the
    answer directly; relative-only attention has to count the keys on each side.
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

    def position_free_floor(self, batch: Batch) -> float:
        """A bidirectional model without positions gives every token of a row the same
        answer for the same token: 1 / L."""
        return 1.0 / batch.tokens.shape[1]


TASKS = {"retrieval": RetrievalTask, "copy": CopyTask, "marker": MarkerTask, "position": PositionTask}


def make_task(name: str, **options) -> Task:
    """A task by name with its options (see each class)."""
    if name not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {name!r}")
    return TASKS[name](**options)
