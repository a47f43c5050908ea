"""The three forms and what every backend does first (book: chapters/08_what_it_costs.ipynb).

A *form* says how a position term becomes numbers: ``naive`` (per pair), ``gather``
(per row or offset, then indexed), ``skew`` (per offset, then a strided view). A
*backend* says which attention kernel consumes them: ``eager`` (softmax written out),
``sdpa`` (a dense bias as ``attn_mask``) or ``flex`` (inside FlexAttention's tile loop).
Terms with nothing to form (no position at all, RoPE) use the form ``"none"``.
"""
from __future__ import annotations

import torch

from relpos_core.kernels import gather, naive, skew
from relpos_core.kernels.rotary import rotate_qk

__all__ = ["FORMS", "BACKENDS", "form_module", "prepare_qk"]

FORMS = ("none", "naive", "gather", "skew")
BACKENDS = ("eager", "sdpa", "flex")


def form_module(form: str):
    """The module implementing ``form`` (``vector_logits``, ``scalar_bias``, ``value_output``)."""
    return {"naive": naive, "gather": gather, "skew": skew}.get(form)


def prepare_qk(q: torch.Tensor, k: torch.Tensor, term, pos):
    """Rotate (RoPE) and shift (Transformer-XL's u) the inputs.

    Returns (q_content (B, H, Lq, d) for the content score q . k, q (B, H, Lq, d) for the
    position terms, k (B, H, Lk, d)). Without rotary or shift these are the inputs.
    """
    if term.rotary is not None:
        q, k = rotate_qk(q, k, term.rotary, pos)  # (B, H, Lq, d), (B, H, Lk, d)
    q_content = q if term.content_shift is None else q + term.content_shift[None, :, None, :].to(q.dtype)
    return q_content, q, k
