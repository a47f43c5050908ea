"""Dense-bias SDPA path == references; the backend that ran is detected; forcing fails loudly."""
from __future__ import annotations

import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.nn.functional as F

from relpos_core.kernels import sdpa_bias
from relpos_core.measure.backends import (
    SdpaBackendError,
    available_sdpa_backends,
    check_backend_supports,
    detect_sdpa_backend,
    force_sdpa_backend,
)
from relpos_core.schemes import alibi, deberta, rope, shaw, t5
from relpos_core.schemes import transformer_xl as txl

TOL = dict(atol=1e-5, rtol=1e-5)


def qkv(B=2, H=2, L=12, d=8, seed=4):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, L, d, generator=g) for _ in range(3))


def ref_attention(q, k, v, bias, scale):
    s = (q.double() @ k.double().transpose(-2, -1)) * scale + bias.double()
    return torch.softmax(s, -1) @ v.double()


def test_t5_alibi_shaw_match_references():
    q, k, v = qkv(L=20)
    table = torch.randn(8, 2)
    bias = t5.t5_bias_from_table(table.double(), 20, bidirectional=True, max_distance=16)
    torch.testing.assert_close(sdpa_bias.t5_attention(q, k, v, table, max_distance=16, scale=1.0).double(),
                               ref_attention(q, k, v, bias, 1.0), **TOL)
    want = ref_attention(q, k, v, alibi.alibi_bias(2, 20, causal=True), 1 / math.sqrt(8))
    torch.testing.assert_close(sdpa_bias.alibi_attention(q, k, v).double(), want, **TOL)
    rk = torch.randn(9, 8)
    for causal in (False, True):
        want = shaw.shaw_attention(q.double(), k.double(), v.double(), rel_key=rk.double(), max_relative_position=4,
                                   causal=causal)
        got = sdpa_bias.shaw_key_attention(q, k, v, rel_key=rk, max_relative_position=4, causal=causal)
        torch.testing.assert_close(got.double(), want, **TOL)


def test_deberta_and_transformer_xl_match_references():
    q, k, v = qkv()
    pk, pq = torch.randn(2, 8, 8), torch.randn(2, 8, 8)
    rel = deberta.build_relative_position(12, 12)
    c2p, p2c = deberta.deberta_c2p_p2c(q.double(), k.double(), pk.double(), pq.double(), rel, 4, pos_layout="hsd")
    sc = 1 / math.sqrt(24)
    torch.testing.assert_close(sdpa_bias.deberta_attention(q, k, v, pk, pq, att_span=4).double(),
                               ref_attention(q, k, v, (c2p + p2c) * sc, sc), **TOL)
    r, u, vb = torch.randn(2, 12, 8), torch.randn(2, 8), torch.randn(2, 8)
    t = txl.transformer_xl_terms(q.double(), k.double(), r.double(), u.double(), vb.double(), r_layout="HLd")
    s = ((t["a"] + t["b"] + t["c"] + t["d"]) / math.sqrt(8)).masked_fill(~txl.transformer_xl_causal_mask(12, 12),
                                                                          float("-inf"))
    torch.testing.assert_close(sdpa_bias.transformer_xl_attention(q, k, v, r, u, vb).double(),
                               torch.softmax(s, -1) @ v.double(), **TOL)


def test_rope_sdpa_matches_reference_and_stays_fused():
    q, k, v = qkv()
    qr, kr = rope.apply_rope(q.double()), rope.apply_rope(k.double())
    want = ref_attention(qr, kr, v, torch.zeros(()), 1 / math.sqrt(8))
    backend, out = detect_sdpa_backend(sdpa_bias.rope_sdpa_attention, q, k, v)
    torch.testing.assert_close(out.double(), want, **TOL)
    assert backend == "flash"  # CPU: the fused _scaled_dot_product_flash_attention_for_cpu


def test_learnable_table_gradients_equal_reference_autograd():
    q, k, v = qkv(L=16)
    table = torch.randn(8, 2, requires_grad=True)
    ref_table = table.detach().double().requires_grad_(True)
    sdpa_bias.t5_attention(q, k, v, table, max_distance=16).sum().backward()
    bias = t5.t5_bias_from_table(ref_table, 16, bidirectional=True, max_distance=16)
    ref_attention(q, k, v, bias, 1 / math.sqrt(8)).sum().backward()
    torch.testing.assert_close(table.grad.double(), ref_table.grad, **TOL)


