"""The eager backend: softmax(scale (q k^T + vector terms) + scalar terms) v, written out.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). The only backend that
can apply a *value* term (Shaw's a^V changes the output, not the logits), and the
reference the fused backends are tested against. Causality is a boolean mask applied
to the logits, never part of a bias. Rows whose mask hides every key return 0 (as SDPA
and FlexAttention do), not NaN.
"""
from __future__ import annotations

import torch

from relpos_core.kernels.forms import compose_logits, prepare_qk

__all__ = ["attention", "zero_empty_rows"]


def zero_empty_rows(x: torch.Tensor, pos) -> torch.Tensor:
    """x (B, H, Lq, ...) with the rows of queries that see no key (causal) set to 0.

    Contiguous positions know those rows from Python ints; explicit positions mask with a
    (Lq,) tensor, unconditionally, rather than ask the device whether any row is empty.
    """
    n = pos.leading_empty_rows
    if n == 0:
        return x
    if n is not None:
        x = x.clone()
        x[:, :, :n] = 0.0
        return x
    empty = pos.rows_without_visible_key()  # (Lq,)
    return x.masked_fill(empty.view(-1, *([1] * (x.dim() - 3))), 0.0)


def attention(q, k, v, term, *, form: str, pos, causal: bool) -> torch.Tensor:
    """(B, H, Lq, d) output; arguments already validated by ``relpos_core.attend``."""
    q_content, q_pos, k = prepare_qk(q, k, term, pos, causal)
    content = q_content @ k.transpose(-2, -1)  # (B, H, Lq, Lk) content score
    del q_content
    scores = compose_logits(term, form, q_pos, k, pos, content.dtype, term.logit_scale(q.shape[-1]), content=content)
    del content
    if causal:
        scores = scores.masked_fill_(~pos.visible(), float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # (B, H, Lq, Lk)
    del scores
    if causal:
        probs = zero_empty_rows(probs, pos)  # no visible key: weight 0, output 0
    out = probs @ v  # (B, H, Lq, d)
    for piece in term.output_pieces:
        out = out + piece.output(form, probs, pos)  # (B, H, Lq, d)
    return out
