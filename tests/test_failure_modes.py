"""The five failure modes of chapter 9 (chapters/12_failure_modes.ipynb), each failing, caught, then fixed.

1. a flipped sign convention: the two-token test (rp.failures.two_token_sign_test);
2. a T5 bias table per layer instead of per stack: a real load_state_dict report against
   Hugging Face's T5EncoderModel (random weights from a config, nothing downloaded);
3. clipping hides long-range order: rp.failures.distance_probe;
4. a materialised bias that would run out of memory: rp.attend's memory guard refuses first;
5. a silent SDPA fallback: rp.measure.detect_sdpa_backend and force_sdpa_backend, and what
   the H200 reference data (shipped with the package, relpos_core/data/) says happens on CUDA.
"""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import relpos_core as rp

try:  # the test oracle for the checkpoint's side (random weights from a config, nothing downloaded)
    import transformers
    from transformers.models.t5 import modeling_t5 as hf_t5
except ImportError:  # pragma: no cover
    transformers = hf_t5 = None
needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers (the test oracle) is not installed")

MiB, GiB = 2**20, 2**30


# -- 1. a flipped sign convention ---------------------------------------------------------


def _t5_bias_with_offsets(table, length, convention, *, bidirectional=True):
    """T5's bias, bucketing the offsets of ``convention``: "key_minus_query" is right, the other a bug."""
    rel = rp.relative_offsets(length, convention=convention)  # (L, L)
    buckets = rp.schemes.t5.t5_relative_bucket(rel, bidirectional=bidirectional)  # (L, L)
    return table[buckets].permute(2, 0, 1)  # (H, L, L)


@pytest.fixture
def t5_table():
    return torch.randn(32, 3, generator=torch.Generator().manual_seed(0))  # (num_buckets, H)


def _t5_value(table, bidirectional=True):
    def value(offset):
        bucket = rp.schemes.t5.t5_relative_bucket(torch.tensor(offset), bidirectional=bidirectional)
        return table[bucket]  # (H,)
    return value


def test_two_token_test_passes_t5_as_the_checkpoint_computes_it(t5_table):
    bias = rp.oracles.t5.t5_bias_from_table(t5_table, 2)  # (H, 2, 2)
    result = rp.failures.two_token_sign_test(bias, scheme="t5", value_at_offset=_t5_value(t5_table))
    assert result.passed and not result.swapped and result.verdict == "passed"
    assert result.check() is result


@needs_transformers
def test_two_token_test_with_the_checkpoint_code_as_reference(t5_table):
    """Hugging Face's bucket function (the code T5 checkpoints run with) as value_at_offset."""
    bias = rp.oracles.t5.t5_bias_from_table(t5_table, 2)  # (H, 2, 2)
    hf_bucket = hf_t5.T5Attention._relative_position_bucket
    rp.failures.two_token_sign_test(
        bias, scheme="t5", value_at_offset=lambda r: t5_table[hf_bucket(torch.tensor(r))]).check()


@pytest.mark.parametrize("bidirectional", [True, False], ids=["encoder", "decoder"])
def test_two_token_test_catches_t5_with_i_minus_j(t5_table, bidirectional):
    flipped = _t5_bias_with_offsets(t5_table, 2, "query_minus_key", bidirectional=bidirectional)  # the bug
    result = rp.failures.two_token_sign_test(flipped, scheme="t5",
                                             value_at_offset=_t5_value(t5_table, bidirectional))
    assert not result.passed and result.swapped and result.verdict == "past and future swapped"
    with pytest.raises(rp.failures.SignConventionError, match="past and future swapped.*j - i"):
        result.check()


def test_a_flip_keeps_translation_invariance_so_a_shift_test_misses_it(t5_table):
    L, s = 10, 3
    right = _t5_bias_with_offsets(t5_table, L, "key_minus_query")
    flipped = _t5_bias_with_offsets(t5_table, L, "query_minus_key")
    torch.testing.assert_close(right, rp.oracles.t5.t5_bias_from_table(t5_table, L))
    torch.testing.assert_close(flipped, right.transpose(-1, -2))  # past and future exchanged
    for bias in (right, flipped):  # both depend on the offset only
        torch.testing.assert_close(bias[:, s:, s:], bias[:, :-s, :-s])


