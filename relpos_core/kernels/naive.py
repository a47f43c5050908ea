"""The naive kernel path: materialise the relative tensor or the dense bias, then attend.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). This is each paper's
equations written out literally, the baseline the other paths are measured against:

* Shaw et al. (2018): gather a_K (and a_V) into an [Lq, Lk, d] tensor, then einsum;
  about L^2 d numbers (4 GiB at L = 4096, d = 64, fp32).
* T5 (Raffel et al., 2020): an [Lq, Lk] bucket-id tensor, then the dense [H, Lq, Lk] bias.
* ALiBi (Press et al., 2022): the dense [H, Lq, Lk] bias.
* DeBERTa (He et al., 2021): c2p and p2c gathered to dense [B, H, Lq, Lk] scores.
* Transformer-XL (Dai et al., 2019): the four terms, (b) and (d) moved into place by rel_shift.

Every allocation of order L^2 d or H L^2 is checked against the memory guard first
(``relpos_core.measure.guard``): over budget raises ``MemoryBudgetError`` naming the path
that avoids it. Scores are ``q k^T * scale + bias`` with ``scale`` defaulting to
1/sqrt(d) (as SDPA); pass ``scale=1.0`` for T5's unscaled logits.
"""
from __future__ import annotations

import math

import torch

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.measure.analytic import analytic_bytes, dtype_size
from relpos_core.measure.guard import check_memory

__all__ = [
    "attention_with_bias",
    "check_qkv",
    "shaw_key_logits",
    "shaw_attention",
    "t5_bias",
    "t5_attention",
    "alibi_attention",
    "deberta_bias",
    "deberta_attention",
    "transformer_xl_attention",
]


def check_qkv(q, k, v) -> tuple[int, int, int, int, int]:
    """Validate (B, H, Lq, d), (B, H, Lk, d), (B, H, Lk, d) with one float dtype; return B, H, Lq, Lk, d."""
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("k", k, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 3: d})
    Lk = k.shape[2]
    check_tensor("v", v, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 2: Lk, 3: d})
    return B, H, Lq, Lk, d


