import pytest
import torch

import relpos_core as rp


@pytest.mark.parametrize("L", [1, 2, 7])
def test_conventions_are_negatives_and_antisymmetric(L):
    kq = rp.relative_offsets(L, convention="key_minus_query")
    qk = rp.relative_offsets(L, convention="query_minus_key")
    assert torch.equal(qk, -kq)
    assert torch.equal(kq.T, -kq)  # antisymmetric
    assert torch.equal(qk, kq.T)
    assert kq.dtype == torch.int64 and kq.shape == (L, L)


def test_entries_are_key_minus_query_with_the_queries_last():
    """The one rule: relative_offsets(3, 5) puts the queries at 2, 3, 4, as rp.attend does."""
    kq = rp.relative_offsets(3, 5)
    for i in range(3):
        for j in range(5):
            assert kq[i, j].item() == j - (i + 2)
    assert rp.relative_offsets(3, 5, query_offset=0).tolist() == [[j - i for j in range(5)] for i in range(3)]
    with pytest.raises(ValueError, match="pass query_offset"):
        rp.relative_offsets(5, 3)  # more queries than keys: they must be placed explicitly


def test_query_offset_places_queries_after_keys():
    # one decoder step with four cached keys: the query sits at position 4
    kq = rp.relative_offsets(1, 5, query_offset=4)
    assert kq.tolist() == [[-4, -3, -2, -1, 0]]


def test_two_token_sign():
    # query at position 1, keys at 0 (before) and 2 (after)
    kq = rp.relative_offsets(3)
    assert kq[1, 0] == -1 and kq[1, 2] == 1
    qk = rp.relative_offsets(3, convention="query_minus_key")
    assert qk[1, 0] == 1 and qk[1, 2] == -1


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(query_len=0), "query_len"),
        (dict(query_len=-3), "query_len"),
        (dict(query_len=2.5), "query_len"),
        (dict(query_len=True), "query_len"),
        (dict(query_len=3, key_len=0), "key_len"),
        (dict(query_len=3, convention="i-j"), "convention"),
        (dict(query_len=3, query_offset=1.0), "query_offset"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, param):
    with pytest.raises(ValueError, match=param):
        rp.relative_offsets(**kwargs)


def test_key_positions_for_a_cache_that_evicted_keys():
    kept = torch.tensor([0, 1, 6, 7, 8])  # positions 2..5 were evicted; the query is at 8
    offsets = rp.relative_offsets(1, convention="query_minus_key", query_offset=8, key_positions=kept)
    assert offsets.tolist() == [[8, 7, 2, 1, 0]]
    full = rp.relative_offsets(9, convention="query_minus_key")
    assert torch.equal(offsets[0], full[8, kept])  # the kept columns of the uncached matrix


@pytest.mark.parametrize(
    "kwargs, param",
    [
        (dict(query_len=1, key_positions=torch.tensor([0.0, 1.0])), "key_positions"),
        (dict(query_len=1, key_positions=torch.tensor([[0, 1]])), "key_positions"),
        (dict(query_len=1, key_len=3, key_positions=torch.tensor([0, 1])), "key_positions"),
    ],
)
def test_bad_key_positions(kwargs, param):
    with pytest.raises(ValueError, match=param):
        rp.relative_offsets(**kwargs)


def test_alibi_and_t5_biases_after_eviction_are_the_kept_columns():
    kept, n = torch.tensor([0, 1, 10, 11, 12]), 12
    alibi_full = rp.schemes.alibi.alibi_bias(8, n + 1)  # (H, L, L)
    alibi_step = rp.schemes.alibi.alibi_bias(8, 1, query_offset=n, key_positions=kept)  # (H, 1, K)
    torch.testing.assert_close(alibi_step[:, 0], alibi_full[:, n, kept])
    table = torch.randn(32, 4)
    t5_full = rp.oracles.t5.t5_bias_from_table(table, n + 1)
    t5_step = rp.oracles.t5.t5_bias_from_table(table, 1, query_offset=n, key_positions=kept)
    torch.testing.assert_close(t5_step[:, 0], t5_full[:, n, kept])