def test_flipped_decoder_puts_every_visible_key_in_bucket_zero():
    rel = rp.relative_offsets(16, convention="query_minus_key")  # i - j: the bug
    buckets = rp.schemes.t5.t5_relative_bucket(rel, bidirectional=False)
    visible = torch.ones(16, 16, dtype=torch.bool).tril()
    assert int(buckets[visible].max()) == 0  # no position information left among visible keys
    right = rp.schemes.t5.t5_relative_bucket(rp.relative_offsets(16), bidirectional=False)
    assert len(torch.unique(right[visible])) == 16


def test_two_token_test_catches_alibi_with_j_minus_i():
    slopes = rp.schemes.alibi.alibi_slopes(4)  # (H,)
    right = -slopes[:, None, None] * rp.relative_offsets(2, convention="query_minus_key")  # -m (i - j)
    flipped = -slopes[:, None, None] * rp.relative_offsets(2, convention="key_minus_query")  # -m (j - i)
    value = lambda r: -slopes * r  # noqa: E731  ALiBi's offset is i - j
    assert rp.failures.two_token_sign_test(right, scheme="alibi", value_at_offset=value).passed
    assert rp.failures.two_token_sign_test(flipped, scheme="alibi", value_at_offset=value).swapped
    # agrees with the library's causal bias where the mask lets keys through
    lib = rp.schemes.alibi.alibi_bias(4, 2)  # (H, 2, 2), -inf above the diagonal
    torch.testing.assert_close(lib.tril(), right.tril())


def test_two_token_test_refuses_a_reference_it_cannot_fail():
    slopes = rp.schemes.alibi.alibi_slopes(2)
    symmetric = -slopes[:, None, None] * rp.relative_offsets(2).abs()
    with pytest.raises(ValueError, match="same value"):
        rp.failures.two_token_sign_test(symmetric, scheme="alibi", value_at_offset=lambda r: -slopes * abs(r))


def test_two_token_test_reports_other_bugs_as_wrong_values(t5_table):
    bias = rp.oracles.t5.t5_bias_from_table(t5_table, 2) + 1.0
    result = rp.failures.two_token_sign_test(bias, scheme="t5", value_at_offset=_t5_value(t5_table))
    assert not result.passed and not result.swapped and result.verdict == "wrong values"


@pytest.mark.parametrize("kwargs, match", [
    (dict(bias=torch.zeros(3, 3)), "bias must have shape"),
    (dict(bias=torch.zeros(2, 2, dtype=torch.long)), "bias must be a floating-point"),
    (dict(scheme="xlnet"), "scheme must be one of"),
    (dict(scheme="absolute"), "scheme must use a relative offset"),
    (dict(value_at_offset=3.0), "value_at_offset must be callable"),
    (dict(value_at_offset=lambda r: torch.zeros(5) + r), "must broadcast"),
    (dict(value_at_offset=lambda r: "row"), "must return a number or a tensor"),
    (dict(rtol=-1.0), "rtol must be a number in"),
    (dict(atol="tight"), "atol must be a number in"),
])
def test_two_token_test_validates_its_arguments(kwargs, match):
    args = dict(bias=torch.zeros(2, 2), scheme="t5", value_at_offset=lambda r: float(r))
    with pytest.raises(ValueError, match=match):
        rp.failures.two_token_sign_test(**{**args, **kwargs})


# -- 2. a bias table per layer instead of per stack -------------------------------------------


def _per_layer_stack(config):
    """The mistake: every block owns a table and computes its own bias."""
    t5 = rp.oracles.t5

    class PerLayerBiasStack(t5.T5EncoderStack):
        def __init__(self, cfg):
            super().__init__(cfg)
            self.block = torch.nn.ModuleList([t5.T5Block(cfg, True) for _ in range(cfg.num_layers)])

        def forward(self, input_ids):
            x = self.embed_tokens(input_ids)  # (B, L, d_model)
            for block in self.block:
                x, _ = block(x, None)  # no bias passed on: each block builds its own
            return self.final_layer_norm(x)  # (B, L, d_model)

    return PerLayerBiasStack(config)


