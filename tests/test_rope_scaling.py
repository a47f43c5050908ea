"""RoPE past its training length: every scaling against Hugging Face, on every path, in a decoder.

* Inverse frequencies and attention factor of ``relpos_core.kernels.rope_scaling`` equal
  ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (``linear``, ``dynamic``,
  ``yarn``, ``llama3``, ``longrope``; static NTK through ``dynamic`` with factor 1 at
  ``seq_len = s L``) for random configurations built here (hypothesis; nothing downloaded).
* A scaled RoPE term gives the same attention on every kernel path of the registry as a
  float64 construction from those frequencies.
* A decoder with each scaling: cached decoding equals recomputation (the rotated and the
  unrotated cache where a rotated key stays right; dynamic methods, whose frequencies follow
  the sequence, equal the recomputation of each prefix), also with sinks and a window.
* Bad configurations are refused with errors that name the field.
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relpos_core as rp
from relpos_core.kernels import rope_scaling as rs

transformers = pytest.importorskip("transformers")
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

# HF computes in float32: base ** (2k / r) carries ~ ln(base) * 6e-8 of relative error
HF_TOL = dict(rtol=2e-5, atol=0.0)
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, scope="module")
def quiet_transformers():
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its validators warn about fields it does not know
    yield
    hf_logging.set_verbosity(level)


def hf_config(*, head_dim, rotary_dim, base, max_positions, **rope):
    """A Llama config (built locally) whose rope_parameters hold ``rope``."""
    params = dict(rope, rope_theta=float(base))
    if rotary_dim != head_dim:
        params["partial_rotary_factor"] = rotary_dim / head_dim
    return transformers.LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                                    max_position_embeddings=max_positions, rope_parameters=params)


def hf(config, seq_len=None):
    fn = ROPE_INIT_FUNCTIONS[config.rope_parameters["rope_type"]]
    inv, factor = fn(config, torch.device("cpu"), seq_len=seq_len)
    return inv.double(), float(factor)


def check_equal(ours, config, seq_len=None, *, rotary_dim, base, hf_seq_len="same"):
    inv_hf, factor_hf = hf(config, seq_len if hf_seq_len == "same" else hf_seq_len)
    inv = ours.inverse_frequencies(rotary_dim, base, seq_len=seq_len)
    assert inv.dtype == torch.float64 and inv.shape == (rotary_dim // 2,)
    torch.testing.assert_close(inv, inv_hf, **HF_TOL)
    assert math.isclose(ours.attention_factor, factor_hf, rel_tol=1e-12), (ours.attention_factor, factor_hf)


# -- random configurations ---------------------------------------------------------------------
HEADS = st.sampled_from([(16, 16), (32, 32), (64, 64), (128, 128), (64, 32), (128, 64), (32, 8)])  # (d, r)
BASES = st.one_of(st.sampled_from([10000.0, 500000.0, 1e6]), st.floats(50.0, 2e6))
FACTORS = st.floats(1.0, 64.0)
LENGTHS = st.integers(16, 16384)


@SETTINGS
@given(head=HEADS, base=BASES, factor=FACTORS, L=LENGTHS)
def test_linear_equals_hugging_face(head, base, factor, L):
    d, r = head
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=L, rope_type="linear", factor=factor)
    check_equal(rs.LinearScaling(factor), cfg, rotary_dim=r, base=base)


@SETTINGS
@given(head=HEADS, base=BASES, factor=FACTORS, L=LENGTHS, ratio=st.floats(0.0, 8.0))
def test_dynamic_ntk_equals_hugging_face(head, base, factor, L, ratio):
    d, r = head
    seq_len = max(1, int(ratio * L))
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=L, rope_type="dynamic", factor=factor)
    ours = rs.DynamicNTKScaling(factor, L)
    check_equal(ours, cfg, seq_len, rotary_dim=r, base=base)
    check_equal(ours, cfg, None, rotary_dim=r, base=base)  # no length: the trained one
    assert ours.dynamic


@SETTINGS
@given(head=HEADS, base=BASES, factor=st.floats(1.5, 64.0), L=LENGTHS, M=LENGTHS, ratio=st.floats(1.5, 8.0))
def test_dynamic_ntk_reads_hugging_faces_max_position_embeddings_not_the_dicts(head, base, factor, L, M, ratio):
    """Hugging Face's ``dynamic`` takes L from the model's ``max_position_embeddings`` and ignores the
    dict's ``original_max_position_embeddings``; ours takes that field. With the two keys different,
    ours equals Hugging Face only when given the model's ``max_position_embeddings``."""
    if abs(L - M) < 0.2 * max(L, M):
        return  # keys too close for the frequencies to differ beyond HF's float32 tolerance
    d, r = head
    seq_len = int(ratio * max(L, M))  # past both, so both scale
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=M, rope_type="dynamic", factor=factor,
                    original_max_position_embeddings=L)
    assert cfg.rope_parameters["original_max_position_embeddings"] == L != cfg.max_position_embeddings
    check_equal(rs.DynamicNTKScaling(factor, M), cfg, seq_len, rotary_dim=r, base=base)
    from_dict = rs.from_config(dict(rope_type="dynamic", factor=factor, original_max_position_embeddings=L))
    inv_hf, _ = hf(cfg, seq_len)
    assert not torch.allclose(from_dict.inverse_frequencies(r, base, seq_len=seq_len), inv_hf, **HF_TOL)


