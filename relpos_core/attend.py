"""``rp.attend``: one entry point for every scheme on every kernel path.

Book: "What it costs" (chapters/11_what_it_costs.ipynb); "The KV cache"
(chapters/08_the_kv_cache.ipynb).

    out = rp.attend(q, k, v, rp.schemes.t5.position_term(table), form="gather", backend="flex", causal=True)

A scheme says *what* (its ``PositionTerm``), the call says *how*: the form (naive, gather,
skew) and the backend (eager, sdpa, flex), from ``relpos_core.registry``. Before any
tensor that grows with Lq Lk is allocated, ``attend``

1. checks every argument (ranks, dtypes, devices, lengths >= 1, head size >= 1, finite
   values) and raises a ValueError that names the parameter and its valid range;
2. places the queries and keys by the one rule of ``relpos_core.positions`` (queries are
   the last Lq keys unless ``query_offset`` / ``query_positions`` / ``key_positions`` say
   otherwise);
3. refuses a path that cannot compute the term or this call (``registry.call_refusal``:
   the same rules the memory guard uses to suggest a path);
4. counts the bytes the path will allocate (``measure.analytic.peak_bytes``) and raises
   ``MemoryBudgetError`` over the budget, naming the cheapest path that fits and accepts
   the call;
5. scans q, k, v (and the term's tables) for NaN and inf, one pass per tensor
   (``torch.aminmax``: a NaN or inf reaches the min or the max).

Steps 1-4 depend on the shapes, dtypes, devices and arguments only: a call whose key
(those, the term's structure, the grad and inference mode and the memory budget) was
checked before reuses the result (``_PLANS``, ``relpos_core.kernels.memo``), so a model's
repeated calls are checked once per shape; calls with explicit position tensors or kernel
options, and calls while ``torch.compile`` traces, are checked every time. Step 5 reads
values and runs on every call that asks for it.

Behaviour shared by every path: causality is a mask (never part of a bias); a query
whose mask hides every key gets a zero output row; non-finite q, k or v are refused
(``check_finite=False`` skips that scan, and then NaN propagates as each kernel lets it).

**No host syncs.** With ``check_finite=False`` and positions known from the shapes (the
default rule or ``query_offset``), ``attend`` reads nothing back from the device. Explicit
position tensors cost one read (``relpos_core.positions``) and the finiteness scan one more,
each once per call and only when asked for. ``torch.compile(fullgraph=True)`` of a function
calling ``attend`` builds and runs on every path with the default arguments: inside the graph
the finiteness check is an opaque op that still raises the same ValueError, and the tables a
FlexAttention score_mod reads enter its CPU kernel through an opaque copy
(``relpos_core.compile_ops``; ``tests/test_compile.py``). ``attend`` changes no process-wide setting.
"""
from __future__ import annotations

import math

import torch

from relpos_core._validate import check_choice, check_int, check_tensor
from relpos_core.compile_ops import refuse_non_finite
from relpos_core.kernels import eager, flex, memo, sdpa
from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.measure import guard
from relpos_core.measure.analytic import peak_bytes
from relpos_core.positions import resolve_positions
from relpos_core.registry import Call, call_refusal, unsupported_reason
from relpos_core.terms import NO_POSITION, PositionTerm

