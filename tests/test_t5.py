"""T5 relative buckets and attention, against Hugging Face transformers (oracle) and the seed's numbers."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.oracles import t5 as t5_oracle
from relpos_core.schemes import t5

transformers = pytest.importorskip("transformers")
from transformers.models.t5 import modeling_t5 as hf_t5  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)
# (num_buckets, max_distance) configurations valid in both modes
CONFIGS = [(32, 128), (16, 64), (8, 20), (64, 256), (12, 40), (6, 10)]


@pytest.fixture(scope="module", autouse=True)
def oracle_version():
    print(f"\n[test_t5] oracle: transformers {transformers.__version__}")


def _hf_bucket(rel, bidirectional, num_buckets, max_distance):
    return hf_t5.T5Attention._relative_position_bucket(
        rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
    )


def _exact_bucket(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The bucket from the formula, in exact integer arithmetic (no floats, no torch).

    Within a direction with n_dir buckets and max_exact = n_dir // 2, a distance d >= max_exact
    lands in max_exact + k for the largest k < n = n_dir - max_exact with
    log(d / max_exact) / log(max_distance / max_exact) * n >= k, i.e.
    d^n * max_exact^k >= max_distance^k * max_exact^n.
    """
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = num_buckets if rel > 0 else 0
        d = abs(rel)
    else:
        d = max(-rel, 0)
    me = num_buckets // 2
    if d < me:
        return offset + d
    n = num_buckets - me
    k = max(k for k in range(n) if d**n * me**k >= max_distance**k * me**n)
    return offset + me + k


# ----------------------------------------------------------------------------- buckets vs HF

@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
def test_bucket_equals_hf(bidirectional, num_buckets, max_distance):
    rel = torch.cat([torch.arange(-600, 601), torch.tensor([-10**6, -4097, -1000, 1000, 4097, 10**6, 2**31 - 1])])
    ours = t5.t5_relative_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    theirs = _hf_bucket(rel, bidirectional, num_buckets, max_distance)
    assert ours.dtype == torch.int64 and ours.shape == rel.shape
    assert torch.equal(ours, theirs)
    # int32 input (HF documents int32) and a 2-D input give the same buckets
    ours32 = t5.t5_relative_bucket(rel.int().view(2, -1), bidirectional=bidirectional, num_buckets=num_buckets,
                                   max_distance=max_distance)
    assert torch.equal(ours32.flatten(), theirs)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
