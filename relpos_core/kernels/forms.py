"""The three forms, what every backend does first, and the one logit composition.

Book: "What it costs" (chapters/11_what_it_costs.ipynb).

A *form* says how a position term becomes numbers: ``naive`` (per pair), ``gather``
(per row or offset, then indexed), ``skew`` (per offset, then a strided view). A
*backend* says which attention kernel consumes them: ``eager`` (softmax written out),
``sdpa`` (a dense bias as ``attn_mask``) or ``flex`` (inside FlexAttention's tile loop).
Terms with nothing to form (no position at all, RoPE) use the form ``"none"``. Each
piece computes itself in a form (``relpos_core.pieces.base.Piece``); the backends walk
the pieces through the composition here, the only place it is written:

    logit_ij = scale * (content_ij + sum of scaled pieces) + sum of unscaled pieces

``compose_logits`` builds it as a dense tensor (eager: with the content score; SDPA: the
bias, SDPA adds the scaled content itself), ``compose_score_mod`` as FlexAttention's
score_mod (FlexAttention hands it the scaled content score).
"""
from __future__ import annotations

import torch

from relpos_core.compile_ops import flex_inputs
from relpos_core.kernels.rotary import rotate_qk

__all__ = ["FORMS", "BACKENDS", "prepare_qk", "compose_logits", "compose_score_mod"]

FORMS = ("none", "naive", "gather", "skew")
BACKENDS = ("eager", "sdpa", "flex")


def prepare_qk(q: torch.Tensor, k: torch.Tensor, term, pos, causal: bool = False):
    """Rotate (RoPE), scale (a length scaling: ``term.query_pieces``) and shift (Transformer-XL's u) the inputs.

    Returns (q_content (B, H, Lq, d) for the content score q . k, q (B, H, Lq, d) for the
    position terms, k (B, H, Lk, d)). Without rotary or shift these are the inputs.
    """
    if term.rotary is not None:
        q, k = rotate_qk(q, k, term.rotary, pos)  # (B, H, Lq, d), (B, H, Lk, d)
    for piece in term.query_pieces:
        q = piece.prepare_query(q, pos, causal)  # (B, H, Lq, d)
    q_content = q if term.content_shift is None else q + term.content_shift[None, :, None, :].to(q.dtype)
    return q_content, q, k


def _add(out: torch.Tensor | None, t: torch.Tensor) -> torch.Tensor:
    """out + t, in place into whichever of the two (both fresh) has the broadcast shape."""
    if out is None:
        return t
    if out.shape == torch.broadcast_shapes(out.shape, t.shape):
        return out.add_(t)
    return t.add_(out)


def compose_logits(term, form: str, q: torch.Tensor, k: torch.Tensor, pos, dtype: torch.dtype, scale: float,
                   content: torch.Tensor | None = None) -> torch.Tensor | None:
    """scale * (content + scaled pieces) + unscaled pieces: (B|1, H, Lq, Lk), or None when empty.

    ``content`` (B, H, Lq, Lk), the unscaled q . k (eager), is added into and returned;
    without it the result is the position bias alone (SDPA's ``attn_mask``). One piece
    at a time: each piece's contribution is added and dropped before the next.
    """
    out = content
    pieces = term.logit_pieces if form != "none" else ()
    for piece in pieces:
        if piece.scaled:
            out = _add(out, piece.logits(form, q, k, pos, dtype))
    if out is not None:
        out = out.mul_(scale)
    for piece in pieces:
        if not piece.scaled:
            out = _add(out, piece.logits(form, q, k, pos, dtype))
    return out


def compose_score_mod(term, form: str, q: torch.Tensor, k: torch.Tensor, pos, scale: float, *,
                      causal_in_score_mod: bool = False):
    """The same composition inside FlexAttention: score (already scale * q . k) + scale * scaled readers
    + unscaled readers. None when the term has no logit piece and nothing is masked here."""
    pieces = term.logit_pieces
    if not pieces and not causal_in_score_mod:
        return None
    scaled = [p.score_mod(form, q, k, pos) for p in pieces if p.scaled]
    unscaled = [p.score_mod(form, q, k, pos) for p in pieces if not p.scaled]
    offset_of = _offset_function(pos)

    def score_mod(score, b, h, q_idx, kv_idx):
        off = offset_of(q_idx, kv_idx)
        if scaled:
            vec = scaled[0](b, h, q_idx, kv_idx, off)
            for read in scaled[1:]:
                vec = vec + read(b, h, q_idx, kv_idx, off)
            score = score + scale * vec
        for read in unscaled:
            score = score + read(b, h, q_idx, kv_idx, off)
        if causal_in_score_mod:
            score = torch.where(off <= 0, score, -float("inf"))
        return score

    return score_mod


def _offset_function(pos):
    """(q_idx, kv_idx) -> key_pos - query_pos, inside the kernel."""
    if pos.contiguous:
        shift = flex_inputs(torch.tensor(pos.shift, device=pos.query.device))  # 0-d: no recompile when it changes

        def offset(q_idx, kv_idx):
            return kv_idx - q_idx - shift

        return offset
    qp, kp = flex_inputs(pos.query, pos.key)

    def offset(q_idx, kv_idx):
        return kp[kv_idx] - qp[q_idx]

    return offset
