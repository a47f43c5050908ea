"""The lab's one door into the position schemes: every call into ``relpos_core.schemes``
and ``relpos_core.attention`` that the lab makes is in this file.

Book: chapter 10, "Experiments" (chapters/10_experiments.ipynb). The papers behind each
scheme are cited in the scheme modules this file calls (``relpos_core/schemes/``).

Each ``<scheme>_attention`` function has the same signature,

    fn(q, k, v, tables, *, causal) -> (B, H, L, d)

with q, k, v the projected heads (B, H, L, d) of one layer and ``tables`` a dict of that
layer's position tensors (the model owns them as parameters; see ``models.py``). A
causal model masks keys after the query here, with the same boolean mask for every
scheme, never through a bias that holds -inf. When the kernel layer of relpos_core gets
its unified entry point, porting the lab means editing this file only.

Sign conventions are the schemes' own: Shaw, T5 and RoPE use ``key_minus_query``
(j - i), DeBERTa and ALiBi ``query_minus_key`` (i - j).
"""
from __future__ import annotations

import math

import torch

from relpos_core.attention import attention as _dense_attention
from relpos_core.schemes import absolute as _absolute
from relpos_core.schemes import alibi as _alibi
from relpos_core.schemes import deberta as _deberta
from relpos_core.schemes import rope as _rope
from relpos_core.schemes import shaw as _shaw
from relpos_core.schemes import t5 as _t5

__all__ = [
    "ATTENTION",
    "plain_attention",
    "shaw_attention",
    "t5_attention",
    "alibi_attention",
    "rope_attention",
    "deberta_attention",
    "sinusoidal_table",
    "learned_position_table",
    "deberta_relative_table",
    "enhanced_mask_decoder",
    "deberta_config",
    "shaw_rows_of_offsets",
    "t5_buckets_of_offsets",
]


def _causal_mask(L: int, device) -> torch.Tensor:
    """(L, L) bool, True where the key comes after the query (masked)."""
    return torch.ones(L, L, dtype=torch.bool, device=device).triu(1)  # (L, L)


def plain_attention(q, k, v, tables, *, causal):
    """Content only (no position term): none, sinusoidal and learned absolute positions."""
    return _dense_attention(q, k, v, causal=causal)  # (B, H, L, d)


def shaw_attention(q, k, v, tables, *, causal):
    """Shaw et al.: ``tables`` holds ``rel_key`` and/or ``rel_value`` (2k + 1, d) and ``k``."""
    return _shaw.shaw_attention(
        q, k, v, rel_key=tables.get("rel_key"), rel_value=tables.get("rel_value"),
        max_relative_position=tables["k"], causal=causal,
    )  # (B, H, L, d)


def t5_attention(q, k, v, tables, *, causal):
    """T5: ``tables["table"]`` is (num_buckets, H), shared by the layers; bias added unscaled.

    T5 itself runs with scale 1.0 and folds 1/sqrt(d) into its initialisation; here the
    content term keeps the family's 1/sqrt(d) and the bias is added after it, as T5 adds
    its bias to the (unscaled) logits.
    """
    L = q.shape[2]
    bias = _t5.t5_bias_from_table(
        tables["table"], L, L, bidirectional=not causal, max_distance=tables["max_distance"],
    )  # (H, L, L)
    return _dense_attention(q, k, v, bias=bias, causal=causal)  # (B, H, L, d)


def alibi_attention(q, k, v, tables, *, causal):
    """ALiBi: the symmetric -m_h |i - j| bias; causality comes from the shared mask."""
    H, L = q.shape[1], q.shape[2]
    bias = _alibi.alibi_bias(H, L, L, causal=False, device=q.device).to(q.dtype)  # (H, L, L)
    return _dense_attention(q, k, v, bias=bias, causal=causal)  # (B, H, L, d)


def rope_attention(q, k, v, tables, *, causal):
    """RoPE: rotate queries and keys by their positions, then plain attention."""
    positions = torch.arange(q.shape[2], device=q.device)  # (L,)
    q = _rope.apply_rope(q, positions)  # (B, H, L, d)
    k = _rope.apply_rope(k, positions)  # (B, H, L, d)
    return _dense_attention(q, k, v, causal=causal)  # (B, H, L, d)