def test_every_bucket_boundary_from_integer_math(bidirectional, num_buckets, max_distance):
    """Every bucket's boundaries, derived independently with Python ints, in both directions."""
    rel = list(range(-3 * max_distance, 3 * max_distance + 1))
    ours = t5.t5_relative_bucket(torch.tensor(rel), bidirectional=bidirectional, num_buckets=num_buckets,
                                 max_distance=max_distance).tolist()
    expected = [_exact_bucket(r, bidirectional, num_buckets, max_distance) for r in rel]
    assert ours == expected
    # every bucket is reached, so every boundary was checked (bidirectional: offset 0 counts as
    # "before", so bucket num_buckets // 2 + 0 is never used)
    unused = {num_buckets // 2} if bidirectional else set()
    assert set(expected) == set(range(num_buckets)) - unused


# ----------------------------------------------------------------------------- the seed's numbers

def _b(d_left, bidirectional=True):
    """Bucket of a key ``d_left`` positions to the LEFT of the query (rel = -d), defaults 32 / 128."""
    return int(t5.t5_relative_bucket(torch.tensor(-d_left), bidirectional=bidirectional))


def _b_right(d_right):
    return int(t5.t5_relative_bucket(torch.tensor(d_right), bidirectional=True))


SEED_BIDIRECTIONAL_LEFT = {
    **{d: d for d in range(8)},  # exact
    **{d: 8 for d in range(8, 12)},
    **{d: 9 for d in range(12, 16)},
    **{d: 10 for d in range(16, 23)},
    **{d: 11 for d in range(23, 32)},
    32: 12, 64: 14, 100: 15, 128: 15, 1000: 15,
}


@pytest.mark.parametrize("d,bucket", sorted(SEED_BIDIRECTIONAL_LEFT.items()))
def test_seed_bidirectional_left_and_right(d, bucket):
    assert _b(d) == bucket
    if d > 0:  # keys to the right get the same numbers plus 16 (offset 0 is "left", bucket 0)
        assert _b_right(d) == bucket + 16


def test_seed_causal():
    assert [_b(d, False) for d in range(16)] == list(range(16))  # offsets 0..15 exact
    assert _b(64, False) == 26
    # keys after the query (masked in a decoder) share bucket 0
    assert int(t5.t5_relative_bucket(torch.tensor(5), bidirectional=False)) == 0


# First distance of every log bucket, derived by hand from the formula (not from the code):
# causal 32/128: bucket 16 + k starts at ceil(16 * 8^(k/16)) = ceil(16 * 2^(3k/16));
# bidirectional 32/128: bucket 8 + k starts at ceil(8 * 16^(k/8)) = ceil(8 * 2^(k/2)).
CAUSAL_FIRST = [16, 19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113]
BIDIRECTIONAL_FIRST = [8, 12, 16, 23, 32, 46, 64, 91]


def test_pinned_first_distance_of_every_bucket():
    assert CAUSAL_FIRST == [math.ceil(16 * 2 ** (3 * k / 16)) for k in range(16)]
    assert BIDIRECTIONAL_FIRST == [math.ceil(8 * 2 ** (k / 2)) for k in range(8)]
    for k, first in enumerate(CAUSAL_FIRST):
        assert _b(first, False) == 16 + k and _b(first - 1, False) == 16 + k - 1
    for k, first in enumerate(BIDIRECTIONAL_FIRST):
        assert _b(first) == 8 + k and _b(first - 1) == 8 + k - 1
        assert _b_right(first) == 24 + k and _b_right(first - 1) == 24 + k - 1


def test_seed_about_127_is_imprecise():
    """The seed says "everything from about 127 on lands in 31": the exact first distance is 113
    (16 * 8^(15/16) = 112.40...), so 113..126 are already in the last causal bucket."""
    assert 16 * 8 ** (15 / 16) == pytest.approx(112.40, abs=0.01)
    assert _b(112, False) == 30
    assert all(_b(d, False) == 31 for d in [113, 120, 126, 127, 128, 1000, 10**6])
    # bidirectional: the last bucket (15 on the left) starts at 91, which is why 100 -> 15
    assert _b(90) == 14 and _b(91) == 15


# ----------------------------------------------------------------------------- properties

bucket_cfg = st.sampled_from(CONFIGS)


@settings(max_examples=25, deadline=None)
@given(cfg=bucket_cfg, bidirectional=st.booleans(), start=st.integers(0, 5000))
def test_monotone_in_distance_and_saturating(cfg, bidirectional, start):
    num_buckets, max_distance = cfg
    d = torch.arange(start, start + 300)
    for sign in ((-1, 1) if bidirectional else (-1,)):
        b = t5.t5_relative_bucket(sign * d, bidirectional=bidirectional, num_buckets=num_buckets,
                                  max_distance=max_distance)
        assert (b[1:] >= b[:-1]).all()  # non-decreasing in |offset| within a direction
        last = (num_buckets // 2 if bidirectional else num_buckets) - 1 + (num_buckets // 2 if sign > 0 else 0)
        assert int(b.max()) <= last
        far = t5.t5_relative_bucket(sign * (d + max_distance), bidirectional=bidirectional,
                                    num_buckets=num_buckets, max_distance=max_distance)
        assert (far == last).all()  # at and beyond max_distance: the last bucket


@settings(max_examples=15, deadline=None)
@given(cfg=bucket_cfg, q=st.integers(1, 500), gap=st.integers(1, 300))
def test_two_token_sign(cfg, q, gap):
    """Keys at q - gap (before) and q + gap (after) a query at q: key_minus_query offsets -gap, +gap."""
    num_buckets, max_distance = cfg
    before, after = q - gap, q + gap
    rel = torch.tensor([before - q, after - q])  # j - i
    b = t5.t5_relative_bucket(rel, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance)
    assert int(b[0]) < num_buckets // 2 <= int(b[1])  # the later key lives in the upper half
    c = t5.t5_relative_bucket(rel, bidirectional=False, num_buckets=num_buckets, max_distance=max_distance)
    assert int(c[1]) == 0 and int(c[0]) == _exact_bucket(-gap, False, num_buckets, max_distance)


def test_causal_attention_ignores_later_key():
    torch.manual_seed(0)
    cfg = t5_oracle.T5Config(d_model=16, d_kv=4, num_heads=2, num_layers=1, d_ff=8, vocab_size=10, causal=True)
    attn = t5_oracle.T5Attention(cfg, has_relative_attention_bias=True).eval()
    x = torch.randn(1, 3, 16)
    y = x.clone()
    y[0, 2] += 5.0  # change only the key after query 1
    out_x, _ = attn(x)
    out_y, _ = attn(y)
    torch.testing.assert_close(out_x[:, :2], out_y[:, :2], **TOL)
    assert not torch.allclose(out_x[:, 2], out_y[:, 2])


@settings(max_examples=15, deadline=None)
@given(shift=st.integers(1, 400), L=st.integers(1, 12), bidirectional=st.booleans())
def test_shift_invariance(shift, L, bidirectional):
    """Queries and keys all moved by `shift` (queries at shift + i among keys 0..shift+L-1): same bias
    on the shifted window, hence the same attention."""
    g = torch.Generator().manual_seed(shift)
    table = torch.randn(32, 3, generator=g)
    base = t5_oracle.t5_bias_from_table(table, L, bidirectional=bidirectional)
    shifted = t5_oracle.t5_bias_from_table(table, L, shift + L, bidirectional=bidirectional, query_offset=shift)
    torch.testing.assert_close(shifted[:, :, shift:], base, rtol=0, atol=0)
    scores = torch.randn(3, L, L, generator=g)
    torch.testing.assert_close((scores + shifted[:, :, shift:]).softmax(-1), (scores + base).softmax(-1), **TOL)


# ----------------------------------------------------------------------------- bias and attention vs HF

def _hf_config(is_decoder, num_buckets=32, max_distance=128, num_layers=1, attn="eager"):
    cfg = hf_t5.T5Config(vocab_size=40, d_model=24, d_kv=6, d_ff=40, num_layers=num_layers, num_heads=4,
                         relative_attention_num_buckets=num_buckets, relative_attention_max_distance=max_distance,
                         dropout_rate=0.0, is_decoder=is_decoder)
    cfg._attn_implementation = attn
    return cfg


def _ours_config(hf_cfg):
    return t5_oracle.T5Config(d_model=hf_cfg.d_model, d_kv=hf_cfg.d_kv, num_heads=hf_cfg.num_heads, d_ff=hf_cfg.d_ff,
                       num_layers=hf_cfg.num_layers, num_buckets=hf_cfg.relative_attention_num_buckets,
                       max_distance=hf_cfg.relative_attention_max_distance, is_decoder=hf_cfg.is_decoder,
                       vocab_size=hf_cfg.vocab_size, layer_norm_eps=hf_cfg.layer_norm_epsilon)


@pytest.mark.parametrize("is_decoder", [False, True])
@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (8, 20)])
@pytest.mark.parametrize("query_len,key_len,offset", [(7, 7, 0), (1, 40, 39), (5, 300, 295), (9, 9, 0)])
def test_bias_equals_hf_compute_bias(is_decoder, num_buckets, max_distance, query_len, key_len, offset):
    torch.manual_seed(1)
    hf = hf_t5.T5Attention(_hf_config(is_decoder, num_buckets, max_distance), has_relative_attention_bias=True,
                           layer_idx=0)
    theirs = hf.compute_bias(query_len, key_len, past_seen_tokens=offset)[0]  # (H, Lq, Lk)
    table = hf.relative_attention_bias.weight.detach()
    ours = t5_oracle.t5_bias_from_table(table, query_len, key_len, bidirectional=not is_decoder,
                                 max_distance=max_distance, query_offset=offset)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    mod = t5_oracle.T5RelativeBias(num_buckets, 4, bidirectional=not is_decoder, max_distance=max_distance)
    mod.load_state_dict(hf.relative_attention_bias.state_dict())
    torch.testing.assert_close(mod.compute_bias(query_len, key_len, query_offset=offset), theirs, rtol=0, atol=0)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_attention_equals_hf(is_decoder):
    torch.manual_seed(2)
    hf_cfg = _hf_config(is_decoder)
    hf = hf_t5.T5Attention(hf_cfg, has_relative_attention_bias=True, layer_idx=0).eval()
    ours = t5_oracle.T5Attention(_ours_config(hf_cfg), has_relative_attention_bias=True).eval()
    ours.load_state_dict(hf.state_dict(), strict=True)
    B, L = 2, 11
    x = torch.randn(B, L, hf_cfg.d_model)
    mask = None
    if is_decoder:  # HF's T5Attention takes the causal mask from its stack; give it the same additive mask
        future = torch.ones(L, L, dtype=torch.bool).triu(1)
        mask = torch.zeros(B, 1, L, L).masked_fill(future, torch.finfo(torch.float32).min)
    with torch.no_grad():
        theirs, hf_bias, _ = hf(x, mask=mask)
        out, bias = ours(x)
        torch.testing.assert_close(out, theirs, **TOL)
        torch.testing.assert_close(bias, hf_bias[0], **TOL)
        # a later layer without a table reuses the first layer's bias
        hf2 = hf_t5.T5Attention(hf_cfg, has_relative_attention_bias=False, layer_idx=1).eval()
        ours2 = t5_oracle.T5Attention(_ours_config(hf_cfg), has_relative_attention_bias=False).eval()
        ours2.load_state_dict(hf2.state_dict(), strict=True)
        assert not hasattr(ours2, "relative_attention_bias")
        torch.testing.assert_close(ours2(x, position_bias=bias)[0], hf2(x, mask=mask, position_bias=hf_bias)[0],
                                   **TOL)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_encoder_stack_loads_hf_state_dict_and_matches(attn):
    torch.manual_seed(3)
    hf_cfg = _hf_config(False, num_layers=3, attn=attn)
    hf = transformers.T5EncoderModel(hf_cfg).eval()
    ours = t5_oracle.T5EncoderStack(_ours_config(hf.config)).eval()
    result = ours.load_state_dict(hf.encoder.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert set(ours.state_dict()) == set(hf.encoder.state_dict())
    # only block 0 owns the table
    assert [hasattr(b.layer[0].SelfAttention, "relative_attention_bias") for b in ours.block] == [True, False, False]
    ids = torch.randint(0, hf_cfg.vocab_size, (2, 13))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, 9:] = 0  # right padding in the second sequence
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(input_ids=ids).last_hidden_state, **TOL)
        torch.testing.assert_close(ours(ids, mask), hf(input_ids=ids, attention_mask=mask).last_hidden_state, **TOL)


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs,param", [
    (dict(num_buckets=31), "num_buckets"),  # odd, bidirectional
    (dict(num_buckets=0), "num_buckets"),
    (dict(num_buckets=2), "num_buckets"),  # max_exact would be 0
    (dict(num_buckets=32, max_distance=8), "max_distance"),  # max_exact = 8: inside the exact range
    (dict(num_buckets=32, max_distance=3), "max_distance"),
    (dict(bidirectional=False, num_buckets=32, max_distance=16), "max_distance"),  # causal max_exact = 16
    (dict(bidirectional=False, num_buckets=1), "num_buckets"),
    (dict(bidirectional="yes"), "bidirectional"),
    (dict(max_distance=128.0), "max_distance"),
])
def test_bucket_validation(kwargs, param):
    with pytest.raises(ValueError, match=param):
        t5.t5_relative_bucket(torch.tensor([0, 1]), **kwargs)


