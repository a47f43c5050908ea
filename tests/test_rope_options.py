"""RoPE's options p-RoPE (``keep_fraction``) and length scaling (``length_scaling``, on NoPE too).

Every (form, backend) of the registry for the option's term is computed and equals the
float64 reference of tests/references/rope.py (written from the papers), or is refused
with the reason the registry gives; Llama 4's temperature equals Hugging Face's
``Llama4TextAttention`` (built from a small random config, float64), a prefill and a
decode step through its cache; a model with the options decodes with a cache equal to
recomputation. FlexAttention runs its eager reference (``compiled=False``).
"""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.kernels import rotary as rot
from relpos_core.kernels.forms import BACKENDS, FORMS
from relpos_core.schemes import none, rope
from tests.references import rope as ref

H, D = 2, 8
SCALINGS = [dict(method="log_length", train_length=3.0), dict(method="ssmax"),
            dict(method="llama4", floor_scale=2.0, attn_scale=0.5)]
S = torch.tensor([0.7, 1.3], dtype=torch.float64)  # ssmax's s per head


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
        return fn()


def _inputs(B, Lq, Lk, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (Lq, Lk, Lk)]


def _every_path(term, want, q, k, v, **call):
    """Every (form, backend): computed and equal to ``want``, or refused with the registry's reason."""
    computed = 0
    for form in FORMS:
        for backend in BACKENDS:
            reason = registry.unsupported_reason(term, form, backend)
            dtype = torch.float32 if backend == "flex" else torch.float64
            cast = [x.to(dtype) for x in (q, k, v)]

            def run():
                return _quiet(lambda: rp.attend(*cast, term, form=form, backend=backend, compiled=False, **call))
            if reason is not None:
                with pytest.raises(ValueError) as err:
                    run()
                assert reason in str(err.value), (form, backend)
                continue
            tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
            torch.testing.assert_close(run().double(), want, **tol)
            computed += 1
    assert computed == 3  # form "none" on eager, sdpa and flex
    return computed


# -- p-RoPE ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keep_fraction,rotary_dim", [(0.25, None), (0.5, None), (0.75, None), (0.5, 6)])
@pytest.mark.parametrize("causal", [True, False])
def test_p_rope_equals_its_reference_on_every_path(keep_fraction, rotary_dim, causal):
    q, k, v = _inputs(2, 3, 5, seed=1)
    term = rope.position_term(keep_fraction=keep_fraction, rotary_dim=rotary_dim)
    kpos = torch.arange(5)
    want = ref.p_rope_reference(q, k, v, kpos[2:], kpos, causal, keep_fraction=keep_fraction, rotary_dim=rotary_dim)
    _every_path(term, want, q, k, v, causal=causal)
    full = ref.p_rope_reference(q, k, v, kpos[2:], kpos, causal, keep_fraction=1.0, rotary_dim=rotary_dim)
    assert (want - full).abs().max() > 1e-3  # the removed frequencies change the result: the test can fail


