"""The FlexAttention path: the bias computed inside the tile loop, never materialised.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb).
``torch.nn.attention.flex_attention`` (PyTorch 2.5+) takes a ``score_mod(score, b, h,
q_idx, kv_idx)`` that edits each logit inside the fused kernel. Factories follow
attention-gym's ``generate_<name>(...)`` style; each one reads only small tables, so no
[L, L] tensor exists:

* ``generate_t5_score_mod``: T5 (Raffel et al., 2020) from a 1-D per-offset table
  [H, Lq + Lk - 1] indexed by kv - q, or clamped [H, 2 max_distance + 1] (exact: offsets
  beyond max_distance share the last bucket). The H200 anchors: 2.4x the no-bias time at
  L = 16384, against 11.3x for the seed's recipe ``generate_t5_bucket_ids_score_mod``
  (an [L, L] bucket-id tensor, kept for comparison) and 33x for log() in the score_mod.
* ``generate_alibi_score_mod``: ALiBi (Press et al., 2022), slope[h] * (kv - q).
* ``generate_shaw_key_score_mod``: Shaw et al. (2018), reads q @ a_K^T [B, H, Lq, 2k + 1].
* ``generate_deberta_score_mod``: DeBERTa (He et al., 2021), c2p and p2c read from
  [B, H, L, 2S] tables by a 1-D per-offset index.
* ``generate_transformer_xl_score_mod``: Transformer-XL (Dai et al., 2019) terms
  (b) + (d) from (q + v) . r_m, one row per relative distance (per query: this one is
  still [Lq, Lk] in size; see the module notes in the book).

Tables read by a score_mod are fp32 whatever the q/k/v dtype (the anchors: a bf16 T5
table made the kernel 35x slower than an fp32 one). All run through one shared
``torch.compile(flex_attention)``; a new closure of the same
factory at the same shapes reuses the compiled kernel. In torch 2.13 a 4-D table indexed
with ``clamp`` in the score_mod hits an inductor C++ codegen error on CPU, so the
per-query tables are indexed as 2-D [B * H * L, columns] (same values).

Training. FlexAttention has no backward on CPU (torch 2.13 raises "FlexAttention does
not support backward on CPU" when q/k/v require grad, and an opaque inductor IndexError
when only a captured table does). The wrappers here therefore check first: on CPU with
grad needed they warn (``FlexCPUBackwardWarning``) and compute the same attention on the
dense-bias SDPA path, which is differentiable; on CUDA gradients reach the tables
through FlexAttention itself.

RoPE needs no score_mod: ``rope_sdpa_attention`` (re-exported from ``sdpa_bias``)
rotates q and k and calls SDPA, which keeps the fused backends.
"""
from __future__ import annotations

import math
import warnings

import torch

from relpos_core._validate import check_choice, check_positive_int, check_tensor
from relpos_core.kernels import gather, naive, sdpa_bias
from relpos_core.kernels.naive import check_qkv
from relpos_core.kernels.sdpa_bias import rope_sdpa_attention  # noqa: F401  (RoPE: no bias, fused SDPA)

__all__ = [
    "FlexCPUBackwardWarning",
    "compiled_flex_attention",
    "flex_attention_call",
    "generate_t5_score_mod",
    "generate_t5_bucket_ids_score_mod",
    "generate_alibi_score_mod",
    "generate_shaw_key_score_mod",
    "generate_deberta_score_mod",
    "generate_transformer_xl_score_mod",
    "no_bias_attention",
    "t5_attention",
    "alibi_attention",
    "shaw_key_attention",
    "deberta_attention",
    "transformer_xl_attention",
    "rope_sdpa_attention",
]

T5_FORMS = ("offset", "clamped", "bucket_ids")


class FlexCPUBackwardWarning(UserWarning):
    """FlexAttention cannot backpropagate on CPU; the dense SDPA bias path was used instead."""


_COMPILED: list = []


def compiled_flex_attention():
    """The one shared ``torch.compile(flex_attention)`` (compiled lazily on first use).

    Raises dynamo's recompile limit to at least 64: every score_mod factory and every
    new sequence length adds a cache entry to the same compiled function, and at the
    default limit of 8 dynamo would silently fall back to the slow eager path.
    ``dynamic=False``: each new shape compiles a static kernel. In torch 2.13 the CPU
    flex template fails to build (C++ codegen error) once automatic dynamic shapes kick
    in on a recompile, e.g. the same factory with a differently sized table.
    """
    if not _COMPILED:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention

        cfg = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, max(getattr(cfg, name), 64))
        _COMPILED.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED[0]


