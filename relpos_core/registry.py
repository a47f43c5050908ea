"""Every (scheme, form, backend) path, and what each supports: one list for the whole library.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb), whose coverage table
is ``coverage_markdown()``. The benchmark's cases (``relpos_core.bench``), the byte counts
(``relpos_core.measure.analytic_bytes``), the memory guard's suggestion of a cheaper path
and the cross-path test all read this module, so a path exists in exactly one place.

Schemes are collected from ``relpos_core.schemes``: every scheme module that defines
``EXAMPLES`` (name -> ``example_term(num_heads, head_dim, k, *, device, dtype,
generator)``) and ``K_NAMES`` (name -> the name of its distance parameter ``k``) is in
the registry; "none" (no position signal) is added here. Support is *derived* from the
pieces of a scheme's ``PositionTerm`` by ``unsupported_reason``, the same function
``rp.attend`` uses to refuse a path, so the table and the behaviour cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.terms import NO_POSITION, PositionTerm, ScalarSlopes

__all__ = [
    "SchemeEntry",
    "Path",
    "SCHEMES",
    "scheme_names",
    "example_term",
    "unsupported_reason",
    "paths",
    "coverage_markdown",
]


@dataclass(frozen=True)
class SchemeEntry:
    name: str
    make_example: Callable[..., PositionTerm]
    k_name: str | None  # the scheme's distance parameter, passed as k to make_example


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


def _collect() -> dict[str, SchemeEntry]:
    from relpos_core import schemes

    entries = {"none": SchemeEntry("none", lambda *a, **kw: NO_POSITION, None)}
    for name in schemes.__all__:
        module = getattr(schemes, name)
        for scheme, make in getattr(module, "EXAMPLES", {}).items():
            entries[scheme] = SchemeEntry(scheme, make, getattr(module, "K_NAMES", {}).get(scheme))
    return entries


SCHEMES: dict[str, SchemeEntry] = _collect()


def scheme_names() -> tuple[str, ...]:
    return tuple(SCHEMES)


def example_term(scheme: str, *, num_heads: int, head_dim: int, k: int = 16, device=None,
                 dtype=torch.float32, generator=None) -> PositionTerm:
    """A scheme's term with random tables (``device="meta"``: shapes only, no memory)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {list(SCHEMES)}, got {scheme!r}")
    return SCHEMES[scheme].make_example(num_heads, head_dim, k, device=device, dtype=dtype, generator=generator)


def unsupported_reason(term: PositionTerm, form: str, backend: str) -> str | None:
    """Why (form, backend) cannot compute ``term``, or None when it can."""
    if form not in FORMS:
        return f"form must be one of {list(FORMS)}, got {form!r}"
    if backend not in BACKENDS:
        return f"backend must be one of {list(BACKENDS)}, got {backend!r}"
    has_pieces = term.has_logit_terms or term.value is not None
    if form == "none" and has_pieces:
        return (f"form 'none' computes no position term, but {term.scheme} has {', '.join(term.pieces())}: "
                f"use form 'naive', 'gather' or 'skew'")
    if form != "none" and not has_pieces:
        return f"{term.scheme} has nothing to form (only {term.pieces() or 'no position signal'}): use form 'none'"
    if form == "skew" and term.scalars:
        return "the skew form has no scalar bias (T5, ALiBi): use form 'gather'"
    if term.value is not None and backend != "eager":
        return (f"{term.value.name} changes the output, not the logits: no attn_mask or score_mod can express it; "
                f"use backend 'eager'")
    if backend == "flex" and form == "skew":
        return "FlexAttention reads small tables inside its kernel; the skew builds a dense tensor: use form 'gather'"
    return None


def _materialises(term: PositionTerm, form: str, backend: str) -> str:
    if not (term.has_logit_terms or term.value is not None):
        return "rotated q and k" if term.rotary is not None else "nothing"
    vectors = bool(term.query_vectors or term.key_vectors or term.value is not None)
    if backend == "flex":
        small = "per-row tables [B, H, L, R]" if vectors else "per-offset table [H, Lq + Lk - 1]"
        if any(isinstance(s, ScalarSlopes) for s in term.scalars) and not vectors:
            small = "nothing (slope x offset in the kernel)"
        return small if form == "gather" else "an [Lq, Lk] index per pair"
    dense = "[B|1, H, Lq, Lk] logits"
    if form == "naive":
        return ("[Lq, Lk, d] gathered table + " if vectors else "[Lq, Lk] offsets + ") + dense
    if form == "gather":
        return ("[Lq, Lk] int64 index + " if vectors else "") + dense
    return "[B, H, Lq, Lq + Lk - 1] per-offset scores (viewed, not copied)"


def _path(scheme: str, term: PositionTerm, form: str, backend: str) -> Path:
    if backend == "flex":
        back_cpu, back_cuda = "no: warns, then SDPA with the same form", "yes"
        dtypes = ("float16", "bfloat16", "float32")
    else:
        back_cpu = back_cuda = "yes"
        dtypes = ("float16", "bfloat16", "float32", "float64")
    return Path(scheme=scheme, form=form, backend=backend, value_term=term.value is not None,
                positions="contiguous" if form == "skew" else "any",
                causal="required" if term.causal_only else "any", backward_cpu=back_cpu, backward_cuda=back_cuda,
                dtypes=dtypes, materialises=_materialises(term, form, backend))


def paths(scheme: str | None = None) -> list[Path]:
    """Every supported path, in registry order (optionally of one scheme)."""
    names = list(SCHEMES) if scheme is None else [scheme]
    out = []
    for name in names:
        term = example_term(name, num_heads=2, head_dim=8, k=4, device="meta")
        for form in FORMS:
            for backend in BACKENDS:
                if unsupported_reason(term, form, backend) is None:
                    out.append(_path(name, term, form, backend))
    return out


def coverage_markdown() -> str:
    """Scheme x (form, backend) table: which paths exist (chapter 8)."""
    cols = [(f, b) for f in FORMS if f != "none" for b in BACKENDS]
    have = {(p.scheme, p.form, p.backend) for p in paths()}
    head = "| scheme | no form | " + " | ".join(f"{f} / {b}" for f, b in cols) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for name in SCHEMES:
        none = ", ".join(b for b in BACKENDS if (name, "none", b) in have) or "-"
        cells = ["yes" if (name, f, b) in have else "-" for f, b in cols]
        lines.append(f"| {name} | {none} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
