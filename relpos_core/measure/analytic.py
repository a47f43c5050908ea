"""Analytic byte counts: the peak memory a kernel path will allocate, before it allocates any.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). ``peak_bytes`` asks the pieces:
every piece of a term declares the tensors it materialises on a path
(``Piece.allocations``, ``relpos_core.pieces.base``: shapes and dtypes), and the count
adds them to the kernel's own few tensors, in the order the kernel holds them:

* eager: the scores (B, H, Lq, Lk) while one piece at a time adds into them, then the
  scores and the weights, then the weights, the output and each output piece;
* SDPA: the bias (the first logit piece's result, later pieces added into it), then the
  bias, the causal mask, the output and SDPA's own workspace;
* FlexAttention: every piece's tables at once (the score_mod keeps them for the
  kernel), the BlockMask, the output and the kernel's workspace.

Nothing here mirrors a piece's variable lifetimes: a piece's declared tensors count as
alive together (an upper bound within the piece), so the count is at least what the
profiler measures and at most ``BOUND`` times it, for every path of every scheme
(``tests/test_memory.py`` checks ``count / BOUND <= measured <= count`` on the CPU
profiler, compiled FlexAttention and FlexAttention's eager reference at decode shapes).

It counts what ``measure_peak_memory`` measures: everything allocated during the call
above what existed before it (q, k, v and the scheme's tables excluded, the output
included), and ``rp.attend``'s memory guard uses it to refuse a path before the first
large allocation. Kernel workspaces are counted from the kernels' own sources, for the
torch version this book pins (2.13, CPU): SDPA's fused CPU kernel
(``_scaled_dot_product_flash_attention_for_cpu``) takes ``num_threads x (qSplit kvSplit +
2 qSplit + qSplit d)`` fp32 numbers, with qSplit = min(Lq, 256 / 64 / 32 for Lq >= 768 /
>= 192 / smaller), kvSplit = min(512, Lk), plus a logsumexp (B, H, Lq) fp32; compiled
FlexAttention's CPU template allocates its per-thread buffers and a reordered copy of k
and v (``torch/_inductor/codegen/cpp_flex_attention_template.py``); its eager reference
(``compiled=False``) materialises the scores and, per logit piece, what its reader
evaluates at every pair. On CUDA only the output and the logsumexp are counted (the fused
kernels keep their tiles in on-chip memory). With ``grad=True`` (the forward of a training
step) every tensor is counted as kept for the backward pass: an upper bound, used by the
guard, not a measurement target.

``analytic_bytes(scheme, form, backend, ...)`` is the same count for a scheme of the
registry with example tables of the given sizes; ``k`` is the scheme's distance
parameter (its declaration names it: Shaw's clip distance, T5's max_distance, ...).
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_int
from relpos_core.budget import dtype_size
from relpos_core.pieces.base import Sizes

__all__ = ["peak_bytes", "analytic_bytes", "dtype_size", "BOUND"]

_I64 = 8
_F32 = 4
#: the count is at most this many times the measured peak (tests/test_memory.py)
BOUND = 2.0

_LAST_THREADS = [1]


def _threads() -> int:
    """torch's intra-op thread count; inside torch.compile the count of the last eager call (reading it
    there would break the graph), so a compiled ``rp.attend`` counts what an eager one does."""
    if not torch.compiler.is_compiling():
        _LAST_THREADS[0] = torch.get_num_threads()
    return _LAST_THREADS[0]


def _piece_bytes(piece, form: str, backend: str, sizes: Sizes) -> int:
    return sum(a.nbytes for a in piece.allocations(form, backend, sizes))


def _sdpa_kernel(*, B, H, Lq, Lk, d, es, device_type: str, threads: int) -> int:
    """SDPA's own allocations beyond the output (see the module docstring)."""
    n = B * H * Lq * _F32  # logsumexp
    if device_type == "cpu":
        q_split = min(Lq, 256 if Lq >= 768 else 64 if Lq >= 192 else 32)
        kv_split = min(512, Lk)
        n += threads * (q_split * kv_split + 2 * q_split + q_split * d) * _F32
        if es != _F32:
            n += threads * q_split * kv_split * es
    return n


def _flex_kernel(*, B, H, Lq, Lk, d, es, device_type: str, threads: int, compiled: bool, readers: int) -> int:
    """FlexAttention's own allocations beyond the output (see the module docstring)."""
    if not compiled:  # the eager reference: fp32 copies of k and v, fp32 scores, their mask, the weights and their
        # sum, and what each reader evaluates at every pair
        return 2 * B * H * Lk * d * _F32 + B * H * Lq * Lk * (4 * _F32 + readers * READER_BYTES_PER_PAIR) \
            + B * H * Lq * (d + 2) * _F32
    if device_type != "cpu":
        return B * H * Lq * _F32  # logsumexp
    qs, ks = min(128, Lq), min(128, Lk)
    return (threads * (qs * ks + 2 * qs + qs * d) * _F32  # per-thread accumulators
            + threads * qs * ks * es  # per-thread reduced-precision scores
            + 2 * B * H * Lk * d * es  # k and v reordered (packed) for the gemms
            + threads * ks * d * es + threads * qs * d * es)  # transpose and query-padding buffers


