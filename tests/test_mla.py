"""Multi-head latent attention: equal to Hugging Face's DeepseekV2Attention, its latent cache equal to
recomputation, the absorbed form equal to the expanded one, and bytes that match the formula.

The oracle is built here from a config with random weights (nothing downloaded):
``transformers.models.deepseek_v2.modeling_deepseek_v2.DeepseekV2Attention``.
"""
from __future__ import annotations

import pytest
import torch

import relpos_core as rp
from relpos_core.mla import LatentCache, MLAConfig, MLAttention, latent_bytes_per_token

transformers = pytest.importorskip("transformers")
from transformers.models.deepseek_v2 import modeling_deepseek_v2 as hf_ds  # noqa: E402

YARN = {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 16, "beta_fast": 32.0,
        "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}  # DeepSeek-V2's settings, a short L
SIZES = dict(d_model=64, num_heads=4, kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _pair(q_lora_rank, scaling, base=10000.0):
    rope = dict(scaling or {"rope_type": "default"}, rope_theta=base)
    hf_config = transformers.DeepseekV2Config(
        hidden_size=SIZES["d_model"], num_attention_heads=SIZES["num_heads"], num_key_value_heads=SIZES["num_heads"],
        kv_lora_rank=SIZES["kv_lora_rank"], q_lora_rank=q_lora_rank, qk_nope_head_dim=SIZES["qk_nope_head_dim"],
        qk_rope_head_dim=SIZES["qk_rope_head_dim"], v_head_dim=SIZES["v_head_dim"], max_position_embeddings=64,
        rope_parameters=rope, attention_bias=False)
    hf_config._attn_implementation = "eager"
    oracle = hf_ds.DeepseekV2Attention(hf_config, layer_idx=0).eval()
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for p in oracle.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 if p.dim() == 2
                    else 1 + 0.1 * torch.randn(p.shape, generator=g))
    ours = MLAttention(MLAConfig(**SIZES, q_lora_rank=q_lora_rank, base=base, scaling=scaling)).eval()
    missing = ours.load_state_dict(oracle.state_dict(), strict=True)  # the same weight names
    assert not missing.missing_keys and not missing.unexpected_keys
    return oracle, ours, hf_ds.DeepseekV2RotaryEmbedding(hf_config)


@pytest.mark.parametrize("scaling", [None, YARN], ids=["rope", "yarn"])
@pytest.mark.parametrize("q_lora_rank", [None, 20], ids=["q_proj", "q_lora"])
def test_equals_hugging_face_deepseek_v2_attention(q_lora_rank, scaling):
    oracle, ours, rotary = _pair(q_lora_rank, scaling)
    B, n = 2, 40  # beyond YaRN's original length of 16
    x = torch.randn(B, n, SIZES["d_model"], generator=torch.Generator().manual_seed(1))
    positions = torch.arange(n)[None].expand(B, n)
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]  # (1, 1, n, n) additive causal
    with torch.no_grad():
        expected, _ = oracle(x, attention_mask=mask, position_embeddings=rotary(x, positions))
        for absorbed in (False, True):
            torch.testing.assert_close(ours(x, absorbed=absorbed), expected, rtol=2e-5, atol=2e-5)
    assert expected.abs().max() > 0.1


@pytest.mark.parametrize("absorbed", [False, True])
def test_latent_cache_equals_recomputation(absorbed):
    config = MLAConfig(**SIZES, q_lora_rank=20, scaling=YARN)
    layers = torch.nn.ModuleList(MLAttention(config) for _ in range(2)).double()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in layers.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) / p.shape[-1] ** 0.5)
        x = torch.randn(2, 30, SIZES["d_model"], generator=g, dtype=torch.float64)

        def run(h, cache=None):
            for i, layer in enumerate(layers):
                h = h + layer(h, cache, i, absorbed=absorbed)
            return h

        full = run(x)  # (B, 30, D): no cache
        cache = LatentCache(2)
        steps = [run(x[:, :5], cache)] + [run(x[:, t:t + 1], cache) for t in range(5, 30)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)
    assert len(cache) == 30