@needs_transformers
def test_bias_per_layer_breaks_loading_a_t5_checkpoint():
    sizes = dict(vocab_size=64, d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=3)
    torch.manual_seed(0)
    hf = transformers.T5EncoderModel(transformers.T5Config(**sizes, dropout_rate=0.0,
                                                           feed_forward_proj="relu")).eval()
    checkpoint = hf.encoder.state_dict()
    ids = torch.randint(0, 64, (2, 9))
    want = hf(input_ids=ids).last_hidden_state

    config = rp.oracles.t5.T5Config(**sizes)
    wrong = _per_layer_stack(config).eval()
    missing = [f"block.{i}.layer.0.SelfAttention.relative_attention_bias.weight" for i in (1, 2)]
    with pytest.raises(RuntimeError, match="Missing key"):
        wrong.load_state_dict(checkpoint)
    report = wrong.load_state_dict(checkpoint, strict=False)
    assert report.missing_keys == missing and report.unexpected_keys == []
    assert hf.encoder.load_state_dict(wrong.state_dict(), strict=False).unexpected_keys == missing
    extra = sum(p.numel() for p in wrong.parameters()) - sum(p.numel() for p in hf.encoder.parameters())
    assert extra == 2 * 32 * 4  # two extra (num_buckets, H) tables
    assert len(rp.failures.bias_table_names(wrong)) == 3
    assert (wrong(ids) - want).abs().max() > 1e-2  # loads "fine", computes something else

    right = rp.oracles.t5.T5EncoderStack(config).eval()
    report = right.load_state_dict(checkpoint, strict=True)
    assert report.missing_keys == [] and report.unexpected_keys == []
    assert rp.failures.bias_table_names(right) == ["block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    assert rp.failures.bias_table_names(hf) == ["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]
    torch.testing.assert_close(right(ids), want, atol=1e-5, rtol=1e-5)


def test_bias_table_names_validates():
    with pytest.raises(ValueError, match="module must be"):
        rp.failures.bias_table_names("block.0")
    with pytest.raises(ValueError, match="suffix"):
        rp.failures.bias_table_names(torch.nn.Linear(2, 2), suffix="")


# -- 3. clipping hides long-range order ---------------------------------------------------------


def _probe(term, distances, L=160, d=8, seed=1):
    return rp.failures.distance_probe(term, distances, seq_len=L, head_dim=d,
                                      generator=torch.Generator().manual_seed(seed))[:, 0]


def _terms(k=8, d=8):
    g = torch.Generator().manual_seed(0)
    return {
        "shaw": rp.schemes.shaw.position_term(rel_key=torch.randn(2 * k + 1, d, generator=g, dtype=torch.float64),
                                              max_relative_position=k),
        "t5": rp.schemes.t5.position_term(torch.randn(32, 1, generator=g, dtype=torch.float64)),
        "alibi": rp.schemes.alibi.position_term(1),
        "rope": rp.schemes.rope.position_term(),
    }


def test_clipped_schemes_cannot_tell_far_distances_apart():
    terms, far = _terms(k=8), [100, 130, 159]  # all beyond Shaw's k = 8 and T5's last bucket (91)
    assert int(rp.schemes.t5.t5_relative_bucket(torch.tensor(-91))) == 15  # the last past bucket
    assert int(rp.schemes.t5.t5_relative_bucket(torch.tensor(-90))) == 14
    for name in ("shaw", "t5"):
        w = _probe(terms[name], far)
        torch.testing.assert_close(w, w[:1].expand(3), rtol=1e-12, atol=0)  # one weight for every far distance
    for name in ("alibi", "rope"):
        w = _probe(terms[name], far)
        assert len({round(x, 9) for x in w.tolist()}) == 3, name  # each distance its own weight
    w = _probe(terms["shaw"], [1, 2, 3, 8, 9, 50])
    assert len({round(x, 9) for x in w[:4].tolist()}) == 4  # inside the clip: told apart
    torch.testing.assert_close(w[3:], w[3:4].expand(3), rtol=1e-12, atol=0)  # from k on: one weight


def test_alibi_weight_falls_with_distance_and_a_wide_enough_clip_tells_all_apart():
    w = _probe(_terms()["alibi"], list(range(0, 160, 10)))
    assert bool((w[1:] < w[:-1]).all())
    wide = _terms(k=159)["shaw"]  # k >= L - 1: every distance has its own row
    w = _probe(wide, list(range(160)))
    assert len({round(x, 9) for x in w.tolist()}) == 160