#: FlexAttention's eager reference evaluates a score_mod reader at every pair (vmap over b, h, q, kv):
#: beyond the scores it adds into (measured: tests/test_memory.py)
READER_BYTES_PER_PAIR = 8


def peak_bytes(term, form: str, backend: str, *, B: int, H: int, Lq: int, Lk: int, d: int,
               dtype: torch.dtype = torch.float32, contiguous: bool = True, grad: bool = False,
               device_type: str = "cpu", threads: int | None = None, num_offsets: int | None = None,
               causal: bool = False, compiled: bool = True, check_finite: bool = True,
               window: int | None = None) -> int:
    """Peak bytes ``rp.attend(q, k, v, term, form=form, backend=backend)`` allocates (module docstring).

    ``num_offsets``: distinct offsets of the call (default Lq + Lk - 1, contiguous positions).
    ``window``: a sliding window (a causal mask: SDPA then builds an (Lq, Lk) mask even
    where it would use its own ``is_causal``).
    """
    es = dtype_size(dtype)
    threads = _threads() if threads is None else threads
    n_off = Lq + Lk - 1 if num_offsets is None else num_offsets
    sizes = Sizes(B=B, H=H, Lq=Lq, Lk=Lk, d=d, dtype=dtype, num_offsets=n_off)
    S, Xq, P = B * H * Lq * Lk * es, B * H * Lq * d * es, Lq * Lk
    pieces = term.formed if form != "none" else ()
    logit = [p for p in pieces if p.stage != "output"]
    output = [p for p in pieces if p.stage == "output"]
    combine = sum if grad else max  # with gradients every phase's tensors are kept for the backward
    scan = 0
    if check_finite:  # torch.aminmax per tensor: nothing for a dense one, a copy of a slice (an upper bound)
        scan = max(n * es for n in (B * H * Lq * d, B * H * Lk * d))
    base = _I64 * Lk  # the key positions
    for piece in term.all_pieces:  # what changes q and k before the kernel: the rotation, a length scaling
        if piece.stage == "rotary":
            base += _piece_bytes(piece, form, backend, sizes)
    if term.content_shift is not None:
        base += Xq
    if backend == "flex" and not (grad and device_type == "cpu"):
        tables = sum(_piece_bytes(p, form, backend, sizes) for p in logit)
        tiles = 64 * (-(-Lq // 128)) * (-(-Lk // 128)) + 1024  # the block-mask tables
        if causal and not contiguous:  # create_block_mask evaluates the mask at every pair: 10 bytes a pair (CPU)
            tiles += 10 * P
        kernel = _flex_kernel(B=B, H=H, Lq=Lq, Lk=Lk, d=d, es=es, device_type=device_type, threads=threads,
                              compiled=compiled, readers=len(logit))
        return combine([scan, base + tables + tiles + Xq + kernel])
    each = [_piece_bytes(p, form, backend, sizes) for p in logit]
    if backend in ("sdpa", "flex"):  # flex with gradients on CPU runs the SDPA backend
        bias = (B if any(p.batched for p in logit) else 1) * H * P * es if logit else 0
        building = combine([each[0], *(bias + b for b in each[1:])]) if each else 0  # later pieces add into it
        if causal:
            own = contiguous and Lq == Lk and window is None  # SDPA's is_causal: no mask tensor
            mask = 2 * P if bias else 0 if own else P + (P * es if device_type == "cpu" else 0)
        else:
            mask = 0
        kernel = _sdpa_kernel(B=B, H=H, Lq=Lq, Lk=Lk, d=d, es=es, device_type=device_type, threads=threads)
        return combine([scan, base + combine([building, bias + mask + Xq + kernel])])
    # eager: the scores while each piece adds into them; the scores and the weights; the output pieces
    building = S + combine(each) if each else S
    softmax = 2 * S + (2 * P if causal else 0)
    outputs = S + Xq + (combine(_piece_bytes(p, form, backend, sizes) for p in output) + Xq if output else 0)
    return combine([scan, base + combine([building, softmax, outputs])])


def analytic_bytes(scheme: str, form: str, backend: str, *, B: int, H: int, Lq: int, Lk: int, d: int, k: int = 16,
                   dtype: torch.dtype = torch.float32, causal: bool = False, device_type: str = "cpu",
                   threads: int | None = None) -> int:
    """``peak_bytes`` for a registry scheme with example tables (``relpos_core.registry``)."""
    from relpos_core.kernels.forms import BACKENDS, FORMS
    from relpos_core.registry import example_term, scheme_names, unsupported_reason

    check_choice("scheme", scheme, scheme_names())  # registry names come from the scheme declarations
    check_choice("form", form, FORMS)
    check_choice("backend", backend, BACKENDS)
    for name, value in (("B", B), ("H", H), ("Lq", Lq), ("Lk", Lk), ("d", d), ("k", k)):
        check_int(name, value, min_value=1)
    dtype_size(dtype)
    term = example_term(scheme, num_heads=H, head_dim=d, k=k, device="meta", dtype=dtype)
    reason = unsupported_reason(term, form, backend)
    if reason is not None:
        raise ValueError(f"({scheme}, {form}, {backend}) is not a path: {reason}")
    return peak_bytes(term, form, backend, B=B, H=H, Lq=Lq, Lk=Lk, d=d, dtype=dtype, causal=causal,
                      device_type=device_type, threads=threads)
