"""Every declared scheme is complete: a reference, a sign-convention row, a decoding check, a byte count.

A scheme is one file in ``relpos_core/schemes`` (its ``SCHEME`` declaration) plus one file in
``tests/references``; everything else (the registry, the benchmark's cases, the decoder, the lab,
figure labels) derives from those. These tests fail for a registered name that lacks any of it.
"""
from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

import pytest
import torch

import relpos_core as rp
from relpos_core import schemes
from tests.references import CASES

ROOT = Path(__file__).resolve().parents[1]
NAMES = schemes.names()
BIB_KEYS = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "references.bib").read_text()))


def test_no_reference_without_a_scheme():
    """Every registry name has a float64 reference in tests/references, and every reference a registry name."""
    missing = {name: f"tests/references/{schemes.lookup(name).scheme.name}.py" for name in NAMES if name not in CASES}
    assert not missing, f"registry names without a reference (add them to): {missing}"
    assert set(CASES) <= set(NAMES), f"references without a scheme: {sorted(set(CASES) - set(NAMES))}"


@pytest.mark.parametrize("name", list(schemes.SCHEMES))
def test_every_scheme_has_a_sign_convention_row(name):
    row = schemes.sign_convention(name)
    assert row["paper"] and row["formula"] and row["code"]


@pytest.mark.parametrize("name", NAMES)
def test_every_name_decodes_or_says_why_not(name):
    """Checked against the model itself, not against the declarations' lists: a name the declaration says
    is decoded must decode, token by token through a KV cache, to the logits of one uncached forward call;
    a name it says is not must be refused by the model's cache with the declared reason."""
    scheme = schemes.lookup(name).scheme
    config = rp.models.TransformerConfig(name, vocab_size=7, d_model=8, num_heads=2, num_layers=1,
                                         max_positions=16, causal=True)
    model = rp.models.Transformer(config, seed=1, dtype=torch.float64)
    if scheme.not_decoded is not None:
        assert len(scheme.not_decoded) > 20
        with pytest.raises(ValueError, match="not decoded") as info:
            model.new_cache()
        assert scheme.not_decoded in str(info.value)
        return
    tokens = torch.randint(0, 7, (1, 5), generator=torch.Generator().manual_seed(0))
    stepped = model.decode(tokens, model.new_cache(), prefill=2)  # (1, 5, 7): 2 tokens, then one per call
    torch.testing.assert_close(stepped, model(tokens), atol=1e-9, rtol=1e-9)


def _profiled_call(name, form, backend):
    """One causal call of ``name``'s example term, Lq != Lk, B = 2 (the shape of tests/test_memory.py)."""
    B, H, Lq, Lk, d = 2, 2, 24, 37, 16
    g = torch.Generator().manual_seed(0)
    distance = schemes.lookup(name).scheme.distance
    k = Lk if distance is not None and distance.follows_length else 6
    term = rp.registry.example_term(name, num_heads=H, head_dim=d, k=k, generator=g)
    q, key, v = (torch.randn(B, H, n, d, generator=g) for n in (Lq, Lk, Lk))

    def call():
        return rp.attend(q, key, v, term, form=form, backend=backend, causal=True, compiled=False)

    return term, call, dict(B=B, H=H, Lq=Lq, Lk=Lk, d=d)


DENSE_BACKENDS = tuple(b for b in rp.kernels.forms.BACKENDS if b != "flex")


@pytest.mark.parametrize("name", rp.registry.scheme_names())
def test_every_path_has_a_byte_count_and_a_measurement(name):
    """Checked against rp.attend and the CPU profiler, not against the registry's own list: every (form,
    backend) pair on the dense backends either computes the call, and then the registry lists it and its
    byte count holds the stated bound against the profiler's measured peak (measured <= count <= BOUND x measured,
    as tests/test_memory.py checks), or is refused
    with a ValueError, and then the registry does not list it. Every listed FlexAttention path counts at
    least the output it returns."""
    listed = {(p.form, p.backend) for p in rp.registry.paths(name)}
    for form in rp.kernels.forms.FORMS:
        for backend in DENSE_BACKENDS:
            term, call, sizes = _profiled_call(name, form, backend)
            if (form, backend) not in listed:
                with pytest.raises(ValueError):
                    call()
                continue
            with torch.no_grad():
                measured = rp.measure.measure_peak_memory(call)
            counted = rp.measure.analytic.peak_bytes(term, form, backend, causal=True, **sizes)
            bound = rp.measure.analytic.BOUND
            assert measured <= counted <= bound * measured, (form, backend, measured, counted)
    for form, backend in sorted(listed):
        if backend == "flex":
            sizes = dict(B=1, H=2, Lq=8, Lk=8, d=8)
            out_bytes = 4 * sizes["B"] * sizes["H"] * sizes["Lq"] * sizes["d"]
            assert rp.measure.analytic_bytes(name, form, backend, k=4, **sizes) >= out_bytes, (form, backend)


