"""The sign-convention table: complete, self-consistent, pointing at real code, and agreeing with what
the schemes compute (two-token checks against relpos_core.offsets)."""
import importlib

import pytest
import torch

from relpos_core.offsets import CONVENTIONS, relative_offsets
from relpos_core.schemes import alibi, conventions, rope, t5

EXPECTED = {
    "absolute": "none",
    "shaw": "key_minus_query",
    "music_transformer": "key_minus_query",
    "transformer_xl": "query_minus_key",
    "t5": "key_minus_query",
    "deberta": "query_minus_key",
    "alibi": "query_minus_key",
    "rope": "key_minus_query",
}
FIELDS = {"scheme", "paper", "convention", "formula", "positive_means", "code"}


def test_every_scheme_once_with_the_agreed_convention():
    rows = conventions.SIGN_CONVENTIONS
    assert [r["scheme"] for r in rows].count("t5") == 1
    assert {r["scheme"]: r["convention"] for r in rows} == EXPECTED
    assert len(rows) == len(EXPECTED)
    for r in rows:
        assert set(r) == FIELDS
        assert r["convention"] in (*CONVENTIONS, "none")


@pytest.mark.parametrize("row", conventions.SIGN_CONVENTIONS, ids=lambda r: r["scheme"])
def test_row_is_self_consistent(row):
    conv, formula = row["convention"], row["formula"]
    if conv == "key_minus_query":
        assert row["positive_means"] == "key after the query" and "j - i" in formula and "i - j" not in formula
    elif conv == "query_minus_key":
        assert row["positive_means"] == "key before the query" and "i - j" in formula and "j - i" not in formula
    else:
        assert "i - j" not in formula and "j - i" not in formula


@pytest.mark.parametrize("row", conventions.SIGN_CONVENTIONS, ids=lambda r: r["scheme"])
def test_code_reference_resolves(row):
    module_name, _, attr = row["code"].rpartition(".")
    assert module_name == f"relpos_core.schemes.{row['scheme']}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError:  # written by another helper; checked once that file exists
        pytest.skip(f"{module_name} not written yet")
    assert callable(getattr(module, attr))


def test_offsets_module_agrees_with_positive_means():
    """Query 0, key 1 (the key after the query): +1 in key_minus_query, -1 in query_minus_key."""
    assert int(relative_offsets(2, convention="key_minus_query")[0, 1]) == 1
    assert int(relative_offsets(2, convention="query_minus_key")[0, 1]) == -1


def test_t5_alibi_rope_behave_as_their_rows_say():
    """Query at position 1, keys at 0 (before) and 2 (after)."""
    assert conventions.sign_convention("t5")["convention"] == "key_minus_query"
    buckets = t5.t5_relative_bucket(relative_offsets(1, 3, query_offset=1))[0]  # j - i = -1, 0, +1
    assert buckets.tolist() == [1, 0, 17]  # the key after the query: upper half (16 + 1)

    assert conventions.sign_convention("alibi")["convention"] == "query_minus_key"
    bias = alibi.alibi_bias(1, 1, 3, causal=False, query_offset=1)[0, 0]  # i - j = +1, 0, -1
    torch.testing.assert_close(bias, -alibi.alibi_slopes(1)[0] * torch.tensor([1.0, 0.0, 1.0]))

    assert conventions.sign_convention("rope")["convention"] == "key_minus_query"
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).view(1, 1, 1, 2)  # head_dim 2: theta_0 = 1
    k = torch.tensor([0.0, 1.0], dtype=torch.float64).view(1, 1, 1, 2)
    qi = rope.apply_rope(q, torch.tensor([1]))
    scores = [float((qi * rope.apply_rope(k, torch.tensor([j]))).sum()) for j in (0, 2)]
    # q^T R(j - i) k = -sin(j - i): +sin 1 for the key before, -sin 1 for the key after
    assert scores == pytest.approx([torch.sin(torch.tensor(1.0)).item(), -torch.sin(torch.tensor(1.0)).item()])


def test_markdown_table():
    md = conventions.conventions_table_markdown()
    lines = md.splitlines()
    assert lines[0].startswith("| scheme |") and set(lines[1]) <= set("|-")
    assert len(lines) == 2 + len(conventions.SIGN_CONVENTIONS)
    for row, line in zip(conventions.SIGN_CONVENTIONS, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == row["scheme"] and cells[2] == f"`{row['convention']}`"
        assert len(cells) == 6


def test_sign_convention_validation():
    with pytest.raises(ValueError, match="scheme"):
        conventions.sign_convention("xlnet")
