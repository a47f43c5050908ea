"""DeBERTa: seed facts, HF DeBERTa-v2 as oracle, float64 loop references, properties.

Convention ``query_minus_key`` (i - j) throughout. HF transformers builds random-weight
modules from ``DebertaV2Config`` only (nothing downloaded).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.oracles import deberta as deberta_oracle
from relpos_core.schemes import deberta as db
from tests.references.deberta import ref_c2p_p2c, ref_delta, ref_emd

transformers = pytest.importorskip("transformers")
from transformers import DebertaV2Config  # noqa: E402
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf  # noqa: E402

ATOL = 1e-5  # fp32 tolerance against the oracles


@pytest.fixture(scope="module", autouse=True)
def _oracle_version():
    print(f"test_deberta: compared against transformers {transformers.__version__}")


def _hf_config(D=32, H=4, mrp=16, pb=-1, share=True, pos_att_type=("c2p", "p2c"), **kw):
    return DebertaV2Config(
        hidden_size=D, num_attention_heads=H, intermediate_size=2 * D, num_hidden_layers=2,
        relative_attention=True, max_relative_positions=mrp, position_buckets=pb,
        pos_att_type=list(pos_att_type), share_att_key=share,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=1e-7, **kw,
    )


def _config(D=32, H=4, mrp=16, pb=-1, share=True, pos_att_type=("c2p", "p2c"), **kw):
    return deberta_oracle.DisentangledConfig(
        hidden_size=D, num_heads=H, max_relative_positions=mrp, position_buckets=pb,
        pos_att_type=pos_att_type, share_att_key=share, intermediate_size=2 * D, **kw,
    )


def _padding_mask(B, L):
    m = torch.ones(B, L)
    m[-1, L - L // 3:] = 0  # last sequence padded
    return m, hf.DebertaV2Encoder.get_attention_mask(None, m)  # (B, L), (B, 1, L, L) as HF's encoder


# ----------------------------------------------------------------------------- seed facts


SEED_K = 512  # the seed's default k


@pytest.mark.parametrize(
    "offset, expected",
    [(-SEED_K - 7, 0), (-SEED_K, 0), (-SEED_K + 1, 1), (-1, SEED_K - 1), (0, SEED_K),
     (SEED_K - 1, 2 * SEED_K - 1), (SEED_K, 2 * SEED_K - 1), (SEED_K + 7, 2 * SEED_K - 1)],
)
def test_delta_boundaries_from_seed(offset, expected):
    # seed formula: 0 if i-j <= -k, 2k-1 if i-j >= k, else i-j+k; the seed's code
    # clamp(i-j, -k, k-1) + k agrees at every boundary (this test pins both).
    L = 2 * SEED_K + 8
    delta = db.deberta_delta_index(L, max_relative_positions=SEED_K)
    i, j = (offset, 0) if offset >= 0 else (0, -offset)
    assert delta[i, j].item() == expected == ref_delta(i, j, SEED_K)


def test_delta_table_size_and_formula():
    delta = db.deberta_delta_index(1100, max_relative_positions=SEED_K)
    assert delta.min().item() == 0 and delta.max().item() == 2 * SEED_K - 1
    assert torch.unique(delta).numel() == 2 * SEED_K == 1024  # "2k = 1024 embeddings"
    for k, Lq, Lk in [(1, 4, 4), (3, 9, 5), (5, 6, 14)]:
        d = db.deberta_delta_index(Lq, Lk, max_relative_positions=k, query_offset=0)  # the paper's i, j
        expected = torch.tensor([[ref_delta(i, j, k) for j in range(Lk)] for i in range(Lq)])
        if Lq <= Lk:  # the default: the queries are the last Lq keys
            assert torch.equal(db.deberta_delta_index(Lq, Lk, max_relative_positions=k),
                               db.deberta_delta_index(Lq, Lk, max_relative_positions=k, query_offset=Lk - Lq))
        assert torch.equal(d, expected)


def test_seed_relative_position_matrix():
    seed_6x6 = torch.tensor([
        [0, -1, -2, -3, -4, -5],
        [1, 0, -1, -2, -3, -4],
        [2, 1, 0, -1, -2, -3],
        [3, 2, 1, 0, -1, -2],
        [4, 3, 2, 1, 0, -1],
        [5, 4, 3, 2, 1, 0],
    ])
    assert torch.equal(deberta_oracle.build_relative_position(6), seed_6x6)
    assert db.SIGN_CONVENTION == "query_minus_key"


# ----------------------------------------------------------------------------- HF: offsets


BUCKET_COMBOS = [(-1, -1), (0, 0), (4, 6), (7, 20), (8, 16), (8, 64), (32, 100), (256, 512)]


@pytest.mark.parametrize("bucket_size, max_position", BUCKET_COMBOS)
@pytest.mark.parametrize("L", [1, 5, 17, 300])
def test_build_relative_position_matches_hf(L, bucket_size, max_position):
    x = torch.empty(L, 1)
    expected = hf.build_relative_position(x, x, bucket_size=bucket_size, max_position=max_position)  # (1, L, L)
    got = deberta_oracle.build_relative_position(L, bucket_size=bucket_size, max_position=max_position)
    assert got.dtype == torch.long and torch.equal(got, expected[0])


@pytest.mark.parametrize("bucket_size, max_position", [c for c in BUCKET_COMBOS if c[0] > 0] + [(2, 3), (3, 5), (512, 1024)])
def test_make_log_bucket_position_matches_hf(bucket_size, max_position):
    rel = torch.arange(-3000, 3001)
    expected = hf.make_log_bucket_position(rel, bucket_size, max_position)  # float32 values
    got = db.make_log_bucket_position(rel, bucket_size, max_position)
    assert torch.equal(got, expected.long()) and torch.equal(got.float(), expected)


# ----------------------------------------------------------------------------- c2p / p2c vs loops


@pytest.mark.parametrize("p2c_index", ["code", "paper"])
@pytest.mark.parametrize("layout", ["hsd", "shd"])
@pytest.mark.parametrize("bucketed", [False, True])
def test_c2p_p2c_matches_loop_reference(p2c_index, layout, bucketed):
    torch.manual_seed(0)
    B, H, Lq, Lk, d, S = 2, 3, 5, 9, 4, 3
    q, k = torch.randn(B, H, Lq, d), torch.randn(B, H, Lk, d)
    pos_key, pos_query = torch.randn(H, 2 * S, d), torch.randn(H, 2 * S, d)  # (H, 2S, d)
    rel = deberta_oracle.build_relative_position(Lq, Lk, bucket_size=4, max_position=6) if bucketed else deberta_oracle.build_relative_position(Lq, Lk)
    pk, pq = (pos_key, pos_query) if layout == "hsd" else (pos_key.transpose(0, 1), pos_query.transpose(0, 1))
    c2p, p2c = deberta_oracle.deberta_c2p_p2c(q, k, pk, pq, rel, S, p2c_index=p2c_index)
    r_c2p, r_p2c = ref_c2p_p2c(q, k, pos_key, pos_query, rel, S, p2c_index)
    torch.testing.assert_close(c2p.double(), r_c2p, atol=ATOL, rtol=0)
    torch.testing.assert_close(p2c.double(), r_p2c, atol=ATOL, rtol=0)
    # float64 in, float64 out: agreement to rounding
    c64, p64 = deberta_oracle.deberta_c2p_p2c(q.double(), k.double(), pk.double(), pq.double(), rel, S, p2c_index=p2c_index)
    torch.testing.assert_close(c64, r_c2p)
    torch.testing.assert_close(p64, r_p2c)


def test_tables_index_mapping():
    torch.manual_seed(1)
    B, H, L, d, S = 1, 2, 7, 4, 2
    q, k = torch.randn(B, H, L, d), torch.randn(B, H, L, d)
    pos_key, pos_query = torch.randn(2 * S, H, d), torch.randn(2 * S, H, d)  # (2S, H, d)
    c2p_t, p2c_t = deberta_oracle.deberta_c2p_p2c_tables(q, k, pos_key, pos_query)
    assert c2p_t.shape == (B, H, L, 2 * S) and p2c_t.shape == (B, H, L, 2 * S)
    c2p, p2c = deberta_oracle.deberta_c2p_p2c(q, k, pos_key, pos_query, deberta_oracle.build_relative_position(L), S)
    delta = db.deberta_delta_index(L, max_relative_positions=S)  # the paper's delta(i, j)
    for i in range(L):
        for j in range(L):
            assert torch.equal(c2p[..., i, j], c2p_t[..., i, delta[i, j]])
            assert torch.equal(p2c[..., i, j], p2c_t[..., j, delta[i, j]])  # the code's p2c row


def test_code_and_paper_p2c_are_mirror_images():
    # the two readings of p2c differ only in the row: delta(i, j) vs delta(j, i)
    torch.manual_seed(2)
    H, L, d, S = 2, 6, 4, 8
    k = torch.randn(1, H, L, d)
    pos_query = torch.randn(H, 2 * S, d)
    rel = deberta_oracle.build_relative_position(L)
    _, code = deberta_oracle.deberta_c2p_p2c(k, k, pos_query, pos_query, rel, S, p2c_index="code")
    _, paper = deberta_oracle.deberta_c2p_p2c(k, k, pos_query, pos_query, rel, S, p2c_index="paper")
    _, code_mirrored = deberta_oracle.deberta_c2p_p2c(k, k, pos_query, pos_query, -rel, S, p2c_index="code")
    assert torch.equal(paper, code_mirrored)
    assert not torch.allclose(code, paper)


# ----------------------------------------------------------------------------- HF: modules


def test_hf_config_spells_pos_att_type_as_list():
    assert _hf_config().pos_att_type == ["c2p", "p2c"]
    assert DebertaV2Config(pos_att_type="c2p|p2c").pos_att_type == ["c2p", "p2c"]  # legacy "|" string


ATTN_CASES = [
    (True, -1, ("c2p", "p2c"), 16, 24),
    (True, 0, ("c2p", "p2c"), 16, 24),
    (True, 8, ("c2p", "p2c"), 16, 40),
    (True, 256, ("c2p", "p2c"), 512, 160),
    (False, -1, ("c2p", "p2c"), 16, 24),
    (False, 8, ("c2p", "p2c"), 16, 40),
    (False, 256, ("c2p", "p2c"), 512, 160),
    (False, -1, ("c2p",), 16, 24),
    (False, 8, ("p2c",), 16, 24),
    (True, -1, (), 16, 12),
]


@pytest.mark.parametrize("share, pb, pos_att_type, mrp, L", ATTN_CASES)
def test_disentangled_attention_matches_hf(share, pb, pos_att_type, mrp, L):
    torch.manual_seed(0)
    ref = hf.DisentangledSelfAttention(_hf_config(mrp=mrp, pb=pb, share=share, pos_att_type=pos_att_type)).eval()
    ours = deberta_oracle.DisentangledSelfAttention(_config(mrp=mrp, pb=pb, share=share, pos_att_type=pos_att_type))
    ours.load_state_dict(ref.state_dict())  # strict: parameter names match HF's
    B = 2
    x = torch.randn(B, L, 32)
    rel_emb = torch.randn(2 * ours.config.att_span, 32)
    _, mask4 = _padding_mask(B, L)
    rel = hf.build_relative_position(x, x, bucket_size=pb, max_position=mrp)  # as HF's encoder passes it
    with torch.no_grad():
        expected = ref(x, mask4, relative_pos=rel, rel_embeddings=rel_emb)[0]
        got = ours(x, mask4, rel_emb)
        got_3d = ours(x, mask4[:, 0], rel_emb)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(got_3d, expected, atol=ATOL, rtol=0)
    # a (B, L) mask pads keys only; HF's encoder also blanks padded query rows (m_i * m_j),
    # which changes only those rows
    m2, _ = _padding_mask(B, L)
    with torch.no_grad():
        got_2d = ours(x, m2, rel_emb)
    valid = m2.bool()
    torch.testing.assert_close(got_2d[valid], expected[valid], atol=ATOL, rtol=0)


@pytest.mark.parametrize("pb", [-1, 8])
def test_layer_with_query_states_matches_hf(pb):
    torch.manual_seed(3)
    ref = hf.DebertaV2Layer(_hf_config(pb=pb)).eval()
    ours = deberta_oracle.DisentangledLayer(_config(pb=pb))
    ours.load_state_dict(ref.state_dict())
    B, L = 2, 20
    x, query = torch.randn(B, L, 32), torch.randn(B, L, 32)
    rel_emb = torch.randn(2 * ours.attention["self"].config.att_span, 32)
    _, mask4 = _padding_mask(B, L)
    rel = hf.build_relative_position(x, x, bucket_size=pb, max_position=16)
    with torch.no_grad():
        expected = ref(x, mask4, query_states=query, relative_pos=rel, rel_embeddings=rel_emb)[0]
        got = ours(x, mask4, rel_emb, query_states=query)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("pb", [-1, 8])
def test_encoder_stack_with_shared_relative_embeddings_matches_hf(pb):
    torch.manual_seed(4)
    ref = hf.DebertaV2Encoder(_hf_config(pb=pb, norm_rel_ebd="layer_norm")).eval()
    cfg = _config(pb=pb, norm_rel_ebd=True)
    table = deberta_oracle.RelativeEmbeddings(cfg)
    layers = torch.nn.ModuleList([deberta_oracle.DisentangledLayer(cfg) for _ in range(2)])
    sd = ref.state_dict()
    table.load_state_dict({n: sd[n] for n in ("rel_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")})
    layers.load_state_dict({n[len("layer."):]: t for n, t in sd.items() if n.startswith("layer.")})
    with torch.no_grad():  # HF initialises LayerNorm to (1, 0): perturb so the test sees it
        table.LayerNorm.weight.uniform_(0.5, 1.5)
        table.LayerNorm.bias.normal_()
        ref.LayerNorm.load_state_dict(table.LayerNorm.state_dict())
    B, L = 2, 30
    x = torch.randn(B, L, 32)
    m2, _ = _padding_mask(B, L)
    with torch.no_grad():
        expected = ref(x, m2, output_hidden_states=False).last_hidden_state
        torch.testing.assert_close(table(), ref.get_rel_embedding(), atol=ATOL, rtol=0)
        h, mask4 = x, hf.DebertaV2Encoder.get_attention_mask(None, m2)
        for layer in layers:
            h = layer(h, mask4, table())  # one table, every layer
    torch.testing.assert_close(h, expected, atol=ATOL, rtol=0)


def test_unequal_lengths():
    # query rows are independent: queries = the last Lq tokens (the one rule) give the last Lq rows
    torch.manual_seed(5)
    ours = deberta_oracle.DisentangledSelfAttention(_config(pb=8))
    x = torch.randn(2, 24, 32)
    rel_emb = torch.randn(16, 32)
    with torch.no_grad():
        full = ours(x, None, rel_emb)
        part = ours(x, None, rel_emb, query_states=x[:, -7:])
    torch.testing.assert_close(part, full[:, -7:], atol=ATOL, rtol=0)
    # HF: with c2p only, unequal lengths work; HF puts the queries first (positions 0 .. Lq - 1), so we
    # pass that placement explicitly and agree
    ref = hf.DisentangledSelfAttention(_hf_config(share=False, pos_att_type=("c2p",))).eval()
    ours_c2p = deberta_oracle.DisentangledSelfAttention(_config(share=False, pos_att_type=("c2p",)))
    ours_c2p.load_state_dict(ref.state_dict())
    rel_emb = torch.randn(32, 32)
    q = x[:, :7]
    with torch.no_grad():
        expected = ref(x, torch.ones(2, 1, 7, 24), query_states=q, rel_embeddings=rel_emb)[0]
        got = ours_c2p(x, None, rel_emb, query_states=q,
                       relative_pos=deberta_oracle.build_relative_position(7, 24, query_offset=0))
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)
    # HF 5.24's p2c path builds (Lk, Lk) offsets and fails on Lq != Lk: we document, not copy
    if transformers.__version__.startswith("5.24"):
        ref2 = hf.DisentangledSelfAttention(_hf_config()).eval()
        with pytest.raises(RuntimeError):
            ref2(x, torch.ones(2, 1, 7, 24), query_states=q, rel_embeddings=rel_emb)


# ----------------------------------------------------------------------------- EMD


def _emd(seed=6, mrp=4):
    torch.manual_seed(seed)
    cfg = deberta_oracle.DisentangledConfig(hidden_size=16, num_heads=2, max_relative_positions=mrp, intermediate_size=32,
                                max_position_embeddings=64)
    emd = deberta_oracle.EnhancedMaskDecoder(cfg)
    with torch.no_grad():  # non-trivial LayerNorm and biases
        for name, p in emd.named_parameters():
            if "LayerNorm.weight" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.normal_(std=0.1)
    return cfg, emd


def test_emd_matches_float64_formula():
    cfg, emd = _emd()
    B, L = 2, 7
    x = torch.randn(B, L, 16)
    rel_emb = torch.randn(2 * cfg.att_span, 16)
    m2, mask4 = _padding_mask(B, L)
    pos = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [0, 1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        got = emd(x, mask4, rel_emb, position_ids=pos)
    expected = ref_emd(emd.state_dict(), x, pos, rel_emb, deberta_oracle.build_relative_position(L), cfg.att_span, 2,
                       cfg.layer_norm_eps, mask=mask4[:, 0].bool())
    torch.testing.assert_close(got.double(), expected, atol=ATOL, rtol=0)


@settings(max_examples=10, deadline=None)
@given(shift=st.integers(1, 40), start=st.integers(0, 10))
def test_emd_sees_absolute_positions_relative_layers_do_not(shift, start):
    cfg, emd = _emd()
    layer = deberta_oracle.DisentangledLayer(cfg)
    L = 6
    x = torch.randn(1, L, 16)
    rel_emb = torch.randn(2 * cfg.att_span, 16)
    p = torch.arange(start, start + L)
    with torch.no_grad():
        a = emd(x, None, rel_emb, position_ids=p)
        b = emd(x, None, rel_emb, position_ids=p + shift)
        # relative layer: offsets from the same positions, shifted: i - j unchanged
        r1 = layer(x, None, rel_emb, relative_pos=p[:, None] - p[None, :])
        r2 = layer(x, None, rel_emb, relative_pos=(p + shift)[:, None] - (p + shift)[None, :])
    assert not torch.allclose(a, b, atol=1e-4)
    assert torch.equal(r1, r2)


def test_emd_without_positions_is_the_layer_applied_twice():
    cfg, emd = _emd()
    with torch.no_grad():
        emd.position_embeddings.weight.zero_()
        x = torch.randn(2, 5, 16)
        rel_emb = torch.randn(2 * cfg.att_span, 16)
        once = emd.layer(x, None, rel_emb, query_states=x)
        twice = emd.layer(x, None, rel_emb, query_states=once)
        torch.testing.assert_close(emd(x, None, rel_emb), twice)


# ----------------------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 64), gap=st.integers(1, 200))
def test_two_token_sign(k, gap):
    # query at position gap, key at 0: key BEFORE the query, i - j = gap > 0 -> delta > k
    # (exactly min(gap, k - 1) + k); key after the query -> delta < k (max(-gap, -k) + k).
    delta = db.deberta_delta_index(gap + 1, max_relative_positions=k)
    assert delta[gap, 0].item() == min(gap, k - 1) + k > k
    assert delta[0, gap].item() == max(-gap, -k) + k < k
    assert delta[0, 0].item() == k
    # the same through c2p: K_r[r] = r, q = 1 -> the c2p score is the row index
    rows = torch.arange(2 * k, dtype=torch.float64).view(1, 2 * k, 1)  # (H=1, 2k, d=1)
    q = torch.ones(1, 1, 2, 1, dtype=torch.float64)
    pos = torch.tensor([gap, 0])  # token 0 is the query at position gap, token 1 the key at 0
    c2p, _ = deberta_oracle.deberta_c2p_p2c(q, q, rows, rows, pos[:, None] - pos[None, :], k)
    assert c2p[0, 0, 0, 1] > k > c2p[0, 0, 1, 0]


@settings(max_examples=15, deadline=None)
@given(N=st.integers(4, 24), data=st.data(), S=st.integers(1, 6), bucketed=st.booleans())
def test_scores_shift_invariant(N, data, S, bucketed):
    # scores depend on i - j only: a window [s, s + L) of a longer sequence, computed alone
    # with its own positions 0..L-1, equals the same block of the full computation
    L = data.draw(st.integers(1, N))
    s = data.draw(st.integers(0, N - L))
    g = torch.Generator().manual_seed(N * 100 + s)
    q, k = torch.randn(1, 2, N, 4, generator=g), torch.randn(1, 2, N, 4, generator=g)
    pk, pq = torch.randn(2, 2 * S, 4, generator=g), torch.randn(2, 2 * S, 4, generator=g)
    kw = dict(bucket_size=4, max_position=6) if bucketed else {}
    full = deberta_oracle.deberta_c2p_p2c(q, k, pk, pq, deberta_oracle.build_relative_position(N, **kw), S, pos_layout="hsd")
    win = deberta_oracle.deberta_c2p_p2c(q[..., s:s + L, :], k[..., s:s + L, :], pk, pq, deberta_oracle.build_relative_position(L, **kw), S,
                             pos_layout="hsd")  # (H, 2S, d); explicit because 2S == H happens here
    for f, w in zip(full, win):
        torch.testing.assert_close(f[..., s:s + L, s:s + L], w, atol=1e-6, rtol=1e-6)  # matmul blocking differs


@settings(max_examples=20, deadline=None)
@given(half=st.integers(2, 64), extra=st.integers(2, 600))
def test_log_buckets_monotone_odd_and_saturating(half, extra):
    bucket_size, max_position = 2 * half, half + extra
    r = torch.arange(0, 3 * max_position)
    b = db.make_log_bucket_position(r, bucket_size, max_position)
    assert torch.all(b[1:] >= b[:-1])  # monotone in |offset|
    assert torch.equal(db.make_log_bucket_position(-r, bucket_size, max_position), -b)  # odd
    assert torch.equal(b[: half + 1], r[: half + 1])  # exact near the diagonal
    # saturation: with S = bucket_size rows per side, every |offset| >= max_position - 1
    # lands on the last row 2S - 1 (and the mirror on row 0 is reached too)
    idx = torch.clamp(b + bucket_size, 0, 2 * bucket_size - 1)
    assert torch.all(idx[max_position - 1:] == 2 * bucket_size - 1)
    assert b[max_position - 1].item() in (bucket_size - 1, bucket_size)


# ----------------------------------------------------------------------------- validation


def _attn():
    return deberta_oracle.DisentangledSelfAttention(_config())


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda: db.deberta_delta_index(4, max_relative_positions=0), "max_relative_positions"),
        (lambda: db.deberta_delta_index(0, max_relative_positions=4), "query_len"),
        (lambda: db.deberta_delta_index(3, 0, max_relative_positions=4), "key_len"),
        (lambda: deberta_oracle.build_relative_position(4, bucket_size=8, max_position=-1), "bucket_size"),
        (lambda: deberta_oracle.build_relative_position(4, bucket_size=8, max_position=5), "max_position"),
        (lambda: deberta_oracle.build_relative_position(4, bucket_size=1, max_position=10), "bucket_size"),
        (lambda: db.make_log_bucket_position(torch.zeros(3), 8, 16), "relative_pos"),
        (lambda: db.make_log_bucket_position(torch.zeros(3, dtype=torch.long), -1, -1), "bucket_size"),
        (lambda: deberta_oracle.DisentangledConfig(hidden_size=30, num_heads=4), "num_heads"),
        (lambda: deberta_oracle.DisentangledConfig(max_relative_positions=0), "max_relative_positions"),
        (lambda: deberta_oracle.DisentangledConfig(max_relative_positions=8, position_buckets=16), "max_position"),
        (lambda: deberta_oracle.DisentangledConfig(pos_att_type=("p2p",)), "pos_att_type"),
        (lambda: deberta_oracle.DisentangledConfig(pos_att_type=("c2p", "c2p")), "pos_att_type"),
        (lambda: _attn()(torch.randn(1, 5, 32), None, torch.randn(30, 32)), "rel_embeddings"),
        (lambda: _attn()(torch.randn(1, 5, 32), None, torch.randn(32, 16)), "rel_embeddings"),
        (lambda: _attn()(torch.randn(5, 32), None, torch.randn(32, 32)), "hidden_states"),
        (lambda: _attn()(torch.ones(1, 5, 32, dtype=torch.long), None, torch.randn(32, 32)), "hidden_states"),
        (lambda: _attn()(torch.randn(1, 5, 32), torch.ones(1, 4), torch.randn(32, 32)), "attention_mask"),
        (lambda: _attn()(torch.randn(1, 5, 32), None, torch.randn(32, 32), query_states=torch.randn(2, 5, 32)), "query_states"),
        (lambda: _attn()(torch.randn(1, 5, 32), None, torch.randn(32, 32), relative_pos=torch.zeros(5, 4, dtype=torch.long)), "relative_pos"),
        (lambda: deberta_oracle.deberta_c2p_p2c(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.zeros(3, 3, dtype=torch.long), 0), "att_span"),
        (lambda: deberta_oracle.deberta_c2p_p2c(torch.randn(2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.zeros(3, 3, dtype=torch.long), 3), "q"),
        (lambda: deberta_oracle.deberta_c2p_p2c(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.zeros(3, 3), 3), "relative_pos"),
        (lambda: deberta_oracle.deberta_c2p_p2c(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 8, 4), torch.randn(2, 8, 4), torch.zeros(3, 3, dtype=torch.long), 3), "pos_key"),
        (lambda: deberta_oracle.deberta_c2p_p2c(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.zeros(3, 3, dtype=torch.long), 3, p2c_index="x"), "p2c_index"),
        (lambda: deberta_oracle.deberta_c2p_p2c_tables(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(2, 2, 4), torch.randn(2, 2, 4)), "pos_layout"),
        (lambda: deberta_oracle.deberta_c2p_p2c_tables(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 3, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 4)), "k"),
        (lambda: deberta_oracle.EnhancedMaskDecoder(_config(), num_steps=0), "num_steps"),
        (lambda: deberta_oracle.EnhancedMaskDecoder(_config())(torch.randn(1, 3, 32), None, torch.randn(32, 32), position_ids=torch.tensor([0, 1, 512])), "position_ids"),
    ],
)
def test_validation_names_the_parameter(call, param):
    with pytest.raises(ValueError, match=param):
        call()


@pytest.mark.parametrize("pos_att_type, terms", [(("c2p", "p2c"), 3), (("c2p",), 2), ((), 1)])
def test_scale_is_sqrt_of_d_times_the_number_of_summed_terms(pos_att_type, terms):
    cfg = deberta_oracle.DisentangledConfig(hidden_size=32, num_heads=4, max_relative_positions=8, pos_att_type=pos_att_type)
    layer = deberta_oracle.DisentangledSelfAttention(cfg)
    assert layer.scale == pytest.approx((8 * terms) ** 0.5)  # d_head = 32 / 4 = 8