def test_hugging_face_has_no_static_ntk_type():
    """Static NTK-aware scaling has no ``rope_type`` of its own in Hugging Face (ours is named ``ntk``):
    it is ``dynamic`` with factor 1 read at s L (the next test), or the base raised by hand."""
    assert rs.NTKScaling(4.0).rope_type not in ROPE_INIT_FUNCTIONS
    assert {"linear", "dynamic", "yarn", "llama3", "longrope"} <= set(ROPE_INIT_FUNCTIONS)


@SETTINGS
@given(head=HEADS, base=BASES, factor=FACTORS, L=st.integers(16, 4096))
def test_static_ntk_equals_hugging_face_dynamic_at_s_times_L(head, base, factor, L):
    d, r = head
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=L, rope_type="dynamic", factor=1.0)
    ours = rs.NTKScaling(factor)
    check_equal(ours, cfg, None, rotary_dim=r, base=base, hf_seq_len=factor * L)
    assert not ours.dynamic
    # its lowest frequency is the plain one divided by exactly s, its highest untouched
    ratio = rs.stretch(ours, r, base)
    assert ratio[0] == 1 and math.isclose(ratio[-1], factor, rel_tol=1e-9)


@st.composite
def yarn_fields(draw):
    fields = dict(factor=draw(FACTORS), original_max_position_embeddings=draw(LENGTHS))
    beta_slow = draw(st.floats(0.25, 4.0))
    fields.update(beta_slow=beta_slow, beta_fast=beta_slow + draw(st.floats(0.5, 64.0)))
    fields["truncate"] = draw(st.booleans())
    which = draw(st.sampled_from(["default", "given", "mscale"]))
    if which == "given":
        fields["attention_factor"] = draw(st.floats(0.5, 2.0))
    elif which == "mscale":
        fields.update(mscale=draw(st.floats(0.1, 2.0)), mscale_all_dim=draw(st.floats(0.1, 2.0)))
    return fields


@SETTINGS
@given(head=HEADS, base=BASES, fields=yarn_fields())
def test_yarn_equals_hugging_face(head, base, fields):
    d, r = head
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=fields["original_max_position_embeddings"],
                    rope_type="yarn", **fields)
    check_equal(rs.YaRNScaling(**fields), cfg, rotary_dim=r, base=base)


@SETTINGS
@given(head=HEADS, base=BASES, factor=FACTORS, L=LENGTHS, low=st.floats(0.25, 4.0), gap=st.floats(0.25, 16.0))
def test_llama3_equals_hugging_face(head, base, factor, L, low, gap):
    d, r = head
    fields = dict(factor=factor, original_max_position_embeddings=L, low_freq_factor=low, high_freq_factor=low + gap)
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=L, rope_type="llama3", **fields)
    check_equal(rs.Llama3Scaling(**fields), cfg, rotary_dim=r, base=base)


