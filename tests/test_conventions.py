"""The sign-convention table: built from the declarations, complete, self-consistent, pointing at real
code, and agreeing with what the schemes compute (two-token checks against relpos_core.offsets)."""
import importlib

import pytest
import torch

import relpos_core as rp
from relpos_core.offsets import CONVENTIONS, relative_offsets
from relpos_core.schemes import alibi, conventions, rope, t5

ROWS = rp.schemes.SIGN_CONVENTIONS


def test_one_row_per_declared_scheme():
    assert [r["scheme"] for r in ROWS] == list(rp.schemes.SCHEMES)
    for r in ROWS:
        assert set(r) == set(conventions.FIELDS)
        assert r["convention"] in (*CONVENTIONS, "none")
        assert r["convention"] == rp.schemes.SCHEMES[r["scheme"]].convention


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["scheme"])
def test_row_is_self_consistent(row):
    conv = row["convention"]
    formula = row["formula"].replace("p_j", "j").replace("p_i", "i")  # offsets of drawn positions
    if conv == "key_minus_query":
        assert row["positive_means"] == "key after the query" and "j - i" in formula and "i - j" not in formula
    elif conv == "query_minus_key":
        assert row["positive_means"] == "key before the query" and "i - j" in formula and "j - i" not in formula
    else:
        assert "i - j" not in formula and "j - i" not in formula


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r["scheme"])
def test_code_reference_resolves(row):
    module_name, _, attr = row["code"].rpartition(".")
    assert module_name.startswith("relpos_core.")
    assert callable(getattr(importlib.import_module(module_name), attr))


def test_a_variant_has_its_schemes_row():
    assert rp.schemes.sign_convention("shaw_key") == rp.schemes.sign_convention("shaw")
    with pytest.raises(ValueError, match="scheme must be one of"):
        rp.schemes.sign_convention("xlnet")


def test_offsets_module_agrees_with_positive_means():
    """Query 0, key 1 (the key after the query): +1 in key_minus_query, -1 in query_minus_key."""
    assert int(relative_offsets(2, convention="key_minus_query")[0, 1]) == 1
    assert int(relative_offsets(2, convention="query_minus_key")[0, 1]) == -1


def test_t5_alibi_rope_behave_as_their_rows_say():
    """Query at position 1, keys at 0 (before) and 2 (after)."""
    assert rp.schemes.sign_convention("t5")["convention"] == "key_minus_query"
    buckets = t5.t5_relative_bucket(relative_offsets(1, 3, query_offset=1))[0]  # j - i = -1, 0, +1
    assert buckets.tolist() == [1, 0, 17]  # the key after the query: upper half (16 + 1)

    assert rp.schemes.sign_convention("alibi")["convention"] == "query_minus_key"
    bias = alibi.alibi_bias(1, 1, 3, symmetric=False, query_offset=1)[0, 0]  # i - j = +1, 0, -1
    torch.testing.assert_close(bias, -alibi.alibi_slopes(1)[0] * torch.tensor([1.0, 0.0, -1.0]))

    assert rp.schemes.sign_convention("rope")["convention"] == "key_minus_query"
    q = torch.tensor([1.0, 0.0], dtype=torch.float64).view(1, 1, 1, 2)  # head_dim 2: theta_0 = 1
    k = torch.tensor([0.0, 1.0], dtype=torch.float64).view(1, 1, 1, 2)
    qi = rope.apply_rope(q, torch.tensor([1]))
    scores = [float((qi * rope.apply_rope(k, torch.tensor([j]))).sum()) for j in (0, 2)]
    # q^T R(j - i) k = -sin(j - i): +sin 1 for the key before, -sin 1 for the key after
    assert scores == pytest.approx([torch.sin(torch.tensor(1.0)).item(), -torch.sin(torch.tensor(1.0)).item()])


def test_markdown_table():
    md = rp.schemes.conventions_table_markdown()
    lines = md.splitlines()
    assert lines[0].startswith("| scheme |") and set(lines[1]) <= set("|-")
    assert len(lines) == 2 + len(ROWS)
    for row, line in zip(ROWS, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == row["scheme"] and cells[2] == f"`{row['convention']}`"
        assert cells[3] == f"${row['formula']}$"
