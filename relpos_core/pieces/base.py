"""The piece protocol: what every kind of position piece says about itself.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). A scheme's ``PositionTerm``
(``relpos_core.terms``) is a bundle of pieces; every kernel path walks its pieces and asks
each one, never naming a piece class:

* **what it computes**: ``logits(form, q, k, pos, dtype)``, its contribution to the logits
  (B|1, H, Lq, Lk) as a fresh tensor (the eager and SDPA backends), ``score_mod(form, q, k,
  pos)``, a reader ``(b, h, q_idx, kv_idx, off) -> value`` for FlexAttention, or, for a piece
  of the ``output`` stage, ``output(form, probs, pos)`` (B, H, Lq, d). ``q`` is the query
  the position terms see (rotated, unshifted), ``k`` the key: a piece may read both
  (content-dependent positions, CoPE). ``scaled``: whether the contribution is multiplied
  by the term's logit scale like the content score (vector terms) or added as it is
  (scalar biases); the one composition is ``relpos_core.kernels.forms.compose_logits``.
* **what it supports**: ``computes``, form -> the backends that compute it. A (form,
  backend) it does not list is refused with ``refusal(form, backend)``, its own reason:
  never skipped. ``call_refusal(call)`` refuses what depends on one call (offsets a table
  has no row for).
* **what it allocates**: ``allocations(form, backend, sizes)``, the tensors (``Alloc``: a
  name, a shape, a dtype) it materialises on that path, its result included. The memory
  guard (``relpos_core.measure.analytic``) sums them with the kernel's own few tensors.
* **what a decode step costs**: ``decode_step_work(context, num_heads, head_dim, layout)``,
  what one decode step computes for it beyond the q . k and p . v over the ``context`` kept
  keys (a description and its multiply-adds; ``relpos_core.decoding.ledger.step_work``). A
  piece that does not declare it is an error naming the piece, never counted as no work.
* **what it does to q first**: a piece of stage "rotary" held in ``PositionTerm.pieces``
  (length scaling) changes the query before any kernel, ``prepare_query(q, pos, causal)``;
  RoPE's own rotation is the term's ``rotary`` slot.
* **where it enters** the concept figure: ``stage`` ("rotary": q and k changed before the
  kernel, "vector", "scalar" or "output"), and ``kind``, its short name in tables and messages; ``heads``, the head count
  its tensors fix (None when any fits).

A new kind of piece is one subclass; nothing else in the library needs to know it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Mapping

import torch

__all__ = ["Piece", "Alloc", "Sizes", "ALL_BACKENDS", "STAGES"]

ALL_BACKENDS = ("eager", "sdpa", "flex")
DENSE_BACKENDS = ("eager", "sdpa")
STAGES = ("rotary", "vector", "scalar", "output")


@dataclass(frozen=True)
class Alloc:
    """One tensor a piece materialises: a name (for tables and messages), its shape and dtype."""

    name: str
    shape: tuple
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n * torch.empty((), dtype=self.dtype, device="meta").element_size()


@dataclass(frozen=True)
class Sizes:
    """The sizes of one call, as a piece's ``allocations`` reads them."""

    B: int
    H: int
    Lq: int
    Lk: int
    d: int
    dtype: torch.dtype
    num_offsets: int  # distinct offsets key_pos - query_pos of the call (Lq + Lk - 1 when contiguous)

    def side(self, side: str) -> int:
        """Lq for the query side, Lk for the key side."""
        return self.Lq if side == "query" else self.Lk


class Piece:
    """The protocol (module docstring). Subclasses are frozen dataclasses with a ``name``."""

    kind: ClassVar[str] = "piece"
    stage: ClassVar[str] = "scalar"
    scaled: ClassVar[bool] = False
    #: form -> the backends that compute this piece in that form
    computes: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    #: True when the piece is a function of the offset alone (a per-offset table exists)
    offset_only: ClassVar[bool] = True
    #: True when its logits differ per batch element (it reads q or k): (B, H, Lq, Lk), else (1, H, Lq, Lk)
    batched: ClassVar[bool] = False

    def refusal(self, form: str, backend: str) -> str:
        """Why (form, backend) cannot compute this piece: the piece's own reason."""
        forms = [f for f, b in self.computes.items() if backend in b]
        where = f"forms {forms} on backend {backend!r}" if forms else f"no form on backend {backend!r}"
        return f"{self.name} ({self.kind}) is computed by {where}, not by form {form!r}"

    def supports(self, form: str, backend: str) -> str | None:
        """None when (form, backend) computes this piece, else ``refusal``."""
        return None if backend in self.computes.get(form, ()) else self.refusal(form, backend)

    def call_refusal(self, lowest_offset: int) -> str | None:
        """Why this piece refuses a call whose visible pairs reach ``lowest_offset``, or None."""
        return None

    def check(self, num_heads: int, head_dim: int) -> None:
        """Raise a ValueError when the piece does not fit q's heads H and head size d."""

    @property
    def heads(self) -> int | None:
        """The head count H its tensors fix (a bias per head, a table per head), or None when any H fits."""
        return None

    def tensors(self) -> list[tuple[str, torch.Tensor]]:
        """Every (name, tensor) the piece holds (tables, parameters): device, dtype and gradient checks."""
        return []

    def logits(self, form: str, q: torch.Tensor, k: torch.Tensor, pos, dtype: torch.dtype) -> torch.Tensor:
        """Its logit contribution (B|1, H, Lq, Lk), fresh (the caller adds into it), unscaled."""
        raise ValueError(self.refusal(form, "eager"))

    def prepare_query(self, q: torch.Tensor, pos, causal: bool) -> torch.Tensor:
        """A pre-kernel piece's query (B, H, Lq, d), changed (fresh), for every form and backend."""
        raise ValueError(f"{self.name} ({self.kind}) is a piece of stage {self.stage!r} that does not say what it "
                         f"does to the query: give it prepare_query(q, pos, causal)")

    def score_mod(self, form: str, q: torch.Tensor, k: torch.Tensor, pos):
        """A reader ``(b, h, q_idx, kv_idx, off) -> value`` for FlexAttention's score_mod, unscaled."""
        raise ValueError(self.refusal(form, "flex"))

    def output(self, form: str, probs: torch.Tensor, pos) -> torch.Tensor:
        """An ``output`` piece's contribution to the attention output: (B, H, Lq, d)."""
        raise ValueError(self.refusal(form, "eager"))

    def allocations(self, form: str, backend: str, sizes: Sizes) -> list[Alloc]:
        """The tensors it materialises on (form, backend) at these sizes, its result included."""
        return []

    def decode_step_work(self, context: int, num_heads: int, head_dim: int,
                         layout: str | None = None) -> tuple[str, int]:
        """What one decode step computes for this piece, per layer: (a description, multiply-adds).

        Beyond the q . k and p . v over the ``context`` kept keys that every scheme does, for
        one new query of ``num_heads`` heads of size ``head_dim``. ``layout``: how the cache
        keeps the keys ("rotated" or "unrotated", ``relpos_core.cache.ROPE_LAYOUTS``; what a
        rotation costs depends on it), None without a rotation. Counting: a rotation costs 2
        multiply-adds per dimension, a dot product of size d costs d, a bias lookup, a slope
        product or a function evaluation 1.
        """
        raise NotImplementedError(
            f"{self.name} ({self.kind}, class {type(self).__name__}) does not say what a decode step computes "
            f"for it: give it decode_step_work(context, num_heads, head_dim, layout) -> (description, "
            f"multiply-adds) (relpos_core.pieces.base.Piece)")
