"""Transformer-XL (Dai et al. 2019): rel_shift, the four terms, the module, the memory.

Convention query_minus_key: the pair (i, j) uses R_{i - j}; keys before the query have a
positive distance. Queries sit at M + i behind M cached states.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.kernels import skew as sk
from relpos_core.schemes import transformer_xl as txl
from tests.references.transformer_xl import transformer_xl_attention_ref, transformer_xl_sinusoid_ref, transformer_xl_terms_ref

F64 = dict(rtol=0, atol=1e-10)
F32 = dict(rtol=1e-5, atol=1e-5)


def _weights(m: txl.RelPartialLearnableAttention):
    w_q, w_k, w_v = m.qkv_net.weight.split(m.config.num_heads * m.config.d_head, dim=0)
    return dict(w_q=w_q, w_k=w_k, w_v=w_v, w_r=m.r_net.weight, w_o=m.o_net.weight, u=m.u, v=m.v)


def _module(d_model=8, H=2, dh=3, mem_len=4, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    m = txl.RelPartialLearnableAttention(txl.TransformerXLConfig(d_model, H, dh, mem_len)).to(dtype)
    with torch.no_grad():  # make the biases large enough that (c) and (d) matter
        m.u.normal_()
        m.v.normal_()
    return m


# --- the sinusoid ----------------------------------------------------------------------------
def test_sinusoid_rows_run_from_far_to_zero():
    R = txl.sinusoidal_relative_encoding(5, 6, dtype=torch.float64)
    assert R.shape == (5, 6)
    for r in range(5):
        torch.testing.assert_close(R[r], transformer_xl_sinusoid_ref(5 - 1 - r, 6), **F64)
    # R_0 = [sin 0 ..., cos 0 ...] = [0, 0, 0, 1, 1, 1] (paper's code: cat([sin, cos]))
    assert R[-1].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]


# --- rel_shift -------------------------------------------------------------------------------
def _paper_rel_shift(x):
    """The paper's code, transcribed: x is (qlen, klen, bsz, n_head)."""
    zero_pad = torch.zeros((x.size(0), 1, *x.size()[2:]), dtype=x.dtype)
    x_padded = torch.cat([zero_pad, x], dim=1)
    x_padded = x_padded.view(x.size(1) + 1, x.size(0), *x.size()[2:])
    return x_padded[1:].view_as(x)


def test_rel_shift_small_explicit_matrices():
    # y[i, j] = x[i, Lq - 1 + j - i] for j <= i + (Lk - Lq), worked out by hand.
    x = torch.arange(9.0).view(3, 3)  # rows: distances 2, 1, 0
    y = sk.rel_shift(x)
    assert [y[0, 0].item()] == [2.0]
    assert [y[1, 0].item(), y[1, 1].item()] == [4.0, 5.0]
    assert y[2].tolist() == [6.0, 7.0, 8.0]
    x = torch.arange(8.0).view(2, 4)  # Lq = 2 queries behind M = 2 cached keys
    y = sk.rel_shift(x)
    assert y[0, :3].tolist() == [1.0, 2.0, 3.0]
    assert y[1].tolist() == [4.0, 5.0, 6.0, 7.0]


@pytest.mark.parametrize("Lq,Lk", [(1, 1), (3, 3), (2, 5), (4, 9)])
def test_rel_shift_is_the_papers_rel_shift(Lq, Lk):
    x = torch.randn(2, 3, Lq, Lk)  # (B, H, Lq, Lk)
    want = _paper_rel_shift(x.permute(2, 3, 0, 1).contiguous()).permute(2, 3, 0, 1)
    assert torch.equal(sk.rel_shift(x), want)  # junk entries included