def _needs_cpu_fallback(q, tensors, path: str) -> bool:
    """True (with a warning) when grad is needed on CPU, where FlexAttention has no backward."""
    if q.device.type != "cpu" or not torch.is_grad_enabled():
        return False
    if not any(t is not None and t.requires_grad for t in tensors):
        return False
    warnings.warn(
        f"FlexAttention has no backward on CPU (torch {torch.__version__}); {path} computes the same "
        f"attention with a dense bias through SDPA so gradients reach the tables. This costs an "
        f"[H, Lq, Lk] tensor; on CUDA the FlexAttention path trains without it.",
        FlexCPUBackwardWarning, stacklevel=3)
    return True


def flex_attention_call(q, k, v, score_mod=None, *, scale=None, compiled: bool = True,
                        kernel_options: dict | None = None) -> torch.Tensor:
    """flex_attention(q, k, v, score_mod) through the shared compiled function; (B, H, Lq, d).

    Sign convention: whatever ``score_mod`` uses (the factories say). ``compiled=False``
    runs the eager reference implementation (slow; for checking). On CPU with inputs
    that require grad this raises ``NotImplementedError`` with an explanation (use the
    scheme wrappers below, which fall back to SDPA).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("compiled", compiled, (False, True))
    if score_mod is not None and not callable(score_mod):
        raise ValueError(f"score_mod must be callable or None, got {type(score_mod).__name__}")
    scale = naive._scale(scale, d)
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise NotImplementedError(
            "FlexAttention has no backward on CPU: q, k or v requires grad. Run under torch.no_grad(), "
            "move to CUDA, or use relpos_core.kernels.sdpa_bias (dense bias, differentiable)")
    if compiled:
        fn = compiled_flex_attention()
    else:
        from torch.nn.attention.flex_attention import flex_attention as fn
    kwargs = {"kernel_options": kernel_options} if kernel_options else {}
    return fn(q, k, v, score_mod=score_mod, scale=scale, **kwargs)  # (B, H, Lq, d)


# ----------------------------------------------------------------------------- score_mod factories


def generate_t5_score_mod(offset_table, *, min_offset: int, max_offset: int):
    """T5 bias from a 1-D per-offset table: score + table[h, clamp(kv - q, lo, hi) - lo].

    Sign convention: ``key_minus_query`` (kv - q). offset_table (H, max_offset -
    min_offset + 1): column c holds the bias of offset min_offset + c. Unclamped
    (min = -(Lq - 1), max = Lk - 1) or clamped to +-max_distance (see
    ``relpos_core.kernels.gather.t5_offset_table``).
    """
    check_tensor("offset_table", offset_table, ndim=2, floating=True)
    if not isinstance(min_offset, int) or not isinstance(max_offset, int) or max_offset < min_offset:
        raise ValueError(f"min_offset <= max_offset must be integers, got {min_offset!r}, {max_offset!r}")
    if offset_table.shape[1] != max_offset - min_offset + 1:
        raise ValueError(f"offset_table must have max_offset - min_offset + 1 = {max_offset - min_offset + 1} "
                         f"columns, got shape {tuple(offset_table.shape)}")
    lo, hi = min_offset, max_offset

    def t5_score_mod(score, b, h, q_idx, kv_idx):
        return score + offset_table[h, (kv_idx - q_idx).clamp(lo, hi) - lo]

    return t5_score_mod


def generate_t5_bucket_ids_score_mod(rel_bias, bucket_ids):
    """The seed's recipe: score + rel_bias[h, bucket_ids[q, kv]] with an [Lq, Lk] id tensor.

    Sign convention: ``key_minus_query`` (bucket_ids[i, j] = bucket(j - i)). rel_bias
    (H, num_buckets). Kept to measure against the per-offset form.
    """
    check_tensor("rel_bias", rel_bias, ndim=2, floating=True)
    check_tensor("bucket_ids", bucket_ids, ndim=2, floating=False)

    def t5_bucket_ids_score_mod(score, b, h, q_idx, kv_idx):
        return score + rel_bias[h, bucket_ids[q_idx, kv_idx]]

    return t5_bucket_ids_score_mod


def generate_alibi_score_mod(slopes, *, causal: bool = True):
    """ALiBi: score + slopes[h] * (kv - q) = score - m_h (i - j); -inf for kv > q when causal.

    Sign convention: ``query_minus_key`` distance i - j (the bias is -m_h (i - j));
    bidirectional: score - m_h |i - j|. slopes (H,).
    """
    check_tensor("slopes", slopes, ndim=1, floating=True)
    check_choice("causal", causal, (False, True))
    if causal:
        def alibi_score_mod(score, b, h, q_idx, kv_idx):
            rel = kv_idx - q_idx  # j - i <= 0 for visible keys
            return torch.where(rel <= 0, score + slopes[h] * rel, -float("inf"))
    else:
        def alibi_score_mod(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (kv_idx - q_idx).abs()
    return alibi_score_mod


def generate_shaw_key_score_mod(qa, *, max_relative_position: int, num_heads: int, query_len: int,
                                causal: bool = False):
    """Shaw key term: score + qa[b, h, q, clamp(kv - q, -k, k) + k], qa = q @ a_K^T (pre-scaled).

    Sign convention: ``key_minus_query`` (kv - q). qa is passed flattened as
    (B * H * Lq, 2k + 1) (row (b H + h) Lq + q). causal: -inf for kv > q.
    """
    kmax = check_positive_int("max_relative_position", max_relative_position)
    H = check_positive_int("num_heads", num_heads)
    Lq = check_positive_int("query_len", query_len)
    check_tensor("qa", qa, ndim=2, floating=True, shape={1: 2 * kmax + 1})
    if causal:
        def shaw_score_mod(score, b, h, q_idx, kv_idx):
            rel = kv_idx - q_idx
            out = score + qa[(b * H + h) * Lq + q_idx, rel.clamp(-kmax, kmax) + kmax]
            return torch.where(rel <= 0, out, -float("inf"))
    else:
        def shaw_score_mod(score, b, h, q_idx, kv_idx):
            return score + qa[(b * H + h) * Lq + q_idx, (kv_idx - q_idx).clamp(-kmax, kmax) + kmax]
    return shaw_score_mod


def generate_deberta_score_mod(c2p_table, p2c_table, offset_index, *, num_heads: int, query_len: int,
                               key_len: int):
    """DeBERTa: score + c2p_table[b, h, q, idx] + p2c_table[b, h, kv, idx], idx = offset_index[q - kv + Lk - 1].

    Sign convention: ``query_minus_key`` (q - kv). c2p_table flattened (B * H * Lq, 2S),
    p2c_table flattened (B * H * Lk, 2S), both pre-scaled; offset_index (Lq + Lk - 1,)
    int64: the table column of each offset i - j (clamp(rel + S, 0, 2S - 1), rel
    possibly log-bucketed). Never an [Lq, Lk] tensor.
    """
    H = check_positive_int("num_heads", num_heads)
    Lq = check_positive_int("query_len", query_len)
    Lk = check_positive_int("key_len", key_len)
    check_tensor("c2p_table", c2p_table, ndim=2, floating=True)
    check_tensor("p2c_table", p2c_table, ndim=2, floating=True, shape={1: c2p_table.shape[1]})
    check_tensor("offset_index", offset_index, ndim=1, floating=False, shape={0: Lq + Lk - 1})

    def deberta_score_mod(score, b, h, q_idx, kv_idx):
        idx = offset_index[q_idx - kv_idx + (Lk - 1)]
        bh = b * H + h
        return score + c2p_table[bh * Lq + q_idx, idx] + p2c_table[bh * Lk + kv_idx, idx]

    return deberta_score_mod


def generate_transformer_xl_score_mod(bd_table, *, num_heads: int, query_len: int, key_len: int):
    """Transformer-XL (b) + (d): score + bd[b, h, q, Lq - 1 - q + kv], causal.

    Sign convention: ``query_minus_key``: relative row m = Lq - 1 - q + kv holds distance
    (Lk - Lq) + q - kv (rows for distances Lk - 1 .. 0); keys with kv > q + (Lk - Lq) get
    -inf. bd_table flattened (B * H * Lq, Lk) = (q + v) . r_m, pre-scaled.
    """
    H = check_positive_int("num_heads", num_heads)
    Lq = check_positive_int("query_len", query_len)
    Lk = check_positive_int("key_len", key_len)
    check_tensor("bd_table", bd_table, ndim=2, floating=True, shape={1: Lk})

    def transformer_xl_score_mod(score, b, h, q_idx, kv_idx):
        row = kv_idx - q_idx + (Lq - 1)
        val = score + bd_table[(b * H + h) * Lq + q_idx, row.clamp(0, Lk - 1)]
        return torch.where(row <= Lk - 1, val, -float("inf"))

    return transformer_xl_score_mod


# ----------------------------------------------------------------------------- scheme wrappers


def no_bias_attention(q, k, v, *, scale=None, compiled: bool = True) -> torch.Tensor:
    """The ceiling: FlexAttention with no score_mod; returns (B, H, Lq, d)."""
    return flex_attention_call(q, k, v, None, scale=scale, compiled=compiled)


def t5_attention(q, k, v, table, *, bidirectional: bool = True, max_distance: int = 128, scale=None,
                 form: str = "offset", compiled: bool = True, kernel_options: dict | None = None) -> torch.Tensor:
    """T5 through FlexAttention; ``form`` "offset" (default, [H, Lq + Lk - 1]), "clamped"
    ([H, 2 max_distance + 1]) or "bucket_ids" (the seed's [Lq, Lk] id tensor).

    Sign convention: ``key_minus_query``. table (num_buckets, H), learnable or not: on CPU
    with grad needed it warns and uses ``sdpa_bias.t5_attention``. T5 itself uses
    ``scale=1.0``; default 1/sqrt(d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("table", table, ndim=2, floating=True, shape={1: H})
    check_choice("form", form, T5_FORMS)
    M = check_positive_int("max_distance", max_distance)
    if _needs_cpu_fallback(q, (q, k, v, table), "flex.t5_attention"):
        return sdpa_bias.t5_attention(q, k, v, table.to(q.dtype), bidirectional=bidirectional, max_distance=M,
                                      scale=scale)
    if form == "bucket_ids":
        from relpos_core.schemes.t5 import t5_relative_bucket
        from relpos_core.offsets import relative_offsets

        naive._guard_dense("flex T5 bucket-id tensor", 1, 1, Lq, Lk, torch.int64, "t5", k=M)
        ids = t5_relative_bucket(relative_offsets(Lq, Lk, device=q.device), bidirectional=bidirectional,
                                 num_buckets=table.shape[0], max_distance=M)  # (Lq, Lk)
        mod = generate_t5_bucket_ids_score_mod(table.transpose(0, 1).float().contiguous(), ids)
    else:
        clamped = form == "clamped"
        per_offset = gather.t5_offset_table(table.float(), Lq, Lk, bidirectional=bidirectional, max_distance=M,
                                            clamped=clamped).contiguous()  # (H, R) fp32
        lo, hi = (-M, M) if clamped else (-(Lq - 1), Lk - 1)
        mod = generate_t5_score_mod(per_offset, min_offset=lo, max_offset=hi)
    return flex_attention_call(q, k, v, mod, scale=scale, compiled=compiled, kernel_options=kernel_options)


def alibi_attention(q, k, v, *, causal: bool = True, scale=None, compiled: bool = True) -> torch.Tensor:
    """ALiBi through FlexAttention (slopes from ``schemes.alibi``); returns (B, H, Lq, d).

    Sign convention: ``query_minus_key`` (bias -m_h (i - j)).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_choice("causal", causal, (False, True))
    if _needs_cpu_fallback(q, (q, k, v), "flex.alibi_attention"):
        return sdpa_bias.alibi_attention(q, k, v, causal=causal, scale=scale)
    from relpos_core.schemes.alibi import alibi_slopes

    slopes = alibi_slopes(H).to(q.device)  # (H,) fp32
    return flex_attention_call(q, k, v, generate_alibi_score_mod(slopes, causal=causal), scale=scale,
                               compiled=compiled)


def shaw_key_attention(q, k, v, *, rel_key, max_relative_position: int, causal: bool = False,
                       compiled: bool = True) -> torch.Tensor:
    """Shaw key term through FlexAttention, reading q @ a_K^T [B, H, L, 2k + 1].

    Sign convention: ``key_minus_query``. Self-attention, scale 1/sqrt(d); returns (B, H, L, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    kmax = check_positive_int("max_relative_position", max_relative_position)
    check_choice("causal", causal, (False, True))
    naive._check_shaw_table("rel_key", rel_key, kmax, d, q.dtype)
    if Lq != Lk:
        raise ValueError(f"k must have the same length as q (self-attention, Lq == Lk = {Lq}), got Lk = {Lk}")
    if _needs_cpu_fallback(q, (q, k, v, rel_key), "flex.shaw_key_attention"):
        return sdpa_bias.shaw_key_attention(q, k, v, rel_key=rel_key, max_relative_position=kmax, causal=causal)
    scale = 1.0 / math.sqrt(d)
    qa = (q.float() @ rel_key.float().transpose(0, 1)) * scale  # (B, H, Lq, 2k + 1) fp32, pre-scaled
    mod = generate_shaw_key_score_mod(qa.reshape(B * H * Lq, 2 * kmax + 1), max_relative_position=kmax,
                                      num_heads=H, query_len=Lq, causal=causal)
    return flex_attention_call(q, k, v, mod, scale=scale, compiled=compiled)


def deberta_attention(q, k, v, pos_key, pos_query, *, att_span: int, relative_pos=None, compiled: bool = True,
                      kernel_options: dict | None = None) -> torch.Tensor:
    """DeBERTa c2p + p2c through FlexAttention from [B, H, L, 2S] tables; (B, H, Lq, d).

    Sign convention: ``query_minus_key``. relative_pos (Lq, Lk) i - j, default unbucketed;
    it must depend on i - j only (true of DeBERTa's log buckets), since only its
    Lq + Lk - 1 distinct offsets are kept. Scale 1/sqrt(3d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    S = check_positive_int("att_span", att_span)
    for name, t in (("pos_key", pos_key), ("pos_query", pos_query)):
        check_tensor(name, t, ndim=3, floating=True, dtype=q.dtype, shape={0: H, 1: 2 * S, 2: d})
    if relative_pos is not None:
        check_tensor("relative_pos", relative_pos, ndim=2, floating=False, shape={0: Lq, 1: Lk})
    if _needs_cpu_fallback(q, (q, k, v, pos_key, pos_query), "flex.deberta_attention"):
        return sdpa_bias.deberta_attention(q, k, v, pos_key, pos_query, att_span=S, relative_pos=relative_pos)
    if relative_pos is None:  # unbucketed: the offset itself, no [Lq, Lk] tensor at all
        rel_of_offset = torch.arange(-(Lk - 1), Lq, device=q.device)  # (Lq + Lk - 1,) i - j
    else:
        rel_of_offset = _rel_by_offset(relative_pos.to(q.device), Lq, Lk)  # (Lq + Lk - 1,) at offsets -(Lk-1) .. Lq-1
    offset_index = (rel_of_offset + S).clamp(0, 2 * S - 1)  # (Lq + Lk - 1,) table column
    scale = 1.0 / math.sqrt(3 * d)
    c2p_table = (q.float() @ pos_key.float().transpose(-1, -2)) * scale  # (B, H, Lq, 2S) fp32
    p2c_table = (k.float() @ pos_query.float().transpose(-1, -2)) * scale  # (B, H, Lk, 2S) fp32
    mod = generate_deberta_score_mod(c2p_table.reshape(B * H * Lq, 2 * S), p2c_table.reshape(B * H * Lk, 2 * S),
                                     offset_index, num_heads=H, query_len=Lq, key_len=Lk)
    return flex_attention_call(q, k, v, mod, scale=scale, compiled=compiled, kernel_options=kernel_options)


def _rel_by_offset(rel, Lq: int, Lk: int) -> torch.Tensor:
    """Value of rel at each offset i - j = -(Lk - 1) .. Lq - 1, read from row 0 and column 0.

    Offset o = i - j <= 0 appears at (0, -o) in row 0; o > 0 at (o, 0) in column 0.
    """
    neg = rel[0, :].flip(0)  # (Lk,): offsets -(Lk - 1) .. 0
    pos = rel[1:, 0]  # (Lq - 1,): offsets 1 .. Lq - 1
    return torch.cat([neg, pos]).long()  # (Lq + Lk - 1,)


def transformer_xl_attention(q, k, v, r_k, u, v_bias, *, compiled: bool = True) -> torch.Tensor:
    """Transformer-XL through FlexAttention: (q + u) against k, (b) + (d) in the score_mod.

    Sign convention: ``query_minus_key``. r_k (H, Lk, d) rows for distances Lk-1 .. 0;
    u, v_bias (H, d); causal. Scale 1/sqrt(d). Returns (B, H, Lq, d).
    """
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    check_tensor("r_k", r_k, ndim=3, floating=True, dtype=q.dtype, shape={0: H, 1: Lk, 2: d})
    check_tensor("u", u, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    check_tensor("v_bias", v_bias, ndim=2, floating=True, dtype=q.dtype, shape={0: H, 1: d})
    if Lq > Lk:
        raise ValueError(f"q must have query_len <= key_len = {Lk}, got {Lq}")
    if _needs_cpu_fallback(q, (q, k, v, r_k, u, v_bias), "flex.transformer_xl_attention"):
        return sdpa_bias.transformer_xl_attention(q, k, v, r_k, u, v_bias)
    scale = 1.0 / math.sqrt(d)
    bd = ((q + v_bias[None, :, None, :]).float() @ r_k.float().transpose(-2, -1)) * scale  # (B, H, Lq, Lk) fp32
    mod = generate_transformer_xl_score_mod(bd.reshape(B * H * Lq, Lk), num_heads=H, query_len=Lq, key_len=Lk)
    return flex_attention_call(q + u[None, :, None, :], k, v, mod, scale=scale, compiled=compiled)
