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


def test_entries_are_key_minus_query():
    kq = rp.relative_offsets(3, 5)
    for i in range(3):
        for j in range(5):
            assert kq[i, j].item() == j - i


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
