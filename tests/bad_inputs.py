"""A catalogue of bad inputs: each must raise a ValueError that names the parameter (and its range).

Used by ``tests/test_bad_inputs.py`` (every case, in-process) and ``tools/bad_inputs.py``
(every case in a forked child with a time limit, to classify crashes and hangs too).
A case is (id, call, expected text in the error message).
"""
from __future__ import annotations

import dataclasses
from functools import cache

import numpy as np
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.measure import memory_budget

H, D = 2, 8


def _qkv(Lq=4, Lk=6, d=D, dtype=torch.float32, B=1):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, n, d, generator=g).to(dtype) for n in (Lq, Lk, Lk)]


_QKV = None  # set below, once


def _term(scheme, d=D, dtype=torch.float32, heads=H):
    return registry.example_term(scheme, num_heads=heads, head_dim=d, k=8, dtype=dtype,
                                 generator=torch.Generator().manual_seed(1))


def _tensors(obj):
    """Every tensor a term holds (through its dataclass fields, tuples and dicts)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in _tensors(getattr(obj, f.name))]
    if isinstance(obj, (tuple, list)):
        return [t for x in obj for t in _tensors(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in _tensors(x)]
    return []


@cache
def _depends_on(scheme, **sizes) -> bool:
    """Whether the scheme's example term holds tables whose shapes change with ``heads`` or ``d`` (derived
    from the term, not listed): only such a term can be given for the wrong heads or head size."""
    def shapes(**kw):
        return sorted(tuple(t.shape) for t in _tensors(_term(scheme, **kw)))
    return shapes() != shapes(**sizes)


@cache
def _causal_only(scheme) -> bool:
    return rp.schemes.lookup(scheme).scheme.causal_only


_QKV = _qkv()


def _attend_cases(scheme, form, backend):
    causal = _causal_only(scheme)
    base = dict(form=form, backend=backend, causal=causal, compiled=False)

    def call(q=None, k=None, v=None, term="default", **kw):
        def run():  # inputs are built when the case runs, not when the catalogue is listed
            qq, kk, vv = _qkv()
            t = _term(scheme) if term == "default" else term
            return rp.attend(qq if q is None else q, kk if k is None else k, vv if v is None else v, t,
                             **{**base, **kw})
        return run

    q, k, v = _QKV
    nan_future = k.clone()
    nan_future[:, :, -1] = float("nan")
    yield "q rank 3", call(q=q[0]), "q must have rank 4"
    yield "q integer", call(q=q.long()), "q must have dtype"
    yield "k other dtype", call(k=k.double()), "k must have q's dtype"
    yield "v other length", call(v=v[:, :, :-1]), "v must have k's shape"
    yield "k other head size", call(k=k[..., :-1]), "k must have shape"
    yield "Lq = 0", call(q=q[:, :, :0]), "query length Lq"
    yield "Lk = 0", call(k=k[:, :, :0], v=v[:, :, :0]), "key length Lk"
    yield "d = 0", call(q=q[..., :0], k=k[..., :0], v=v[..., :0]), "head size d"
    yield "B = 0", call(q=q[:0], k=k[:0], v=v[:0]), "batch size B"
    yield "k on another device", call(k=k.to("meta")), "k must be on q's device"
    yield "NaN in q", call(q=torch.full_like(q, float("nan"))), "q holds non-finite"
    yield "NaN in a masked future key", call(k=nan_future, causal=True), "k holds non-finite"
    yield "query_offset text", call(query_offset="3"), "query_offset must be an integer"
    yield "query_offset huge", call(query_offset=2**50), "query_offset must be an integer in"
    yield "query_offset and query_positions", call(query_offset=1, query_positions=torch.arange(4)), \
        "query_offset and query_positions"
    yield "key_positions float", call(key_positions=torch.arange(6.0)), "key_positions must have dtype"
    yield "key_positions short", call(key_positions=torch.arange(5)), "key_positions must hold one position per key"
    yield "query_positions 2-D", call(query_positions=torch.arange(4)[None]), "query_positions must have rank 1"
    yield "form unknown", call(form="fused"), "form must be one of"
    yield "backend unknown", call(backend="cuda"), "backend must be one of"
    yield "causal text", call(causal="yes"), "causal must be one of"
    yield "check_finite text", call(check_finite="no"), "check_finite must be one of"
    yield "kernel_options list", call(kernel_options=[1]), "kernel_options must be a dict"
    yield "term a tensor", call(term=torch.zeros(3)), "term must be a PositionTerm"
    yield "Lq > Lk by the rule", call(q=_qkv(Lq=8)[0]), "q must not be longer than k"
    if _depends_on(scheme, d=2 * D):
        yield "term for another head size", call(term=_term(scheme, d=2 * D)), "head size"
    if _depends_on(scheme, heads=H + 1):
        yield "term for other heads", call(term=_term(scheme, heads=H + 1)), "heads"
    if causal:
        yield "decoder scheme without causal", call(causal=False), "pass causal=True"
    if backend == "flex":
        yield "float64 on flex", call(q=q.double(), k=k.double(), v=v.double(), term=_term(scheme, dtype=torch.float64)), \
            "backend 'flex' takes"

    def over_budget():
        with memory_budget(1):
            call()()

    yield "over the memory budget", over_budget, "over the memory budget"


def _unsupported_cases():
    q, k, v = _qkv()
    shaw = _term("shaw")
    yield "value term on sdpa", lambda: rp.attend(q, k, v, shaw, backend="sdpa"), "use backend 'eager'"
    yield "value term on flex", lambda: rp.attend(q, k, v, shaw, backend="flex"), "use backend 'eager'"
    yield "skew of a scalar bias", lambda: rp.attend(q, k, v, _term("t5"), form="skew"), "skew form has no scalar"
    yield "skew on flex", lambda: rp.attend(q, k, v, _term("shaw_key"), form="skew", backend="flex"), "form 'gather'"
    yield "skew with evicted keys", lambda: rp.attend(q, k, v, _term("shaw_key"), form="skew",
                                                      key_positions=torch.tensor([0, 1, 2, 5, 6, 9])), "contiguous"
    yield "form none with a table", lambda: rp.attend(q, k, v, _term("t5"), form="none"), "form 'none'"
    yield "a form for RoPE", lambda: rp.attend(q, k, v, _term("rope"), form="gather"), "use form 'none'"
    txl = rp.schemes.transformer_xl.position_term(torch.randn(H, 3, D), torch.randn(H, D), torch.randn(H, D))
    yield "Transformer-XL table too short", lambda: rp.attend(q, k, v, txl, causal=True), "give the table at least"


def _builder_cases():
    s = rp.schemes
    yield "t5 table 1-D", lambda: s.t5.position_term(torch.randn(32)), "table must have rank 2"
    yield "t5 integer table", lambda: s.t5.position_term(torch.ones(32, 2, dtype=torch.long)), "table must be a floating"
    yield "t5 odd buckets", lambda: s.t5.position_term(torch.randn(31, 2)), "must be even"
    yield "t5 max_distance too small", lambda: s.t5.position_term(torch.randn(32, 2), max_distance=4), "max_distance"
    yield "t5 bidirectional text", lambda: s.t5.position_term(torch.randn(32, 2), bidirectional="yes"), "bidirectional"
    yield "alibi 0 heads", lambda: s.alibi.position_term(0), "num_heads"
    yield "alibi 10**9 heads", lambda: s.alibi.alibi_slopes(10**9), "num_heads must be an integer in [1, 4096]"
    yield "alibi heads float", lambda: s.alibi.position_term(2.5), "num_heads"
    yield "alibi symmetric text", lambda: s.alibi.position_term(2, symmetric="no"), "symmetric"
    yield "shaw no table", lambda: s.shaw.position_term(max_relative_position=4), "rel_key and rel_value"
    yield "shaw wrong rows", lambda: s.shaw.position_term(rel_key=torch.randn(8, D), max_relative_position=4), \
        "2 * max_relative_position + 1"
    yield "shaw k = 0", lambda: s.shaw.position_term(rel_key=torch.randn(1, D), max_relative_position=0), \
        "max_relative_position"
    yield "deberta rows", lambda: s.deberta.position_term(torch.randn(H, 7, D), None, att_span=4), "2 * att_span"
    yield "deberta span 0", lambda: s.deberta.position_term(torch.randn(H, 8, D), None, att_span=0), "att_span"
    yield "deberta p2c_index", lambda: s.deberta.position_term(torch.randn(H, 8, D), None, att_span=4,
                                                               p2c_index="both"), "p2c_index"
    yield "deberta buckets without max", lambda: s.deberta.position_term(torch.randn(H, 8, D), None, att_span=4,
                                                                         position_buckets=4), "max_position"
    yield "txl r_k 2-D", lambda: s.transformer_xl.position_term(torch.randn(4, D), torch.randn(H, D),
                                                                torch.randn(H, D)), "r_k must have rank 3"
    yield "txl u shape", lambda: s.transformer_xl.position_term(torch.randn(H, 4, D), torch.randn(H, D + 1),
                                                                torch.randn(H, D)), "u must have size"
    yield "txl r_k ambiguous (D == H)", lambda: s.transformer_xl.position_term(torch.randn(H, H, D), torch.randn(H, D),
                                                                               torch.randn(H, D)), "ambiguous"
    yield "deberta pos_layout", lambda: s.deberta.position_term(torch.randn(H, 8, D), None, att_span=4,
                                                                pos_layout="dhs"), "pos_layout"
    yield "kerple kernel", lambda: s.kerple_log.position_term(torch.ones(H), torch.ones(H), kernel="cubic"), "kernel"
    yield "kerple r2 heads", lambda: s.kerple_log.position_term(torch.ones(H), torch.ones(H + 1)), "r2 must have size"
    yield "fire params missing", lambda: s.fire.position_term({"w1": torch.ones(4)}), "b1 (width,)"
    yield "fire w2 width", lambda: s.fire.position_term(dict(w1=torch.ones(4), b1=torch.ones(4), w2=torch.ones(H, 5),
                                                             b2=torch.ones(H), c=torch.tensor(0.1),
                                                             L=torch.tensor(8.0))), "params['w2']"
    yield "xpos scale_base 0", lambda: s.xpos.position_term(scale_base=0), "scale_base must be"
    yield "rope rotary_dim odd", lambda: s.rope.position_term(rotary_dim=3), "rotary_dim must be even"
    yield "model unknown option", lambda: rp.models.TransformerConfig("t5", position=dict(k=3)), "not options of t5"
    yield "model unknown scheme", lambda: rp.models.TransformerConfig("kerple"), "scheme must be one of"
    yield "model xpos encoder", lambda: rp.models.TransformerConfig("xpos", causal=False), "decoder-only"
    yield "another model's cache", lambda: rp.models.Transformer(rp.models.TransformerConfig("rope"))(
        torch.zeros(1, 2, dtype=torch.long), rp.models.Transformer(rp.models.TransformerConfig(
            "rope", position=dict(base=500.0))).new_cache()), "made for another model"
    yield "xpos rotated cache", lambda: rp.models.Transformer(rp.models.TransformerConfig("xpos")).new_cache(
        rope_layout="rotated"), "use rope_layout='unrotated'"
    yield "rope base 1", lambda: s.rope.position_term(base=1), "base must be a real number > 1"
    yield "rope pairing", lambda: s.rope.position_term(pairing="zigzag"), "pairing"
    yield "term scale negative", lambda: rp.terms.PositionTerm("x", "none", scale=-1.0), "scale must be"
    yield "term scale NaN", lambda: rp.terms.PositionTerm("x", "none", scale=float("nan")), "scale must be"
    with_budget = memory_budget(2**20)
    yield "relative_offsets over budget", lambda: _in(with_budget, lambda: rp.relative_offsets(4096)), "memory budget"
    yield "alibi_bias over budget", lambda: _in(memory_budget(2**20), lambda: s.alibi.alibi_bias(8, 4096)), \
        "memory budget"
    yield "t5_bias_from_table over budget", lambda: _in(memory_budget(2**20), lambda: rp.oracles.t5.t5_bias_from_table(
        torch.randn(32, 8), 4096)), "memory budget"
    big_q = torch.empty(1, 1, 4096, 64)  # an empty tensor costs nothing: each builder is refused before it works
    yield "shaw_attention over budget", lambda: _in(memory_budget(2**30), lambda: s.shaw.shaw_attention(
        big_q, big_q, big_q, rel_key=torch.zeros(9, 64), max_relative_position=4)), "memory budget"
    yield "shaw_relative_logits over budget", lambda: _in(memory_budget(2**30), lambda: s.shaw.shaw_relative_logits(
        big_q, torch.zeros(9, 64), max_relative_position=4)), "memory budget"
    yield "relative_logits_gather over budget", lambda: _in(memory_budget(2**20), lambda: (
        s.music_transformer.relative_logits_gather(big_q, torch.zeros(8191, 64)))), "memory budget"
    yield "transformer_xl_terms over budget", lambda: _in(memory_budget(2**20), lambda: s.transformer_xl.
                                                          transformer_xl_terms(big_q, big_q, torch.zeros(4096, 1, 64),
                                                                               torch.zeros(1, 64), torch.zeros(1, 64),
                                                                               r_layout="LHd")), "memory budget"
    yield "deberta_delta_index over budget", lambda: _in(memory_budget(2**20), lambda: s.deberta.deberta_delta_index(
        4096, max_relative_positions=8)), "memory budget"
    yield "deberta_c2p_p2c over budget", lambda: _in(memory_budget(2**20), lambda: rp.oracles.deberta.deberta_c2p_p2c(
        big_q, big_q, torch.zeros(1, 16, 64), torch.zeros(1, 16, 64), torch.empty(4096, 4096, dtype=torch.long),
        8)), "memory budget"
    yield "attention over budget", lambda: _in(memory_budget(2**20), lambda: rp.attention(
        torch.randn(4096, 8), torch.randn(4096, 8), torch.randn(4096, 8))), "memory budget"
    yield "attention scale numpy", lambda: rp.attention(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4),
                                                        scale=np.float32(-1)), "scale must be"
    yield "positions length 0", lambda: rp.positions.resolve_positions(0, 4), "query_len"
    yield "budget 0", lambda: rp.budget.set_memory_budget(0), "nbytes"
    yield "budget text", lambda: rp.measure.guard.parse_budget("1e400"), "RELPOS_MEMORY_BUDGET"
    yield "budget negative", lambda: rp.measure.guard.parse_budget("-5"), "RELPOS_MEMORY_BUDGET"
    yield "budget fractional", lambda: rp.measure.guard.parse_budget("2.5"), "RELPOS_MEMORY_BUDGET"
    yield "budget zero", lambda: rp.measure.guard.parse_budget("0"), "RELPOS_MEMORY_BUDGET"
    yield "analytic form", lambda: rp.measure.analytic_bytes("t5", "fast", "eager", B=1, H=1, Lq=4, Lk=4, d=4), "form"
    yield "analytic Lq", lambda: rp.measure.analytic_bytes("t5", "gather", "eager", B=1, H=1, Lq=0, Lk=4, d=4), "Lq"


def _in(ctx, fn):
    with ctx:
        return fn()


SPECIAL_CASES = ("term for another head size", "term for other heads", "decoder scheme without causal")


def cases(every_path: bool = True):
    """Every (id, call, expected message text); ``every_path=False``: the attend cases for one scheme per
    (form, backend) pair, and the special cases on every path of the first scheme of each kind
    (decoder-only, tables per head, tables of the head size: found from the declarations and the terms)."""
    out, seen = [], set()
    kinds = {}
    for name in dict.fromkeys(p.scheme for p in registry.paths()):
        kinds.setdefault((_causal_only(name), _depends_on(name, heads=H + 1), _depends_on(name, d=2 * D)), name)
    special = {name for kind, name in kinds.items() if any(kind)}
    for p in registry.paths():
        first = (p.form, p.backend) not in seen
        if not (every_path or first or p.scheme in special):
            continue
        seen.add((p.form, p.backend))
        for cid, call, expect in _attend_cases(p.scheme, p.form, p.backend):
            if every_path or first or cid in SPECIAL_CASES:
                out.append((f"attend[{p.scheme}/{p.form}/{p.backend}] {cid}", call, expect))
    out += [(f"attend {cid}", c, e) for cid, c, e in _unsupported_cases()]
    out += [(f"builder {cid}", c, e) for cid, c, e in _builder_cases()]
    return out