__all__ = ["attend", "check_qkv", "choose_form"]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_qkv(q, k, v) -> tuple[int, int, int, int, int]:
    """(B, H, Lq, d), (B, H, Lk, d), (B, H, Lk, d): one float dtype, one device, every size >= 1."""
    check_tensor("q", q, ndim=4, dtype=FLOAT_DTYPES)
    check_tensor("k", k, ndim=4, dtype=FLOAT_DTYPES)
    check_tensor("v", v, ndim=4, dtype=FLOAT_DTYPES)
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
        if t.dtype != q.dtype:
            raise ValueError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
    B, H, Lq, d = q.shape
    for name, size in (("batch size B (q.shape[0])", B), ("number of heads H (q.shape[1])", H),
                       ("query length Lq (q.shape[2])", Lq), ("head size d (q.shape[3])", d),
                       ("key length Lk (k.shape[2])", k.shape[2])):
        if size < 1:
            raise ValueError(f"{name} must be >= 1, got {size} (shape of q {tuple(q.shape)}, k {tuple(k.shape)})")
    if tuple(k.shape[:2]) != (B, H) or k.shape[3] != d:
        raise ValueError(f"k must have shape (B, H, Lk, d) = ({B}, {H}, Lk, {d}), got {tuple(k.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    return B, H, Lq, k.shape[2], d


def _check_term(term: PositionTerm, q: torch.Tensor) -> None:
    B, H, _, d = q.shape
    for name, t in term.tensors():
        if t.device != q.device:
            raise ValueError(f"the term's {name} must be on q's device {q.device}, got {t.device}")
    for piece in term.all_pieces:
        piece.check(H, d)
    if term.content_shift is not None and tuple(term.content_shift.shape) != (H, d):
        raise ValueError(f"the term's content_shift must be (H, d) = ({H}, {d}), got {tuple(term.content_shift.shape)}")


def choose_form(term: PositionTerm, form: str | None) -> str:
    """``form=None``: "none" for a term with nothing to form (no position, RoPE), "naive" for a term
    with no per-offset table (FIRE), else "gather"."""
    if form is not None:
        return check_choice("form", form, FORMS)
    if not term.formed:
        return "none"
    return "gather" if term.offset_only else "naive"


def _dense_view(t: torch.Tensor) -> torch.Tensor:
    """t with its dimensions permuted into memory order when that makes it contiguous (a transposed
    (B, L, H, d) projection): ``aminmax`` then reads it in place instead of copying it."""
    if t.is_contiguous():
        return t
    p = t.permute(sorted(range(t.dim()), key=lambda i: -t.stride(i)))
    return p if p.is_contiguous() else t


def _all_sums_finite(tensors: list[torch.Tensor]) -> bool:
    """True when the sum of every tensor is finite, which proves each finite: a NaN makes a sum
    NaN and an inf makes it inf or NaN. One reduction per tensor (float32 or wider accumulators)
    and one device read, 2-3x cheaper than the (min, max) flags; a False (a NaN, an inf, or a
    finite tensor whose sum overflows) leaves the verdict and the name to the exact check."""
    total = None
    for t in tensors:
        s = t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)  # () accumulator
        total = s if total is None else total + s
    return math.isfinite(total.item())  # the one device read


def _check_finite(tensors) -> None:
    """One pass over each tensor and one device read for all of them: are they all finite?

    ``torch.aminmax`` reads a tensor once and allocates nothing that grows with it (a tensor
    not dense in memory, a slice, is copied first); a NaN makes both its min and max NaN and
    an inf reaches one of them, so the tensor is finite iff both are (``isfinite(t).all()``
    wrote |t| and three boolean masks of t's size). Integer tensors are finite by
    construction. Names the first that is not (``relpos_core.compile_ops.refuse_non_finite``: the
    same check inside a ``torch.compile`` graph, without a graph break).
    """
    scanned = []
    for name, t in tensors:
        if t.is_meta or t.numel() == 0:  # meta tensors hold no values to scan; empty ones hold none
            continue
        if t.is_complex():
            t = torch.view_as_real(t)
        if t.is_floating_point():
            scanned.append((name, _dense_view(t.detach())))
    if not scanned:
        return
    if not torch.compiler.is_compiling() and _all_sums_finite([t for _, t in scanned]):
        return
    # (min, max) of every tensor in one (2n,) tensor: one isfinite for all of them, then (n,) flags
    ok = torch.isfinite(torch.stack([m for _, t in scanned for m in torch.aminmax(t)])).view(-1, 2).all(dim=1)
    refuse_non_finite(ok, [name for name, _ in scanned])  # one read; compiled: an opaque op, no graph break


# Call plans: what the checks below derive from the shapes and arguments alone (the form, the
# positions), kept per shape so that a model's repeated calls (every layer, every step) are checked
# once. The finiteness scan reads values and runs on every call that asks for it.
_PLANS = memo.LRU(256)


def _plan_key(q, k, v, term, form, backend, causal, query_offset, query_positions, key_positions, window,
              check_finite, compiled, kernel_options):
    """The call's key in ``_PLANS``, or None for a call that is checked afresh: explicit position tensors
    (their values are read), kernel options, arguments of unexpected types (the checks name them),
    terms holding something no key stands for, and while ``torch.compile`` traces."""
    if memo.bypassed() or query_positions is not None or key_positions is not None or kernel_options is not None:
        return None
    if not all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in (q, k, v)):
        return None
    if not (type(causal) is bool and type(check_finite) is bool and type(compiled) is bool
            and type(backend) is str and (form is None or type(form) is str)
            and (window is None or type(window) is int) and (query_offset is None or type(query_offset) is int)):
        return None
    if term is not None and not isinstance(term, PositionTerm):
        return None
    try:
        term_key = None if term is None else memo.signature(term)
    except memo.Unhashable:
        return None
    return (memo.tensor_key(q, False), memo.tensor_key(k, False), memo.tensor_key(v, False), term_key, form,
            backend, causal, query_offset, window, check_finite, compiled, memo.mode_key(), guard.get_memory_budget())


