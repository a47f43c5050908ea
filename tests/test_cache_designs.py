"""The cache of 2025-26 designs (relpos_core.decoding.designs): hybrid patterns, partial
RoPE, quantised caches and tensor-parallel replication, against the library's measured
caches where one exists, and in exact integer arithmetic elsewhere."""
from fractions import Fraction

import pytest
import torch

import relpos_core as rp
from relpos_core.decoding import designs as D
from relpos_core.mla import LatentCache, MLAConfig, MLAttention

B, VOCAB, WINDOW, T = 2, 11, 5, 13
WIN, GLOBAL, NOPE = D.Layer("window", WINDOW), D.Layer("global"), D.Layer("global", rotary=False)


def _model(position=None, layers=2, scheme="rope"):
    cfg = rp.models.TransformerConfig(scheme=scheme, position=position or {}, vocab_size=VOCAB, d_model=16,
                                      num_heads=2, num_layers=layers, max_positions=32)
    return rp.models.Transformer(cfg, seed=1, dtype=torch.float64)


def _tokens(n=T):
    return torch.randint(0, VOCAB, (B, n), generator=torch.Generator().manual_seed(0))


def _layer_bytes(cache, layer):  # measured: the (B, H, K, d) key and value tensors of one layer
    return sum(t.numel() * t.element_size() for t in (cache.keys[layer], cache.values[layer]))


# -- hybrid patterns against the library's KVCache ---------------------------------------------------
def test_window_and_global_layers_cache_what_the_formula_says():
    model, tokens = _model(), _tokens()
    sizes = dict(num_kv_heads=2, head_dim=8, element_bytes=8, batch=B)  # float64
    for window, layer in ((None, GLOBAL), (WINDOW, WIN)):
        cache = model.new_cache(window=window)
        model.decode(tokens, cache, prefill=3)
        measured = cache.nbytes()
        assert measured["keys"] + measured["values"] == D.cache_bytes([layer] * 2, T, **sizes)
        assert _layer_bytes(cache, 0) == D.layer_bytes(layer, T, **sizes)
    assert D.kept_tokens(WIN, T) == WINDOW and D.kept_tokens(GLOBAL, T) == T


def test_a_hybrid_cache_is_its_layers_caches():
    """A 3:1 pattern's cache is the sum of its layers' measured caches: window layers from a
    windowed cache, global layers from a full one (one model, decoded twice)."""
    model, tokens = _model(), _tokens()
    full, windowed = model.new_cache(), model.new_cache(window=WINDOW)
    model.decode(tokens, full, prefill=2)
    model.decode(tokens, windowed, prefill=2)
    pattern = D.repeat([WIN, WIN, WIN, NOPE], 8)
    measured = sum(_layer_bytes(windowed if x.kind == "window" else full, i % 2) for i, x in enumerate(pattern))
    assert measured == D.cache_bytes(pattern, T, num_kv_heads=2, head_dim=8, element_bytes=8, batch=B)
    assert measured == 8 * 2 * 2 * 8 * 8 * B * (3 * WINDOW + T) // 4


def test_share_saved_is_exact():
    block = [D.Layer("window", 4096)] * 3 + [NOPE]
    assert D.share_saved(block, 262144) == Fraction(3, 4) * (1 - Fraction(4096, 262144)) == Fraction(189, 256)
    assert D.share_saved(block, 4096) == 0  # the window is not full yet: nothing saved
    assert D.share_saved(D.repeat(block, 64), 262144) == Fraction(189, 256)  # whole blocks: any count
    gemma = D.repeat([D.Layer("window", 1024)] * 5 + [GLOBAL], 26)  # 22 local, 4 global layers
    assert D.share_saved(gemma, 32768) == Fraction(22 * (32768 - 1024), 26 * 32768)
    assert D.bytes_per_token(block, 8192, num_kv_heads=1, head_dim=1) == Fraction(2 * (3 * 4096 + 8192) * 2, 8192)


def test_the_command_a_preset_saves_73_8_percent_at_256k():
    ca = D.PATTERNS["Command A"]
    assert ca.context.value == 262144 and not ca.sized
    assert D.share_saved(ca.block, ca.context.value) == Fraction(189, 256)
    with pytest.raises(ValueError, match="not confirmed"):
        ca.cache_bytes(1024)
    with pytest.raises(ValueError, match="pass num_layers"):
        ca.layers()
    assert [r[2] for r in ca.sources()].count("not confirmed") == 3