def deberta_attention(q, k, v, tables, *, causal):
    """DeBERTa c2p + p2c: ``tables`` holds ``pos_key``, ``pos_query`` (H, 2S, d) and ``span`` S.

    The layer projects the shared relative table with its own key and query projections
    (``share_att_key``, as DeBERTa-v2); all three terms are divided by sqrt(3 d).
    """
    B, H, L, d = q.shape
    rel = _deberta.build_relative_position(L, L, device=q.device)  # (L, L), i - j
    c2p, p2c = _deberta.deberta_c2p_p2c(
        q, k, tables["pos_key"], tables["pos_query"], rel, tables["span"], pos_layout="hsd",
    )  # (B, H, L, L) each, unscaled
    scale = 1.0 / math.sqrt(3 * d)
    return _dense_attention(q, k, v, bias=(c2p + p2c) * scale, causal=causal, scale=scale)  # (B, H, L, d)


ATTENTION = {
    "plain": plain_attention,
    "shaw": shaw_attention,
    "t5": t5_attention,
    "alibi": alibi_attention,
    "rope": rope_attention,
    "deberta": deberta_attention,
}


# ----------------------------------------------------------------------------- tables and modules


def sinusoidal_table(num_positions: int, dim: int) -> torch.Tensor:
    """(num_positions, dim) sinusoidal table of Vaswani et al. (absolute positions 0..N-1)."""
    return _absolute.sinusoidal_position_embeddings(num_positions, dim)


def learned_position_table(num_positions: int, dim: int) -> torch.nn.Module:
    """A learned absolute table (BERT/GPT), ``forward(positions) -> (..., dim)``."""
    return _absolute.LearnedPositionEmbedding(num_positions, dim)


def deberta_config(d_model: int, num_heads: int, span: int, max_positions: int):
    """The ``DisentangledConfig`` of the lab's DeBERTa: clip at S = ``span``, no log buckets."""
    return _deberta.DisentangledConfig(
        hidden_size=d_model, num_heads=num_heads, max_relative_positions=span, position_buckets=-1,
        max_position_embeddings=max_positions,
    )


def deberta_relative_table(config) -> torch.nn.Module:
    """DeBERTa's shared (2S, D) relative table with its LayerNorm, ``forward() -> (2S, D)``."""
    return _deberta.RelativeEmbeddings(config)


def enhanced_mask_decoder(config, layer: torch.nn.Module, num_steps: int = 2) -> torch.nn.Module:
    """DeBERTa's Enhanced Mask Decoder around the model's last block (weights shared).

    ``layer`` must accept ``(hidden, attention_mask, rel_embeddings, query_states=,
    relative_pos=)``; the EMD adds absolute positions to the query input only.
    """
    return _deberta.EnhancedMaskDecoder(config, layer=layer, num_steps=num_steps)


# ----------------------------------------------------------------------------- offsets to table rows (figures)


def shaw_rows_of_offsets(offsets: torch.Tensor, k: int) -> torch.Tensor:
    """Shaw's table row clip(r, -k, k) + k for each offset r = j - i (``key_minus_query``)."""
    _check_offsets(offsets)
    idx = _shaw.shaw_relative_index(1, 2 * int(offsets.abs().max()) + 1, max_relative_position=k,
                                    query_offset=int(offsets.abs().max()))[0]  # rows of r = -m .. m
    return idx[offsets + int(offsets.abs().max())]


def t5_buckets_of_offsets(offsets: torch.Tensor, *, max_distance: int, num_buckets: int = 32,
                          bidirectional: bool = True) -> torch.Tensor:
    """T5's bucket of each offset r = j - i (``key_minus_query``)."""
    _check_offsets(offsets)
    return _t5.t5_relative_bucket(offsets, bidirectional=bidirectional, num_buckets=num_buckets,
                                  max_distance=max_distance)


def _check_offsets(offsets) -> None:
    if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1 or offsets.numel() == 0 or offsets.is_floating_point():
        raise ValueError(f"offsets must be a non-empty 1-D integer tensor, got {offsets!r:.80}")
