"""Absolute positions: the sinusoidal table from Vaswani et al. (2017), the learned table, and the
contrast with relative schemes (shifting every position changes the attention)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.schemes import absolute

TOL = dict(atol=1e-5, rtol=1e-5)


def _loop_reference(num_positions, dim):
    """PE[p, 2k] = sin(p / 10000^(2k/d)), PE[p, 2k+1] = cos(p / 10000^(2k/d)), with math in float64."""
    out = torch.empty(num_positions, dim, dtype=torch.float64)
    for p in range(num_positions):
        for c in range(dim):
            two_k = c - (c % 2)
            angle = p / 10000 ** (two_k / dim)
            out[p, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return out


@pytest.mark.parametrize("num_positions,dim", [(50, 16), (7, 5), (300, 8), (1, 1)])
def test_sinusoidal_equals_formula(num_positions, dim):
    pe = absolute.sinusoidal_position_embeddings(num_positions, dim)
    assert pe.shape == (num_positions, dim) and pe.dtype == torch.float32
    torch.testing.assert_close(pe.double(), _loop_reference(num_positions, dim), rtol=0, atol=1e-7)


def test_sinusoidal_pinned_values():
    pe = absolute.sinusoidal_position_embeddings(3, 4)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0]  # sin 0, cos 0 in every pair
    torch.testing.assert_close(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]))
    torch.testing.assert_close(pe[2, :2], torch.tensor([math.sin(2), math.cos(2)]))


@settings(max_examples=10, deadline=None)
@given(p=st.integers(0, 400), k=st.integers(0, 100))
def test_sinusoidal_offset_is_a_rotation(p, k):
    """The paper's motivation: PE(p + k) is a fixed linear map (a rotation per pair) of PE(p)."""
    dim = 8
    pe = absolute.sinusoidal_position_embeddings(p + k + 1, dim).double()
    for pair in range(dim // 2):
        w = 1 / 10000 ** (2 * pair / dim)
        c, s = math.cos(k * w), math.sin(k * w)
        sin_p, cos_p = pe[p, 2 * pair], pe[p, 2 * pair + 1]
        assert float(pe[p + k, 2 * pair]) == pytest.approx(float(sin_p * c + cos_p * s), abs=1e-6)
        assert float(pe[p + k, 2 * pair + 1]) == pytest.approx(float(cos_p * c - sin_p * s), abs=1e-6)


def test_learned_embedding_lookup():
    torch.manual_seed(0)
    emb = absolute.LearnedPositionEmbedding(10, 6)
    pos = torch.tensor([[0, 3], [9, 9]])
    torch.testing.assert_close(emb(pos), emb.weight[pos])
    assert emb(pos).shape == (2, 2, 6)


def _manual_attention(module, x, positions):
    """Float64 reference: softmax((x+p)Wq ((x+p)Wk)^T / sqrt(dh)) ((x+p)Wv) Wo, from the definition."""
    cfg = module.config
    H, D = cfg.num_heads, cfg.d_model
    dh = D // H
    table = (absolute.sinusoidal_position_embeddings(cfg.max_positions, D) if cfg.position_embedding == "sinusoidal"
             else module.wpe.weight.detach())
    h = x.double() + table.double()[positions]
    lin = {n: (getattr(module, n).weight.double(), getattr(module, n).bias.double()) for n in "qkvo"}
    proj = {n: h @ lin[n][0].T + lin[n][1] for n in "qkv"}
    B, L, _ = x.shape
    q, k, v = (proj[n].view(B, L, H, dh).transpose(1, 2) for n in "qkv")
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)
    if cfg.causal:
        scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    attn = scores.softmax(-1)
    out = (attn @ v).transpose(1, 2).reshape(B, L, D) @ lin["o"][0].T + lin["o"][1]
    return out, attn


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_equals_manual_reference(kind, causal):
    torch.manual_seed(1)
    cfg = absolute.AbsoluteAttentionConfig(d_model=16, num_heads=2, max_positions=64, position_embedding=kind,
                                           causal=causal)
    module = absolute.AbsoluteSelfAttention(cfg).eval()
    x = torch.randn(2, 5, 16)
    positions = torch.tensor([3, 4, 5, 6, 7])
    with torch.no_grad():
        out, attn = module(x, positions)
    ref_out, ref_attn = _manual_attention(module, x, positions)
    torch.testing.assert_close(out.double(), ref_out, **TOL)
    torch.testing.assert_close(attn.double(), ref_attn, **TOL)


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(1, 200), kind=st.sampled_from(["sinusoidal", "learned"]))
def test_shift_changes_absolute_attention(shift, kind):
    """The contrast with T5/ALiBi/RoPE: the same tokens at positions + shift attend differently."""
    torch.manual_seed(2)
    cfg = absolute.AbsoluteAttentionConfig(d_model=32, num_heads=2, max_positions=256, position_embedding=kind)
    module = absolute.AbsoluteSelfAttention(cfg).eval()
    if kind == "learned":  # make the learned table as large as the sinusoidal one, so position matters
        with torch.no_grad():
            module.wpe.weight.normal_()
    x = torch.randn(1, 6, 32)
    pos = torch.arange(6)
    with torch.no_grad():
        _, attn = module(x, pos)
        _, attn_shifted = module(x, pos + shift)
    assert (attn - attn_shifted).abs().max() > 1e-3


@pytest.mark.parametrize("call,param", [
    (lambda: absolute.sinusoidal_position_embeddings(0, 8), "num_positions"),
    (lambda: absolute.sinusoidal_position_embeddings(4, 0), "dim"),
    (lambda: absolute.LearnedPositionEmbedding(-1, 8), "num_positions"),
    (lambda: absolute.LearnedPositionEmbedding(4, 8)(torch.tensor([4])), "positions"),
    (lambda: absolute.LearnedPositionEmbedding(4, 8)(torch.tensor([-1])), "positions"),
    (lambda: absolute.LearnedPositionEmbedding(4, 8)(torch.tensor([1.0])), "positions"),
    (lambda: absolute.AbsoluteAttentionConfig(d_model=10, num_heads=3), "d_model"),
    (lambda: absolute.AbsoluteAttentionConfig(num_heads=0), "num_heads"),
    (lambda: absolute.AbsoluteAttentionConfig(position_embedding="rope"), "position_embedding"),
    (lambda: absolute.AbsoluteAttentionConfig(causal=None), "causal"),
    (lambda: absolute.AbsoluteSelfAttention(absolute.AbsoluteAttentionConfig(d_model=8, num_heads=2))(
        torch.randn(1, 3, 7)), "x"),
    (lambda: absolute.AbsoluteSelfAttention(absolute.AbsoluteAttentionConfig(d_model=8, num_heads=2))(
        torch.randn(1, 3, 8), torch.arange(4)), "positions"),
    (lambda: absolute.AbsoluteSelfAttention(absolute.AbsoluteAttentionConfig(d_model=8, num_heads=2,
                                                                              max_positions=5))(
        torch.randn(1, 3, 8), torch.tensor([3, 4, 5])), "positions"),
])
def test_validation(call, param):
    with pytest.raises(ValueError, match=param):
        call()
