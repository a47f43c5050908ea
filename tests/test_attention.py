import pytest
import torch
import torch.nn.functional as F

import relpos_core as rp


@pytest.mark.parametrize("causal", [False, True])
def test_matches_torch_sdpa(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, dtype=torch.float64) for _ in range(3))
    bias = torch.randn(3, 5, 5, dtype=torch.float64)
    mask = bias if not causal else bias.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(rp.attention(q, k, v, bias=bias, causal=causal), expected)


def test_weights_rows_sum_to_one_and_causal_zeroes_future():
    q = torch.randn(4, 6)
    w = rp.attention_weights(q, q, causal=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(4))
    assert torch.all(w.triu(1) == 0)


@pytest.mark.parametrize(
    "q, k, param",
    [
        (torch.randn(5), torch.randn(5), "q"),
        (torch.randn(4, 8), torch.randn(4, 7), "k"),
        (torch.randint(0, 3, (4, 8)), torch.randn(4, 8), "q"),
    ],
)
def test_bad_tensors_name_the_parameter(q, k, param):
    with pytest.raises(ValueError, match=param):
        rp.attention_weights(q, k)
