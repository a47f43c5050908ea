"""RoPE against Llama's rotary embedding (transformers, oracle) and a float64 2x2-rotation loop."""
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relpos_core.schemes import rope
import relpos_core as rp

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama as hf_llama  # noqa: E402

TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module", autouse=True)
def oracle_version():
    print(f"\n[test_rope] oracle: transformers {transformers.__version__}")


def _llama_rotary(head_dim, base):
    cfg = transformers.LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                                   rope_parameters={"rope_type": "default", "rope_theta": base})
    return hf_llama.LlamaRotaryEmbedding(cfg)


POSITIONS = {
    "arange": torch.arange(12),
    "gappy": torch.tensor([0, 3, 4, 10, 57, 58, 200, 1023]),
    "far": torch.arange(4090, 4100),
}


@pytest.mark.parametrize("head_dim,base", [(16, 10000.0), (64, 10000.0), (8, 500000.0), (2, 100.0)])
@pytest.mark.parametrize("which", list(POSITIONS))
def test_rotate_half_equals_llama(head_dim, base, which):
    torch.manual_seed(head_dim)
    pos = POSITIONS[which]
    L = len(pos)
    q, k = torch.randn(2, 3, L, head_dim), torch.randn(2, 3, L, head_dim)
    cos, sin = _llama_rotary(head_dim, base)(q, pos[None])  # (1, L, d)
    ours_cos, ours_sin = rope.rope_cos_sin(pos, head_dim, base=base)
    # Hugging Face forms its angles in float32 (error up to position x 2**-23 rad); ours are formed in
    # float64, so they equal the exact angles to float32 rounding and HF's within HF's own error
    hf_tol = dict(rtol=0, atol=TOL["atol"] + 4 * int(pos.max()) * 2.0**-23)
    exact = pos[:, None].double() * base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    exact = torch.cat([exact, exact], dim=-1)  # (L, d) rotate-half layout
    torch.testing.assert_close(ours_cos.double(), exact.cos(), rtol=0, atol=2e-7)
    torch.testing.assert_close(ours_sin.double(), exact.sin(), rtol=0, atol=2e-7)
    torch.testing.assert_close(ours_cos, cos[0], **hf_tol)
    torch.testing.assert_close(ours_sin, sin[0], **hf_tol)
    q_hf, k_hf = hf_llama.apply_rotary_pos_emb(q, k, cos, sin)
    hf_tol["atol"] *= 8  # q and k of size about 4 (randn)
    torch.testing.assert_close(rope.apply_rope(q, pos, base=base), q_hf, **hf_tol)
    torch.testing.assert_close(rope.apply_rope(k, pos, base=base), k_hf, **hf_tol)
    # batched (B, L) positions broadcast the same way
    torch.testing.assert_close(rope.apply_rope(q, pos[None].expand(2, L), base=base), q_hf, **hf_tol)
    if which == "arange":
        torch.testing.assert_close(rope.apply_rope(q, base=base), q_hf, **hf_tol)  # default positions


def _interleaved_loop(x, positions, base):
    """The paper's form: pair (2k, 2k+1) rotated by position * base^(-2k/d), float64, one 2x2 matrix at a time."""
    x = x.double()
    out = torch.empty_like(x)
    d = x.shape[-1]
    for t, p in enumerate(positions.tolist()):
        for k in range(d // 2):
            a = p * base ** (-2 * k / d)
            R = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
            out[..., t, 2 * k: 2 * k + 2] = x[..., t, 2 * k: 2 * k + 2] @ R.T
    return out


@pytest.mark.parametrize("head_dim,base", [(8, 10000.0), (6, 10000.0), (4, 50.0)])
def test_interleaved_equals_rotation_loop(head_dim, base):
    torch.manual_seed(7)
    pos = torch.tensor([0, 1, 2, 5, 17, 100, 511])
    x = torch.randn(2, 2, len(pos), head_dim)
    ref = _interleaved_loop(x, pos, base)
    torch.testing.assert_close(rope.apply_rope(x, pos, base=base, pairing="interleaved").double(), ref, **TOL)
    torch.testing.assert_close(rope.apply_rope(x.double(), pos, base=base, pairing="interleaved"), ref,
                               rtol=1e-12, atol=1e-12)


def test_pairings_are_a_permutation_of_each_other():
    """rotate_half on a de-interleaved vector equals interleaved on the original (same maths, other order)."""
    torch.manual_seed(8)
    d = 8
    x = torch.randn(1, 2, 5, d, dtype=torch.float64)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # interleaved -> halves
    a = rope.apply_rope(x, pairing="interleaved")
    b = rope.apply_rope(x[..., perm], pairing="rotate_half")
    torch.testing.assert_close(a[..., perm], b, rtol=1e-12, atol=1e-12)


def _score(q, k, m, n, pairing):
    """q at position m, k at position n: (R_m q) . (R_n k). q, k: (d,) float64."""
    qm = rope.apply_rope(q.view(1, 1, 1, -1), torch.tensor([m]), pairing=pairing)
    kn = rope.apply_rope(k.view(1, 1, 1, -1), torch.tensor([n]), pairing=pairing)
    return float((qm * kn).sum())


@settings(max_examples=25, deadline=None)
@given(m=st.integers(0, 2000), n=st.integers(0, 2000), shift=st.integers(-1000, 3000),
       pairing=st.sampled_from(rope.PAIRINGS), seed=st.integers(0, 10**6))
def test_score_depends_only_on_offset(m, n, shift, pairing, seed):
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 16, generator=g, dtype=torch.float64)
    shift = max(shift, -min(m, n))  # keep positions >= 0
    assert _score(q, k, m, n, pairing) == pytest.approx(_score(q, k, m + shift, n + shift, pairing), abs=1e-9)


