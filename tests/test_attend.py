"""rp.attend: every (scheme, form, backend) of the registry against float64 references from the papers.

Hypothesis draws the lengths (decode steps Lq = 1, Lq != Lk, k >= L, L = 1), causal or
not, and where the queries and keys sit (the default rule, an explicit query offset,
keys kept after an eviction). FlexAttention runs its eager reference here (one compiled
kernel per shape costs seconds on CPU); ``test_compiled_flex_*`` runs the compiled kernel
at a few shapes, decode step included.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relpos_core as rp
from relpos_core import registry
from tests.references import CASES

PATHS = [(p.scheme, p.form, p.backend) for p in registry.paths()]


def _richest_flex_path_per_form(paths):
    """Derived, not listed: for each form, the flex path whose term has the most kinds of piece.
    FlexAttention's eager reference retraces every new score_mod and shape (seconds on a busy CPU), so
    the checks that run other shapes use this sample; every flex path runs in the per-path check."""
    best = {}
    for scheme, form, backend in paths:
        if backend == "flex":
            n = len(registry.example_term(scheme, num_heads=2, head_dim=8, k=4, device="meta").kinds())
            if form not in best or n > best[form][0]:
                best[form] = (n, (scheme, form, backend))
    return [path for _, path in best.values()]


FLEX_SAMPLE = _richest_flex_path_per_form(PATHS)
# the zero-rows check runs at the per-path check's shape (FlexAttention's traces are reused): every path
EVERY_PATH_SHAPE = dict(B=1, Lq=3, Lk=4)
CHEAP = [p for p in PATHS if p[2] != "flex"] + FLEX_SAMPLE
SAMPLE = [p for p in PATHS if p[:2] in {(s, f) for s, f, _ in FLEX_SAMPLE} | {("t5", "naive"), ("alibi", "gather"),
                                                                              ("shaw_key", "skew")}
          and (p[2] != "flex" or p in FLEX_SAMPLE)]
H, D = 2, 8


def make_params(scheme, H, d, k, generator):
    """(params, build(dtype) -> the scheme's term) from the scheme's reference file."""
    case = CASES[scheme]
    params = case.make_params(H, d, k, generator)
    return params, lambda dtype: case.term(_cast(params, dtype))


def _cast(params, dtype):
    return {n: (t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
            for n, t in params.items()}


def _causal_only(scheme):
    return rp.schemes.lookup(scheme).scheme.causal_only


class _References(dict):
    def __missing__(self, scheme):
        return CASES[scheme].reference


REFERENCES = _References()


def _inputs(B, Lq, Lk, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, d, generator=g, dtype=torch.float64).to(dtype) for n in (Lq, Lk, Lk)]


def _positions(mode, Lq, Lk, seed):
    """(attend keyword arguments, qpos, kpos) for one way of placing the queries and keys."""
    kpos = torch.arange(Lk)
    if mode == "default":
        return {}, kpos[Lk - Lq:] if Lq <= Lk else None, kpos
    if mode == "offset":
        o = (seed % 7) - 2
        return {"query_offset": o}, torch.arange(Lq) + o, kpos
    # evicted: keys 0..s-1 kept as sinks, then a window of recent keys; queries the last ones
    g = torch.Generator().manual_seed(seed)
    gaps = torch.randint(1, 4, (Lk,), generator=g)
    kpos = torch.cumsum(gaps, 0) - gaps[0]
    return {"key_positions": kpos}, kpos[Lk - Lq:], kpos


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
        return fn()


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), Lq=st.integers(1, 7), extra=st.integers(0, 5), causal=st.booleans(),
       mode=st.sampled_from(["default", "offset", "evicted"]), k=st.integers(1, 12), seed=st.integers(0, 999))
def test_every_path_matches_the_float64_reference(path, Lq, extra, causal, mode, k, seed):
    scheme, form, backend = path
    Lk = Lq + extra
    if _causal_only(scheme):
        causal = True  # decoder only (Transformer-XL's reference table has a row for every distance drawn here)
    if form == "skew" and mode == "evicted":
        mode = "default"  # the skew needs consecutive positions (refused otherwise: tested below)
    kwargs, qpos, kpos = _positions(mode, Lq, Lk, seed)
    params, build = make_params(scheme, H, D, k, torch.Generator().manual_seed(seed))
    q, kk, v = _inputs(2, Lq, Lk, D, seed)
    want = REFERENCES[scheme](q, kk, v, params, qpos, kpos, causal)
    dtype = torch.float32 if backend == "flex" else torch.float64
    got = _quiet(lambda: rp.attend(q.to(dtype), kk.to(dtype), v.to(dtype), build(dtype), form=form, backend=backend,
                                   causal=causal, compiled=False, **kwargs))
    tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(got.double(), want, **tol)


@pytest.mark.flex_eager
@pytest.mark.parametrize("path", PATHS, ids="-".join)
def test_every_path_matches_its_float64_reference_at_one_tiny_shape(path):
    """The fast tier's check of every registry path, FlexAttention included (its eager reference,
    compiled=False): Lq != Lk, causal, against the float64 reference of tests/references."""
    scheme, form, backend = path
    B, Lq, Lk = EVERY_PATH_SHAPE.values()
    params, build = make_params(scheme, H, D, 4, torch.Generator().manual_seed(11))
    q, kk, v = _inputs(B, Lq, Lk, D, 11)
    kpos = torch.arange(Lk)
    want = REFERENCES[scheme](q, kk, v, params, kpos[Lk - Lq:], kpos, True)
    dtype = torch.float32 if backend == "flex" else torch.float64
    got = _quiet(lambda: rp.attend(q.to(dtype), kk.to(dtype), v.to(dtype), build(dtype), form=form, backend=backend,
                                   causal=True, compiled=False))
    tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(got.double(), want, **tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("path", SAMPLE, ids="-".join)
def test_half_precision_paths_stay_close(path, dtype):
    scheme, form, backend = path
    params, build = make_params(scheme, H, 16, 12, torch.Generator().manual_seed(1))
    q, k, v = _inputs(1, 6, 9, 16, 1)
    causal = True
    kpos = torch.arange(9)
    want = REFERENCES[scheme](q, k, v, params, kpos[3:], kpos, causal)
    got = _quiet(lambda: rp.attend(q.to(dtype), k.to(dtype), v.to(dtype), build(dtype), form=form, backend=backend,
                                   causal=causal, compiled=False))
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=3e-2)


def _grads(fn, tensors):
    out = fn()
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    return torch.autograd.grad((out * weights).sum(), tensors)


@pytest.mark.parametrize("path", PATHS, ids="-".join)
def test_gradients_reach_q_k_v_and_every_table(path):
    """Backward through the path (flex on CPU: through the SDPA fallback, with a warning) equals float64 autograd."""
    scheme, form, backend = path
    params, _ = make_params(scheme, H, D, 3, torch.Generator().manual_seed(2))
    leaves = {n: t.clone().requires_grad_(True) for n, t in params.items()
              if isinstance(t, torch.Tensor) and t.is_floating_point()}
    q, k, v = (t.requires_grad_(True) for t in _inputs(1, 4, 6, D, 2))
    causal = _causal_only(scheme) or path[1] == "skew"
    kpos = torch.arange(6)
    ref_params = {**params, **leaves}
    want = _grads(lambda: REFERENCES[scheme](q, k, v, ref_params, kpos[2:], kpos, causal), [q, k, v, *leaves.values()])
    dtype = torch.float32 if backend == "flex" else torch.float64
    cast = {n: t.detach().to(dtype).requires_grad_(True) for n, t in leaves.items()}
    qkv = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    term = CASES[scheme].term({**_cast(params, dtype), **cast})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rp.kernels.flex.FlexCPUBackwardWarning)
        got = _grads(lambda: rp.attend(*qkv, term, form=form, backend=backend, causal=causal), [*qkv, *cast.values()])
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=1e-4 if dtype == torch.float32 else 1e-9, rtol=1e-4)


def test_flex_on_cpu_with_gradients_warns_and_uses_sdpa():
    params, build = make_params("t5", H, D, 4, torch.Generator().manual_seed(3))
    table = params["table"].float().requires_grad_(True)
    q, k, v = _inputs(1, 5, 5, D, 3, torch.float32)
    with pytest.warns(rp.kernels.flex.FlexCPUBackwardWarning, match="no backward on CPU"):
        out = rp.attend(q, k, v, rp.schemes.t5.position_term(table, max_distance=4), backend="flex")
    out.sum().backward()
    assert table.grad is not None and table.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- compiled FlexAttention

SHAPES = [(1, 37, True), (24, 37, True), (37, 37, False)]  # (Lq, Lk, causal): a decode step, a prefill, an encoder
# (scheme, form, Lq, Lk, causal): the flex sample (the richest flex path per form), each at one of the shapes
COMPILED_CASES = [(scheme, form, *SHAPES[i % len(SHAPES)]) for i, (scheme, form, _) in enumerate(FLEX_SAMPLE)]


@pytest.mark.slow
@pytest.mark.xdist_group("compiled-flex")  # one worker compiles these; test_memory reuses its kernels
@pytest.mark.parametrize("case", COMPILED_CASES, ids=lambda c: "-".join(map(str, c)))
def test_compiled_flex_matches_the_reference(case):
    scheme, form, Lq, Lk, causal = case
    params, build = make_params(scheme, H, 16, 6, torch.Generator().manual_seed(4))
    q, k, v = _inputs(1, Lq, Lk, 16, 4)
    kpos = torch.arange(Lk)
    want = REFERENCES[scheme](q, k, v, params, kpos[Lk - Lq:], kpos, causal)
    got = rp.attend(q.float(), k.float(), v.float(), build(torch.float32), form=form, backend="flex", causal=causal)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=2e-5)


@pytest.mark.slow
def test_block_mask_and_score_mod_masking_agree_and_the_block_mask_skips_tiles():
    """Causality as a BlockMask (the default) and as -inf in the score_mod give the same output;
    the BlockMask lists fewer tiles to compute."""
    from relpos_core.kernels import flex
    from relpos_core.positions import resolve_positions

    L = 300
    pos = resolve_positions(L, L)
    causal_mask, full = flex.causal_block_mask(pos), flex.full_block_mask(L, L, "cpu")
    n_causal = int(causal_mask.kv_num_blocks.sum() + causal_mask.full_kv_num_blocks.sum())
    n_full = int(full.kv_num_blocks.sum() + full.full_kv_num_blocks.sum())
    nb = math.ceil(L / flex.BLOCK_SIZE)
    assert (n_causal, n_full) == (nb * (nb + 1) // 2, nb * nb)
    q, k, v = _inputs(1, 40, 40, 16, 5, torch.float32)
    term = rp.schemes.alibi.position_term(H)
    pos = resolve_positions(40, 40)
    a = _quiet(lambda: flex.attention(q, k, v, term, form="gather", pos=pos, causal=True, compiled=False))
    b = _quiet(lambda: flex.attention(q, k, v, term, form="gather", pos=pos, causal=True, compiled=False,
                                      block_skipping=False))
    torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------- shared behaviour


@pytest.mark.flex_eager
@pytest.mark.parametrize("path", PATHS, ids="-".join)
def test_a_query_that_sees_no_key_gets_zeros_on_every_path(path):
    scheme, form, backend = path
    params, build = make_params(scheme, H, D, 4, torch.Generator().manual_seed(6))
    q, k, v = _inputs(*EVERY_PATH_SHAPE.values(), D, 6, torch.float32)
    out = _quiet(lambda: rp.attend(q, k, v, build(torch.float32), form=form, backend=backend, causal=True,
                                   query_offset=-2, compiled=False))  # queries at -2, -1, 0: two see nothing
    assert torch.equal(out[:, :, :2], torch.zeros_like(out[:, :, :2]))
    assert out[:, :, 2].abs().sum() > 0


@pytest.mark.parametrize("path", CHEAP, ids="-".join)
def test_decode_step_equals_the_last_row_of_the_full_computation(path):
    """The regression the kernel redesign fixed: a decoder step attends to its whole cache."""
    scheme, form, backend = path
    params, build = make_params(scheme, H, D, 12, torch.Generator().manual_seed(7))
    dtype = torch.float32 if backend == "flex" else torch.float64
    q, k, v = _inputs(1, 9, 9, D, 7, dtype)
    term = build(dtype)
    full = _quiet(lambda: rp.attend(q, k, v, term, form=form, backend=backend, causal=True, compiled=False))
    step = _quiet(lambda: rp.attend(q[:, :, -1:], k, v, term, form=form, backend=backend, causal=True,
                                    compiled=False))
    torch.testing.assert_close(step, full[:, :, -1:])