def test_backend_detection_on_cpu():
    """torch 2.13 CPU: a 4-D mask keeps the fused kernel, a 3-D mask or a grad mask goes to math."""
    q, k, v = qkv()
    bias = torch.randn(2, 12, 12)
    assert detect_sdpa_backend(sdpa_bias.sdpa_attention, q, k, v, bias)[0] == "flash"  # passed on as 4-D
    assert detect_sdpa_backend(F.scaled_dot_product_attention, q, k, v, attn_mask=bias)[0] == "math"
    out, backend = sdpa_bias.sdpa_attention_with_backend(q, k, v, causal=True)
    assert backend == "flash" and out.shape == q.shape
    assert detect_sdpa_backend(lambda: q + 1)[0] == "none"
    assert available_sdpa_backends("cpu") == ("flash", "math")


def test_forced_backend_runs_or_fails_loudly():
    q, k, v = qkv()
    bias = torch.randn(1, 2, 12, 12)
    with force_sdpa_backend("math"):
        backend, _ = detect_sdpa_backend(sdpa_bias.sdpa_attention, q, k, v, bias)
    assert backend == "math"
    with pytest.raises(SdpaBackendError, match="'efficient' does not exist on CPU"):
        with force_sdpa_backend("efficient"):
            sdpa_bias.sdpa_attention(q, k, v, bias)
    # a raw call PyTorch refuses: "No available kernel" becomes a ValueError with the reasons
    with pytest.raises(SdpaBackendError, match="forced SDPA backend 'flash' cannot run"):
        with force_sdpa_backend("flash"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias[0])
    assert issubclass(SdpaBackendError, ValueError)


@pytest.mark.parametrize("kwargs, match", [
    (dict(backend="flash", device="cuda", dtype=torch.float64), "float16 or bfloat16"),
    (dict(backend="flash", device="cuda", dtype=torch.bfloat16, mask_ndim=4), "refuses any attn_mask"),
    (dict(backend="efficient", device="cuda", dtype=torch.float64), "efficient"),
    (dict(backend="flash", device="cpu", dtype=torch.float32, mask_ndim=3), "4-D"),
    (dict(backend="flash", device="cpu", dtype=torch.float32, mask_ndim=4, mask_requires_grad=True), "requires grad"),
    (dict(backend="fast", device="cpu", dtype=torch.float32), "backend"),
])
def test_backend_support_checks(kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_backend_supports(**kwargs)


@pytest.mark.parametrize("call, match", [
    (lambda q: sdpa_bias.sdpa_attention(q, q, q, torch.randn(2, 6, 5)), "bias"),
    (lambda q: sdpa_bias.sdpa_attention(q, q, q, torch.randn(2, 6, 6), causal=True), "causal"),
    (lambda q: sdpa_bias.rope_sdpa_attention(q, q[:, :, :3], q[:, :, :3]), "longer"),
    (lambda q: sdpa_bias.rope_sdpa_attention(q, q, q, positions=torch.arange(5)), "positions"),
    (lambda q: sdpa_bias.t5_attention(q, q, q, torch.randn(8, 2).double()), "table"),
    (lambda q: sdpa_bias.transformer_xl_attention(q, q, q, torch.randn(2, 6, 8), torch.randn(3, 8), torch.randn(2, 8)), "u"),
    (lambda q: force_sdpa_backend("fastest").__enter__(), "name"),
])
def test_bad_input_raises_value_error(call, match):
    q = torch.randn(1, 2, 6, 8)
    with pytest.raises(ValueError, match=match):
        call(q)


def test_causal_queries_sit_at_the_end_of_the_keys():
    import relpos_core as rp

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    # torch's is_causal would let query 0 see key 0 only; a decoder with a cache sees keys 0..4
    torch.testing.assert_close(sdpa_bias.sdpa_attention(q, k, v, causal=True), rp.attention(q, k, v, causal=True))


def test_rope_decoder_step_equals_the_last_row_of_the_full_pass():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    full = sdpa_bias.rope_sdpa_attention(q, k, v, causal=True)  # (1, 2, 9, 8)
    step = sdpa_bias.rope_sdpa_attention(q[:, :, -1:], k, v, causal=True)  # one query, a cache of 9 keys
    torch.testing.assert_close(step, full[:, :, -1:])
    shifted = sdpa_bias.rope_sdpa_attention(q[:, :, -1:], k, v, positions=torch.arange(9) + 100, causal=True)
    torch.testing.assert_close(shifted, step, atol=1e-5, rtol=1e-5)  # relative: a shift changes nothing