@settings(max_examples=20, deadline=None)
@given(i=st.integers(1, 500), gap=st.integers(1, 50), pairing=st.sampled_from(rope.PAIRINGS))
def test_two_token_sign(i, gap, pairing):
    """Query at i, keys at i - gap (before) and i + gap (after). key_minus_query: the score is
    q^T R((j - i) theta) k with R the counter-clockwise 2x2 rotation. With q = (1, 0) and k = (0, 1)
    in pair 0 (theta_0 = 1) that is -sin(j - i): positive for the key before, negative after."""
    d = 8
    q = torch.zeros(d, dtype=torch.float64)
    k = torch.zeros(d, dtype=torch.float64)
    first, second = (0, d // 2) if pairing == "rotate_half" else (0, 1)  # the two dims of pair 0
    q[first] = 1.0
    k[second] = 1.0
    for j in (i - gap, i + gap):
        a = (j - i) * 1.0
        R = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        expected = float(torch.tensor([1.0, 0.0], dtype=torch.float64) @ R @ torch.tensor([0.0, 1.0],
                                                                                       dtype=torch.float64))
        assert _score(q, k, i, j, pairing) == pytest.approx(expected, abs=1e-9)
        assert _score(q, k, i, j, pairing) == pytest.approx(-math.sin(j - i), abs=1e-9)
    if math.sin(gap) != 0:  # before and after are told apart: opposite signs
        assert _score(q, k, i, i - gap, pairing) == pytest.approx(-_score(q, k, i, i + gap, pairing), abs=1e-9)


@settings(max_examples=15, deadline=None)
@given(shift=st.integers(1, 5000), L=st.integers(1, 10), pairing=st.sampled_from(rope.PAIRINGS))
def test_shift_invariance_of_attention(shift, L, pairing):
    g = torch.Generator().manual_seed(shift)
    q, k = torch.randn(2, 1, 2, L, 16, generator=g, dtype=torch.float64)
    pos = torch.arange(L)

    def attention(p):
        return (rope.apply_rope(q, p, pairing=pairing) @ rope.apply_rope(k, p, pairing=pairing).transpose(-2, -1)
                ).softmax(-1)

    torch.testing.assert_close(attention(pos + shift), attention(pos), rtol=1e-9, atol=1e-9)


def test_rotation_preserves_norm_and_position_zero_is_identity():
    torch.manual_seed(9)
    x = torch.randn(2, 3, 6, 8)
    for pairing in rope.PAIRINGS:
        torch.testing.assert_close(rope.apply_rope(x, torch.zeros(6, dtype=torch.long), pairing=pairing), x)
        torch.testing.assert_close(rope.apply_rope(x, pairing=pairing).norm(dim=-1), x.norm(dim=-1), **TOL)


@pytest.mark.parametrize("call,param", [
    (lambda: rope.rope_cos_sin(torch.arange(4), 7), "head_dim"),
    (lambda: rope.rope_cos_sin(torch.arange(4), 0), "head_dim"),
    (lambda: rope.rope_cos_sin(torch.arange(4.0), 8), "positions"),
    (lambda: rope.rope_cos_sin(torch.zeros(2, 2, 2, dtype=torch.long), 8), "positions"),
    (lambda: rope.rope_cos_sin(torch.arange(4), 8, base=0.0), "base"),
    (lambda: rope.rope_cos_sin(torch.arange(4), 8, base=-5), "base"),
    (lambda: rope.rope_cos_sin(torch.arange(4), 8, dtype=torch.int64), "dtype"),
    (lambda: rope.apply_rope(torch.randn(2, 3, 4, 7)), "head_dim"),
    (lambda: rope.apply_rope(torch.randn(3, 4, 8)), "x"),
    (lambda: rope.apply_rope(torch.arange(64).view(1, 2, 4, 8)), "x"),
    (lambda: rope.apply_rope(torch.randn(1, 2, 4, 8), pairing="gptj"), "pairing"),
    (lambda: rope.apply_rope(torch.randn(1, 2, 4, 8), torch.arange(5)), "positions"),
    (lambda: rope.apply_rope(torch.randn(1, 2, 4, 8), torch.arange(4.0)), "positions"),
    (lambda: rope.apply_rope(torch.randn(2, 2, 4, 8), torch.zeros(3, 4, dtype=torch.long)), "positions"),
    (lambda: rope.apply_rope(torch.randn(1, 2, 4, 8), base="big"), "base"),
])
def test_validation(call, param):
    with pytest.raises(ValueError, match=param):
        call()


def _rope_float64_reference(q, k, v, qpos, kpos, term):
    return rp.attend(q.double(), k.double(), v.double(), term, form="none", backend="eager", causal=True,
                     query_positions=qpos, key_positions=kpos)


@pytest.mark.parametrize("scheme", ["rope", "xpos"])
@pytest.mark.parametrize("start", [10**4, 10**6, 10**7, 2**31])
def test_angles_are_formed_in_float64_at_far_positions(scheme, start):
    """A float32 call at a far position equals the float64 one: the angles (position x theta) are formed
    in float64 and reduced (cos, sin) before the cast, not formed in float32 (error 0.1 at 1e7 before)."""
    term = rp.registry.example_term(scheme, num_heads=1, head_dim=64, k=None)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, 64, generator=g) for n in (1, 4, 4))
    kpos = torch.arange(start, start + 4)
    out = rp.attend(q, k, v, term, form="none", backend="eager", causal=True, query_positions=kpos[-1:],
                    key_positions=kpos)
    ref = _rope_float64_reference(q, k, v, kpos[-1:], kpos, term)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=2e-6)


