"""The piece protocol: a path computes a piece or refuses it with the piece's own reason, never skips it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.pieces.base import STAGES, Alloc, Piece
from relpos_core.terms import PositionTerm

REASON = "a test piece that only the naive dense backends know"


@dataclass(frozen=True)
class SquaredOffset(Piece):
    """logit_ij += weight_h (j - i)^2: a new kind, with no FlexAttention reader and no per-offset form."""

    weight: torch.Tensor  # (H,)
    name: str = "squared offset"
    kind: ClassVar[str] = "squared_offset"
    stage: ClassVar[str] = "scalar"
    computes: ClassVar = {"naive": ("eager", "sdpa")}

    def refusal(self, form, backend):
        return f"{REASON} ({form}, {backend})"

    def tensors(self):
        return [("squared offset weight", self.weight)]

    def logits(self, form, q, k, pos, dtype):
        off = pos.offsets().to(dtype)  # (Lq, Lk)
        return (self.weight.to(dtype)[:, None, None] * off * off).unsqueeze(0)  # (1, H, Lq, Lk)

    def allocations(self, form, backend, s):
        return [Alloc("offsets", (3, s.Lq, s.Lk), s.dtype), Alloc("bias", (s.H, s.Lq, s.Lk), s.dtype)]


def _term():
    return PositionTerm(scheme="squared", convention="key_minus_query", pieces=(SquaredOffset(torch.tensor([0.1, -0.2])),))


def test_a_new_piece_is_computed_where_it_says_and_refused_elsewhere_with_its_reason():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (3, 5, 5))
    term = _term()
    off = (torch.arange(5)[None, :] - torch.arange(2, 5)[:, None]).double()  # (3, 5), queries the last 3 keys
    logits = q @ k.transpose(-2, -1) / 8**0.5 + torch.tensor([0.1, -0.2]).double()[:, None, None] * off**2
    want = torch.softmax(logits, -1) @ v
    for backend in ("eager", "sdpa"):
        torch.testing.assert_close(rp.attend(q, k, v, term, form="naive", backend=backend), want)
    for form in FORMS:
        for backend in BACKENDS:
            reason = registry.unsupported_reason(term, form, backend)
            if (form, backend) in {("naive", "eager"), ("naive", "sdpa")}:
                assert reason is None
                continue
            assert reason is not None, (form, backend)
            if form != "none":  # form 'none' is refused for any term with something to form
                assert reason.startswith(REASON), reason
                with pytest.raises(ValueError, match=REASON):
                    rp.attend(q.float(), k.float(), v.float(), term, form=form, backend=backend, compiled=False)
    assert registry.unsupported_reason(term, "naive", "flex") == f"{REASON} (naive, flex)"
    assert rp.measure.analytic.peak_bytes(term, "naive", "eager", B=1, H=2, Lq=3, Lk=5, d=8) > 0


def test_a_piece_a_kernel_does_not_know_cannot_be_skipped():
    """A piece that declares a path but gives it nothing to compute raises: the kernels ask every piece,
    so a piece missing from a kernel's walk is an error, not a silently dropped term."""

    @dataclass(frozen=True)
    class Forgetful(Piece):
        name: str = "forgetful"
        kind: ClassVar[str] = "forgetful"
        computes: ClassVar = {"naive": BACKENDS, "gather": BACKENDS}

    term = PositionTerm(scheme="forgetful", convention="key_minus_query", pieces=(Forgetful(),))
    q = k = v = torch.randn(1, 2, 4, 8)
    for form in ("naive", "gather"):
        for backend in BACKENDS:
            with pytest.raises(ValueError, match="forgetful"):
                rp.attend(q, k, v, term, form=form, backend=backend, compiled=False)


def test_every_piece_of_every_scheme_follows_the_protocol_and_every_path_is_one_its_pieces_accept():
    for name in registry.scheme_names():
        term = registry.example_term(name, num_heads=2, head_dim=8, k=4, device="meta")
        for piece in term.all_pieces:
            assert isinstance(piece, Piece) and piece.stage in STAGES and piece.kind
        for path in registry.paths(name):
            assert all(p.supports(path.form, path.backend) is None for p in term.all_pieces), path


def test_a_term_refuses_an_object_that_is_not_a_piece():
    with pytest.raises(ValueError, match="must follow relpos_core.pieces.base.Piece"):
        PositionTerm(scheme="x", convention="key_minus_query", pieces=(object(),))
