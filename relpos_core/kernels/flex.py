"""The FlexAttention backend: the position term computed inside the tile loop, never materialised.

Book: "What it costs" (chapters/11_what_it_costs.ipynb).
``torch.nn.attention.flex_attention`` (PyTorch 2.5+) takes a ``score_mod(score, b, h,
q_idx, kv_idx)`` that edits each logit inside the fused kernel, and a ``BlockMask`` that
says which (query block, key block) tiles to compute at all. Here the score_mod is built
from a scheme's ``PositionTerm`` in one of two forms:

* ``gather``: it reads small tables by offset: a per-offset bias [H, Lq + Lk - 1] (T5;
  ALiBi needs none, its slope times the offset is computed in the kernel), per-query
  scores q @ E^T [B, H, Lq, R] (Shaw's key term, DeBERTa's c2p, Transformer-XL's (b) + (d))
  or per-key scores k @ E^T [B, H, Lk, R] (DeBERTa's p2c), indexed through a 1-D
  row-of-offset table. No [Lq, Lk] tensor exists ("What it costs" plots what that costs in
  time on a GPU, from the reference measurements).
* ``naive``: it reads an [Lq, Lk] index per pair (T5's bucket-id tensor; FIRE's bias,
  which has no per-offset table): kept to measure the difference, and for FIRE.

Causality is never written into a score_mod: it is a ``BlockMask``, built once per call
from block arithmetic (no [Lq, Lk] evaluation) for contiguous positions, so the kernel
skips every tile above the diagonal; explicit positions use ``create_block_mask``.
Shaw's value term changes the output, not the logits: no score_mod can express it.

Tables a score_mod reads are fp32 whatever the q/k/v dtype (one dtype for every table, so
one compiled kernel serves every input dtype), and indexed as 2-D (in torch 2.13 a 4-D
table indexed with ``clamp`` hits an inductor C++ codegen error on CPU). Inside a
``torch.compile`` of the caller (``run_compiled`` then calls ``flex_attention`` in place) on
CPU, every tensor a score_mod or mask_mod reads, and q and k when a rotation or a shift
changed them, pass through ``relpos_core.compile_ops.flex_inputs``, an opaque copy: the CPU
template takes no input computed inside the same graph.

Training: FlexAttention has no backward on CPU (from torch 2.11 even the uncompiled call
raises "FlexAttention does not support backward on CPU"; on 2.9 the uncompiled call runs,
unfused, and the compiled one fails inside inductor with an IndexError). When gradients
are needed on CPU, ``attention`` warns (``FlexCPUBackwardWarning``; under ``torch.compile``
once, when the call is traced) and computes the same attention on the SDPA backend with the
same form; on CUDA gradients reach the tables through FlexAttention itself.
"""
from __future__ import annotations

import torch

from relpos_core.compile_ops import flex_inputs, warn
from relpos_core.kernels import sdpa
from relpos_core.kernels.forms import compose_score_mod, prepare_qk

__all__ = [
    "FlexCPUBackwardWarning",
    "BLOCK_SIZE",
    "compiled_flex_attention",
    "run_compiled",
    "recompile_limits",
    "causal_block_mask",
    "full_block_mask",
    "build_score_mod",
    "attention",
    "needs_cpu_fallback",
]

BLOCK_SIZE = 128


class FlexCPUBackwardWarning(UserWarning):
    """FlexAttention cannot backpropagate on CPU; the SDPA backend was used instead."""


_COMPILED: list = []
RECOMPILE_LIMIT = 64


def compiled_flex_attention():
    """The one shared ``torch.compile(flex_attention)`` (compiled lazily on first use).

    ``dynamic=False``: each shape compiles a static kernel (torch 2.13's dynamic-shape CPU
    template fails to build: a C++ codegen error). Call it through ``run_compiled``, which
    raises dynamo's recompile limit for the duration of the call only.
    """
    if not _COMPILED:
        from torch.nn.attention.flex_attention import flex_attention

        _COMPILED.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED[0]


def recompile_limits(n: int = RECOMPILE_LIMIT):
    """Dynamo's recompile limits raised to at least ``n``, as a ``config.patch`` context.

    Every new score_mod structure and shape adds a cache entry to the one compiled
    function, and at dynamo's default limit of 8 it would fall back, silently, to
    FlexAttention's slow eager path. ``run_compiled`` patches it for one call and a
    benchmark for its run: no process-wide setting is left changed.
    """
    import torch._dynamo

    cfg = torch._dynamo.config
    names = [name for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                               "accumulated_cache_size_limit") if hasattr(cfg, name)]
    return cfg.patch(**{name: max(getattr(cfg, name), n) for name in names})