def test_distance_probe_reads_the_heads_of_every_piece():
    """The probe's head count comes from whichever piece fixes one, a piece of a new kind included (CoPE)."""
    g = torch.Generator().manual_seed(0)
    per_head = rp.schemes.cope.position_term(torch.randn(3, 16, 8, generator=g, dtype=torch.float64))  # (H, npos, d)
    assert _probe(per_head, [1, 5], L=16).shape == (2,)
    assert rp.failures.distance_probe(per_head, [1, 5], seq_len=16, head_dim=8).shape == (2, 3)  # (n, H): 3 heads
    assert rp.failures.distance_probe(_terms()["t5"], [1], seq_len=16, head_dim=8).shape == (1, 1)  # T5's one head
    assert rp.failures.distance_probe(_terms()["rope"], [1], seq_len=16, head_dim=8).shape == (1, 1)  # any H: 1


def test_distance_probe_validates():
    terms = _terms()
    shaw_with_value = rp.schemes.shaw.position_term(rel_key=torch.zeros(3, 8), rel_value=torch.zeros(3, 8),
                                                    max_relative_position=1)
    with pytest.raises(ValueError, match="no value term"):
        rp.failures.distance_probe(shaw_with_value, [1], seq_len=8, head_dim=8)
    with pytest.raises(ValueError, match=r"distances\[i\] must be an integer in \[0, 7\]"):
        rp.failures.distance_probe(terms["alibi"], [8], seq_len=8, head_dim=8)
    with pytest.raises(ValueError, match="at least one distance"):
        rp.failures.distance_probe(terms["alibi"], [], seq_len=8, head_dim=8)
    with pytest.raises(ValueError, match="term must be a PositionTerm"):
        rp.failures.distance_probe("alibi", [1], seq_len=8, head_dim=8)
    with pytest.raises(ValueError, match="seq_len"):
        rp.failures.distance_probe(terms["alibi"], [1], seq_len=0, head_dim=8)
    with pytest.raises(ValueError, match="generator"):
        rp.failures.distance_probe(terms["alibi"], [1], seq_len=8, head_dim=8, generator=0)
    with rp.measure.memory_budget(MiB), pytest.raises(rp.measure.MemoryBudgetError, match="distance_probe"):
        rp.failures.distance_probe(terms["alibi"], list(range(512)), seq_len=512, head_dim=8)


# -- 4. a materialised bias that would run out of memory --------------------------------------


def test_guard_refuses_a_16_gib_bias_before_allocating_it():
    H, L, d = 16, 16384, 64
    assert H * L * L * 4 == 16 * GiB  # the dense fp32 bias alone
    zero = torch.zeros(1, 1, 1, 1).expand(1, H, L, d)  # (1, H, L, d): a view, no memory
    term = rp.schemes.t5.position_term(torch.randn(32, H))
    errors = []

    def attempt():
        try:
            rp.attend(zero, zero, zero, term, form="gather", backend="sdpa", check_finite=False)
        except rp.measure.MemoryBudgetError as err:
            errors.append(err)

    with rp.measure.memory_budget(8 * GiB):
        peak = rp.measure.measure_peak_memory(attempt)
    assert len(errors) == 1 and isinstance(errors[0], ValueError)
    flex = rp.measure.analytic.peak_bytes(term, "gather", "flex", B=1, H=H, Lq=L, Lk=L, d=d)
    message = str(errors[0])
    assert "form='gather', backend='flex'" in message and rp.measure.guard.format_bytes(flex) in message
    assert "8.0 GiB" in message and flex < 8 * GiB
    assert peak < MiB  # only the key positions (8 L bytes): the bias was never allocated


def test_guard_names_a_cheaper_path_that_then_runs_within_the_budget():
    L, d, k = 256, 32, 8
    g = torch.Generator().manual_seed(3)
    q, kk, v = (torch.randn(1, 1, L, d, generator=g) for _ in range(3))
    term = rp.schemes.shaw.position_term(rel_key=0.1 * torch.randn(2 * k + 1, d, generator=g),
                                         rel_value=0.1 * torch.randn(2 * k + 1, d, generator=g),
                                         max_relative_position=k)
    budget = 4 * MiB
    naive = rp.measure.analytic.peak_bytes(term, "naive", "eager", B=1, H=1, Lq=L, Lk=L, d=d)
    assert naive > budget  # the [L, L, d] gathered tables
    with rp.measure.memory_budget(budget):
        with pytest.raises(rp.measure.MemoryBudgetError, match="use form='(skew|gather)', backend='eager'") as info:
            rp.attend(q, kk, v, term, form="naive", backend="eager")
        form = re.search(r"use form='(\w+)'", str(info.value)).group(1)  # the value term needs eager
        out = rp.attend(q, kk, v, term, form=form, backend="eager")  # (1, 1, L, d)
        peak = rp.measure.measure_peak_memory(rp.attend, q, kk, v, term, form=form, backend="eager")
    assert peak <= budget
    torch.testing.assert_close(out, rp.attend(q, kk, v, term, form="naive", backend="eager"))


