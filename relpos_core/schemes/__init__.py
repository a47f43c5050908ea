"""What each scheme computes: one file per scheme, found by itself (see CONTRIBUTING.md).

Every module of this package that defines ``SCHEME`` (a ``declaration.Scheme``) is a
scheme: ``SCHEMES`` maps its name to the declaration, ``names()`` lists every registry
name (schemes and their variants, in the declarations' order) and ``lookup(name)``
returns an ``Entry`` for any of them. Nothing else in the library lists schemes by hand:
the registry of kernel paths, the sign-convention table (``SIGN_CONVENTIONS``), the
benchmark's cases, figure labels, the decoder and the lab all read these.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass

import torch

from . import conventions
from .declaration import Bench, Distance, Lab, LabRun, ModelShape, PositionModule, Scheme, Variant, make_options

__all__ = ["SCHEMES", "Entry", "names", "lookup", "SIGN_CONVENTIONS", "conventions_table_markdown",
           "sign_convention", "Scheme", "Variant", "Distance", "Lab", "LabRun", "Bench", "ModelShape", "PositionModule",
           "baseline", "tokens_baseline", "with_role"]

_NOT_SCHEMES = {"declaration", "conventions"}


def _discover() -> dict[str, Scheme]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_SCHEMES:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        scheme = getattr(module, "SCHEME", None)
        if not isinstance(scheme, Scheme):
            raise ImportError(f"relpos_core/schemes/{info.name}.py declares no SCHEME = Scheme(...): every module "
                              f"of relpos_core.schemes is a scheme (helpers go in relpos_core/terms.py or kernels/)")
        if scheme.name != info.name:
            raise ImportError(f"relpos_core/schemes/{info.name}.py declares the scheme {scheme.name!r}: a scheme's "
                              f"file is named after it")
        found.append(scheme)
    found.sort(key=lambda s: (s.order, s.name))
    return {s.name: s for s in found}


SCHEMES: dict[str, Scheme] = _discover()


@dataclass(frozen=True)
class Entry:
    """A registry name: a scheme, or one of its variants."""

    name: str
    scheme: Scheme
    variant: Variant | None = None

    @property
    def display(self) -> str:
        return self.variant.display if self.variant is not None else self.scheme.display

    @property
    def short(self) -> str:
        """A compact label: the declaration's ``short``, else its ``display``."""
        item = self.variant if self.variant is not None else self.scheme
        return item.short or item.display

    @property
    def color(self) -> str:
        """The book's colour for it (``#rrggbb``): the variant's own, else the scheme's."""
        return (self.variant.color if self.variant is not None else "") or self.scheme.color

    @property
    def lab(self):
        """Where the lab trains it (``declaration.Lab``): the variant's own, else the scheme's."""
        return (self.variant.lab if self.variant is not None else None) or self.scheme.lab

    @property
    def summary(self) -> str:
        return (self.variant.summary or self.scheme.summary) if self.variant is not None else self.scheme.summary

    def options(self, overrides: dict | None = None):
        """The module's options for this entry (``overrides`` on top of the variant's settings)."""
        return make_options(self.scheme, overrides, variant=self.variant)

    def example(self, num_heads: int, head_dim: int, k: int | None = None, *, device=None,
                dtype: torch.dtype = torch.float32, generator=None, options: dict | None = None):
        """A term with random tables; ``k`` sets the distance parameter (``device="meta"``: shapes only)."""
        overrides = dict(options or {})
        if k is not None and self.scheme.distance is not None:
            overrides[self.scheme.distance.name] = max(self.scheme.distance.minimum, int(k))
        return self.scheme.example(num_heads, head_dim, self.options(overrides), device=device, dtype=dtype,
                                   generator=generator)


_ENTRIES: dict[str, Entry] = {}
for _scheme in SCHEMES.values():
    for _name in _scheme.names():
        if _name in _ENTRIES:
            raise ImportError(f"the registry name {_name!r} is declared twice")
        _ENTRIES[_name] = Entry(_name, _scheme, _scheme.variant(_name))


def names() -> tuple[str, ...]:
    """Every registry name: each scheme, followed by its variants, in declaration order."""
    return tuple(_ENTRIES)


def lookup(name: str) -> Entry:
    """The ``Entry`` of a registry name; ValueError listing the names otherwise."""
    if name not in _ENTRIES:
        raise ValueError(f"scheme must be one of {list(_ENTRIES)}, got {name!r}")
    return _ENTRIES[name]


def _only(found: list[str], what: str) -> str:
    if len(found) != 1:
        raise ValueError(f"exactly one scheme must declare {what}, found {found}")
    return found[0]


def baseline() -> str:
    """The scheme without any position (``has_positions=False``): the benchmarks' baseline."""
    return _only([s.name for s in SCHEMES.values() if not s.has_positions], "has_positions=False")


def tokens_baseline() -> str:
    """The first scheme whose positions are added to the tokens (``positions_in_tokens``): its
    attention call is the baseline's, so runs made before the baseline existed divide by it."""
    return next(s.name for s in SCHEMES.values() if s.positions_in_tokens)


def with_role(role: str) -> str:
    """The scheme whose colour marks ``role`` in the concept figures (``Scheme.roles``)."""
    return _only([s.name for s in SCHEMES.values() if role in s.roles], f"the role {role!r}")


SIGN_CONVENTIONS: list[dict] = [conventions.row(s) for s in SCHEMES.values()]


def sign_convention(scheme: str) -> dict:
    """The row of ``SIGN_CONVENTIONS`` for ``scheme`` (e.g. ``"t5"``; a variant gives its scheme's row)."""
    base = lookup(scheme).scheme.name
    return next(row for row in SIGN_CONVENTIONS if row["scheme"] == base)


def conventions_table_markdown() -> str:
    """``SIGN_CONVENTIONS`` as a Markdown table (one row per scheme)."""
    return conventions.table_markdown(SIGN_CONVENTIONS)