# --- the four terms ----------------------------------------------------------------------------
@pytest.mark.parametrize("Lq,Lk", [(4, 4), (3, 7), (1, 5)])
@pytest.mark.parametrize("layout", ["LHd", "HLd"])
def test_terms_match_paper_formula(Lq, Lk, layout):
    g = torch.Generator().manual_seed(1)
    B, H, d = 2, 3, 4
    q = torch.randn(B, H, Lq, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, Lk, d, generator=g, dtype=torch.float64)
    r_by_distance = torch.randn(H, Lk, d, generator=g, dtype=torch.float64)  # row p: distance p
    u, v = torch.randn(H, d, generator=g, dtype=torch.float64), torch.randn(H, d, generator=g, dtype=torch.float64)
    r_k = r_by_distance.flip(1)  # (H, Lk, d), row r: distance Lk - 1 - r, as the code orders it
    if layout == "LHd":
        r_k = r_k.transpose(0, 1).contiguous()  # (Lk, H, d)
    got = txl.transformer_xl_terms(q, k, r_k, u, v)
    want = transformer_xl_terms_ref(q, k, r_by_distance, u, v)
    valid = txl.transformer_xl_causal_mask(Lq, Lk)
    assert torch.equal(valid, ~torch.isnan(want["b"][0, 0]))
    for name in "abcd":
        assert got[name].shape == (B, H, Lq, Lk)
        torch.testing.assert_close(got[name][..., valid], want[name][..., valid], **F64)


@pytest.mark.parametrize("mems_len", [0, 3])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, F64), (torch.float32, F32)])
def test_module_logits_and_output_match_reference(mems_len, dtype, tol):
    m = _module(dtype=dtype)
    h = torch.randn(2, 4, 8, dtype=dtype)
    mems = torch.randn(2, mems_len, 8, dtype=dtype) if mems_len else None
    out, new_mems = m(h, mems)
    want_out, want_logits = transformer_xl_attention_ref(h, mems, **_weights(m))
    torch.testing.assert_close(m.attention_logits(h, mems), want_logits.to(dtype), **tol)
    torch.testing.assert_close(out, want_out.to(dtype), **tol)
    cat = h if mems is None else torch.cat([mems, h], 1)
    assert torch.equal(new_mems, cat[:, -4:])


# --- Hugging Face oracle: XLNet's relative attention core is Transformer-XL's ------------
@pytest.fixture(scope="module")
def transformers_version():
    import transformers

    print(f"test_transformer_xl compared against transformers {transformers.__version__}")
    return transformers.__version__


@pytest.mark.parametrize("M", [0, 3])
def test_matches_hf_xlnet_relative_attention(transformers_version, M):
    """XLNet (attn_type="uni") scores (q + r_w_bias) . k + rel_shift((q + r_r_bias) . r) with its
    own sinusoid (distances Lk .. 0, one row more) and its own shift: it must land every
    distance where ours does. We feed it our projections; it supplies R, shift, mask, softmax."""
    from transformers import XLNetConfig, XLNetModel

    d_model, H, dh, L = 8, 2, 4, 4
    torch.manual_seed(0)
    cfg = XLNetConfig(vocab_size=11, d_model=d_model, n_layer=1, n_head=H, d_inner=16, attn_type="uni", dropout=0.0)
    xl = XLNetModel(cfg).eval()
    att = xl.layer[0].rel_attn
    m = _module(d_model=d_model, H=H, dh=dh, mem_len=8, dtype=torch.float32)
    h = torch.randn(2, L, d_model)
    mems = torch.randn(2, M, d_model) if M else None
    with torch.no_grad():
        att.r_w_bias.copy_(m.u)  # u: global content bias
        att.r_r_bias.copy_(m.v)  # v: global position bias
        cat = h if mems is None else torch.cat([mems, h], 1)
        Lk = cat.shape[1]
        q, k, v = m.qkv_net(cat).split(H * dh, -1)  # (B, Lk, H*dh) each

        def to_ibnd(t):  # XLNet's (len, batch, heads, d_head)
            return t.transpose(0, 1).reshape(t.shape[1], t.shape[0], H, dh)

        pos_emb = xl.relative_positional_encoding(L, Lk)  # (Lk + 1, 1, d_model)
        k_r = m.r_net(pos_emb).reshape(Lk + 1, 1, H, dh)
        hidden = (~txl.transformer_xl_causal_mask(L, Lk)).float()[:, :, None, None]  # (i, j, 1, 1)
        vec, prob = att.rel_attn_core(to_ibnd(q[:, -L:]), to_ibnd(k), to_ibnd(v), k_r,
                                      attn_mask=hidden, output_attentions=True)
        probs = torch.softmax(m.attention_logits(h, mems), dim=-1)  # (B, H, L, Lk)
        torch.testing.assert_close(probs, prob.permute(2, 3, 0, 1), **F32)
        v_heads = v.reshape(2, Lk, H, dh).transpose(1, 2)  # (B, H, Lk, dh)
        torch.testing.assert_close(probs @ v_heads, vec.permute(1, 2, 0, 3), **F32)