def test_p_rope_at_explicit_positions():
    q, k, v = _inputs(1, 2, 4, seed=2)
    kpos, qpos = torch.tensor([0, 1, 7, 9]), torch.tensor([8, 9])
    term = rope.position_term(keep_fraction=0.5)
    want = ref.p_rope_reference(q, k, v, qpos, kpos, True, keep_fraction=0.5)
    for backend in ("eager", "sdpa"):
        got = rp.attend(q, k, v, term, backend=backend, causal=True, query_positions=qpos, key_positions=kpos)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_p_rope_and_partial_rotary_turn_at_different_frequencies():
    """rotary_dim = r: the first r dimensions at base^(-2k/r), the whole range re-spaced (GPT-NeoX); p-RoPE
    with p = r/d: the p d/2 highest frequencies of the full head, base^(-2k/d), the rest 0."""
    d, r, base = 16, 8, 10000.0
    partial = rot.inverse_frequencies(rp.terms.Rotary(rotary_dim=r), d, dtype=torch.float64)  # (4,)
    p_rope = rot.inverse_frequencies(rp.terms.Rotary(keep_fraction=r / d), d, dtype=torch.float64)  # (8,)
    torch.testing.assert_close(partial, torch.tensor([base ** (-2 * k / r) for k in range(r // 2)],
                                                     dtype=torch.float64), rtol=1e-15, atol=0)
    torch.testing.assert_close(p_rope, torch.tensor(ref.p_rope_theta(d, r / d), dtype=torch.float64),
                               rtol=1e-15, atol=0)
    assert p_rope[4:].eq(0).all() and p_rope[:4].gt(0).all()
    # partial rotary keeps a low frequency, base^(-(r - 2) / r) = 1e-3; p-RoPE stops at base^(-6 / 16) = 0.032
    assert partial.min() < 2e-3 and p_rope[3] > 3e-2
    # and the rotated dimensions differ: partial rotary leaves dimensions r.. alone, p-RoPE k and k + d/2, k >= 4
    x = torch.randn(1, 1, 1, d, dtype=torch.float64)
    pos = torch.tensor([5])
    still_partial = rot.rotate(x, pos, rp.terms.Rotary(rotary_dim=r)) == x
    still_p = rot.rotate(x, pos, rp.terms.Rotary(keep_fraction=r / d)) == x
    assert still_partial[..., r:].all() and not still_partial[..., :r].any()
    kept = torch.zeros(d, dtype=torch.bool)
    kept[[4, 5, 6, 7, 12, 13, 14, 15]] = True
    assert torch.equal(still_p.flatten(), kept)


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.5, True, "half", float("nan")])
def test_keep_fraction_is_validated_by_name(bad):
    with pytest.raises(ValueError, match="keep_fraction"):
        rope.position_term(keep_fraction=bad)
    with pytest.raises(ValueError, match="keep_fraction"):
        rope.RoPEOptions(keep_fraction=bad)


def test_a_keep_fraction_that_keeps_no_pair_is_refused():
    q, k, v = _inputs(1, 2, 2, seed=0)
    with pytest.raises(ValueError, match="keep_fraction = 0.1 keeps no pair"):
        rp.attend(q, k, v, rope.position_term(keep_fraction=0.1))  # 4 pairs: floor(0.4) = 0
    cfg = rp.models.TransformerConfig(scheme="rope", position=dict(keep_fraction=0.1), vocab_size=8, d_model=16,
                                      num_heads=2, num_layers=1, max_positions=8)
    with pytest.raises(ValueError, match="keep_fraction"):
        rp.models.Transformer(cfg, seed=0)


# -- length scaling ---------------------------------------------------------------------------------------------
def _scaling(spec, dtype=torch.float64):
    spec = dict(spec)
    method = spec.pop("method")
    scaling = rp.pieces.length_scaling.LengthScaling(method, **spec)
    return scaling.with_scale(S.to(dtype)) if method == "ssmax" else scaling


def _ref_kwargs(spec):
    return dict(spec, s=S) if spec["method"] == "ssmax" else dict(spec)


@pytest.mark.parametrize("spec", SCALINGS, ids=lambda s: s["method"])
@pytest.mark.parametrize("scheme", ["rope", "none"])
@pytest.mark.parametrize("causal", [True, False])
def test_length_scaling_equals_its_reference_on_every_path(spec, scheme, causal):
    q, k, v = _inputs(2, 3, 6, seed=3)
    kpos = torch.arange(6)
    want = ref.length_scaled_reference(q, k, v, kpos[3:], kpos, causal, rotate=scheme == "rope", **_ref_kwargs(spec))
    module = rope if scheme == "rope" else none
    term = module.position_term(length_scaling=_scaling(spec))
    _every_path(term, want, q, k, v, causal=causal)
    unscaled = ref.length_scaled_reference(q, k, v, kpos[3:], kpos, causal, rotate=scheme == "rope",
                                           method="llama4", floor_scale=1e9)  # factor 1 everywhere
    assert (want - unscaled).abs().max() > 1e-4  # the factor changes the result: the comparison can fail


