"""Every (scheme, form, backend) path, what each supports, and what each call may ask of it.

Book: "What it costs" (chapters/11_what_it_costs.ipynb), whose coverage table
is ``coverage_markdown()``. The benchmark's cases, the byte counts
(``relpos_core.measure.analytic_bytes``), the memory guard's suggestion of a cheaper path
and the cross-path tests all read this module, so a path exists in exactly one place.

The schemes come from their declarations (``relpos_core.schemes``: every scheme file and
its variants; none is listed here). Support is *derived* from the pieces of a scheme's
``PositionTerm`` by ``unsupported_reason``, and what one call may ask of a path (its
dtype, causality, positions, gradients) by ``call_refusal``: the same two functions
``rp.attend`` uses to refuse a call and the memory guard uses to choose a path to
suggest, so the table, the suggestion and the behaviour cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core import schemes
from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.terms import NO_POSITION, PositionTerm

__all__ = [
    "Path",
    "Call",
    "scheme_names",
    "example_term",
    "stages",
    "unsupported_reason",
    "call_refusal",
    "paths",
    "coverage_markdown",
]

FLEX_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Path:
    """One way to compute one scheme, with what it supports."""

    scheme: str
    form: str
    backend: str
    value_term: bool  # applies a value term (Shaw's a^V) if the scheme has one
    positions: str  # "any" (explicit and evicted positions too) or "contiguous"
    causal: str  # "any" or "required" (Transformer-XL's table has no row for later keys)
    backward_cpu: str  # "yes", or how gradients are obtained instead
    backward_cuda: str
    dtypes: tuple[str, ...]
    materialises: str  # the largest position-dependent tensor it builds


@dataclass(frozen=True)
class Call:
    """What one attention call asks of a path: sizes, dtype, device, causality, positions, gradients."""

    B: int
    H: int
    Lq: int
    Lk: int
    d: int
    dtype: torch.dtype
    device_type: str = "cpu"
    causal: bool = False
    grad: bool = False
    contiguous: bool = True
    min_offset: int | None = None  # the smallest key_pos - query_pos (default: -(Lq - 1) for self-attention)
    num_offsets: int | None = None
    compiled: bool = True
    check_finite: bool = True
    window: int | None = None  # a sliding window of keys (a mask: every path takes it)

    def ledger_sizes(self, backend: str) -> dict:
        """The keyword arguments of ``relpos_core.measure.analytic.peak_bytes`` for this call."""
        return dict(B=self.B, H=self.H, Lq=self.Lq, Lk=self.Lk, d=self.d, dtype=self.dtype,
                    contiguous=self.contiguous, causal=self.causal, grad=self.grad, device_type=self.device_type,
                    num_offsets=self.num_offsets, compiled=self.compiled, check_finite=self.check_finite,
                    window=self.window)


def scheme_names() -> tuple[str, ...]:
    """Every name with an attention call of its own: the schemes and their variants, from the
    declarations, less the variants that change only the model around attention."""
    return tuple(n for n in schemes.names() if not getattr(schemes.lookup(n).variant, "model_only", False))


def example_term(scheme: str, *, num_heads: int, head_dim: int, k: int | None = 16, device=None,
                 dtype=torch.float32, generator=None) -> PositionTerm:
    """A scheme's term with random tables (``device="meta"``: shapes only, no memory).

    ``k`` sets the scheme's distance parameter (ignored by schemes without one); a scheme
    with no term at all (none, absolute positions) gives ``NO_POSITION``.
    """
    term = schemes.lookup(scheme).example(num_heads, head_dim, k, device=device, dtype=dtype, generator=generator)
    return NO_POSITION if term is None else term


def stages(scheme: str) -> tuple[str, ...]:
    """Where a scheme's term puts position, read from its pieces: each piece's ``stage``
    ("rotary", "vector", "scalar", "output", ...), in order, once each; () for a scheme
    with no term (none, and absolute positions, which are added to the tokens)."""
    term = example_term(scheme, num_heads=2, head_dim=8, k=4, device="meta")
    return tuple(dict.fromkeys(piece.stage for piece in term.all_pieces))


def unsupported_reason(term: PositionTerm, form: str, backend: str) -> str | None:
    """Why (form, backend) cannot compute ``term`` at all, or None when it can.

    Walks the term's pieces: the first piece that does not list (form, backend) among
    what it computes refuses it with its own reason (``Piece.supports``).
    """
    if form not in FORMS:
        return f"form must be one of {list(FORMS)}, got {form!r}"
    if backend not in BACKENDS:
        return f"backend must be one of {list(BACKENDS)}, got {backend!r}"
    formed = term.formed
    if form == "none" and formed:
        return (f"form 'none' computes no position term, but {term.scheme} has {', '.join(term.kinds())}: "
                f"use form 'naive', 'gather' or 'skew'")
    if form != "none" and not formed:
        return f"{term.scheme} has nothing to form (only {term.kinds() or 'no position signal'}): use form 'none'"
    for piece in term.all_pieces:
        reason = piece.supports(form, backend)
        if reason is not None:
            return reason
    return None


def call_refusal(term: PositionTerm, form: str, backend: str, call: Call) -> str | None:
    """Why (form, backend) refuses this particular call, or None when it accepts it.

    Everything ``unsupported_reason`` says, plus what depends on the call: FlexAttention's
    dtypes, a decoder-only term without ``causal``, the skew without consecutive
    positions, and offsets a table has no row for.
    """
    reason = unsupported_reason(term, form, backend)
    if reason is not None:
        return reason
    if backend == "flex" and call.dtype not in FLEX_DTYPES:
        return (f"backend 'flex' takes q, k, v in float16, bfloat16 or float32 (FlexAttention has no float64 "
                f"kernel), got {call.dtype}; use backend 'eager' or 'sdpa' for float64")
    if term.causal_only and not call.causal:
        return f"{term.scheme} is decoder-only (keys after the query have no relative row): pass causal=True"
    if form == "skew" and not call.contiguous:
        return ("form 'skew' needs contiguous positions (each a run of consecutive integers); "
                "use form 'gather' for explicit or evicted positions")
    lowest = -(call.Lq - 1) if call.min_offset is None else call.min_offset
    for piece in term.all_pieces:
        reason = piece.call_refusal(lowest)
        if reason is not None:
            return reason
    return None


def _materialises(term: PositionTerm, form: str, backend: str) -> str:
    """The largest tensor the path's pieces materialise, at a call of Lq = Lk = 1024, d = 64, one head."""
    from relpos_core.pieces.base import Sizes

    if not term.formed:
        return "rotated q and k" if term.rotary is not None else "nothing"
    sizes = Sizes(B=1, H=1, Lq=1024, Lk=1024, d=64, dtype=torch.float32, num_offsets=2047)
    allocs = [a for piece in term.formed for a in piece.allocations(form, backend, sizes)]
    if not allocs:
        return "nothing (computed in the kernel)"
    biggest = max(allocs, key=lambda a: a.nbytes)
    dense = "" if backend == "flex" else " + [B|1, H, Lq, Lk] logits"
    return biggest.name + dense