def test_bucket_odd_buckets_fine_when_causal():
    assert int(t5.t5_relative_bucket(torch.tensor(-3), bidirectional=False, num_buckets=7, max_distance=20)) == 3


@pytest.mark.parametrize("bad", [torch.tensor([0.0, 1.0]), torch.tensor([True]), [0, 1]])
def test_bucket_rejects_non_integer_tensor(bad):
    with pytest.raises(ValueError, match="relative_position"):
        t5.t5_relative_bucket(bad)


def test_bias_from_table_validation():
    table = torch.randn(32, 4)
    with pytest.raises(ValueError, match="table"):
        t5_oracle.t5_bias_from_table(table[0], 4)  # wrong rank
    with pytest.raises(ValueError, match="table"):
        t5_oracle.t5_bias_from_table(torch.zeros(32, 4, dtype=torch.long), 4)  # wrong dtype
    with pytest.raises(ValueError, match="num_heads"):
        t5_oracle.t5_bias_from_table(table, 4, num_heads=8)  # head count does not match the table
    with pytest.raises(ValueError, match="num_buckets"):
        t5_oracle.t5_bias_from_table(torch.randn(31, 4), 4)
    with pytest.raises(ValueError, match="max_distance"):
        t5_oracle.t5_bias_from_table(table, 4, max_distance=8)
    with pytest.raises(ValueError, match="query_len"):
        t5_oracle.t5_bias_from_table(table, 0)
    with pytest.raises(ValueError, match="key_len"):
        t5_oracle.t5_bias_from_table(table, 3, -1)
    with pytest.raises(ValueError, match="query_offset"):
        t5_oracle.t5_bias_from_table(table, 3, query_offset=1.5)


