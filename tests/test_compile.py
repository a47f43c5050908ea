"""torch.compile(fullgraph=True) of a function calling rp.attend builds and runs on every path, and the call
asks the device for nothing it does not need.

Every (scheme, form, backend) path of the registry is compiled whole (inductor, CPU, ``fullgraph=True``,
the default arguments: finiteness check on) at a small shape, run, and compared with the eager call
(``assert_close``); the compiled call still refuses a NaN with the eager ValueError
(``relpos_core.compile_ops.refuse_non_finite``: an opaque op, no graph break). Gradients through the
compiled call match eager ones on one path of each kernel structure (form, backend and kinds of pieces:
what decides which code runs) that trains on CPU, and on T5's flex path, which warns (once, when traced)
and trains on SDPA, as it does eagerly. Inductor compiles each path in 10-60 s on 2 CPU cores, so these are in the
slow tier (``make test``); the unit tier compiles one T5 call through dynamo and AOTAutograd (no
inductor) to check that the finiteness check stays in the graph. ``tools/compile_sweep.py`` does all of
it, gradients of every path included, from the command line.
Explicit position tensors cost one read of the device per call (``relpos_core.positions``), the
finiteness scan one more; no library call changes a process-wide setting.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo as dynamo

import relpos_core as rp
from relpos_core import registry
from relpos_core.kernels.flex import FlexCPUBackwardWarning

H, D, L, LQ = 2, 8, 12, 5  # queries are the last LQ of L keys


def _kernel_structures(paths):
    """One path of each (form, backend, kinds of pieces, causal-only)."""
    out, seen = [], set()
    for p in paths:
        term = registry.example_term(p.scheme, num_heads=H, head_dim=D, k=4, device="meta")
        key = (p.form, p.backend, tuple(term.kinds()), term.causal_only)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


PATHS = registry.paths()
# the flex paths train on SDPA on CPU (the dense paths of the same form): one of them checks the fallback
TRAINING = _kernel_structures([p for p in PATHS if p.backward_cpu == "yes"]) + [
    next(p for p in PATHS if (p.scheme, p.form, p.backend) == ("t5", "gather", "flex"))]


def _ids(p):
    return f"{p.scheme}-{p.form}-{p.backend}"


def _term(scheme, generator, requires_grad=False):
    distance = rp.schemes.lookup(scheme).scheme.distance
    k = L if distance is not None and distance.follows_length else 4
    term = registry.example_term(scheme, num_heads=H, head_dim=D, k=k, generator=generator)
    if requires_grad:
        for _, t in term.tensors():
            if t.is_floating_point() and t.is_leaf:
                t.requires_grad_(True)
    return term


def _call(path, term):
    causal = path.causal == "required" or path.form == "skew"

    def step(q, k, v):
        return rp.attend(q, k, v, term, form=path.form, backend=path.backend, causal=causal)

    return step


def _inputs(seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return g, [torch.randn(1, H, n, D, generator=g, requires_grad=requires_grad) for n in (LQ, L, L)]


@pytest.mark.slow
@pytest.mark.xdist_group("dynamo")
@pytest.mark.parametrize("path", PATHS, ids=_ids)
def test_every_path_compiles_runs_and_matches_eager(path):
    g, (q, k, v) = _inputs(0)
    step = _call(path, _term(path.scheme, g))
    dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(q, k, v), step(q, k, v), rtol=1e-5, atol=1e-5)
        bad = k.clone()
        bad[0, 1, 3, 2] = float("nan")
        with pytest.raises(ValueError, match="^k holds non-finite values"):
            compiled(q, bad, v)


@pytest.mark.slow
@pytest.mark.xdist_group("dynamo")
@pytest.mark.parametrize("path", TRAINING, ids=_ids)
def test_gradients_through_the_compiled_call_match_eager(path):
    grads = []
    for compile_it in (False, True):
        g, (q, k, v) = _inputs(1, requires_grad=True)
        term = _term(path.scheme, g, requires_grad=True)
        step = _call(path, term)
        if compile_it:
            dynamo.reset()
            step = torch.compile(step, fullgraph=True)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out = step(q, k, v)
        fell_back = [w for w in seen if issubclass(w.category, FlexCPUBackwardWarning)]
        assert bool(fell_back) == (path.backend == "flex"), [str(w.message) for w in seen]
        leaves = [q, k, v] + [t for _, t in term.tensors() if t.requires_grad]
        grads.append(torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), leaves))
    for eager, compiled in zip(*grads):
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


def test_the_finiteness_check_stays_in_the_graph():
    """Dynamo and AOTAutograd (no inductor: the unit tier): one graph, and the eager ValueError on NaN or inf."""
    g, (q, k, v) = _inputs(2)
    table = torch.randn(32, H, generator=g)  # (num_buckets, H)

    def step(q, k, v, table):
        return rp.attend(q, k, v, rp.schemes.t5.position_term(table), form="gather", backend="sdpa", causal=True)

    dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break would raise
    torch.testing.assert_close(compiled(q, k, v, table), step(q, k, v, table))
    for name, index in (("q", 0), ("v", 2), ("the term's", 3)):
        bad = [q, k, v, table]
        bad[index] = bad[index].clone()
        bad[index].view(-1)[-1] = float("inf") if index < 3 else float("nan")
        with pytest.raises(ValueError, match=f"^{name}.* holds non-finite values"):
            compiled(*bad)


def _device_reads(fn) -> int:
    """How many times ``fn`` reads a value back from a tensor (``item``, ``tolist``, ``bool``, ``int``)."""
    count = [0]
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "__bool__", "__int__")}

    def counting(name):
        def read(self, *args, **kwargs):
            count[0] += 1
            return originals[name](self, *args, **kwargs)
        return read

    try:
        for name in originals:
            setattr(torch.Tensor, name, counting(name))
        fn()
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return count[0]


@pytest.mark.slow
def test_host_reads_happen_only_where_asked_and_once():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, H, n, D, generator=g) for n in (3, L, L))
    term = _term("t5", g)
    kept = torch.tensor([0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
    assert _device_reads(lambda: rp.attend(q, k, v, term, causal=True, check_finite=False)) == 0
    assert _device_reads(lambda: rp.attend(q, k, v, term, causal=True, query_offset=9, check_finite=False)) == 0
    assert _device_reads(lambda: rp.attend(q, k, v, term, causal=True, key_positions=kept, check_finite=False)) == 1
    assert _device_reads(lambda: rp.attend(q, k, v, term, causal=True, check_finite=True)) == 1
    assert _device_reads(lambda: rp.attend(q, k, v, term, causal=True, key_positions=kept)) == 2


@pytest.mark.slow
def test_no_call_changes_process_wide_state():
    """torch's threads, dynamo's recompile limit and the global RNG are as they were after flex, a
    benchmark module and a model build."""
    import torch._dynamo.config as cfg

    before = (torch.get_num_threads(), cfg.recompile_limit, torch.random.get_rng_state().clone())
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, H, 8, D, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        rp.attend(q, k, v, _term("alibi", g), backend="flex", compiled=False)
    rp.models.Transformer(rp.models.TransformerConfig("t5"), seed=3)
    rp.oracles.t5.benchmark_module(2, 8, 32)  # builds a Hugging Face module from a seeded fork of the RNG
    after = (torch.get_num_threads(), cfg.recompile_limit, torch.random.get_rng_state())
    assert before[:2] == after[:2] and torch.equal(before[2], after[2])