def test_presets_cite_the_bibliography_and_match_transformers():
    from pybtex.database import parse_file
    from pathlib import Path

    keys = set(parse_file(str(Path(__file__).parents[1] / "references.bib")).entries)
    for p in D.PATTERNS.values():
        for row in p.sources():
            if row[2] != "not confirmed":
                assert row[3].split(":")[0] in keys, row
    transformers = pytest.importorskip("transformers")
    scout, smol = transformers.Llama4TextConfig(), transformers.SmolLM3Config()
    for preset, cfg in ((D.PATTERNS["Llama 4 Scout"], scout), (D.PATTERNS["SmolLM3 3B"], smol)):
        layers = preset.layers()
        assert len(layers) == cfg.num_hidden_layers and preset.num_kv_heads.value == cfg.num_key_value_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        assert preset.head_dim.value == head_dim
        assert [int(x.rotary) for x in layers] == list(cfg.no_rope_layers)  # 1: RoPE, 0: NoPE
    assert [x.kind == "chunk" for x in D.PATTERNS["Llama 4 Scout"].layers()] == \
        [t == "chunked_attention" for t in scout.layer_types]
    assert D.PATTERNS["Llama 4 Scout"].block[0].span == scout.attention_chunk_size
    cohere = transformers.Cohere2Config()
    block = D.PATTERNS["Command A"].block
    sliding = [t == "sliding_attention" for t in cohere.layer_types[:8]]
    assert [x.kind == "window" for x in D.repeat(block, 8)] == sliding
    assert block[0].span == cohere.sliding_window


# -- partial RoPE ---------------------------------------------------------------------------------
def test_a_partially_rotated_key_is_cached_in_the_same_bytes():
    tokens = _tokens()
    caches = {}
    for name, position in (("full", {}), ("partial", {"rotary_dim": 4})):
        model = _model(position)
        caches[name] = cache = model.new_cache(rope_layout="rotated")
        model.decode(tokens, cache, prefill=2)
        plain = model.new_cache(rope_layout="unrotated")
        model.decode(tokens, plain, prefill=2)
        caches[name + " unrotated"] = plain
    sizes = {n: sum(c.nbytes()[k] for k in ("keys", "values")) for n, c in caches.items()}
    assert len(set(sizes.values())) == 1  # one (B, H, K, d) layout's bytes for all four
    split = D.rotary_split(8, 4)
    assert split == dict(rotated=4, unrotated=4, pairs=2, elements=8)
    rotated, plain = caches["partial"].keys[0], caches["partial unrotated"].keys[0]  # (B, H, K, d)
    torch.testing.assert_close(rotated[..., split["rotated"]:], plain[..., split["rotated"]:], rtol=0, atol=0)
    assert (rotated[..., :split["rotated"]] - plain[..., :split["rotated"]]).abs().max() > 1e-3


def test_mla_caches_its_latent_and_rotary_key_on_every_rank():
    config = MLAConfig(d_model=32, num_heads=4, kv_lora_rank=24, qk_nope_head_dim=8, qk_rope_head_dim=8,
                       v_head_dim=8)
    layers = [MLAttention(config).double() for _ in range(2)]
    cache = LatentCache(2)
    with torch.no_grad():
        x = torch.randn(1, 9, 32, dtype=torch.float64)
        for i, layer in enumerate(layers):
            layer(x, cache, i)
    held = sum(cache.nbytes().values())
    for tp in (1, 2, 4):
        assert held == 9 * D.per_rank_bytes("MLA", tp=tp, num_layers=2, kv_lora_rank=24, qk_rope_head_dim=8,
                                             element_bytes=8)
    assert D.replication("MLA", tp=4, num_layers=2, kv_lora_rank=24, qk_rope_head_dim=8) == 4