# -- 5. a silent kernel fallback ---------------------------------------------------------------


def test_a_3d_mask_or_a_learnable_bias_falls_back_to_math_on_cpu():
    g = torch.Generator().manual_seed(4)
    H, L, d = 2, 64, 16
    q, k, v = (torch.randn(1, H, L, d, generator=g) for _ in range(3))
    bias = torch.randn(H, L, L, generator=g)  # (H, L, L)
    out3, ran3 = rp.measure.detect_sdpa_backend(F.scaled_dot_product_attention, q, k, v, attn_mask=bias)
    out4, ran4 = rp.measure.detect_sdpa_backend(F.scaled_dot_product_attention, q, k, v, attn_mask=bias[None])
    assert (ran3, ran4) == ("math", "flash")
    torch.testing.assert_close(out3, out4)  # same numbers: only the profiler tells
    with pytest.raises(rp.measure.backends.SdpaBackendError):
        with rp.measure.force_sdpa_backend("flash"):
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    table = torch.randn(32, H, generator=g, requires_grad=True)  # a learnable T5 table
    term = rp.schemes.t5.position_term(table)
    _, training = rp.measure.detect_sdpa_backend(rp.attend, q, k, v, term, backend="sdpa")
    with torch.no_grad():
        _, inference = rp.measure.detect_sdpa_backend(rp.attend, q, k, v, term, backend="sdpa")
    assert (training, inference) == ("math", "flash")
    with pytest.raises(rp.measure.backends.SdpaBackendError, match="requires grad"):
        with rp.measure.force_sdpa_backend("flash"):
            rp.attend(q, k, v, term, backend="sdpa")


def test_math_fallback_holds_the_scores_in_memory():
    g = torch.Generator().manual_seed(5)
    H, L, d = 8, 256, 16
    q, k, v = (torch.randn(1, H, L, d, generator=g) for _ in range(3))
    bias = torch.randn(H, L, L, generator=g)
    math = rp.measure.measure_peak_memory(F.scaled_dot_product_attention, q, k, v, attn_mask=bias)
    flash = rp.measure.measure_peak_memory(F.scaled_dot_product_attention, q, k, v, attn_mask=bias[None])
    scores = H * L * L * 4  # (1, H, L, L) fp32
    assert math >= scores > 4 * flash


def test_reference_data_what_a_dense_bias_does_on_cuda():
    """What chapter 9 says about CUDA, read from the committed H200 file (fixed numbers, not a timing run)."""
    provenance, records = rp.failures.read_reference()  # the copy shipped with relpos_core
    assert provenance["device"] == "NVIDIA H200" and "not relpos_core" in provenance["code"]
    dense = [r for r in records if r.get("path") == "sdpa_densebias"]
    flash = [r for r in dense if r["backend"] == "flash"]
    assert flash and all("No available kernel" in r["error"] for r in flash)  # flash refuses any mask
    by = {(r["L"], r["backend"], r["bias_dtype"]): r for r in dense if "error" not in r}
    plain = {(r["L"], r["backend"]): r for r in records if r.get("path") == "sdpa_nobias"}
    math, cudnn = by[(4096, "math", "torch.bfloat16")], by[(4096, "cudnn", "torch.bfloat16")]
    assert math["peak_mib"] > 100 * cudnn["peak_mib"]  # the fallback materialises the scores
    assert math["ms"] > 10 * cudnn["ms"]
    for L in (4096, 16384):  # cuDNN takes the dense bias: slower than without it, faster than efficient
        with_bias = by[(L, "cudnn", "torch.bfloat16")]["ms"]
        assert plain[(L, "cudnn")]["ms"] < with_bias < by[(L, "efficient", "torch.bfloat16")]["ms"]
    assert by[(16384, "cudnn", "torch.bfloat16")]["mask_mib"] == 16 * 16384**2 * 2 / MiB  # 8 GiB of bf16 bias


def test_read_reference_validates(tmp_path):
    with pytest.raises(ValueError, match="existing JSON-lines file"):
        rp.failures.read_reference(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"L": 1}\n')
    with pytest.raises(ValueError, match="provenance"):
        rp.failures.read_reference(bad)