@pytest.mark.parametrize("spec", SCALINGS, ids=lambda s: s["method"])
def test_length_scaling_counts_the_kept_keys_at_explicit_positions(spec):
    """After an eviction the query attends the kept keys; Llama 4's factor reads the query's own position."""
    q, k, v = _inputs(1, 2, 5, seed=4)
    kpos, qpos = torch.tensor([0, 1, 6, 7, 9]), torch.tensor([7, 9])
    want = ref.length_scaled_reference(q, k, v, qpos, kpos, True, **_ref_kwargs(spec))
    term = rope.position_term(length_scaling=_scaling(spec))
    for backend in ("eager", "sdpa"):
        got = rp.attend(q, k, v, term, backend=backend, causal=True, query_positions=qpos, key_positions=kpos)
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("window", [1, 2, 3, 6])
@pytest.mark.parametrize("explicit", [False, True])
def test_length_scaling_counts_only_the_keys_inside_a_sliding_window(window, explicit):
    """n is the number of keys the query sees: inside a window of W, at most W (a hybrid model's window layer)."""
    from relpos_core.positions import resolve_positions

    kw = dict(query_positions=torch.tensor([2, 5, 8, 9]), key_positions=torch.tensor([0, 2, 3, 5, 6, 8, 9]))
    pos = resolve_positions(4, 7, **(kw if explicit else {})).with_window(window)
    scaling = _scaling(dict(method="log_length", train_length=3.0))
    n = torch.exp(scaling.factors(pos, causal=True) * math.log(3.0))  # (Lq,) back from log_3(n)
    seen = pos.visible().sum(-1).clamp(min=1).to(torch.float64)  # (Lq,) keys each query attends
    torch.testing.assert_close(n, seen, atol=1e-9, rtol=1e-9)


def test_a_decode_step_gets_its_true_position():
    """Lq = 1 after 9 keys: the query sits at 9 (the last of the keys), not at 0."""
    q, k, v = _inputs(1, 1, 10, seed=5)
    term = none.position_term({"type": "llama4", "floor_scale": 2.0, "attn_scale": 0.5})
    kpos = torch.arange(10)
    want = ref.length_scaled_reference(q, k, v, kpos[9:], kpos, True, rotate=False, method="llama4",
                                       floor_scale=2.0, attn_scale=0.5)
    torch.testing.assert_close(rp.attend(q, k, v, term, causal=True), want, atol=1e-12, rtol=1e-12)
    at_zero = ref.length_scaled_reference(q, k, v, torch.tensor([0]), kpos, False, rotate=False, method="llama4",
                                          floor_scale=2.0, attn_scale=0.5)
    assert (want - at_zero).abs().max() > 1e-3


@pytest.mark.parametrize("bad,match", [({"type": "loglen"}, "length_scaling type"),
                                       ({"type": "log_length", "train_length": 1}, "train_length"),
                                       ({"type": "llama4", "floor_scale": 0}, "floor_scale"),
                                       ({"type": "llama4", "attn_scale": -1}, "attn_scale"),
                                       ({"type": "ssmax", "init": float("inf")}, "init"),
                                       ({"type": "ssmax", "floor_scale": 2}, "unknown"),
                                       ("llama4", "length_scaling must be")])
def test_length_scaling_is_validated_by_name(bad, match):
    with pytest.raises(ValueError, match=match):
        rope.RoPEOptions(length_scaling=bad)
    with pytest.raises(ValueError, match=match):
        none.NoneOptions(length_scaling=bad)


def test_ssmax_needs_its_scale_per_head():
    q, k, v = _inputs(1, 2, 2, seed=0)
    with pytest.raises(ValueError, match="needs its per-head scale s"):
        rp.attend(q, k, v, none.position_term({"type": "ssmax"}))
    with pytest.raises(ValueError, match="has 3 heads, q has H = 2"):
        rp.attend(q, k, v, none.position_term(_scaling(dict(method="ssmax")).with_scale(torch.ones(3))))