# -- quantisation ---------------------------------------------------------------------------------
def test_quantised_bytes_count_the_scales_and_zero_points():
    assert D.quantized_bytes(4096, "bf16") == 8192
    assert D.quantized_bytes(4096, "fp8", group_size=4096) == 4096 + 2  # one per-tensor scale
    assert D.quantized_bytes(4096, "int4", group_size=128) == 2048 + 32 * 2 * 2  # scale + zero point per group
    assert D.quantized_bytes(100, "int4", group_size=32) == 50 + 4 * 4  # the short last group has its own
    assert D.quantized_bytes(4096, "int4", group_size=32) / 4096 == Fraction(5, 8)  # 4 bits + 32 / 32 bits


def test_kivi_keeps_the_newest_tokens_in_full_precision():
    sizes = dict(num_layers=1, num_kv_heads=1, head_dim=128)
    assert D.kivi_bytes(100, **sizes) == 2 * 100 * 128 * 2  # under the residual: nothing quantised
    q = 896  # 1000 tokens: 7 flushes of 128, 104 waiting
    keys = q * 128 * 2 // 8 + (q // 32) * 128 * 4
    values = q * 128 * 2 // 8 + q * 4 * 4
    assert D.kivi_bytes(1000, **sizes) == keys + values + 2 * 104 * 128 * 2
    assert D.kivi_bytes(1024, bits=4, **sizes) == 2 * 1024 * 64 + 32 * 128 * 4 + 1024 * 4 * 4


# -- tensor parallelism ---------------------------------------------------------------------------
def test_gqa_heads_split_then_replicate():
    sizes = dict(num_layers=32, head_dim=128, num_kv_heads=8)
    per_rank = {tp: D.per_rank_bytes("GQA", tp=tp, **sizes) for tp in (1, 2, 4, 8, 16, 32)}
    assert per_rank == {1: 131072, 2: 65536, 4: 32768, 8: 16384, 16: 16384, 32: 16384}
    assert [D.replication("GQA", tp=tp, **sizes) for tp in (8, 16, 32)] == [1, 2, 4]


@pytest.mark.parametrize("call, match", [
    (lambda: D.Layer("window"), "span must be an integer >= 1"),
    (lambda: D.Layer("global", 8), "span must be None"),
    (lambda: D.Layer("ring", 8), "kind must be one of"),
    (lambda: D.Layer(rotary=1), "rotary must be True or False"),
    (lambda: D.repeat([], 4), "block must be a non-empty"),
    (lambda: D.repeat([GLOBAL], 0), "num_layers must be an integer >= 1"),
    (lambda: D.kept_tokens(GLOBAL, -1), "context must be an integer >= 0"),
    (lambda: D.cache_bytes([], 8, num_kv_heads=1, head_dim=8), "layers must be a non-empty"),
    (lambda: D.cache_bytes([GLOBAL], 8, num_kv_heads=0, head_dim=8), "num_kv_heads must be an integer >= 1"),
    (lambda: D.cache_bytes([GLOBAL], 8, num_kv_heads=1, head_dim=8, element_bytes=0), r"element_bytes must be"),
    (lambda: D.share_saved([GLOBAL], 0), "context must be an integer >= 1"),
    (lambda: D.rotary_split(8, 10), r"rotary_dim must be an integer in \[2, 8\]"),
    (lambda: D.rotary_split(8, 3), "rotary_dim must be even"),
    (lambda: D.quantized_bytes(8, "int3", group_size=4), "fmt must be one of"),
    (lambda: D.quantized_bytes(8, "int4"), "group_size must be an integer >= 1"),
    (lambda: D.quantized_bytes(8, "bf16", group_size=4), "group_size must be None"),
    (lambda: D.kivi_bytes(8, num_layers=1, num_kv_heads=1, head_dim=8, residual=100), "residual must be a multiple"),
    (lambda: D.kivi_bytes(8, num_layers=1, num_kv_heads=1, head_dim=8, bits=3), "bits must be one of"),
    (lambda: D.per_rank_bytes("GQA", tp=3, num_layers=1, head_dim=8, num_kv_heads=8), "tp must divide"),
    (lambda: D.per_rank_bytes("GQA", tp=0, num_layers=1, head_dim=8, num_kv_heads=8), "tp must be an integer"),
    (lambda: D.per_rank_bytes("MHA", tp=1, num_layers=1), "kind must be one of"),
    (lambda: D.per_rank_bytes("MLA", tp=1, num_layers=1), "kv_lora_rank must be an integer >= 1"),
])
def test_bad_input_is_refused_naming_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