def test_config_and_module_validation():
    with pytest.raises(ValueError, match="num_heads"):
        t5_oracle.T5Config(num_heads=0)
    with pytest.raises(ValueError, match="d_model"):
        t5_oracle.T5Config(d_model=-1)
    with pytest.raises(ValueError, match="num_buckets"):
        t5_oracle.T5Config(num_buckets=33)  # odd, encoder
    assert t5_oracle.T5Config(num_buckets=33, causal=True).is_decoder  # odd is fine for a decoder
    with pytest.raises(ValueError, match="max_distance"):
        t5_oracle.T5Config(max_distance=8)
    with pytest.raises(ValueError, match="causal"):
        t5_oracle.T5Config(is_decoder=True, causal=False)
    assert t5_oracle.T5Config(is_decoder=True).causal and t5_oracle.T5Config(causal=True).is_decoder
    with pytest.raises(ValueError, match="num_heads"):
        t5_oracle.T5RelativeBias(32, 0)
    cfg = t5_oracle.T5Config(d_model=8, d_kv=2, num_heads=4, d_ff=8, num_layers=1, vocab_size=5)
    attn = t5_oracle.T5Attention(cfg, True)
    with pytest.raises(ValueError, match="hidden_states"):
        attn(torch.randn(2, 3, 9))
    with pytest.raises(ValueError, match="position_bias"):
        attn(torch.randn(2, 3, 8), position_bias=torch.randn(3, 3, 3))  # 3 heads, config has 4
    with pytest.raises(ValueError, match="attention_mask"):
        attn(torch.randn(2, 3, 8), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="input_ids"):
        t5_oracle.T5EncoderStack(cfg)(torch.randn(2, 3))