# -- Hugging Face's Llama 4 ---------------------------------------------------------------------------------------
def _llama4(floor_scale=2, attn_scale=0.5, L=7):
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama4 import modeling_llama4 as m

    cfg = transformers.Llama4TextConfig(hidden_size=16, num_attention_heads=H, num_key_value_heads=H, head_dim=D,
                                        intermediate_size=32, intermediate_size_mlp=32, num_hidden_layers=1,
                                        vocab_size=32, no_rope_layers=[0], attn_temperature_tuning=True,
                                        floor_scale=floor_scale, attn_scale=attn_scale, use_qk_norm=False,
                                        attention_bias=False, attn_implementation="eager")
    torch.manual_seed(0)
    layer = m.Llama4TextAttention(cfg, layer_idx=0).double().eval()
    assert not layer.use_rope  # a layer without positions: the temperature applies
    x = torch.randn(1, L, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return cfg, layer, x


def _heads(layer, x, proj):
    B, n, _ = x.shape
    return proj(x).view(B, n, H, D).transpose(1, 2)  # (B, H, n, d)


def _causal_mask(Lq, Lk):
    visible = torch.arange(Lk)[None, :] <= torch.arange(Lk - Lq, Lk)[:, None]
    return torch.zeros(1, 1, Lq, Lk, dtype=torch.float64).masked_fill(~visible, float("-inf"))


def test_llama4_temperature_equals_hugging_face_prefill_and_decode_step():
    from transformers import DynamicCache

    cfg, layer, x = _llama4()
    term = none.position_term({"type": "llama4", "floor_scale": cfg.floor_scale, "attn_scale": cfg.attn_scale})

    def ours(xs, keys_from):
        q, k, v = _heads(layer, xs, layer.q_proj), _heads(layer, keys_from, layer.k_proj), \
            _heads(layer, keys_from, layer.v_proj)
        out = rp.attend(q, k, v, term, causal=True)  # (B, H, n, d): queries the last n of the keys
        return layer.o_proj(out.transpose(1, 2).reshape(xs.shape[0], xs.shape[1], -1))

    # Hugging Face forms the factor from positions.float(): float32, so the two agree to float32's rounding of
    # it (measured 6e-8 relative), on float64 activations
    tol = dict(atol=1e-7, rtol=1e-6)
    with torch.no_grad():
        L = x.shape[1]
        hf, _ = layer(x, None, _causal_mask(L, L))
        torch.testing.assert_close(ours(x, x), hf, **tol)
        cache = DynamicCache(config=cfg)
        layer(x[:, :-1], None, _causal_mask(L - 1, L - 1), cache=cache)  # prefill 6 tokens
        step, _ = layer(x[:, -1:], None, None, cache=cache)  # token 7 at position 6
        torch.testing.assert_close(ours(x[:, -1:], x), step, **tol)
        torch.testing.assert_close(step, hf[:, -1:], atol=1e-12, rtol=1e-12)
        plain = rp.attend(_heads(layer, x, layer.q_proj), _heads(layer, x, layer.k_proj),
                          _heads(layer, x, layer.v_proj), rp.terms.NO_POSITION, causal=True)
        plain = layer.o_proj(plain.transpose(1, 2).reshape(1, L, -1))
        assert (plain - hf).abs().max() > 1e-3  # the temperature changes the layer: the comparison can fail


# -- a model with the options decodes with a cache equal to recomputation ----------------------------------------
OPTION_MODELS = [("rope", dict(keep_fraction=0.5)),
                 ("rope", dict(keep_fraction=0.5, length_scaling={"type": "ssmax", "init": 0.8})),
                 ("rope", dict(length_scaling={"type": "log_length", "train_length": 4})),
                 ("none", dict(length_scaling={"type": "llama4", "floor_scale": 2, "attn_scale": 0.5})),
                 ("none", dict(length_scaling={"type": "ssmax"}))]
# RoPE keeps keys rotated or unrotated; NoPE has one layout (None)
DECODE_CASES = [(s, o, layout) for s, o in OPTION_MODELS for layout in
                (("rotated", "unrotated") if s == "rope" else (None,))]


@pytest.mark.parametrize("scheme,position,layout", DECODE_CASES)
def test_a_model_with_the_options_decodes_as_it_recomputes(scheme, position, layout):
    cfg = rp.models.TransformerConfig(scheme=scheme, position=position, vocab_size=32, d_model=16, num_heads=H,
                                      num_layers=2, max_positions=16)
    model = rp.models.Transformer(cfg, seed=3, dtype=torch.float64)
    tokens = torch.randint(0, 32, (2, 8), generator=torch.Generator().manual_seed(0))
    for form, backend in (("none", "eager"), ("none", "sdpa")):
        full = model(tokens, form=form, backend=backend)
        cache = model.new_cache(rope_layout=layout)
        stepped = model.decode(tokens, cache, prefill=3, form=form, backend=backend)
        torch.testing.assert_close(stepped, full, rtol=0, atol=1e-10)
    plain = rp.models.Transformer(rp.models.TransformerConfig(scheme=scheme, vocab_size=32, d_model=16, num_heads=H,
                                                              num_layers=2, max_positions=16), seed=3,
                                  dtype=torch.float64)
    assert (plain(tokens) - full).abs().max() > 1e-4  # the option changes the model: the comparison can fail


# -- the byte count: what the options add is counted within the guard's bound -----------------------------------
@pytest.mark.parametrize("scheme,spec", [("rope", dict(method="llama4")), ("rope", dict(method="ssmax")),
                                         ("none", dict(method="log_length")), ("none", dict(method="ssmax"))],
                         ids=lambda x: x if isinstance(x, str) else x["method"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_the_length_scaling_bytes_are_counted_within_the_bound(scheme, spec, backend):
    from relpos_core.measure import measure_peak_memory
    from relpos_core.measure.analytic import BOUND, peak_bytes

    B, Lq, Lk, d = 2, 24, 37, 16
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, n, d, generator=g) for n in (Lq, Lk, Lk))
    term = (rope if scheme == "rope" else none).position_term(length_scaling=_scaling(spec, torch.float32))
    with torch.no_grad():
        measured = measure_peak_memory(lambda: rp.attend(q, k, v, term, backend=backend, causal=True))
    counted = peak_bytes(term, "none", backend, B=B, H=H, Lq=Lq, Lk=Lk, d=d, causal=True)
    bare = peak_bytes(rp.terms.NO_POSITION if scheme == "none" else rope.position_term(), "none", backend, B=B, H=H,
                      Lq=Lq, Lk=Lk, d=d, causal=True)
    assert measured <= counted <= BOUND * measured, (measured, counted)
    assert counted - bare >= B * H * Lq * d * 4  # the scaled query is counted


@pytest.mark.parametrize("scheme,spec", [("rope", dict(method="llama4")), ("none", dict(method="ssmax")),
                                         ("rope", dict(method="log_length"))],
                         ids=lambda x: x if isinstance(x, str) else x["method"])
@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_the_options_compile_without_a_graph_break(scheme, spec, backend):
    """As every registry path does (tests/test_compile.py): a decode step, p-RoPE with a length scaling."""
    import torch._dynamo as dynamo

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, H, n, D, generator=g) for n in (1, 9, 9))
    extra = dict(keep_fraction=0.5) if scheme == "rope" else {}
    term = (rope if scheme == "rope" else none).position_term(length_scaling=_scaling(spec, torch.float32), **extra)

    def step(q, k, v):
        return rp.attend(q, k, v, term, backend=backend, causal=True, check_finite=False)

    dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        explained = dynamo.explain(step)(q, k, v)
    assert explained.graph_break_count == 0, [str(b.reason).splitlines()[0] for b in explained.break_reasons]