# --- segment recurrence ----------------------------------------------------------------------------
def test_segments_with_full_memory_equal_one_causal_pass():
    T = 10
    m = _module(mem_len=T)  # keeps every earlier state
    x = torch.randn(2, T, 8, dtype=torch.float64)
    seg_out, mems = txl.run_segments(m, x, segment_len=3)
    one_pass, _ = m(x)
    torch.testing.assert_close(seg_out, one_pass, **F64)
    want, _ = transformer_xl_attention_ref(x, None, **_weights(m))
    torch.testing.assert_close(seg_out, want, **F64)
    assert torch.equal(mems, x)


@pytest.mark.parametrize("mem_len,segment_len", [(3, 4), (5, 2), (0, 3)])
def test_segments_equal_one_pass_over_mems_and_segment(mem_len, segment_len):
    """Segment s equals one pass over [the mem_len states before it; segment s], with the
    causal mask and distances M + i - j: what the memory is supposed to mean."""
    T = 9
    m = _module(mem_len=mem_len, seed=2)
    x = torch.randn(1, T, 8, dtype=torch.float64)
    seg_out, _ = txl.run_segments(m, x, segment_len=segment_len)
    w = _weights(m)
    for s0 in range(0, T, segment_len):
        s1 = min(T, s0 + segment_len)
        mems = x[:, max(0, s0 - mem_len):s0] if mem_len and s0 else None
        want, _ = transformer_xl_attention_ref(x[:, s0:s1], mems, **w)
        torch.testing.assert_close(seg_out[:, s0:s1], want, **F64)


def test_no_gradient_through_mems():
    m = _module(dtype=torch.float32)
    h = torch.randn(1, 3, 8, requires_grad=True)
    mems = torch.randn(1, 2, 8, requires_grad=True)
    out, new_mems = m(h, mems)
    out.sum().backward()
    assert mems.grad is None and h.grad is not None
    assert not new_mems.requires_grad


