"""rp.attend compiles with no graph break on every path, and asks the device for nothing it does not need.

With ``check_finite=False`` and positions known from the shapes (the default rule, a decode step),
``torch._dynamo.explain`` finds zero graph breaks: no ``.item()``, no host read, nothing traced out of
the graph. Every eager and SDPA path of the registry is traced; FlexAttention's paths cost about 2.5 s
of CPU each to trace, so one of each distinct kernel structure (form and kinds of pieces: what decides
which score_mod readers run) is traced here; the scheme-specific functions inside them (row maps,
kernels, buckets) are the ones the eager and SDPA paths of the same form trace. ``tools/compile_sweep.py``
traces every path, FlexAttention's included. Explicit position tensors cost one read of the device per
call (``relpos_core.positions``), the finiteness scan one more; no library call changes a process-wide
setting.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo as dynamo

import relpos_core as rp
from relpos_core import registry

pytestmark = pytest.mark.slow  # torch.compile of every path: minutes on 2 cores (make test runs it; make unit does not)

H, D, L = 2, 8, 12


def _traced_paths():
    out, structures = [], set()
    for p in registry.paths():
        if p.backend != "flex":
            out.append(p)
            continue
        term = registry.example_term(p.scheme, num_heads=H, head_dim=D, k=4, device="meta")
        key = (p.form, tuple(term.kinds()), term.causal_only)
        if key not in structures:
            structures.add(key)
            out.append(p)
    return out


PATHS = _traced_paths()


def _term(scheme, generator):
    distance = rp.schemes.lookup(scheme).scheme.distance
    k = L if distance is not None and distance.follows_length else 4
    return registry.example_term(scheme, num_heads=H, head_dim=D, k=k, generator=generator)


@pytest.mark.xdist_group("dynamo")
@pytest.mark.parametrize("path", PATHS, ids=lambda p: f"{p.scheme}-{p.form}-{p.backend}")
def test_every_path_compiles_without_a_graph_break(path):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, n, D, generator=g) for n in (1, L, L))  # a decode step: Lq = 1
    term = _term(path.scheme, g)
    causal = path.causal == "required" or path.form == "skew"

    def step(q, k, v):
        return rp.attend(q, k, v, term, form=path.form, backend=path.backend, causal=causal, check_finite=False)

    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        explained = dynamo.explain(step)(q, k, v)
    assert explained.graph_break_count == 0, [str(b.reason).splitlines()[0] for b in explained.break_reasons]


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