@SETTINGS
@given(head=HEADS, base=BASES, data=st.data(), L=LENGTHS, ratio=st.floats(0.0, 8.0))
def test_longrope_equals_hugging_face(head, base, data, L, ratio):
    d, r = head
    lists = st.lists(st.floats(1.0, 64.0), min_size=r // 2, max_size=r // 2)
    fields = dict(short_factor=data.draw(lists), long_factor=data.draw(lists), original_max_position_embeddings=L)
    if data.draw(st.booleans()):
        fields["factor"] = data.draw(FACTORS)
    else:
        fields.update(factor=data.draw(FACTORS), attention_factor=data.draw(st.floats(0.5, 2.0)))
    cfg = hf_config(head_dim=d, rotary_dim=r, base=base, max_positions=L, rope_type="longrope", **fields)
    ours = rs.LongRoPEScaling(**fields)
    seq_len = max(1, int(ratio * L))
    check_equal(ours, cfg, seq_len, rotary_dim=r, base=base)  # short up to L, long beyond
    check_equal(ours, cfg, None, rotary_dim=r, base=base)
    assert ours.dynamic


def test_the_chapter_settings_equal_hugging_face():
    """The published settings the chapter uses: Llama 3.1 (factor 8, 8192, 1, 4) and YaRN 4x of 4096."""
    d = r = 128
    llama = dict(factor=8.0, original_max_position_embeddings=8192, low_freq_factor=1.0, high_freq_factor=4.0)
    check_equal(rs.Llama3Scaling(**llama),
                hf_config(head_dim=d, rotary_dim=r, base=500000.0, max_positions=131072, rope_type="llama3",
                          **llama), rotary_dim=r, base=500000.0)
    yarn = dict(factor=4.0, original_max_position_embeddings=4096)
    check_equal(rs.YaRNScaling(**yarn), hf_config(head_dim=d, rotary_dim=r, base=10000.0, max_positions=16384,
                                                 rope_type="yarn", **yarn), rotary_dim=r, base=10000.0)


# -- what each method leaves alone ---------------------------------------------------------------
def test_where_each_method_interpolates():
    r, base, s, L = 128, 10000.0, 8.0, 4096
    plain = rs.wavelengths(r, base)
    linear = rs.stretch(rs.LinearScaling(s), r, base)
    assert torch.allclose(linear, torch.full_like(linear, s))  # every pair
    yarn = rs.YaRNScaling(s, L)
    stretch = rs.stretch(yarn, r, base)
    short = plain < L / yarn.beta_fast  # more than 32 turns inside L: untouched
    long = plain > L / yarn.beta_slow  # less than one turn: fully interpolated
    assert short.any() and long.any()
    torch.testing.assert_close(stretch[short], torch.ones(int(short.sum()), dtype=torch.float64))
    torch.testing.assert_close(stretch[long], torch.full((int(long.sum()),), s, dtype=torch.float64))
    llama = rs.stretch(rs.Llama3Scaling(s, L), r, base)
    assert torch.all(llama[plain < L / 4] == 1) and torch.allclose(llama[plain > L], torch.tensor(s).double())


# -- every RoPE path -----------------------------------------------------------------------------
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 3.0},
    "ntk": {"rope_type": "ntk", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4, "beta_fast": 4.0,
             "beta_slow": 0.5},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": 8, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0, 1.5, 2.0, 4.0], "long_factor": [1.0, 2.0, 4.0, 8.0],
                 "original_max_position_embeddings": 4, "factor": 4.0},
}


def _reference_attention(q, k, v, scaling, qpos, kpos, causal):
    """float64 from the frequencies alone: rotate-half rotation times the attention factor, softmax."""
    scaling = rs.from_config(scaling)
    d = q.shape[-1]
    seq_len = max(int(kpos.max()), int(qpos.max())) + 1 if scaling.dynamic else None  # HF: largest position + 1
    inv = scaling.inverse_frequencies(d, 10000.0, seq_len=seq_len)  # (d/2,)
    a = scaling.attention_factor

    def turn(x, pos):
        ang = pos.double()[:, None] * inv  # (L, d/2)
        cos, sin = torch.cat([ang.cos()] * 2, -1) * a, torch.cat([ang.sin()] * 2, -1) * a
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    s = turn(q, qpos) @ turn(k, kpos).transpose(-1, -2) / math.sqrt(d)  # (B, H, Lq, Lk)
    if causal:
        s = s.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    return s.softmax(-1) @ v