def run_compiled(*args, **kwargs):
    """``compiled_flex_attention()(*args, **kwargs)``, or plain ``flex_attention`` when the caller is
    itself being compiled (torch.compile of a model that calls ``rp.attend`` compiles it in place)."""
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling():
        return flex_attention(*args, **kwargs)
    with recompile_limits():
        return compiled_flex_attention()(*args, **kwargs)


def full_block_mask(query_len: int, key_len: int, device, block_size: int = BLOCK_SIZE):
    """A BlockMask in which every tile is computed (no masking), built from block counts alone.

    Passed instead of ``block_mask=None``, for which torch 2.13 evaluates a dense
    [Lq, Lk] mask to build its default one (``tests/test_memory.py`` counts such an evaluation).
    """
    from torch.nn.attention.flex_attention import BlockMask

    nq, nk = -(-query_len // block_size), -(-key_len // block_size)
    kb = torch.arange(nk, device=device, dtype=torch.int32)
    # a block cut short by the sequence end is "partial" (as create_block_mask has it), the rest full
    q_whole = (torch.arange(nq, device=device) + 1) * block_size <= query_len  # (nq,)
    k_whole = (kb.long() + 1) * block_size <= key_len  # (nk,)
    full = q_whole[:, None] & k_whole[None, :]  # (nq, nk)
    full_num = full.sum(-1).to(torch.int32)  # (nq,)
    partial_num = (nk - full_num).to(torch.int32)  # (nq,)
    # rows with every block full list 0 .. nk - 1; otherwise the partial blocks come first
    order = torch.argsort(full.to(torch.int8), dim=-1, stable=True).to(torch.int32)  # (nq, nk): partial, then full
    full_idx = torch.where(full_num[:, None] == nk, kb[None, :], order.flip(-1))  # full blocks first
    partial_idx = order  # partial blocks first

    def everything(b, h, q_idx, kv_idx):
        return q_idx >= 0

    return BlockMask.from_kv_blocks(
        partial_num[None, None], partial_idx[None, None], full_num[None, None], full_idx[None, None],
        BLOCK_SIZE=block_size, mask_mod=everything, seq_lengths=(query_len, key_len))


def causal_block_mask(pos, block_size: int = BLOCK_SIZE):
    """The BlockMask of ``key_pos <= query_pos`` (and ``query_pos - W < key_pos`` with a
    sliding window ``pos.window = W``).

    Contiguous positions (key j visible to query i iff i + shift - W < j <= i + shift): the
    block tables come from arithmetic on block indices, O((Lq / block) (Lk / block)) work
    and memory. A key block is *full* when all of it is visible to every query of the
    block (and neither block is cut short by the sequence end), *partial* when only some
    of it is visible to some query of the block. Explicit positions: evaluated with
    ``create_block_mask`` (an [Lq, Lk] boolean evaluation, counted by the memory guard).
    """
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask

    Lq, Lk, dev, W = pos.query_len, pos.key_len, pos.query.device, pos.window
    if not pos.contiguous:
        qp, kp = flex_inputs(pos.query, pos.key)

        def visible(b, h, q_idx, kv_idx):
            seen = kp[kv_idx] <= qp[q_idx]
            if W is not None:
                seen = seen & (kp[kv_idx] > qp[q_idx] - W)
            return seen

        return create_block_mask(visible, None, None, Lq, Lk, device=dev, BLOCK_SIZE=block_size)
    shift = pos.shift
    nq, nk = -(-Lq // block_size), -(-Lk // block_size)
    qb = torch.arange(nq, device=dev)  # (nq,)
    q_first = qb * block_size  # first query of each block
    q_last = torch.clamp(q_first + block_size - 1, max=Lq - 1)  # last query of each block
    kb = torch.arange(nk, device=dev)  # (nk,)
    k_last = (kb + 1) * block_size - 1  # last key of each block
    k_first = kb * block_size
    any_visible = k_first[None, :] <= (q_last[:, None] + shift)  # (nq, nk)
    all_visible = k_last[None, :] <= (q_first[:, None] + shift)  # (nq, nk)
    if W is not None:  # the window's lower edge: key > query + shift - W
        k_end = torch.clamp(k_last, max=Lk - 1)  # the last key a block really holds
        any_visible &= k_end[None, :] > (q_first[:, None] + shift - W)
        all_visible &= k_first[None, :] > (q_last[:, None] + shift - W)
    # as create_block_mask does, a block cut short by the sequence end is never "full"
    all_visible &= ((kb + 1) * block_size <= Lk)[None, :] & ((qb + 1) * block_size <= Lq)[:, None]
    partial = any_visible & ~all_visible  # (nq, nk)
    full_num = all_visible.sum(-1).to(torch.int32)  # (nq,)
    partial_num = partial.sum(-1).to(torch.int32)  # (nq,)
    if W is None:
        # visible blocks of a row are a prefix 0 .. n-1: full ones first, then the partial ones
        cols = kb[None, :].expand(nq, nk)  # (nq, nk)
        full_idx = cols.to(torch.int32)  # full blocks 0 .. full_num - 1 lead each row
        partial_idx = (cols + full_num[:, None].long()).clamp(max=nk - 1).to(torch.int32)  # then the partial ones
    else:  # a band: the listed blocks of each kind first, in increasing order
        full_idx = torch.argsort((~all_visible).to(torch.int8), dim=-1, stable=True).to(torch.int32)  # (nq, nk)
        partial_idx = torch.argsort((~partial).to(torch.int8), dim=-1, stable=True).to(torch.int32)  # (nq, nk)

    def visible(b, h, q_idx, kv_idx):
        seen = kv_idx <= q_idx + shift
        if W is not None:
            seen = seen & (kv_idx > q_idx + shift - W)
        return seen

    return BlockMask.from_kv_blocks(
        partial_num[None, None], partial_idx[None, None], full_num[None, None], full_idx[None, None],
        BLOCK_SIZE=block_size, mask_mod=visible, seq_lengths=(Lq, Lk))


def build_score_mod(term, form: str, q, k, pos, *, causal_in_score_mod: bool = False):
    """The score_mod adding every logit piece of ``term`` (None when it has none and nothing is masked).

    q (B, H, Lq, d) is the query used by position terms (rotated, unshifted), k (B, H, Lk, d).
    Each piece gives its own reader (``Piece.score_mod``); the composition (scale x
    scaled readers + unscaled readers) is ``relpos_core.kernels.forms.compose_score_mod``.
    ``causal_in_score_mod`` writes -inf for keys after the query into the score instead
    of leaving causality to a BlockMask: the same numbers, but no tile can be skipped
    (kept to measure what block skipping saves; ``attention(..., block_skipping=False)``).
    """
    return compose_score_mod(term, form, q, k, pos, term.logit_scale(q.shape[-1]),
                             causal_in_score_mod=causal_in_score_mod)


def needs_cpu_fallback(q, k, v, term) -> bool:
    """True when gradients are needed on CPU, where FlexAttention has no backward."""
    if q.device.type != "cpu" or not torch.is_grad_enabled():
        return False
    tensors = [q, k, v] + [t for _, t in term.tensors()]
    return any(t.requires_grad for t in tensors)


def attention(q, k, v, term, *, form: str, pos, causal: bool, compiled: bool = True,
              kernel_options: dict | None = None, block_skipping: bool = True) -> torch.Tensor:
    """(B, H, Lq, d) output; arguments already validated by ``relpos_core.attend``.

    ``block_skipping=False`` (causal only) masks inside the score_mod and computes every
    tile: the comparison the benchmark makes against the BlockMask default.
    """
    if needs_cpu_fallback(q, k, v, term):
        warn(  # compiled: once, when the call is traced (relpos_core.compile_ops.warn)
            f"FlexAttention has no backward on CPU (torch {torch.__version__}); computing the same attention on "
            f"the SDPA backend (form {form!r}) so gradients reach the tables. This materialises a dense "
            f"[B|1, H, Lq, Lk] bias; on CUDA the flex backend trains without it.", FlexCPUBackwardWarning, stacklevel=3)
        return sdpa.attention(q, k, v, term, form=form, pos=pos, causal=causal)
    q_content, q_pos, k_content = prepare_qk(q, k, term, pos, causal)
    if q_content is not q:  # rotated or shifted in this graph (xPos's interleaved pairs: a 5-D view)
        q_content = flex_inputs(q_content)
    if k_content is not k:
        k_content = flex_inputs(k_content)
    k = k_content
    if pos.window is not None and not block_skipping:
        raise ValueError("block_skipping=False masks causality inside the score_mod, which has no sliding "
                         "window: pass block_skipping=True (the BlockMask holds the window)")
    in_score_mod = causal and not block_skipping
    score_mod = build_score_mod(term, form, q_pos, k, pos, causal_in_score_mod=in_score_mod)
    if causal and block_skipping:
        block_mask = causal_block_mask(pos)
    else:
        block_mask = full_block_mask(pos.query_len, pos.key_len, q.device)
    if compiled:
        fn = run_compiled
    else:
        from torch.nn.attention.flex_attention import flex_attention as fn
    extra = {"kernel_options": kernel_options} if kernel_options else {}
    return fn(q_content, k, v, score_mod=score_mod, block_mask=block_mask,
              scale=term.logit_scale(q.shape[-1]), **extra)  # (B, H, Lq, d)
