"""Compiled FlexAttention path == each scheme's reference (float64), fp32 tolerance 1e-5.

One shared ``torch.compile(flex_attention)``; shapes (B=2, H=2, L=32, d=16, Shaw k=4, T5 8
buckets / max_distance 16, DeBERTa span 4) match ``relpos_core.bench.PRESETS["tiny"]`` so
``tests/test_bench.py`` reuses these compiled kernels in the same pytest run. One compile
per score_mod factory (8 in all).
"""
from __future__ import annotations

import math
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from relpos_core.kernels import flex
from relpos_core.schemes import alibi, deberta, shaw, t5
from relpos_core.schemes import transformer_xl as txl

TOL = dict(atol=1e-5, rtol=1e-5)
B, H, L, d, K, NB, MD, S = 2, 2, 32, 16, 4, 8, 16, 4


@pytest.fixture(scope="module")
def x():
    g = torch.Generator().manual_seed(5)

    def rnd(*shape, s=1.0):
        return torch.randn(*shape, generator=g) * s

    return dict(q=rnd(B, H, L, d), k=rnd(B, H, L, d), v=rnd(B, H, L, d), table=rnd(NB, H), rel_key=rnd(2 * K + 1, d, s=0.3),
                pos_key=rnd(H, 2 * S, d, s=0.3), pos_query=rnd(H, 2 * S, d, s=0.3), r_k=rnd(H, L, d, s=0.3),
                u=rnd(H, d, s=0.3), v_bias=rnd(H, d, s=0.3))


def ref_attention(q, k, v, bias, scale):
    s = (q.double() @ k.double().transpose(-2, -1)) * scale + bias.double()
    return torch.softmax(s, -1) @ v.double()


def test_no_bias_matches_softmax(x):
    want = ref_attention(x["q"], x["k"], x["v"], torch.zeros(()), 1 / math.sqrt(d))
    torch.testing.assert_close(flex.no_bias_attention(x["q"], x["k"], x["v"]).double(), want, **TOL)


@pytest.mark.parametrize("form", flex.T5_FORMS)
def test_t5_every_form_matches_reference(x, form):
    bias = t5.t5_bias_from_table(x["table"].double(), L, bidirectional=True, max_distance=MD)
    want = ref_attention(x["q"], x["k"], x["v"], bias, 1 / math.sqrt(d))
    got = flex.t5_attention(x["q"], x["k"], x["v"], x["table"], bidirectional=True, max_distance=MD, form=form)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_alibi_matches_reference(x):
    want = ref_attention(x["q"], x["k"], x["v"], alibi.alibi_bias(H, L, causal=True), 1 / math.sqrt(d))
    torch.testing.assert_close(flex.alibi_attention(x["q"], x["k"], x["v"], causal=True).double(), want, **TOL)


def test_shaw_key_matches_reference(x):
    q, k, v = x["q"].double(), x["k"].double(), x["v"].double()
    want = shaw.shaw_attention(q, k, v, rel_key=x["rel_key"].double(), max_relative_position=K)
    got = flex.shaw_key_attention(x["q"], x["k"], x["v"], rel_key=x["rel_key"], max_relative_position=K)
    torch.testing.assert_close(got.double(), want, **TOL)


@pytest.mark.parametrize("buckets", [(-1, -1), (4, 12)])
def test_deberta_matches_reference(x, buckets):
    rel = deberta.build_relative_position(L, L, bucket_size=buckets[0], max_position=buckets[1])
    c2p, p2c = deberta.deberta_c2p_p2c(x["q"].double(), x["k"].double(), x["pos_key"].double(),
                                       x["pos_query"].double(), rel, S, pos_layout="hsd")
    sc = 1 / math.sqrt(3 * d)
    want = ref_attention(x["q"], x["k"], x["v"], (c2p + p2c) * sc, sc)
    got = flex.deberta_attention(x["q"], x["k"], x["v"], x["pos_key"], x["pos_query"], att_span=S, relative_pos=rel)
    torch.testing.assert_close(got.double(), want, **TOL)