def _paths():
    return [(p.form, p.backend) for p in rp.registry.paths("rope")]


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("path", _paths(), ids=lambda p: "-".join(p))
def test_every_rope_path_uses_the_scaling(name, path):
    form, backend = path
    g = torch.Generator().manual_seed(5)
    dtype = torch.float32 if backend == "flex" else torch.float64
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (3, 12, 12))
    term = rp.schemes.rope.position_term(scaling=SCALINGS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
        out = rp.attend(q.to(dtype), k.to(dtype), v.to(dtype), term, form=form, backend=backend, causal=True,
                        compiled=False)
    ref = _reference_attention(q, k, v, SCALINGS[name], torch.arange(9, 12), torch.arange(12), True)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.double(), ref, **tol)
    plain = rp.attend(q, k, v, rp.schemes.rope.position_term(), causal=True)
    assert (plain - ref).abs().max() > 1e-3  # the scaling changed the result


# -- a decoder with each scaling --------------------------------------------------------------
T, VOCAB = 12, 32


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _model(name, layers=2):
    cfg = rp.models.TransformerConfig("rope", position={"scaling": SCALINGS[name]}, vocab_size=VOCAB, d_model=16,
                                      num_heads=2, num_layers=layers, max_positions=32)
    return rp.models.Transformer(cfg, seed=3, dtype=torch.float64)