def test_rotary_positions_past_the_bound_are_refused_by_name():
    term = rp.registry.example_term("rope", num_heads=1, head_dim=8, k=None)
    q = k = v = torch.randn(1, 1, 2, 8)
    with pytest.raises(ValueError, match=r"positions must lie in \[-2\*\*32, 2\*\*32\]"):
        rp.attend(q, k, v, term, causal=True, query_offset=2**33)
    with pytest.raises(ValueError, match="positions must lie in"):
        rp.kernels.rotary.rope_cos_sin(torch.tensor([2**33]), 8)
    with pytest.raises(ValueError, match=r"positions must lie in \[-2\*\*32, 2\*\*32\]"):
        rope.apply_rope(q, torch.tensor([2**40, 2**40 + 1]))  # issue 25 S6: accepted before


def test_the_docstrings_state_the_float16_xpos_limit():
    """The span a float16 xPos call can scale, as the module docstrings state it ("about 6,800 positions";
    kernels.rotary said 9,000, the decode-step overflow length of before the centring)."""
    import re

    from relpos_core.schemes import xpos

    term = rp.registry.example_term("xpos", num_heads=1, head_dim=16, k=None)
    limit = rp.kernels.rotary.xpos_limit(term.rotary.decay, 16, torch.float16)
    for module in (rp.kernels.rotary, xpos):
        stated = re.search(r"float16 self-attention over\s+about ([\d,]+) positions", module.__doc__)
        assert stated is not None, module.__name__
        assert abs(int(stated.group(1).replace(",", "")) - limit) <= 0.02 * limit, (module.__name__, limit)


@pytest.mark.parametrize("dtype, length", [(torch.float16, 9_200), (torch.float16, 60_000), (torch.float32, 80_000)])
def test_xpos_decode_step_is_finite_and_exact_at_any_length(dtype, length):
    """One query after every key: the largest xPos factor is 1 (the centre is the middle of first query and
    last key), so a float16 step over 9,200 keys (NaN before) equals the float64 reference."""
    term = rp.registry.example_term("xpos", num_heads=1, head_dim=16, k=None)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, n, 16, generator=g) for n in (1, length, length))
    out = rp.attend(q.to(dtype), k.to(dtype), v.to(dtype), term, form="none", backend="eager", causal=True)
    ref = rp.attend(q.to(dtype).double(), k.to(dtype).double(), v.to(dtype).double(), term, form="none",
                    backend="eager", causal=True)
    assert torch.isfinite(out).all()
    tol = 1e-3 if dtype == torch.float16 else 1e-6
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=tol)


def test_xpos_refuses_a_call_its_dtype_cannot_scale():
    term = rp.registry.example_term("xpos", num_heads=1, head_dim=16, k=None)
    limit = rp.kernels.rotary.xpos_limit(term.rotary.decay, 16, torch.float16)
    assert 5_000 < limit < 20_000
    x = torch.randn(1, 1, limit + 2, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="xPos cannot scale this call in torch.float16"):
        rp.attend(x, x, x, term, form="none", backend="eager", causal=True)
