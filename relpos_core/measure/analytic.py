"""Analytic byte counts: the peak memory a kernel path will allocate, before it allocates any.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). ``peak_bytes`` walks
the same steps as the code in ``relpos_core.kernels`` (prologue, form, backend) through a
tiny allocation ledger: every tensor a step creates is added, every tensor it drops is
removed, and the largest total is the peak. It counts what ``measure_peak_memory``
measures: everything allocated during the call above what existed before it (q, k, v
and the scheme's tables excluded, the output included), so the two can be compared, and
``rp.attend``'s memory guard uses it to refuse a path before the first large allocation.

Kernel workspaces are counted from the kernels' own sources, for the torch version this
book pins (2.13, CPU): SDPA's fused CPU kernel (``_scaled_dot_product_flash_attention_for_cpu``)
takes ``num_threads x (qSplit kvSplit + 2 qSplit + qSplit d)`` fp32 numbers, with
qSplit = min(Lq, 256 / 64 / 32 for Lq >= 768 / >= 192 / smaller), kvSplit = min(512, Lk),
plus a logsumexp (B, H, Lq) fp32; compiled FlexAttention's CPU template allocates its
per-thread buffers and a reordered copy of k and v (``torch/_inductor/codegen/
cpp_flex_attention_template.py``). On CUDA only the output and the logsumexp are counted
(the fused kernels keep their tiles in on-chip memory). With ``grad=True`` (the forward
of a training step) every intermediate is counted as kept for the backward pass: an
upper bound, used by the guard, not a measurement target.

``analytic_bytes(scheme, form, backend, ...)`` is the same count for a scheme of the
registry with example tables of the given sizes; ``k`` is the scheme's distance
parameter (its declaration names it: Shaw's clip distance, T5's max_distance, ...).

The ledger knows the kernels' steps, not the schemes: what a scheme's own functions
allocate (T5's buckets, a Kerple kernel, FIRE's MLP) each piece of its term declares
(``RowIndex.work_bytes``, ``values_peak``, ``pairs_peak`` in ``relpos_core.terms``).
"""
from __future__ import annotations

import torch

from relpos_core._validate import check_choice, check_int
from relpos_core.budget import dtype_size
from relpos_core.terms import PairScalar, ScalarSlopes, ScalarTable

__all__ = ["peak_bytes", "analytic_bytes", "dtype_size", "Ledger"]

_I64 = 8
_F32 = 4


class Ledger:
    """Live bytes and their peak, as tensors are created and dropped (``keep_all``: nothing dropped)."""

    def __init__(self, keep_all: bool = False):
        self.live = 0
        self.peak = 0
        self.keep_all = keep_all

    def new(self, nbytes: int) -> int:
        nbytes = int(nbytes)
        self.live += nbytes
        self.peak = max(self.peak, self.live)
        return nbytes

    def drop(self, *sizes: int) -> None:
        if not self.keep_all:
            self.live -= sum(int(s) for s in sizes)

    def transient(self, *sizes: int) -> None:
        """Tensors that exist together for a moment and are then dropped."""
        for s in sizes:
            self.new(s)
        self.drop(*sizes)


def _table_size(piece) -> int:
    return dtype_size(piece.table.dtype)


def _rows_bytes(rows, n: int) -> int:
    """Extra bytes a RowIndex needs beyond its (fresh, overwritten) int64 input of n offsets."""
    return rows.work_bytes(n)


_LAST_THREADS = [1]


def _threads() -> int:
    """torch's intra-op thread count; inside torch.compile the count of the last eager call (reading it
    there would break the graph), so a compiled ``rp.attend`` counts what an eager one does."""
    if not torch.compiler.is_compiling():
        _LAST_THREADS[0] = torch.get_num_threads()
    return _LAST_THREADS[0]


def _broadcast_copy(B: int, H: int, R: int, d: int, es: int, per_head: bool) -> int:
    """x (B, H, n, d) @ E^T with a per-head E (H, d, R): matmul expands E to (B, H, d, R), a copy when B > 1."""
    return B * H * R * d * es if per_head and B > 1 else 0