def _plan(q, k, v, term, *, form, backend, causal, query_offset, query_positions, key_positions, window,
          check_finite, compiled, kernel_options):
    """Steps 1-4 of the module docstring: (form, positions) of a call that passed them."""
    B, H, Lq, Lk, d = check_qkv(q, k, v)
    term = NO_POSITION if term is None else term
    if not isinstance(term, PositionTerm):
        raise ValueError(f"term must be a PositionTerm (from a scheme's position_term) or None, "
                         f"got {type(term).__name__}")
    form = choose_form(term, form)
    check_choice("backend", backend, BACKENDS)
    check_choice("causal", causal, (False, True))
    if window is not None:
        check_int("window", window, min_value=1)
        if not causal:
            raise ValueError(f"window={window} is a sliding window over earlier keys: it needs causal=True")
    check_choice("check_finite", check_finite, (False, True))
    check_choice("compiled", compiled, (False, True))
    if kernel_options is not None and not isinstance(kernel_options, dict):
        raise ValueError(f"kernel_options must be a dict or None, got {type(kernel_options).__name__}")
    _check_term(term, q)
    reason = unsupported_reason(term, form, backend)
    if reason is not None:
        raise ValueError(f"form={form!r}, backend={backend!r} cannot compute {term.scheme}: {reason}")
    pos = resolve_positions(Lq, Lk, query_offset=query_offset, query_positions=query_positions,
                            key_positions=key_positions, device=q.device).with_window(window)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in [q, k, v] + [t for _, t in term.tensors()])
    call = Call(B=B, H=H, Lq=Lq, Lk=Lk, d=d, dtype=q.dtype, device_type=q.device.type, causal=causal, grad=grad,
                contiguous=pos.contiguous, min_offset=pos.min_offset, num_offsets=pos.num_offsets,
                compiled=compiled, check_finite=check_finite, window=window)
    reason = call_refusal(term, form, backend, call)
    if reason is not None:
        raise ValueError(f"form={form!r}, backend={backend!r} cannot compute {term.scheme} for this call: {reason}")
    need = peak_bytes(term, form, backend, **call.ledger_sizes(backend))
    guard.check_path_memory(need, term=term, form=form, backend=backend, call=call)
    return form, pos


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    term: PositionTerm | None = None,
    *,
    form: str | None = None,
    backend: str = "sdpa",
    causal: bool = False,
    query_offset: int | None = None,
    query_positions: torch.Tensor | None = None,
    key_positions: torch.Tensor | None = None,
    window: int | None = None,
    check_finite: bool = True,
    compiled: bool = True,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """Attention with ``term`` computed by (``form``, ``backend``): (B, H, Lq, d).

    q (B, H, Lq, d), k and v (B, H, Lk, d); ``term`` from a scheme's ``position_term``
    (None: no position signal). ``form``: "naive", "gather", "skew" or "none" (None picks
    "gather", or "none" for a term with nothing to form). ``backend``: "eager", "sdpa" or
    "flex" (``compiled`` and ``kernel_options`` apply to flex only). ``causal``: key j is
    visible to query i iff key_pos[j] <= query_pos[i], positions as in
    ``relpos_core.positions``. ``window`` (causal only): a sliding window of W >= 1 keys,
    key j visible to query i iff query_pos[i] - W < key_pos[j] <= query_pos[i] (the query
    and the W - 1 positions before it), a mask on every path.
    Sign conventions: each scheme's own (the term records it).
    """
    key = _plan_key(q, k, v, term, form, backend, causal, query_offset, query_positions, key_positions, window,
                    check_finite, compiled, kernel_options)
    plan = None if key is None else _PLANS.get(key)
    if plan is None:
        plan = _plan(q, k, v, term, form=form, backend=backend, causal=causal, query_offset=query_offset,
                     query_positions=query_positions, key_positions=key_positions, window=window,
                     check_finite=check_finite, compiled=compiled, kernel_options=kernel_options)
        if key is not None:
            _PLANS.put(key, plan)
    form, pos = plan
    term = NO_POSITION if term is None else term
    if check_finite:
        _check_finite([("q", q), ("k", k), ("v", v), *((f"the term's {n}", t) for n, t in term.tensors())])
    if backend == "eager":
        return eager.attention(q, k, v, term, form=form, pos=pos, causal=causal)
    if backend == "sdpa":
        return sdpa.attention(q, k, v, term, form=form, pos=pos, causal=causal)
    return flex.attention(q, k, v, term, form=form, pos=pos, causal=causal, compiled=compiled,
                          kernel_options=kernel_options)