def _scale(scale, d: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive number (or None for 1/sqrt(d)), got {scale!r}")
    return float(scale)


def attention_with_bias(q, k, v, bias=None, *, scale=None) -> torch.Tensor:
    """softmax(q k^T * scale + bias) v, written out (the math path); returns (B, H, Lq, d).

    Sign convention: not applicable (``bias`` is already in (query, key) layout, any
    shape broadcastable to (B, H, Lq, Lk); -inf entries mask).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    scale = _scale(scale, d)
    if bias is not None:
        check_tensor("bias", bias, ndim=(2, 3, 4), floating=True, shape={-2: Lq, -1: Lk})
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Lq, Lk)
    if bias is not None:
        scores = scores + bias  # (B, H, Lq, Lk)
    return torch.softmax(scores, dim=-1) @ v  # (B, H, Lq, d)


def _check_shaw_table(name, table, kmax, d, dtype):
    check_tensor(name, table, ndim=2, floating=True, dtype=dtype, shape={1: d})
    if table.shape[0] != 2 * kmax + 1:
        raise ValueError(f"{name} must have 2 * max_relative_position + 1 = {2 * kmax + 1} rows, "
                         f"got shape {tuple(table.shape)}")


def _guard_shaw(Lq, Lk, d, B, H, kmax, dtype, what):
    need = Lq * Lk * d * dtype_size(dtype)
    alt = analytic_bytes("gather", "shaw", B, H, Lq, Lk, d, kmax, dtype)
    check_memory(need, what=what, shape=(Lq, Lk, d), dtype=dtype,
                 alternative="the gather path (relpos_core.kernels.gather)", alternative_bytes=alt)


def shaw_key_logits(q, rel_key, *, max_relative_position: int, index: torch.Tensor | None = None) -> torch.Tensor:
    """Unscaled q_i . a_K[clip(j - i, -k, k) + k] by gathering a_K into [Lq, Lk, d].

    Sign convention: ``key_minus_query`` (j - i). q (B, H, Lq, d), rel_key (2k + 1, d);
    key length = Lq (self-attention); ``index`` an optional precomputed
    ``gather.shaw_gather_index(Lq, ...)`` (built once per forward pass, shared by layers).
    Returns (B, H, Lq, Lq).
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    kmax = check_positive_int("max_relative_position", max_relative_position)
    _check_shaw_table("rel_key", rel_key, kmax, d, q.dtype)
    _guard_shaw(Lq, Lq, d, B, H, kmax, q.dtype, "naive Shaw")
    from relpos_core.kernels.gather import check_shaw_index

    idx = check_shaw_index(index, Lq, Lq, kmax, q.device)  # (Lq, Lk)
    a_k = rel_key[idx]  # (Lq, Lk, d): the L^2 d tensor
    return torch.einsum("bhid,ijd->bhij", q, a_k)  # (B, H, Lq, Lk)


def shaw_attention(q, k, v, *, rel_key=None, rel_value=None, max_relative_position: int,
                   causal: bool = False) -> torch.Tensor:
    """Shaw attention with a_K and a_V materialised as [Lq, Lk, d]; returns (B, H, Lq, d).

    Sign convention: ``key_minus_query`` (row clip(j - i, -k, k) + k). Self-attention
    (Lq == Lk); causal masks j > i. Scale 1/sqrt(d) as in the paper.
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_choice("causal", causal, (False, True))
    if Lq != Lk:
        raise ValueError(f"k must have the same length as q (self-attention, Lq == Lk = {Lq}), got Lk = {Lk}")
    for name, t in (("rel_key", rel_key), ("rel_value", rel_value)):
        if t is not None:
            _check_shaw_table(name, t, kmax, d, q.dtype)
            _guard_shaw(Lq, Lk, d, B, H, kmax, q.dtype, f"naive Shaw ({name})")
    from relpos_core.schemes.shaw import shaw_relative_index

    idx = shaw_relative_index(Lq, Lk, max_relative_position=kmax, device=q.device)  # (Lq, Lk)
    scores = q @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    if rel_key is not None:
        scores = scores + torch.einsum("bhid,ijd->bhij", q, rel_key[idx])  # (B, H, Lq, Lk)
    scores = scores / math.sqrt(d)
    if causal:
        scores = scores.masked_fill(idx > kmax, float("-inf"))  # j > i: key after the query
    probs = torch.softmax(scores, dim=-1)  # (B, H, Lq, Lk)
    out = probs @ v  # (B, H, Lq, d)
    if rel_value is not None:
        out = out + torch.einsum("bhij,ijd->bhid", probs, rel_value[idx])  # (B, H, Lq, d)
    return out


def _guard_dense(what, B, H, Lq, Lk, dtype, scheme, alt_path="the FlexAttention path (relpos_core.kernels.flex)",
                 k=1, d=1):
    need = B * H * Lq * Lk * dtype_size(dtype)
    alt = analytic_bytes("flex", scheme, 1, H, Lq, Lk, d, k, dtype)
    check_memory(need, what=what, shape=(B, H, Lq, Lk), dtype=dtype, alternative=alt_path, alternative_bytes=alt)


def t5_bias(table, query_len: int, key_len: int | None = None, *, bidirectional: bool = True,
            max_distance: int = 128) -> torch.Tensor:
    """Dense (H, Lq, Lk) T5 bias via an [Lq, Lk] bucket-id tensor, then a table lookup.

    Sign convention: ``key_minus_query``: entry (h, i, j) = table[bucket(j - i), h].
    table: (num_buckets, H) (Hugging Face's ``relative_attention_bias.weight``).
    """
    check_tensor("table", table, ndim=2, floating=True)
    Lq = check_positive_int("query_len", query_len)
    Lk = Lq if key_len is None else check_positive_int("key_len", key_len)
    max_distance = check_positive_int("max_distance", max_distance)
    _guard_dense("naive T5 dense bias", 1, table.shape[1], Lq, Lk, table.dtype, "t5", k=max_distance)
    from relpos_core.schemes.t5 import t5_bias_from_table

    return t5_bias_from_table(table, Lq, Lk, bidirectional=bidirectional, max_distance=max_distance)  # (H, Lq, Lk)


def t5_attention(q, k, v, table, *, bidirectional: bool = True, max_distance: int = 128, scale=None) -> torch.Tensor:
    """Attention with the dense T5 bias added to the logits; returns (B, H, Lq, d).

    Sign convention: ``key_minus_query``. T5 itself uses ``scale=1.0``; default 1/sqrt(d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("table", table, ndim=2, floating=True, dtype=q.dtype, shape={1: H})
    bias = t5_bias(table, Lq, Lk, bidirectional=bidirectional, max_distance=max_distance)  # (H, Lq, Lk)
    return attention_with_bias(q, k, v, bias, scale=scale)  # (B, H, Lq, d)


def alibi_attention(q, k, v, *, causal: bool = True, scale=None) -> torch.Tensor:
    """Attention with the dense ALiBi bias -m_h (i - j) (-inf for j > i when causal).

    Sign convention: ``query_minus_key`` (distance i - j). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("causal", causal, (False, True))
    _guard_dense("naive ALiBi dense bias", 1, H, Lq, Lk, torch.float32, "alibi")
    from relpos_core.schemes.alibi import alibi_bias

    bias = alibi_bias(H, Lq, Lk, causal=causal, device=q.device).to(q.dtype)  # (H, Lq, Lk)
    return attention_with_bias(q, k, v, bias, scale=scale)  # (B, H, Lq, d)


def _deberta_rel(relative_pos, Lq, Lk, device):
    if relative_pos is None:
        from relpos_core.schemes.deberta import build_relative_position

        return build_relative_position(Lq, Lk).to(device)  # (Lq, Lk) i - j
    check_tensor("relative_pos", relative_pos, ndim=2, floating=False, shape={0: Lq, 1: Lk})
    return relative_pos.to(device)


def deberta_bias(q, k, pos_key, pos_query, *, att_span: int, relative_pos=None) -> torch.Tensor:
    """Unscaled c2p + p2c as dense (B, H, Lq, Lk) scores (DeBERTa-v2 / Hugging Face indexing).

    Sign convention: ``query_minus_key``: relative_pos (Lq, Lk) holds i - j (default
    unbucketed). pos_key, pos_query: (H, 2S, d) projected relative tables, S = att_span.
    """
    check_tensor("q", q, ndim=4, floating=True)
    B, H, Lq, d = q.shape
    check_tensor("k", k, ndim=4, floating=True, dtype=q.dtype, shape={0: B, 1: H, 3: d})
    S = check_positive_int("att_span", att_span)
    for name, t in (("pos_key", pos_key), ("pos_query", pos_query)):
        check_tensor(name, t, ndim=3, floating=True, dtype=q.dtype, shape={0: H, 1: 2 * S, 2: d})
    Lk = k.shape[2]
    rel = _deberta_rel(relative_pos, Lq, Lk, q.device)
    _guard_dense("naive DeBERTa c2p + p2c", 2 * B, H, Lq, Lk, q.dtype, "deberta", k=S, d=d)
    from relpos_core.schemes.deberta import deberta_c2p_p2c

    c2p, p2c = deberta_c2p_p2c(q, k, pos_key, pos_query, rel, S, pos_layout="hsd")  # (B, H, Lq, Lk) each
    return c2p + p2c  # (B, H, Lq, Lk)


def deberta_attention(q, k, v, pos_key, pos_query, *, att_span: int, relative_pos=None) -> torch.Tensor:
    """DeBERTa disentangled attention: softmax((q k^T + c2p + p2c) / sqrt(3d)) v.

    Sign convention: ``query_minus_key`` (see ``deberta_bias``). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    scale = 1.0 / math.sqrt(3 * d)
    bias = deberta_bias(q, k, pos_key, pos_query, att_span=att_span, relative_pos=relative_pos) * scale  # (B, H, Lq, Lk)
    return attention_with_bias(q, k, v, bias, scale=scale)  # (B, H, Lq, d)


def transformer_xl_attention(q, k, v, r_k, u, v_bias) -> torch.Tensor:
    """Transformer-XL attention from the four terms (a)+(b)+(c)+(d), causal, scale 1/sqrt(d).

    Sign convention: ``query_minus_key``. q (B, H, Lq, d) are the last Lq of the Lk keys;
    r_k (H, Lk, d) rows for distances Lk-1 .. 0; u, v_bias (H, d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("r_k", r_k, ndim=3, floating=True, dtype=q.dtype, shape={0: H, 1: Lk, 2: d})
    _guard_dense("naive Transformer-XL terms", 4 * B, H, Lq, Lk, q.dtype, "transformer_xl", d=d)
    from relpos_core.schemes.transformer_xl import transformer_xl_causal_mask, transformer_xl_terms

    t = transformer_xl_terms(q, k, r_k, u, v_bias, r_layout="HLd")  # dict of (B, H, Lq, Lk)
    scores = (t["a"] + t["b"] + t["c"] + t["d"]) / math.sqrt(d)  # (B, H, Lq, Lk)
    visible = transformer_xl_causal_mask(Lq, Lk, device=q.device)  # (Lq, Lk)
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v  # (B, H, Lq, d)
