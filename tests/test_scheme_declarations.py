"""Every declared scheme is complete: a reference, a sign-convention row, a decoding check, a byte count.

A scheme is one file in ``relpos_core/schemes`` (its ``SCHEME`` declaration) plus one file in
``tests/references``; everything else (the registry, the benchmark's cases, the decoder, the lab,
figure labels) derives from those. These tests fail for a registered name that lacks any of it.
"""
from __future__ import annotations

import dataclasses
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


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_name_has_a_float64_reference(name):
    assert name in CASES, f"{name} has no reference: add tests/references/{schemes.lookup(name).scheme.name}.py"


def test_no_reference_without_a_scheme():
    assert set(CASES) == set(NAMES)


@pytest.mark.parametrize("name", list(schemes.SCHEMES))
def test_every_scheme_has_a_sign_convention_row(name):
    row = schemes.sign_convention(name)
    assert row["paper"] and row["formula"] and row["code"]


@pytest.mark.parametrize("name", NAMES)
def test_every_name_decodes_or_says_why_not(name):
    scheme = schemes.lookup(name).scheme
    if scheme.not_decoded is not None:
        assert len(scheme.not_decoded) > 20 and name in rp.decoding.NOT_DECODED
        with pytest.raises(ValueError, match="not decoded"):
            rp.decoding.decode_paths(name)
    else:
        from tests.test_decoding import DECODED

        assert name in rp.decoding.SCHEMES and name in DECODED  # tests/test_decoding.py runs it


@pytest.mark.parametrize("name", rp.registry.scheme_names())
def test_every_path_has_a_byte_count_and_a_measurement(name):
    from tests.test_memory import MEASURED

    for path in rp.registry.paths(name):
        nbytes = rp.measure.analytic_bytes(name, path.form, path.backend, B=1, H=2, Lq=8, Lk=8, d=8, k=4)
        assert isinstance(nbytes, int) and nbytes > 0
        if path.backend != "flex":  # FlexAttention: a sample of its paths is measured (compiles cost seconds)
            assert (name, path.form, path.backend) in MEASURED  # tests/test_memory.py measures it


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
    if s.distance is not None:
        assert s.distance.name in {f.name for f in dataclasses.fields(s.options)}


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