def _path(scheme: str, term: PositionTerm, form: str, backend: str) -> Path:
    if backend == "flex":
        back_cpu, back_cuda = "no: warns, then SDPA with the same form", "yes"
        dtypes = ("float16", "bfloat16", "float32")
    else:
        back_cpu = back_cuda = "yes"
        dtypes = ("float16", "bfloat16", "float32", "float64")
    return Path(scheme=scheme, form=form, backend=backend, value_term=bool(term.output_pieces),
                positions="contiguous" if form == "skew" else "any",
                causal="required" if term.causal_only else "any", backward_cpu=back_cpu, backward_cuda=back_cuda,
                dtypes=dtypes, materialises=_materialises(term, form, backend))


def paths(scheme: str | None = None) -> list[Path]:
    """Every supported path, in registry order (optionally of one scheme)."""
    names = scheme_names() if scheme is None else [schemes.lookup(scheme).name]
    out = []
    for name in names:
        term = example_term(name, num_heads=2, head_dim=8, k=4, device="meta")
        for form in FORMS:
            for backend in BACKENDS:
                if unsupported_reason(term, form, backend) is None:
                    out.append(_path(name, term, form, backend))
    return out


def coverage_markdown() -> str:
    """Scheme x (form, backend) table: which paths exist ("What it costs")."""
    cols = [(f, b) for f in FORMS if f != "none" for b in BACKENDS]
    have = {(p.scheme, p.form, p.backend) for p in paths()}
    head = "| scheme | no form | " + " | ".join(f"{f} / {b}" for f, b in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for name in scheme_names():
        none = ", ".join(b for b in BACKENDS if (name, "none", b) in have) or "-"
        cells = ["yes" if (name, f, b) in have else "-" for f, b in cols]
        lines.append(f"| {name} | {none} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