def _rope(m: Ledger, n: int, X: int, d: int, es: int) -> None:
    """kernels.rotary.rotate on x of X bytes and n positions; leaves the rotated x (X bytes) alive."""
    ws = 8 if es == 8 else 4  # the angles are float32 (float64 for float64 inputs)
    half = n * (d // 2)
    m.transient(_I64 * (d // 2), 3 * ws * (d // 2))  # the inverse frequencies' steps
    inv = m.new(ws * (d // 2))
    p = m.new(ws * n)  # the positions as floats
    angle = m.new(ws * half)
    m.drop(p)
    cos, sin = m.new(ws * half), m.new(ws * half)
    cast = m.new(2 * es * half) if es != ws else 0  # cos and sin in x's dtype
    a, b = m.new(X // 2), m.new(X // 2)  # x1 cos, x2 sin
    first = m.new(X // 2)  # their difference
    m.drop(a, b)
    a, b = m.new(X // 2), m.new(X // 2)  # x1 sin, x2 cos
    second = m.new(X // 2)  # their sum
    m.drop(a, b)
    m.new(X)  # the two halves concatenated: kept
    m.drop(first, second, angle, cos, sin, cast, inv)


def _vector_pieces(m: Ledger, term, form: str, *, B, H, Lq, Lk, d, es, n_off) -> int:
    """The form's vector_logits: returns the bytes of the (B, H, Lq, Lk) result left alive."""
    P, S = Lq * Lk, B * H * Lq * Lk * es
    out = 0
    pieces = [(p, "query") for p in term.query_vectors] + [(p, "key") for p in term.key_vectors]
    for piece, side in pieces:
        n = Lq if side == "query" else Lk
        X = B * H * n * d * es
        per_head = piece.table.dim() == 3
        shift = m.new(X) if getattr(piece, "shift", None) is not None else 0
        if form == "naive":
            rows = m.new(_I64 * P)
            m.transient(_rows_bytes(piece.rows, P))
            pairs = m.new((H if per_head else 1) * P * d * _table_size(piece))
            m.drop(rows)
            t = m.new(S)  # x against its pairs (the batch layout of a contiguous x is a view)
            m.drop(pairs)
            if out:
                m.drop(t)  # added into out
        elif form == "gather":
            rows = m.new(_I64 * P)
            m.transient(_rows_bytes(piece.rows, P))
            m.transient(_broadcast_copy(B, H, piece.rows.num_rows, d, es, per_head))
            per_row = m.new(B * H * n * piece.rows.num_rows * es)
            m.transient(S if out == 0 else S)
            m.drop(rows, per_row)
            if out == 0:
                m.new(S)
        else:  # skew
            m.transient(_I64 * n_off, _rows_bytes(piece.rows, n_off))
            e = m.new((H if per_head else 1) * n_off * d * _table_size(piece))
            copy = m.new(_broadcast_copy(B, H, n_off, d, es, per_head))
            per_offset = m.new(B * H * n * n_off * es)
            m.drop(e, copy)
            if out == 0:
                m.new(S)  # the first piece's clone of the view
            m.drop(per_offset)
        m.drop(shift)
        out = S
    return out


def _scalar_pieces(m: Ledger, term, form: str, *, H, Lq, Lk, es, contiguous, n_off) -> int:
    """The form's scalar_bias: returns the bytes of the (H, Lq, Lk) result left alive."""
    if not term.scalars:
        return 0
    P = Lq * Lk
    out = H * P * es
    if form == "naive":
        for i, piece in enumerate(term.scalars):
            if isinstance(piece, PairScalar):  # from the positions, no offsets tensor
                m.transient(piece.pairs_peak(Lq, Lk, H * P * es))
            else:
                offsets = m.new(_I64 * P)
                m.transient(piece.values_peak(P, H * P * es))
                m.drop(offsets)
            if i == 0:
                m.new(out)
        return out
    per_offset = 0
    for piece in term.scalars:
        m.transient(_I64 * n_off, piece.values_peak(n_off, H * n_off * es))
        per_offset = per_offset or m.new(H * n_off * es)
    cols = m.new(_I64 * P)  # the column of every pair's offset
    m.new(out)
    m.drop(cols, per_offset)
    return out


def _value_piece(m: Ledger, value, form: str, *, B, H, Lq, Lk, d, es, n_off) -> None:
    P, X = Lq * Lk, B * H * Lq * d * es
    per_head = value.table.dim() == 3
    if form == "naive":
        rows = m.new(_I64 * P)
        pairs = m.new((H if per_head else 1) * P * d * _table_size(value))
        m.drop(rows)
        m.transient(X)  # the result (the weights' batch layout is a view)
        m.drop(pairs)
    elif form == "gather":
        rows = m.new(_I64 * P)
        buckets = m.new(B * H * Lq * value.rows.num_rows * es)
        m.drop(rows)
        m.transient(X)
        m.drop(buckets)
    else:
        per_offset = m.new(B * H * Lq * n_off * es)
        m.transient(_I64 * n_off, (H if per_head else 1) * n_off * d * _table_size(value), X)
        m.drop(per_offset)
    m.new(X)  # the value output, alive while added


def _sdpa_kernel(m: Ledger, *, B, H, Lq, Lk, d, es, device_type: str, threads: int) -> None:
    """SDPA's own allocations beyond the output (see the module docstring)."""
    m.new(B * H * Lq * _F32)  # logsumexp
    if device_type == "cpu":
        q_split = min(Lq, 256 if Lq >= 768 else 64 if Lq >= 192 else 32)
        kv_split = min(512, Lk)
        m.new(threads * (q_split * kv_split + 2 * q_split + q_split * d) * _F32)
        if es != _F32:
            m.new(threads * q_split * kv_split * es)


def _flex_kernel(m: Ledger, *, B, H, Lq, Lk, d, es, device_type: str, threads: int, compiled: bool) -> None:
    """Compiled FlexAttention's own allocations beyond the output (see the module docstring)."""
    if not compiled:  # the eager reference materialises the scores in fp32 (tests only)
        m.transient(3 * B * H * Lq * Lk * _F32)
        return
    if device_type != "cpu":
        m.new(B * H * Lq * _F32)  # logsumexp
        return
    qs, ks = min(128, Lq), min(128, Lk)
    m.new(threads * (qs * ks + 2 * qs + qs * d) * _F32)  # per-thread accumulators
    m.new(threads * qs * ks * es)  # per-thread reduced-precision scores
    m.new(2 * B * H * Lk * d * es)  # k and v reordered (packed) for the gemms
    m.new(threads * ks * d * es + threads * qs * d * es)  # transpose and query-padding buffers


def _flex_tables(m: Ledger, term, form: str, *, B, H, Lq, Lk, d, es, n_off) -> None:
    """build_score_mod: the fp32 tables a score_mod reads (kept for the kernel)."""
    P = Lq * Lk
    per_pair = m.new(_I64 * P) if form == "naive" else 0
    pieces = [(p, Lq) for p in term.query_vectors] + [(p, Lk) for p in term.key_vectors]
    for piece, n in pieces:
        X = B * H * n * d * es
        shift = m.new(X) if getattr(piece, "shift", None) is not None else 0
        copies = m.new(X * _F32 // es) if es != _F32 else 0
        m.transient(_broadcast_copy(B, H, piece.rows.num_rows, d, _F32, piece.table.dim() == 3))
        unscaled = m.new(B * H * n * piece.rows.num_rows * _F32)
        m.new(B * H * n * piece.rows.num_rows * _F32)  # scaled: kept
        m.drop(unscaled, copies, shift)
        if form == "naive":
            m.new(_I64 * P)  # the per-pair rows: kept
        else:
            m.new(_I64 * n_off)  # row of each offset: kept
    for piece in term.scalars:
        if isinstance(piece, ScalarSlopes):
            continue
        if form == "naive" and isinstance(piece, ScalarTable):
            clone = m.new(_I64 * P)
            m.transient(max(piece.ids.work_bytes(P), _I64 * P))  # the buckets' steps, their result inside
            m.drop(clone)
            m.new(_I64 * P)  # the bucket-id tensor: kept
        elif isinstance(piece, PairScalar):
            m.transient(piece.pairs_peak(Lq, Lk, H * P * _F32))
            m.new(H * P * _F32)  # the per-pair bias: kept
        elif form == "naive":
            m.transient(piece.values_peak(P, H * P * _F32))
            m.new(H * P * _F32)  # the per-pair bias: kept
        else:
            m.transient(_I64 * n_off, piece.values_peak(n_off, H * n_off * _F32))
            m.new(H * n_off * _F32)  # per-offset bias: kept
    if not any(isinstance(p, ScalarSlopes) for p in term.scalars):
        m.drop(per_pair)  # read by no score_mod: freed when the score_mod is built


def peak_bytes(term, form: str, backend: str, *, B: int, H: int, Lq: int, Lk: int, d: int,
               dtype: torch.dtype = torch.float32, contiguous: bool = True, grad: bool = False,
               device_type: str = "cpu", threads: int | None = None, num_offsets: int | None = None,
               causal: bool = False, compiled: bool = True, check_finite: bool = True) -> int:
    """Peak bytes ``rp.attend(q, k, v, term, form=form, backend=backend)`` allocates (module docstring).

    ``num_offsets``: distinct offsets of the call (default Lq + Lk - 1, contiguous positions).
    """
    es = dtype_size(dtype)
    threads = _threads() if threads is None else threads
    n_off = Lq + Lk - 1 if num_offsets is None else num_offsets
    S, Xq, Xk, P = B * H * Lq * Lk * es, B * H * Lq * d * es, B * H * Lk * d * es, Lq * Lk
    m = Ledger(keep_all=grad)
    if check_finite:  # torch.isfinite(x).all(): |x| and three boolean masks, for q, k and v in turn
        for n in (B * H * Lq * d, B * H * Lk * d, B * H * Lk * d):
            m.transient(n * es, 3 * n)
    m.new(_I64 * Lk)  # the key positions
    if term.rotary is not None:
        _rope(m, Lq, Xq, d, es)  # rotated q: kept
        _rope(m, Lk, Xk, d, es)  # rotated k: kept
    content_shift = m.new(Xq) if term.content_shift is not None else 0
    sizes = dict(B=B, H=H, Lq=Lq, Lk=Lk, d=d, es=es, n_off=n_off)
    if backend == "flex" and not (grad and device_type == "cpu"):
        _flex_tables(m, term, form, **sizes)
        tiles = 64 * (-(-Lq // 128)) * (-(-Lk // 128)) + 1024  # the block-mask tables
        if causal and not contiguous:  # create_block_mask evaluates the mask at every pair: 10 bytes a pair (CPU)
            tiles += 10 * Lq * Lk
        m.transient(tiles)
        m.new(Xq)  # the output
        _flex_kernel(m, B=B, H=H, Lq=Lq, Lk=Lk, d=d, es=es, device_type=device_type, threads=threads,
                     compiled=compiled)
        return m.peak
    if backend in ("sdpa", "flex"):  # flex with gradients on CPU runs the SDPA backend
        bias = 0
        if form != "none":
            bias = _vector_pieces(m, term, form, **sizes)
            scalars = _scalar_pieces(m, term, form, H=H, Lq=Lq, Lk=Lk, es=es, contiguous=contiguous, n_off=n_off)
            if bias and scalars:
                m.drop(scalars)
            bias = bias or scalars
        if causal:
            if bias:
                m.transient(P, P)  # the visible mask and its negation
            elif not (contiguous and Lq == Lk):
                m.new(P)  # a boolean (Lq, Lk) mask ...
                if device_type == "cpu":
                    m.new(P * es)  # ... which the fused CPU kernel converts to a float mask
        m.new(Xq)  # the output
        _sdpa_kernel(m, B=B, H=H, Lq=Lq, Lk=Lk, d=d, es=es, device_type=device_type, threads=threads)
        return m.peak
    # eager
    scores = m.new(S)
    m.drop(content_shift)
    if form != "none":
        vec = _vector_pieces(m, term, form, **sizes)
        m.drop(vec)
        scalars = _scalar_pieces(m, term, form, H=H, Lq=Lq, Lk=Lk, es=es, contiguous=contiguous, n_off=n_off)
        m.drop(scalars)
    if causal:
        m.transient(P, P)
    m.new(S)  # the weights
    m.drop(scores)
    m.new(Xq)  # the output
    if term.value is not None:
        _value_piece(m, term.value, form, **sizes)
        m.new(Xq)  # out + value
    return m.peak


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
