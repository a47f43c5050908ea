"""The SDPA backend: the position term as a dense ``attn_mask`` to scaled_dot_product_attention.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Works for any logit
term (T5, ALiBi, the Shaw key term, DeBERTa's c2p + p2c, Transformer-XL's (b) + (d)),
costs a (1|B, H, Lq, Lk) tensor, and changes which fused backend runs, so the backend is
*detected*, not assumed (``relpos_core.measure.backends``; forcing one: ``kernels.sdpa_backends``). What holds where:

* CPU (torch 2.13): a 2-D or 4-D mask runs the fused ``_flash_attention_for_cpu``; a
  3-D mask or a mask that requires grad falls back to ``math``. So the bias is passed 4-D.
* CUDA: FlashAttention takes no ``attn_mask`` at all ("No available kernel"); cuDNN and
  memory-efficient attention accept a dense mask (on an H200 the default order picks
  cuDNN first: ``../shared/reference`` data, plotted in chapters/11_what_it_costs.ipynb).

Causality: with no bias, no sliding window and Lq == Lk it is SDPA's own ``is_causal``;
otherwise a boolean (Lq, Lk) mask (a sliding window included: ``Positions.visible``), or
-inf written into the bias tensor this call built (never into a scheme's bias). Inside a model
forward (``memo.shared_biases``) layers whose terms hold the same tables and no piece reading
q or k get that one tensor, built once (Hugging Face's T5 computes its bias once per stack),
where no gradient reaches the tables (evaluation, decoding, ALiBi's fixed slopes): a table
trained through one shared bias would get its gradient summed in another order. The bias is an ordinary tensor gathered from the tables, so gradients
reach them on every device: this is the path that trains where FlexAttention cannot.
Shaw's value term changes the output, not the logits: no mask can express it (use the
eager backend). Rows whose mask hides every key return 0.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from relpos_core.kernels import memo
from relpos_core.kernels.eager import zero_empty_rows
from relpos_core.kernels.forms import compose_logits, prepare_qk
from relpos_core.kernels.sdpa_backends import active_forced_backend, check_backend_supports

__all__ = ["attention", "dense_bias"]


def dense_bias(term, q_pos, k, pos, form: str, dtype: torch.dtype) -> torch.Tensor | None:
    """scale * scaled pieces + unscaled pieces as one fresh (1|B, H, Lq, Lk) tensor, or None."""
    return compose_logits(term, form, q_pos, k, pos, dtype, term.logit_scale(q_pos.shape[-1]))


def _causal_mask(term, q_pos, k, pos, form: str, dtype, causal: bool):
    """(the attn_mask: the bias with -inf where hidden, a bool mask or None; whether SDPA's is_causal)."""
    mask = dense_bias(term, q_pos, k, pos, form, dtype)  # (1|B, H, Lq, Lk) or None
    if not causal:
        return mask, False
    if mask is not None:
        return mask.masked_fill_(~pos.visible(), float("-inf")), False
    if pos.contiguous and pos.shift == 0 and pos.query_len == pos.key_len and pos.window is None:
        return None, True  # SDPA's own causal path: no mask tensor at all
    return pos.visible(), False  # (Lq, Lk) bool, True = may attend


def _shared_key(term, q_pos, pos, form: str, dtype, causal: bool):
    """The key of this call's mask in the model forward's memo (``memo.shared_biases``), or None when the
    bias is not shared: a piece reads q or k, positions are explicit, gradients reach the term's tables,
    or the term holds what no key stands for. Tables are keyed by storage and version: layers sharing one table share the bias."""
    if memo.shared_bias_memo() is None or not pos.contiguous or not term.logit_pieces:
        return None
    if any(p.batched for p in term.logit_pieces):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for _, t in term.tensors()):
        # training a shared table (T5): one bias would sum the layers' gradients before the table's gather
        # backward instead of after, other bits than the committed runs (2e-7 relative in the loss within
        # 40 lab steps); each layer builds its own, and only evaluation and decoding share
        return None
    try:
        tables = memo.signature(term, identity=True)
    except memo.Unhashable:
        return None
    return (tables, form, dtype, q_pos.shape[-1], causal, pos.query_len, pos.key_len, pos.query_start, pos.key_start, pos.window,
            memo.mode_key())


def _mask(term, q_pos, k, pos, form: str, dtype, causal: bool):
    """``_causal_mask``, computed once per model forward for layers that share it (``_shared_key``)."""
    key = _shared_key(term, q_pos, pos, form, dtype, causal)
    if key is None:
        return _causal_mask(term, q_pos, k, pos, form, dtype, causal)
    shared = memo.shared_bias_memo()
    if key not in shared:
        shared[key] = _causal_mask(term, q_pos, k, pos, form, dtype, causal)
    return shared[key]


def attention(q, k, v, term, *, form: str, pos, causal: bool) -> torch.Tensor:
    """(B, H, Lq, d) output; arguments already validated by ``relpos_core.attend``."""
    q_content, q_pos, k = prepare_qk(q, k, term, pos, causal)
    mask, is_causal = _mask(term, q_pos, k, pos, form, q.dtype, causal)
    forced = active_forced_backend()
    if forced is not None:
        check_backend_supports(forced, device=q.device, dtype=q.dtype, mask_ndim=None if mask is None else mask.dim(),
                               mask_requires_grad=mask is not None and mask.requires_grad and torch.is_grad_enabled())
    out = F.scaled_dot_product_attention(q_content, k, v, attn_mask=mask, is_causal=is_causal,
                                         scale=term.logit_scale(q.shape[-1]))  # (B, H, Lq, d)
    return zero_empty_rows(out, pos) if causal else out