def _tokens(n=T):
    return torch.randint(0, VOCAB, (2, n), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", list(SCALINGS))
def test_cached_decoding_equals_recomputation(name):
    """Every token recomputed from scratch at the step it is decoded (``recompute`` with a window
    that evicts nothing: each row attends over the tokens up to it, at their positions)."""
    model, tokens = _model(name), _tokens()
    dynamic = rs.from_config(SCALINGS[name]).dynamic
    stepwise = model.recompute(tokens, window=T)  # no state kept between rows
    if dynamic:
        with pytest.raises(ValueError, match="rope_layout='rotated' cannot be used"):
            model.new_cache(rope_layout="rotated")
        assert model.new_cache().rope_layout == "unrotated"  # the default follows
    else:
        torch.testing.assert_close(model(tokens), stepwise, rtol=0, atol=1e-10)  # one forward pass
    for layout in ["unrotated"] if dynamic else ["rotated", "unrotated"]:
        stepped = model.decode(tokens, model.new_cache(rope_layout=layout), prefill=1)
        torch.testing.assert_close(stepped, stepwise, rtol=0, atol=1e-10)
    plain = rp.models.Transformer(rp.models.TransformerConfig(
        "rope", vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=2, max_positions=32), seed=3,
        dtype=torch.float64)
    assert (plain(tokens) - stepwise).abs().max() > 1e-3  # the scaling is in effect


@pytest.mark.parametrize("name", [n for n in SCALINGS if rs.from_config(SCALINGS[n]).dynamic])
def test_a_dynamic_scaling_is_not_causal_in_the_length(name):
    """With a dynamic scaling one forward pass over T tokens computes every earlier token with the
    frequencies of length T: one layer still equals the prefix recomputed (unrotated keys), but a
    deeper layer's keys and values were cached at the frequencies of their own step."""
    tokens = _tokens()
    one = _model(name, layers=1)
    prefixes = torch.cat([one(tokens[:, : t + 1])[:, -1:] for t in range(T)], dim=1)  # (B, T, V)
    torch.testing.assert_close(one.decode(tokens, one.new_cache(), prefill=1), prefixes, rtol=0, atol=1e-10)
    two = _model(name, layers=2)
    prefixes = torch.cat([two(tokens[:, : t + 1])[:, -1:] for t in range(T)], dim=1)
    stepped = two.decode(tokens, two.new_cache(), prefill=1)
    L = rs.from_config(SCALINGS[name]).original_max_position_embeddings
    torch.testing.assert_close(stepped[:, :L], prefixes[:, :L], rtol=0, atol=1e-10)  # within L: the same
    assert (stepped[:, L:] - prefixes[:, L:]).abs().max() > 1e-4  # beyond L they part


@pytest.mark.parametrize("name", [n for n in SCALINGS if rs.from_config(SCALINGS[n]).dynamic])
def test_a_dynamic_scaling_reads_the_largest_query_position(name):
    """A query placed after every key: the sequence is as long as that query (Hugging Face's seq_len is the
    largest position + 1), so LongRoPE uses its long factors there, not the short ones of the keys' length."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g, dtype=torch.float64) for n in (1, 3, 3))
    qpos, kpos = torch.tensor([20]), torch.arange(3)  # keys within the training length 4, the query far beyond
    term = rp.schemes.rope.position_term(scaling=rs.from_config(SCALINGS[name]))
    out = rp.attend(q, k, v, term, form="none", backend="eager", causal=True, query_positions=qpos,
                    key_positions=kpos)
    torch.testing.assert_close(out, _reference_attention(q, k, v, SCALINGS[name], qpos, kpos, True), rtol=0,
                               atol=1e-12)


@pytest.mark.parametrize("frame", ["cache", "original"])
@pytest.mark.parametrize("name", list(SCALINGS))
def test_sinks_and_window_equal_recomputation(name, frame):
    model, tokens = _model(name), _tokens(14)
    dynamic = rs.from_config(SCALINGS[name]).dynamic
    recomputed = model.recompute(tokens, sinks=2, window=5, positions=frame)
    for layout in ["unrotated"] if dynamic else ["rotated", "unrotated"]:
        cache = model.new_cache(sinks=2, window=5, positions=frame, rope_layout=layout)
        stepped = model.decode(tokens, cache, prefill=1)
        torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
        assert len(cache) == 7 and cache.evicted == 14 - 7


def test_the_cache_signature_tells_scalings_apart():
    a, b = _model("linear"), _model("yarn")
    with pytest.raises(ValueError, match="cache was made for another model"):
        b(_tokens(2), a.new_cache())


# -- bad configurations --------------------------------------------------------------------------
@pytest.mark.parametrize("spec,match", [
    # hostile inputs (issue 25): an OverflowError, a silent disagreement, an unbounded factor, a wrong type
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 2**1100}, r"integer >= 2 and <= 2\*\*40"),
    ({"rope_type": "linear", "factor": 2**1100}, "factor must be a finite real number"),
    ({"rope_type": "linear", "factor": 1e308}, r"factor must be a finite real number >= 1 and <= 1e\+06"),
    ({"rope_type": "linear", "type": "dynamic", "factor": 2}, "rope_type 'linear' and type 'dynamic' disagree"),
    ({"rope_type": "longrope", "short_factor": torch.ones(2), "long_factor": [1, 2], "factor": 2,
      "original_max_position_embeddings": 64}, "short_factor must be a list or tuple of positive numbers.*Tensor"),
    ({"rope_type": "longrope", "short_factor": {"a": 1}, "long_factor": [1, 2], "factor": 2,
      "original_max_position_embeddings": 64}, "short_factor must be a list or tuple.*dict"),
    ({"rope_type": "longrope", "short_factor": [1, 2], "long_factor": [1, 2, 3], "factor": 2,
      "original_max_position_embeddings": 64}, r"long_factor must have one entry per rotated pair, as short_factor"),
    ({"rope_type": "cubic", "factor": 2}, "rope_type must be one of"),
    ({"factor": 2}, "rope_type must be one of"),
    ({"rope_type": "linear"}, r"needs the field\(s\) \['factor'\]"),
    ({"rope_type": "linear", "factor": 0.5}, "factor must be a finite real number >= 1"),
    ({"rope_type": "linear", "factor": float("nan")}, "factor must be a finite real number"),
    ({"rope_type": "linear", "factor": 2, "beta_fast": 3}, r"has no field\(s\) \['beta_fast'\]"),
    ({"rope_type": "yarn", "factor": 2}, "original_max_position_embeddings"),
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 1}, "integer >= 2"),
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 64, "beta_fast": 1, "beta_slow": 2},
     "beta_fast must be greater than beta_slow"),
    ({"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 64, "truncate": "yes"},
     "truncate must be True or False"),
    ({"rope_type": "llama3", "factor": 8, "original_max_position_embeddings": 64, "low_freq_factor": 4,
      "high_freq_factor": 1}, "high_freq_factor must be greater than low_freq_factor"),
    ({"rope_type": "longrope", "short_factor": [1, 2], "long_factor": [1, 2], "original_max_position_embeddings": 64},
     "give factor"),
    ({"rope_type": "longrope", "short_factor": [1, -2], "long_factor": [1, 2], "original_max_position_embeddings": 64,
      "factor": 2}, r"short_factor\[1\] must be a finite real number > 0"),
    ({"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 64, "rope_theta": 1e6},
     "rope_theta.*RoPE's base option"),
    ("yarn", "scaling must be None, a dict"),
])
def test_bad_scalings_are_refused_naming_the_field(spec, match):
    with pytest.raises(ValueError, match=match):
        rp.schemes.rope.RoPEOptions(scaling=spec)


def test_sizes_the_scaling_cannot_serve_are_refused_when_the_model_is_built():
    # (a long_factor of another length than short_factor is refused earlier, by the scaling itself)
    spec = {"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 3,
            "original_max_position_embeddings": 8, "factor": 2}
    with pytest.raises(ValueError, match=r"_factor must have one entry per rotated pair, rotary_dim / 2 = 4"):
        _ = rp.models.Transformer(rp.models.TransformerConfig("rope", position={"scaling": spec}, d_model=16,
                                                              num_heads=2))
    with pytest.raises(ValueError, match="needs rotary_dim >= 4"):
        rp.models.Transformer(rp.models.TransformerConfig("rope", position={"scaling": {"rope_type": "ntk",
                                                                                         "factor": 2}},
                                                          d_model=4, num_heads=2))


def test_from_config_round_trips_and_default_means_none():
    assert rs.from_config({"rope_type": "default"}) is None
    for spec in SCALINGS.values():
        obj = rs.from_config(spec)
        assert rs.from_config(obj.to_dict()) == obj and rs.from_config(obj) is obj
    legacy = rs.from_config({"type": "linear", "factor": 2})  # Hugging Face's older key
    assert legacy == rs.LinearScaling(2.0)


def test_a_trained_model_takes_a_scaling_at_evaluation():
    """The lab's path: train without scaling, then evaluate the same weights with one (RoPE owns
    no parameters, so the state dict loads unchanged into the scaled model)."""
    trained = _model("linear")  # any: rebuilt below without scaling
    plain = rp.models.Transformer(rp.models.TransformerConfig(
        "rope", vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=2, max_positions=32), seed=7,
        dtype=torch.float64)
    tokens = _tokens()
    for name in SCALINGS:
        scaled = _model(name)
        scaled.load_state_dict(plain.state_dict(), strict=True)
        out = scaled(tokens)
        if name == "dynamic":  # up to its training length, dynamic NTK is plain RoPE
            torch.testing.assert_close(scaled(tokens[:, :4]), plain(tokens[:, :4]), rtol=0, atol=1e-12)
        assert (out - plain(tokens)).abs().max() > 1e-4
    assert trained.state_dict().keys() == plain.state_dict().keys()


@pytest.mark.parametrize("name", list(SCALINGS))
def test_a_window_without_sinks_at_original_positions_equals_recomputation(name):
    """sinks=0, window=3, positions="original": after the first eviction the kept keys sit at 11 .. 13, and
    with the new token 4 positions fit the training length 4 only if renumbered: the dynamic scalings read
    the true ones (LongRoPE's long factors, dynamic NTK's base), so decoding must pass them (issue 25 S1:
    the cache called them contiguous, LongRoPE was off by 2.7)."""
    model, tokens = _model(name), _tokens(14)
    dynamic = rs.from_config(SCALINGS[name]).dynamic
    recomputed = model.recompute(tokens, sinks=0, window=3, positions="original")
    for layout in ["unrotated"] if dynamic else ["rotated", "unrotated"]:
        cache = model.new_cache(sinks=0, window=3, positions="original", rope_layout=layout)
        stepped = model.decode(tokens, cache, prefill=1)
        torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
        assert cache.positions.tolist() == [11, 12, 13]