@pytest.mark.parametrize("name", list(schemes.SCHEMES))
def test_the_declaration_is_complete(name):
    s = schemes.SCHEMES[name]
    assert s.display and s.summary and re.search(r"\d{4}", s.paper)
    assert s.cite in BIB_KEYS, f"{name}: cite key {s.cite!r} is not in references.bib"
    if s.chapter is not None:
        assert (ROOT / "chapters" / f"{s.chapter}.ipynb").is_file()
    module = __import__(f"relpos_core.schemes.{name}", fromlist=["x"])
    assert s.paper.split()[0] in (module.__doc__ or ""), f"{name}'s module docstring does not cite its paper"
    for field in dataclasses.fields(s.options):  # every option has a default
        assert field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING


@pytest.mark.parametrize("name", list(schemes.SCHEMES))
def test_every_dotted_path_a_declaration_names_imports(name):
    """``code`` (the sign-convention table's link to the code) and ``benchmark_module`` name objects that exist."""
    s = schemes.SCHEMES[name]
    for path in (s.code, s.benchmark_module):
        if path is None:
            continue
        module, _, attr = path.rpartition(".")
        assert module.startswith("relpos_core."), f"{name}: {path!r} is not a dotted path into relpos_core"
        assert hasattr(importlib.import_module(module), attr), f"{name}: {path!r} does not import"
    if s.benchmark_module is not None:
        assert callable(s.load_benchmark_module())


@pytest.mark.parametrize("name", list(schemes.SCHEMES))
def test_the_flags_say_what_the_module_does(name):
    """``positions_in_tokens``: the module adds positions to the token embeddings (it overrides ``embed``);
    ``has_positions=False``: the module adds none and the term is empty (checked on a built model)."""
    s = schemes.SCHEMES[name]
    config = rp.models.TransformerConfig(name, vocab_size=5, d_model=8, num_heads=2, num_layers=1, max_positions=16)
    model = rp.models.Transformer(config, seed=0)
    h = torch.randn(1, 4, 8)
    embeds = not torch.equal(model.position.embed(h, torch.arange(4)), h)
    assert embeds == s.positions_in_tokens, f"{name}: positions_in_tokens={s.positions_in_tokens}, embed adds {embeds}"
    no_term = all(t is None for t in model.position_terms())
    assert (not embeds and no_term) == (not s.has_positions), f"{name}: has_positions={s.has_positions}"


def test_every_name_has_its_own_colour():
    """Figures tell schemes apart by colour: no two registry names share one."""
    colours = {name: schemes.lookup(name).color for name in schemes.names()}
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in colours.values()), colours
    assert len(set(colours.values())) == len(colours), colours


def test_a_bad_colour_is_refused():
    with pytest.raises(ValueError, match="color must be '#rrggbb'"):
        dataclasses.replace(schemes.SCHEMES["rope"], color="blue")


@pytest.mark.parametrize("name", NAMES)
def test_the_example_term_and_the_module_build(name):
    entry = schemes.lookup(name)
    k = entry.scheme.distance.for_preset("small", 16) if entry.scheme.distance else None
    term = entry.example(2, 8, k, device="meta")
    assert term is None or term.scheme in (entry.scheme.name, name)
    config = rp.models.TransformerConfig(name, vocab_size=5, d_model=8, num_heads=2, num_layers=1, max_positions=16,
                                         causal=True)
    model = rp.models.Transformer(config, seed=0)
    logits = model(torch.zeros(1, 3, dtype=torch.long))
    assert logits.shape == (1, 3, 5) and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", schemes.names())
def test_the_declared_code_imports_and_is_callable(name):
    """``Scheme.code`` names the function or class the book points a reader to: it must exist."""
    dotted = schemes.lookup(name).scheme.code
    module, _, attr = dotted.rpartition(".")
    assert module.startswith("relpos_core."), dotted
    assert callable(getattr(importlib.import_module(module), attr)), dotted


def test_stages_are_read_from_the_pieces():
    """``registry.stages`` is the one reading of where a scheme puts position (pages and presets use it)."""
    for name in schemes.names():
        term = rp.registry.example_term(name, num_heads=2, head_dim=8, k=4, device="meta")
        assert set(rp.registry.stages(name)) == {p.stage for p in term.all_pieces}
    assert rp.registry.stages("shaw") == ("vector", "output")
    assert rp.registry.stages(rp.schemes.baseline()) == ()