def test_transformer_xl_matches_reference(x):
    d64 = {n: x[n].double() for n in ("q", "k", "r_k", "u", "v_bias")}
    t = txl.transformer_xl_terms(d64["q"], d64["k"], d64["r_k"], d64["u"], d64["v_bias"], r_layout="HLd")
    s = ((t["a"] + t["b"] + t["c"] + t["d"]) / math.sqrt(d)).masked_fill(~txl.transformer_xl_causal_mask(L, L),
                                                                          float("-inf"))
    want = torch.softmax(s, -1) @ x["v"].double()
    got = flex.transformer_xl_attention(x["q"], x["k"], x["v"], x["r_k"], x["u"], x["v_bias"])
    torch.testing.assert_close(got.double(), want, **TOL)


def test_cpu_backward_warns_and_gradients_equal_reference(x):
    """FlexAttention has no backward on CPU: the wrapper says so and trains through dense SDPA."""
    table = x["table"].clone().requires_grad_(True)
    with pytest.warns(flex.FlexCPUBackwardWarning, match="no backward on CPU"):
        out = flex.t5_attention(x["q"], x["k"], x["v"], table, max_distance=MD)
    out.sum().backward()
    ref_table = x["table"].double().requires_grad_(True)
    bias = t5.t5_bias_from_table(ref_table, L, bidirectional=True, max_distance=MD)
    want = ref_attention(x["q"], x["k"], x["v"], bias, 1 / math.sqrt(d))
    want.sum().backward()
    torch.testing.assert_close(out.double(), want.detach(), **TOL)
    torch.testing.assert_close(table.grad.double(), ref_table.grad, **TOL)


def test_raw_call_with_grad_on_cpu_raises_clearly(x):
    q = x["q"].clone().requires_grad_(True)
    with pytest.raises(NotImplementedError, match="no backward on CPU"):
        flex.flex_attention_call(q, x["k"], x["v"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention backward needs CUDA")
def test_cuda_flex_backward_reaches_the_table():
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 256, 64, generator=g).to(dev) for _ in range(3))
    table = torch.randn(32, 2, generator=g).to(dev).requires_grad_(True)
    ref_table = table.detach().double().requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", flex.FlexCPUBackwardWarning)  # must not fall back on CUDA
        out = flex.t5_attention(q, k, v, table, max_distance=128,
                                kernel_options={"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1})
    out.sum().backward()
    bias = t5.t5_bias_from_table(ref_table, 256, bidirectional=True, max_distance=128)
    ref_attention(q, k, v, bias, 1 / 8).sum().backward()
    torch.testing.assert_close(table.grad.double(), ref_table.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("call, match", [
    (lambda x: flex.generate_t5_score_mod(torch.randn(2, 5), min_offset=-3, max_offset=3), "offset_table"),
    (lambda x: flex.generate_t5_score_mod(torch.randn(2, 5), min_offset=3, max_offset=-1), "min_offset"),
    (lambda x: flex.t5_attention(x["q"], x["k"], x["v"], x["table"], form="log"), "form"),
    (lambda x: flex.generate_alibi_score_mod(torch.rand(2, 2)), "slopes"),
    (lambda x: flex.generate_shaw_key_score_mod(torch.randn(64, 5), max_relative_position=4, num_heads=2,
                                                query_len=32), "qa"),
    (lambda x: flex.generate_deberta_score_mod(torch.randn(4, 8), torch.randn(4, 8), torch.zeros(3, dtype=torch.long),
                                               num_heads=1, query_len=4, key_len=4), "offset_index"),
    (lambda x: flex.generate_transformer_xl_score_mod(torch.randn(4, 3), num_heads=1, query_len=4, key_len=4), "bd_table"),
    (lambda x: flex.flex_attention_call(x["q"], x["k"], x["v"], score_mod=3), "score_mod"),
    (lambda x: flex.deberta_attention(x["q"], x["k"], x["v"], x["pos_key"], x["pos_query"], att_span=3), "pos_key"),
    (lambda x: flex.transformer_xl_attention(x["q"][:, :, :4], x["k"][:, :, :4], x["v"][:, :, :4], x["r_k"], x["u"],
                                             x["v_bias"]), "r_k"),
])
def test_bad_input_raises_value_error(x, call, match):
    with pytest.raises(ValueError, match=match):
        call(x)
