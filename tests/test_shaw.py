"""Shaw et al. (2018) against float64 loop references and the Hugging Face oracle.

Convention key_minus_query: the pair (i, j) uses table row clip(j - i, -k, k) + k.
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.schemes import shaw
from tests.references.shaw import bert_relative_attention_ref, shaw_attention_ref, shaw_clip_ref

F64 = dict(rtol=0, atol=1e-10)
F32 = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module", autouse=True)
def _oracle_version():
    import transformers

    print(f"test_shaw compared against transformers {transformers.__version__}")


def _qkv(B, H, Lq, Lk, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Lq, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, Lk, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, Lk, d, generator=g, dtype=dtype)
    return q, k, v


def _tables(kmax, d, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2 * kmax + 1, d, generator=g, dtype=dtype),
            torch.randn(2 * kmax + 1, d, generator=g, dtype=dtype))


# --- the index ----------------------------------------------------------------------------
@pytest.mark.parametrize("Lq,Lk,kmax,offset", [(5, 5, 1, 0), (5, 5, 2, 0), (4, 7, 3, 3), (3, 6, 9, -2)])
def test_relative_index_is_clipped_key_minus_query(Lq, Lk, kmax, offset):
    idx = shaw.shaw_relative_index(Lq, Lk, max_relative_position=kmax, query_offset=offset)
    want = torch.tensor([[shaw_clip_ref(j - (offset + i), kmax) for j in range(Lk)] for i in range(Lq)])
    assert idx.dtype == torch.int64 and idx.shape == (Lq, Lk)
    assert torch.equal(idx, want)
    assert idx.min() >= 0 and idx.max() <= 2 * kmax


# --- attention equals the paper's equations ---------------------------------------------------
@pytest.mark.parametrize("use_key,use_value", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kmax", [1, 2, 6])  # 6 >= L: no clipping at all
def test_shaw_attention_matches_loop_reference(use_key, use_value, causal, kmax):
    L, d = 5, 4
    q, k, v = _qkv(2, 2, L, L, d)
    a_k, a_v = _tables(kmax, d)
    a_k, a_v = (a_k if use_key else None), (a_v if use_value else None)
    got = shaw.shaw_attention(q, k, v, rel_key=a_k, rel_value=a_v, max_relative_position=kmax, causal=causal)
    want = shaw_attention_ref(q, k, v, a_k, a_v, kmax, causal=causal)
    torch.testing.assert_close(got, want, **F64)


def test_shaw_attention_kv_cache_layout_float32():
    """Lq < Lk with the queries at the end of the keys (query_offset = Lk - Lq), float32."""
    Lq, Lk, d, kmax = 3, 7, 8, 2
    q, k, v = _qkv(1, 3, Lq, Lk, d, dtype=torch.float32)
    a_k, a_v = _tables(kmax, d, dtype=torch.float32)
    got = shaw.shaw_attention(q, k, v, rel_key=a_k, rel_value=a_v, max_relative_position=kmax,
                              causal=True, query_offset=Lk - Lq)
    want = shaw_attention_ref(q, k, v, a_k, a_v, kmax, causal=True, query_positions=range(Lk - Lq, Lk))
    torch.testing.assert_close(got, want.float(), **F32)


def test_shaw_self_attention_module_matches_reference():
    torch.manual_seed(0)
    cfg = shaw.ShawConfig(d_model=8, num_heads=2, max_relative_position=2, causal=True)
    m = shaw.ShawSelfAttention(cfg).double()
    with torch.no_grad():
        m.rel_key.normal_()
        m.rel_value.normal_()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    B, L, H, hd = 2, 5, 2, 4
    split = lambda t: t.view(B, L, H, hd).transpose(1, 2)  # noqa: E731
    z = shaw_attention_ref(split(m.q_proj(x)), split(m.k_proj(x)), split(m.v_proj(x)),
                           m.rel_key, m.rel_value, 2, causal=True)
    want = m.o_proj(z.transpose(1, 2).reshape(B, L, H * hd))
    torch.testing.assert_close(m(x), want, **F64)


# --- BERT relative_key / relative_key_query (transformers < 5), as a loop reference ----------
@pytest.mark.parametrize("L,M", [(5, 5), (4, 7)])
def test_bert_relative_key_is_shaw_key_term_with_flipped_table(L, M):
    """BERT reads D[i - j + M - 1]; Shaw reads a_K[j - i + k]. With k = M - 1 (2k + 1 =
    2M - 1 rows, no clipping since L <= M) the tables correspond by a flip: a_K = D[::-1]."""
    d = 4
    q, k, v = _qkv(1, 2, L, L, d, seed=3)
    D = torch.randn(2 * M - 1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    want = bert_relative_attention_ref(q, k, v, D, M, "relative_key")
    got = shaw.shaw_attention(q, k, v, rel_key=D.flip(0), max_relative_position=M - 1)
    torch.testing.assert_close(got, want, **F64)
    # The sign test: feeding BERT's table unflipped is the i - j vs j - i mix-up.
    wrong = shaw.shaw_attention(q, k, v, rel_key=D, max_relative_position=M - 1)
    assert (wrong - want).abs().max() > 1e-3


def test_bert_relative_key_query_from_shaw_logits():
    """relative_key_query adds k_j . D[i - j + M - 1]: Shaw's position logit with the roles of
    query and key swapped (offset i - j, so the unflipped table), transposed."""
    L, M, d = 5, 6, 4
    q, k, v = _qkv(2, 2, L, L, d, seed=5)
    D = torch.randn(2 * M - 1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    want = bert_relative_attention_ref(q, k, v, D, M, "relative_key_query")
    qside = shaw.shaw_relative_logits(q, D.flip(0), max_relative_position=M - 1)  # q_i . D[i - j + M - 1]
    kside = shaw.shaw_relative_logits(k, D, max_relative_position=M - 1).transpose(-2, -1)  # k_j . D[i - j + M - 1]
    logits = (q @ k.transpose(-2, -1) + qside + kside) / d**0.5
    torch.testing.assert_close(torch.softmax(logits, -1) @ v, want, **F64)


# --- Hugging Face oracle: Wav2Vec2-BERT "relative_key" is Shaw's key term -----------------
def test_matches_hf_wav2vec2_bert_relative_key():
    """transformers 5 keeps Shaw's key term in Wav2Vec2BertSelfAttention (clip j - i to
    [-left, right], row + left). With left = right = k it is ShawSelfAttention(use_value=False)."""
    from transformers import Wav2Vec2BertConfig
    from transformers.models.wav2vec2_bert.modeling_wav2vec2_bert import Wav2Vec2BertSelfAttention

    kmax, d_model, H = 3, 16, 4
    hf_cfg = Wav2Vec2BertConfig(hidden_size=d_model, num_attention_heads=H, position_embeddings_type="relative_key",
                                left_max_position_embeddings=kmax, right_max_position_embeddings=kmax,
                                attention_dropout=0.0)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = Wav2Vec2BertSelfAttention(hf_cfg).eval()
    ours = shaw.ShawSelfAttention(shaw.ShawConfig(d_model, H, kmax, use_key=True, use_value=False)).eval()
    with torch.no_grad():
        for a, b in [("q_proj", "linear_q"), ("k_proj", "linear_k"), ("v_proj", "linear_v"), ("o_proj", "linear_out")]:
            getattr(ours, a).weight.copy_(getattr(hf, b).weight)
            getattr(ours, a).bias.copy_(getattr(hf, b).bias)
        ours.rel_key.copy_(hf.distance_embedding.weight)
    x = torch.randn(2, 9, d_model)  # L = 9 > 2k + 1: clipping is exercised
    torch.testing.assert_close(ours(x), hf(x)[0], **F32)


# --- properties -------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None)
@given(kmax=st.integers(1, 5), d=st.integers(1, 6))
def test_two_token_sign(kmax, d):
    """Query 1 looking at key 0 (the key before it) must use row k - 1 (j - i = -1)."""
    q = torch.ones(1, 1, 2, d, dtype=torch.float64)
    k = torch.zeros(1, 1, 2, d, dtype=torch.float64)
    v = torch.eye(2, dtype=torch.float64)[:, :1].expand(2, d).reshape(1, 1, 2, d).clone()  # v_0 = 1, v_1 = 0
    a_k = torch.zeros(2 * kmax + 1, d, dtype=torch.float64)
    a_k[kmax - 1] = 50.0 / d**0.5  # only "one step back" is attractive
    out = shaw.shaw_attention(q, k, v, rel_key=a_k, max_relative_position=kmax)
    assert out[0, 0, 1, 0] > 0.999  # query 1 took key 0
    assert abs(out[0, 0, 0, 0] - 0.5) < 1e-12  # query 0 sees key 1 at +1: row k + 1 is zero, uniform
    a_v = torch.zeros(2 * kmax + 1, d, dtype=torch.float64)
    a_v[kmax - 1] = 1.0
    out = shaw.shaw_attention(q, k, torch.zeros_like(k), rel_value=a_v, max_relative_position=kmax)
    torch.testing.assert_close(out[0, 0, 1], torch.full((d,), 0.5, dtype=torch.float64), **F64)
    torch.testing.assert_close(out[0, 0, 0], torch.zeros(d, dtype=torch.float64), **F64)


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(-50, 50), kmax=st.integers(1, 4), Lq=st.integers(1, 4), extra=st.integers(0, 3),
       causal=st.booleans())
def test_shift_invariance(shift, kmax, Lq, extra, causal):
    """Moving every position by the same constant changes nothing: the reference, fed
    absolute positions shifted by `shift`, equals shaw_attention with only query_offset."""
    Lk = Lq + extra
    q, k, v = _qkv(1, 2, Lq, Lk, 3, seed=7)
    a_k, a_v = _tables(kmax, 3)
    got = shaw.shaw_attention(q, k, v, rel_key=a_k, rel_value=a_v, max_relative_position=kmax,
                              causal=causal, query_offset=extra)
    want = shaw_attention_ref(q, k, v, a_k, a_v, kmax, causal=causal,
                              query_positions=[shift + extra + i for i in range(Lq)],
                              key_positions=[shift + j for j in range(Lk)])
    torch.testing.assert_close(got, want, **F64)
    idx = shaw.shaw_relative_index(Lq, Lk, max_relative_position=kmax, query_offset=extra)
    assert torch.equal(idx, shaw.shaw_relative_index(Lq, Lk + shift + 60, max_relative_position=kmax,
                                                     query_offset=extra + shift + 60)[:, shift + 60:])


# --- validation -------------------------------------------------------------------------------
def test_validation_errors_name_the_parameter():
    q, k, v = _qkv(1, 2, 4, 4, 3)
    a_k, a_v = _tables(2, 3)
    ok = dict(rel_key=a_k, rel_value=a_v, max_relative_position=2)
    with pytest.raises(ValueError, match="max_relative_position"):
        shaw.shaw_attention(q, k, v, rel_key=a_k, max_relative_position=0)
    with pytest.raises(ValueError, match="max_relative_position"):
        shaw.shaw_relative_index(4, max_relative_position=-1)
    with pytest.raises(ValueError, match="query_len"):
        shaw.shaw_relative_index(0, max_relative_position=1)
    with pytest.raises(ValueError, match="key_len"):
        shaw.shaw_relative_index(3, 0, max_relative_position=1)
    with pytest.raises(ValueError, match="query_offset"):
        shaw.shaw_relative_index(3, max_relative_position=1, query_offset=1.5)
    with pytest.raises(ValueError, match="rel_key"):  # rows != 2k + 1
        shaw.shaw_attention(q, k, v, rel_key=a_k[:-1], max_relative_position=2)
    with pytest.raises(ValueError, match="rel_value"):
        shaw.shaw_attention(q, k, v, rel_value=torch.zeros(7, 3, dtype=torch.float64), max_relative_position=2)
    with pytest.raises(ValueError, match="rel_key"):  # head size mismatch
        shaw.shaw_attention(q, k, v, rel_key=torch.zeros(5, 4, dtype=torch.float64), max_relative_position=2)
    with pytest.raises(ValueError, match="rel_key"):  # dtype
        shaw.shaw_attention(q, k, v, rel_key=a_k.float(), max_relative_position=2)
    with pytest.raises(ValueError, match="rel_value"):  # rank
        shaw.shaw_attention(q, k, v, rel_value=a_v[None], max_relative_position=2)
    with pytest.raises(ValueError, match=r"^q must"):
        shaw.shaw_attention(q[0], k, v, **ok)
    with pytest.raises(ValueError, match=r"^q must"):
        shaw.shaw_attention(q.long(), k, v, **ok)
    with pytest.raises(ValueError, match=r"^k must"):  # head size mismatch
        shaw.shaw_attention(q, k[..., :2], v, **ok)
    with pytest.raises(ValueError, match=r"^v must"):
        shaw.shaw_attention(q, k, v[:, :, :3], **ok)
    with pytest.raises(ValueError, match="causal"):
        shaw.shaw_attention(q, k, v, causal="yes", **ok)
    early = shaw.shaw_attention(q, k, v, causal=True, query_offset=-1, **ok)  # query 0 at -1 sees no key
    assert torch.equal(early[:, :, 0], torch.zeros_like(early[:, :, 0])) and torch.isfinite(early).all()
    with pytest.raises(ValueError, match="d_model"):
        shaw.ShawConfig(d_model=10, num_heads=4)
    with pytest.raises(ValueError, match="max_relative_position"):
        shaw.ShawConfig(max_relative_position=0)
    with pytest.raises(ValueError, match=r"^x must"):
        shaw.ShawSelfAttention(shaw.ShawConfig(d_model=8, num_heads=2))(torch.zeros(1, 3, 6))