def test_absorbing_needs_the_decoupled_key():
    """The algebra of the module docstring, on one head: W_UK folds into the query only without rotation."""
    g = torch.Generator().manual_seed(3)
    d_h, d_c, n = 8, 12, 6
    w_uk = torch.randn(d_h, d_c, generator=g, dtype=torch.float64)
    q, c = torch.randn(d_h, generator=g, dtype=torch.float64), torch.randn(n, d_c, generator=g, dtype=torch.float64)
    keys = c @ w_uk.T  # (n, d_h): k_j = W_UK c_j
    torch.testing.assert_close(keys @ q, c @ (w_uk.T @ q))  # absorbed: (W_UK^T q) . c_j
    rotary = rp.terms.Rotary(pairing="interleaved")

    def rot(x, pos):  # (m, d) rotated at pos (m,)
        return rp.kernels.rotary.rotate(x[None, None], pos, rotary)[0, 0]

    i, js = 5, torch.arange(n)
    true = rot(keys, js) @ rot(q[None], torch.tensor([i]))[0]  # RoPE on the full keys
    folded = c @ (w_uk.T @ rot(q[None], torch.tensor([i]))[0])  # one absorbed query for all j
    assert (true - folded).abs().max() > 1e-3  # wrong: the rotation sits between W_UK and c_j
    per_key = torch.stack([c[j] @ (w_uk.T @ rot(rot(q[None], torch.tensor([i])), torch.tensor([-j]))[0])
                           for j in range(n)])  # a different absorbed query per key: R_(j-i) in the middle
    torch.testing.assert_close(per_key, true)


def test_measured_bytes_per_token_match_the_formula():
    config = MLAConfig(**SIZES)
    layers = [MLAttention(config).to(torch.bfloat16) for _ in range(3)]
    cache = LatentCache(3)
    with torch.no_grad():
        x = torch.randn(1, 17, SIZES["d_model"], dtype=torch.bfloat16)
        for i, layer in enumerate(layers):
            layer(x, cache, i)
    held = cache.nbytes()
    assert held["latents"] == 3 * 17 * 24 * 2 and held["rope_keys"] == 3 * 17 * 8 * 2
    assert sum(held.values()) / 17 == latent_bytes_per_token(config, num_layers=3, dtype=torch.bfloat16)
    expected = rp.decoding.scale.bytes_per_token("MLA", num_layers=3, num_heads=4, head_dim=16, kv_lora_rank=24,
                                                 qk_rope_head_dim=8, dtype=torch.bfloat16)
    assert sum(held.values()) / 17 == expected


@pytest.mark.parametrize("kwargs,match", [
    (dict(qk_rope_head_dim=7), "qk_rope_head_dim must be even"),
    (dict(num_heads=0), "num_heads must be an integer >= 1"),
    (dict(scaling={"rope_type": "dynamic", "factor": 2, "original_max_position_embeddings": 8}),
     "scaling must not be dynamic"),
    (dict(base=1), "base must be a real number > 1"),
])
def test_bad_configurations_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MLAConfig(**dict(SIZES, **kwargs))


def test_a_latent_cache_refuses_another_model_by_name():
    """Another kv_lora_rank, another dtype, other weights of the same config, another layer: refused, not mixed."""
    config = MLAConfig(**SIZES)
    first, second = MLAttention(config), MLAttention(config)
    x = torch.randn(1, 3, SIZES["d_model"])
    with torch.no_grad():
        cache = LatentCache(1)
        first(x, cache, 0)
        with pytest.raises(ValueError, match="written by another MLA layer"):
            second(x[:, :1], cache, 0)  # same config, other weights
        with pytest.raises(ValueError, match="kv_lora_rank"):
            MLAttention(MLAConfig(**{**SIZES, "kv_lora_rank": 16}))(x[:, :1], cache, 0)
        with pytest.raises(ValueError, match="another dtype"):
            MLAttention(config).double()(x[:, :1].double(), cache, 0)
        with pytest.raises(ValueError, match="LatentCache"):
            first(x[:, :1], {"latents": []}, 0)
        assert len(cache) == 3  # nothing appended by a refused call
        first(x[:, :1], cache, 0)  # its own writer goes on
        assert len(cache) == 4