# --- properties ------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(d=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_two_token_sign(d, seed):
    """Key 0 before query 1 has i - j = +1: the row for distance +1 (row 0 of 2)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 1, 2, d, generator=g, dtype=torch.float64)
    k = torch.randn(1, 1, 2, d, generator=g, dtype=torch.float64)
    u, v = torch.randn(1, d, generator=g, dtype=torch.float64), torch.randn(1, d, generator=g, dtype=torch.float64)
    r_plus1, r_zero = torch.randn(d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    r_k = torch.stack([r_plus1, r_zero])[:, None]  # (Lk=2, H=1, d): distances 1, 0
    t = txl.transformer_xl_terms(q, k, r_k, u, v)
    torch.testing.assert_close(t["b"][0, 0, 1, 0], q[0, 0, 1] @ r_plus1, **F64)
    torch.testing.assert_close(t["d"][0, 0, 1, 0], v[0] @ r_plus1, **F64)
    for i in range(2):
        torch.testing.assert_close(t["b"][0, 0, i, i], q[0, 0, i] @ r_zero, **F64)
    # and the sinusoid itself is odd in the sine half: R_{+1} != R_{-1}
    R = txl.sinusoidal_relative_encoding(2, 2 * d, dtype=torch.float64)
    torch.testing.assert_close(R[0], transformer_xl_sinusoid_ref(1, 2 * d), **F64)
    assert not torch.allclose(R[0], transformer_xl_sinusoid_ref(-1, 2 * d))


@settings(max_examples=5, deadline=None)
@given(shift=st.integers(-1000, 1000), M=st.integers(0, 3), L=st.integers(1, 3))
def test_shift_invariance(shift, M, L):
    """The module never sees absolute positions: the reference at positions shifted by
    any constant gives the same output."""
    m = _module(mem_len=M)
    h = torch.randn(1, L, 8, dtype=torch.float64)
    mems = torch.randn(1, M, 8, dtype=torch.float64) if M else None
    want, _ = transformer_xl_attention_ref(h, mems, **_weights(m), position_shift=shift)
    torch.testing.assert_close(m(h, mems)[0], want, **F64)


# --- validation --------------------------------------------------------------------------------
def test_validation_errors_name_the_parameter():
    with pytest.raises(ValueError, match="key_len"):
        txl.sinusoidal_relative_encoding(0, 4)
    with pytest.raises(ValueError, match="d_model"):
        txl.sinusoidal_relative_encoding(3, 5)
    with pytest.raises(ValueError, match="dtype"):
        txl.sinusoidal_relative_encoding(3, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"^x must"):
        sk.rel_shift(torch.zeros(3))
    with pytest.raises(ValueError, match=r"^x must"):
        sk.rel_shift(torch.zeros(4, 3))  # Lq > Lk
    with pytest.raises(ValueError, match="query_len"):
        txl.transformer_xl_causal_mask(4, 3)
    q, k = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)
    r_k, u, v = torch.randn(5, 2, 4), torch.randn(2, 4), torch.randn(2, 4)
    txl.transformer_xl_terms(q, k, r_k, u, v)  # the valid call
    with pytest.raises(ValueError, match=r"^q must"):
        txl.transformer_xl_terms(q[0], k, r_k, u, v)
    with pytest.raises(ValueError, match=r"^q must"):  # more queries than keys
        txl.transformer_xl_terms(torch.randn(1, 2, 6, 4), k, r_k, u, v)
    with pytest.raises(ValueError, match=r"^k must"):  # head size mismatch
        txl.transformer_xl_terms(q, k[..., :3], r_k, u, v)
    with pytest.raises(ValueError, match="r_k"):
        txl.transformer_xl_terms(q, k, r_k[:4], u, v)  # not Lk rows
    with pytest.raises(ValueError, match="r_k"):
        txl.transformer_xl_terms(q, k, r_k.double(), u, v)  # dtype
    with pytest.raises(ValueError, match="r_k"):  # Lk == H: layout ambiguous
        txl.transformer_xl_terms(torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4), torch.randn(2, 2, 4), u, v)
    with pytest.raises(ValueError, match="r_layout"):
        txl.transformer_xl_terms(q, k, r_k, u, v, r_layout="hld")
    with pytest.raises(ValueError, match=r"^u must"):
        txl.transformer_xl_terms(q, k, r_k, u[:1], v)
    with pytest.raises(ValueError, match=r"^v must"):
        txl.transformer_xl_terms(q, k, r_k, u, v[:, :3])
    with pytest.raises(ValueError, match="d_model"):
        txl.TransformerXLConfig(d_model=7)
    with pytest.raises(ValueError, match="mem_len"):
        txl.TransformerXLConfig(mem_len=-1)
    with pytest.raises(ValueError, match="num_heads"):
        txl.TransformerXLConfig(num_heads=0)
    m = _module(dtype=torch.float32)
    with pytest.raises(ValueError, match=r"^h must"):
        m(torch.randn(1, 3, 6))
    with pytest.raises(ValueError, match="mems"):
        m(torch.randn(1, 3, 8), torch.randn(2, 3, 8))  # batch mismatch
    with pytest.raises(ValueError, match="segment_len"):
        txl.run_segments(m, torch.randn(1, 3, 8), 0)
    with pytest.raises(ValueError, match="module"):
        txl.run_segments(torch.nn.Linear(8, 8), torch.randn(1, 3, 8), 2)


def test_project_shapes_and_distances():
    layer = txl.RelPartialLearnableAttention(txl.TransformerXLConfig(d_model=16, num_heads=2, d_head=4, mem_len=3))
    h, mems = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    cat, q, k, v, r_k = layer.project(h, mems)
    assert cat.shape == (2, 8, 16) and q.shape == (2, 2, 5, 4) and k.shape == v.shape == (2, 2, 8, 4)
    assert r_k.shape == (8, 2, 4)
    R = txl.sinusoidal_relative_encoding(8, 16)  # rows: distances 7 .. 0
    torch.testing.assert_close(r_k, layer.r_net(R).reshape(8, 2, 4))
