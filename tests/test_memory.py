"""The byte counts and the memory guard: counted before allocating, measured after, refused in between."""
from __future__ import annotations

import warnings

import pytest
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.measure import MemoryBudgetError, measure_peak_memory, memory_budget
from relpos_core.measure.analytic import BOUND, analytic_bytes, peak_bytes
from tests.test_attend import COMPILED_CASES, SHAPES

MiB, GiB = 2**20, 2**30
H, B = 2, 2


def _call(scheme, form, backend, Lq, Lk, d, causal, compiled=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    distance = rp.schemes.lookup(scheme).scheme.distance
    k = Lk if distance is not None and distance.follows_length else 6  # a row for every distance of the call
    term = registry.example_term(scheme, num_heads=H, head_dim=d, k=k, generator=g)
    q, k, v = (torch.randn(B if backend != "flex" else 1, H, n, d, generator=g) for n in (Lq, Lk, Lk))
    return term, q, (lambda: rp.attend(q, k, v, term, form=form, backend=backend, causal=causal, compiled=compiled))


DENSE_PATHS = [p for p in registry.paths() if p.backend != "flex"]
FLEX_PATHS = [p for p in registry.paths() if p.backend == "flex"]
# every path's count is compared with a measurement here: dense paths on the profiler, flex at a decode step
MEASURED = {(p.scheme, p.form, p.backend) for p in DENSE_PATHS + FLEX_PATHS}


def _within_bound(measured, counted):
    """The stated bound (relpos_core.measure.analytic): the count is never below the measured peak and at most
    BOUND times it (a piece's declared tensors count as alive together)."""
    assert measured <= counted <= BOUND * measured, (measured, counted, round(counted / measured, 3))


@pytest.mark.parametrize("path", DENSE_PATHS, ids=lambda p: f"{p.scheme}-{p.form}-{p.backend}")
def test_counted_bytes_bound_the_cpu_profiler(path):
    """Eager and SDPA paths, B = 2, Lq != Lk, causal: measured <= counted <= BOUND x measured."""
    Lq, Lk, d = 24, 37, 16
    causal = True
    term, q, fn = _call(path.scheme, path.form, path.backend, Lq, Lk, d, causal)
    with torch.no_grad():
        measured = measure_peak_memory(fn)
    counted = peak_bytes(term, path.form, path.backend, B=B, H=H, Lq=Lq, Lk=Lk, d=d, causal=causal)
    _within_bound(measured, counted)


@pytest.mark.slow  # FlexAttention's eager reference traces each path for about 2 s on CPU: 22 paths
@pytest.mark.parametrize("path", FLEX_PATHS, ids=lambda p: f"{p.scheme}-{p.form}-{p.backend}")
def test_counted_bytes_bound_flex_eager_reference_at_a_decode_step(path):
    """FlexAttention's eager reference (compiled=False) at a decode step (Lq = 1, Lk = 512): it copies k and v
    to fp32 and evaluates each reader per pair (issue 25 found 1.3-2.2x the old count): within the bound."""
    Lq, Lk, d = 1, 512, 16
    term, q, fn = _call(path.scheme, path.form, "flex", Lq, Lk, d, True, compiled=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
        fn()
        measured = measure_peak_memory(fn)
    counted = peak_bytes(term, path.form, "flex", B=1, H=H, Lq=Lq, Lk=Lk, d=d, causal=True, compiled=False)
    _within_bound(measured, counted)


def _compiled_flex_cases():
    """test_attend's compiled cases (their kernels are reused), then one case for every other
    flex-capable scheme: the flex path rp.attend picks by default (else its first), at the
    shapes in turn (a decoder-only scheme at a causal one)."""
    from relpos_core.attend import choose_form

    cases = list(COMPILED_CASES)
    covered = {c[0] for c in cases}
    for scheme in dict.fromkeys(p.scheme for p in FLEX_PATHS):
        if scheme in covered:
            continue
        paths = [p for p in FLEX_PATHS if p.scheme == scheme]
        term = registry.example_term(scheme, num_heads=H, head_dim=16, k=6, device="meta")
        default = choose_form(term, None)
        path = next((p for p in paths if p.form == default), paths[0])
        shapes = [s for s in SHAPES if s[2] or path.causal != "required"]
        cases.append((scheme, path.form, *shapes[len(cases) % len(shapes)]))
    return cases


COMPILED_FLEX = _compiled_flex_cases()


def test_the_compiled_flex_cases_cover_every_flex_capable_scheme():
    assert {c[0] for c in COMPILED_FLEX} == {p.scheme for p in FLEX_PATHS}
    assert all((c[0], c[1], "flex") in MEASURED for c in COMPILED_FLEX)


def test_every_scheme_with_a_kernel_path_is_measured_on_an_eager_path():
    """Every registry name but the model-only variants (same call as their scheme) has
    eager paths, each compared with the profiler above, CoPE included."""
    kernel_schemes = {n for n in rp.schemes.names()
                      if not getattr(rp.schemes.lookup(n).variant, "model_only", False)}
    assert {p.scheme for p in DENSE_PATHS if p.backend == "eager"} == kernel_schemes


@pytest.mark.slow
@pytest.mark.xdist_group("compiled-flex")
@pytest.mark.parametrize("case", COMPILED_FLEX, ids=lambda c: "-".join(map(str, c)))
def test_counted_bytes_bound_compiled_flex(case):
    """Compiled FlexAttention, one kernel per flex-capable scheme (test_attend's reused): within the bound."""
    scheme, form, Lq, Lk, causal = case
    term, q, fn = _call(scheme, form, "flex", Lq, Lk, 16, causal, compiled=True, seed=1)
    with torch.no_grad():
        fn()
        measured = measure_peak_memory(fn)
    counted = peak_bytes(term, form, "flex", B=1, H=H, Lq=Lq, Lk=Lk, d=16, causal=causal)
    _within_bound(measured, counted)


def test_the_guard_refuses_before_allocating_and_names_a_path_that_fits():
    L, d = 4096, 64
    term = rp.schemes.shaw.position_term(rel_key=torch.randn(129, d), max_relative_position=64)
    q = k = v = torch.randn(1, 1, L, d)

    def refused():
        with pytest.raises(MemoryBudgetError) as info:
            rp.attend(q, k, v, term, form="naive", backend="sdpa")
        return info.value

    with memory_budget(GiB):
        peak = measure_peak_memory(refused)
        err = refused()
    assert peak < MiB  # the 4 GiB [L, L, d] tensor was never allocated
    msg = str(err)
    naive = peak_bytes(term, "naive", "sdpa", B=1, H=1, Lq=L, Lk=L, d=d)
    assert f"would materialise {rp.measure.guard.format_bytes(naive)}" in msg and "1.0 GiB" in msg
    assert "use form='gather', backend='flex'" in msg or "use form='skew'" in msg or "use form='gather'" in msg
    # the suggested path is itself guarded and fits
    form, backend = msg.split("use form=")[1].split(" (")[0].replace("'", "").split(", backend=")
    assert peak_bytes(term, form, backend, B=1, H=1, Lq=L, Lk=L, d=d) <= GiB


def test_a_dense_fp32_bias_of_16_heads_at_16384_is_16_gib():
    """The failure mode behind the guard: one dense fp32 bias [1, 16, L, L] at L = 16384 is 2**34 bytes
    (16 GiB, 17.2 GB); the SDPA path also holds the int64 column index of every pair (2 GiB) while it
    reads the bias out of the per-offset table; FlexAttention reads that table in the kernel (a few MiB)."""
    L = 16384
    dense = analytic_bytes("t5", "gather", "sdpa", B=1, H=16, Lq=L, Lk=L, d=64, k=128)
    flex = analytic_bytes("t5", "gather", "flex", B=1, H=16, Lq=L, Lk=L, d=64, k=128)
    flex -= analytic_bytes("none", "none", "flex", B=1, H=16, Lq=L, Lk=L, d=64)  # the kernel's own buffers
    assert 16 * L * L * 4 == 2**34 == 16 * GiB and round(2**34 / 1e9, 1) == 17.2
    assert 16 * GiB + 2 * GiB <= dense < 16 * GiB + 2 * GiB + 64 * MiB
    assert 16 * (2 * L - 1) * 4 <= flex < 8 * MiB  # the [H, 2L - 1] fp32 per-offset table and small change


def test_builders_are_guarded():
    with memory_budget(MiB):
        for call in (lambda: rp.relative_offsets(4096), lambda: rp.schemes.alibi.alibi_bias(8, 2048),
                     lambda: rp.oracles.t5.t5_bias_from_table(torch.randn(32, 8), 2048),
                     lambda: rp.attention_weights(torch.randn(1, 1, 2048, 8), torch.randn(1, 1, 2048, 8))):
            with pytest.raises(MemoryBudgetError):
                call()


def test_counts_grow_as_the_formulas_say():
    """naive Shaw: [L, L, d] per layer (shared by heads); gather: the int64 index and per-row scores."""
    d, k = 64, 64
    naive = [analytic_bytes("shaw_key", "naive", "eager", B=1, H=1, Lq=L, Lk=L, d=d, k=k) for L in (1024, 2048)]
    gather = [analytic_bytes("shaw_key", "gather", "eager", B=1, H=1, Lq=L, Lk=L, d=d, k=k) for L in (1024, 2048)]
    assert naive[1] - naive[0] >= (2048**2 - 1024**2) * d * 4  # the [L, L, d] fp32 tensor alone
    assert gather[1] / gather[0] == pytest.approx(4, rel=0.02)  # L^2 terms (scores, index) dominate, no L^2 d
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert analytic_bytes("rope", "none", "sdpa", B=1, H=1, Lq=4096, Lk=4096, d=64) < 16 * MiB


def test_the_block_mask_of_explicit_positions_is_counted():
    """Causal FlexAttention with gapped key positions builds its BlockMask from a dense [Lq, Lk] evaluation
    (create_block_mask): measured here, and in the count the guard uses."""
    from relpos_core.kernels import flex

    L = 512
    kept = torch.cat([torch.arange(2), torch.arange(10, L + 8)])  # two sinks, then a window: not a run
    pos = rp.positions.resolve_positions(L, L, key_positions=kept)
    measured = measure_peak_memory(lambda: flex.causal_block_mask(pos))
    term = registry.example_term("alibi", num_heads=H, head_dim=16, k=6)
    gapped = peak_bytes(term, "gather", "flex", B=1, H=H, Lq=L, Lk=L, d=16, causal=True, contiguous=False)
    runs = peak_bytes(term, "gather", "flex", B=1, H=H, Lq=L, Lk=L, d=16, causal=True, contiguous=True)
    assert measured > 9 * L * L and runs < measured <= gapped  # the count of a gapped call holds the evaluation
