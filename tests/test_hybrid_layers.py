"""Layers that differ: a per-layer scheme and sliding window in one Transformer (issue 24).

* The window is a mask: ``rp.attend(..., window=W)`` shows query i the keys at
  i - W + 1 .. i (itself and W - 1 before it) on every path; each path equals a per-row
  construction that attends over those keys only, and a fully hidden row gives 0.
  FlexAttention's block tables are checked block by block (its eager reference masks every
  pair, so only the compiled kernel, a slow test, skips what they leave out).
* Bad input (a window of 0, a window without causality, a bad pattern) is a ValueError
  naming the field.
* Cached decoding equals recomputation for hybrid patterns (float64, random weights, many
  steps past the window), in both RoPE cache layouts; a window layer keeps W - 1 tokens.
* The cache's bytes equal ``relpos_core.layers.cache_bytes`` at every step, and one more
  token adds ``bytes_per_token`` (the global layers only) once the windows are full.
* Hugging Face parity (random configs built locally, float64) at the attention layer for
  SmolLM3, Gemma 3, Cohere 2 and Llama 4 text: each layer's q, k, v are taken from the
  Hugging Face module's own projections (with Gemma 3's q/k norms, which are not position),
  attended with the relpos model's term and window for that layer, and projected out;
  Hugging Face's own output of the layer (its masks and rotary tables) must match.
* The lab and the language-model lab build and train a hybrid named by its pattern string.
"""
from __future__ import annotations

import math

import pytest
import torch

import relpos_core as rp
from relpos_core import registry
from relpos_core.layers import LayerSpec, bytes_per_token, cache_bytes, pattern
from relpos_core.models import Transformer, TransformerConfig
from relpos_core.oracles import hybrid

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SMALL = dict(d_model=16, num_heads=2, vocab_size=23, max_positions=64)


def _rows(q, k, v, term, window, qpos, kpos):
    """Per query: rp.attend without a window over the keys inside its window only (0 if none)."""
    form = "naive" if term is not None and term.logit_pieces else None
    out = []
    for i in range(q.shape[2]):
        idx = ((kpos <= qpos[i]) & (kpos > qpos[i] - window)).nonzero().squeeze(1)  # (K_i,)
        if idx.numel() == 0:
            out.append(torch.zeros_like(q[:, :, i:i + 1]))
            continue
        out.append(rp.attend(q[:, :, i:i + 1], k[:, :, idx], v[:, :, idx], term, form=form, backend="eager",
                             causal=True, query_positions=qpos[i:i + 1], key_positions=kpos[idx]))
    return torch.cat(out, dim=2)  # (B, H, Lq, d)


def _qkv(L, Lq=None, *, B=1, H=2, d=8, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Lq or L, d, generator=g, dtype=dtype)
    k, v = (torch.randn(B, H, L, d, generator=g, dtype=dtype) for _ in range(2))
    return q, k, v


WINDOW_SCHEMES = ("rope", "t5", "alibi", "shaw", "fire", "cope", "none")


@pytest.mark.flex_eager
@pytest.mark.parametrize("scheme", WINDOW_SCHEMES)
def test_window_mask_on_every_path_equals_rows_over_the_window(scheme):
    H, d, L, W = 2, 8, 24, 5
    term = registry.example_term(scheme, num_heads=H, head_dim=d, k=16, dtype=torch.float32)
    q, k, v = _qkv(L, dtype=torch.float32)
    pos = torch.arange(L)
    want = _rows(q, k, v, term, W, pos, pos)
    gapped = torch.tensor([0, 1, 5, 6, 7, 9, 12, 13, 14, 15, 16, 18, 19, 20, 22, 23, 24, 25, 26, 27, 28, 30, 31, 33])
    want_gapped = _rows(q[:, :, -6:], k, v, term, W, gapped[-6:], gapped)
    for p in registry.paths(scheme):
        got = rp.attend(q, k, v, term, form=p.form, backend=p.backend, causal=True, window=W, compiled=False)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5, msg=f"{p.form}/{p.backend}")
        if p.positions == "any":  # a cache's kept keys: gaps, queries the last 6
            got = rp.attend(q[:, :, -6:], k, v, term, form=p.form, backend=p.backend, causal=True, window=W,
                            compiled=False, key_positions=gapped)
            torch.testing.assert_close(got, want_gapped, atol=2e-6, rtol=1e-5, msg=f"{p.form}/{p.backend} gaps")


@pytest.mark.flex_eager
@pytest.mark.parametrize("W", [1, 37, 128, 129, 200])
def test_window_block_mask_over_several_blocks(W):
    """FlexAttention's block tables (128-token blocks) for a band: equal to the eager mask, also for
    queries placed after the keys (rows whose window holds no key give 0)."""
    term = registry.example_term("alibi", num_heads=2, head_dim=8, dtype=torch.float32)
    q, k, v = _qkv(300, dtype=torch.float32)
    for offset in (None, 150):
        run = dict(causal=True, window=W, form="gather", query_offset=offset)
        want = rp.attend(q, k, v, term, backend="eager", **run)
        got = rp.attend(q, k, v, term, backend="flex", compiled=False, **run)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(rp.attend(q, k, v, term, backend="sdpa", **run), want, atol=2e-6, rtol=1e-5)
    if W == 1:  # the inclusive convention: a window of one key is the query's own key
        out = rp.attend(q, k, v, None, causal=True, window=1)
        torch.testing.assert_close(out, v)


@pytest.mark.parametrize("W, offset", [(1, None), (37, None), (128, None), (129, None), (200, None), (37, 150)])
def test_window_block_tables_list_every_visible_block_and_only_whole_ones_as_full(W, offset):
    """FlexAttention's eager reference evaluates the mask at every pair, so the tables that let the
    compiled kernel skip blocks are checked here directly: a block listed as full must be visible
    at every pair (no mask is applied there), and every block with a visible pair must be listed."""
    from relpos_core.kernels.flex import BLOCK_SIZE, causal_block_mask
    from relpos_core.positions import resolve_positions

    pos = resolve_positions(300, 300, query_offset=offset).with_window(W)
    mask = causal_block_mask(pos)
    seen = pos.visible()  # (Lq, Lk)
    nq, nk = -(-300 // BLOCK_SIZE), -(-300 // BLOCK_SIZE)
    blocks = torch.zeros(nq, nk, dtype=torch.bool)  # any visible pair in the block
    for i in range(nq):
        for j in range(nk):
            blocks[i, j] = seen[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE, j * BLOCK_SIZE:(j + 1) * BLOCK_SIZE].any()
    listed = torch.zeros(nq, nk, dtype=torch.bool)
    for i in range(nq):
        full = mask.full_kv_indices[0, 0, i, :int(mask.full_kv_num_blocks[0, 0, i])].tolist()
        partial = mask.kv_indices[0, 0, i, :int(mask.kv_num_blocks[0, 0, i])].tolist()
        assert not set(full) & set(partial)
        for j in full:
            assert seen[i * BLOCK_SIZE:(i + 1) * BLOCK_SIZE, j * BLOCK_SIZE:(j + 1) * BLOCK_SIZE].all(), (i, j)
        listed[i, full + partial] = True
    assert torch.equal(listed, blocks)


@pytest.mark.slow
def test_window_on_the_compiled_flex_kernel():
    """The compiled kernel skips the blocks the tables leave out: it must equal the eager path."""
    term = registry.example_term("alibi", num_heads=2, head_dim=16, dtype=torch.float32)
    q, k, v = _qkv(300, d=16, dtype=torch.float32)
    for W in (37, 129):
        want = rp.attend(q, k, v, term, form="gather", backend="eager", causal=True, window=W)
        got = rp.attend(q, k, v, term, form="gather", backend="flex", causal=True, window=W, compiled=True)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


def test_window_as_wide_as_the_sequence_changes_nothing_and_a_narrow_one_does():
    q, k, v = _qkv(12)
    term = registry.example_term("rope", num_heads=2, head_dim=8, dtype=torch.float64)
    full = rp.attend(q, k, v, term, causal=True)
    torch.testing.assert_close(rp.attend(q, k, v, term, causal=True, window=12), full)
    assert not torch.allclose(rp.attend(q, k, v, term, causal=True, window=11), full)


@pytest.mark.parametrize("call, match", [
    (dict(window=0, causal=True), "window must be"),
    (dict(window=2.5, causal=True), "window must be"),
    (dict(window=3, causal=False), "window=3 .* needs causal=True"),
])
def test_attend_refuses_a_bad_window(call, match):
    q, k, v = _qkv(4)
    with pytest.raises(ValueError, match=match):
        rp.attend(q, k, v, None, **call)


@pytest.mark.parametrize("make, match", [
    (lambda: LayerSpec("rope", window=0), "window must be"),
    (lambda: LayerSpec("nonsense"), "scheme must be one of"),
    (lambda: LayerSpec("rope", {"bas": 3}), "bas"),
    (lambda: LayerSpec.parse("rope@window"), "option=value"),
    (lambda: pattern("rope", repeat=0), "repeat must be"),
    (lambda: TransformerConfig("rope", layers=("rope",)), "either scheme"),
    (lambda: TransformerConfig(layers=("rope", "none"), num_layers=3), "num_layers must equal len"),
    (lambda: TransformerConfig(layers="rope"), "layers must be a non-empty sequence"),
    (lambda: TransformerConfig(layers=("rope@window=4",), causal=False), "sliding window .* causal=True"),
    (lambda: Transformer(TransformerConfig(layers=("absolute", "rope"))), "adds its positions to the tokens"),
    (lambda: TransformerConfig(layers=("deberta_emd", "rope")), "deberta_emd"),
])
def test_bad_layers_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        m = make()
        Transformer(m) if isinstance(m, TransformerConfig) else None


def test_pattern_spelling():
    layers = pattern("rope@window=4096", repeat=3, then="none", cycles=2)
    assert [str(s) for s in layers[:4]] == ["rope@window=4096"] * 3 + ["none"]
    assert len(layers) == 8 and layers[4:] == layers[:4]
    assert LayerSpec.parse("rope@base=1000000,window=8") == LayerSpec("rope", {"base": 1000000}, 8)
    cfg = TransformerConfig(layers=layers, **SMALL)
    assert cfg.num_layers == 8 and cfg.windows == (4096, 4096, 4096, None) * 2
    assert cfg.label == "rope@window=4096 x3, none, rope@window=4096 x3, none"
    single = TransformerConfig("rope", num_layers=3)  # the single-scheme config is what it was
    assert single.layers is None and single.windows == (None,) * 3 and single.label == "rope"


GEMMA_LIKE = pattern("rope@base=10000,window=4", repeat=2, then="rope@base=1000000")
PATTERNS = {
    "rnope_swa": pattern("rope@window=4", repeat=3, then="none"),  # Command A's shape
    "gemma_like": GEMMA_LIKE,  # two RoPE bases, local and global
    "t5_window": pattern("t5@window=3", repeat=1, then="alibi"),  # a table scheme on a window
}


def _shared_paths(model):
    """The dense (form, backend) paths that decode every layer's scheme (float64: no flex)."""
    paths = [set(rp.models.decode_paths(e.name)) for e in model.config.entries]
    return sorted(p for p in set.intersection(*paths) if p[1] != "flex")


def _model(layers, seed=0):
    return Transformer(TransformerConfig(layers=layers, **SMALL), seed=seed, dtype=torch.float64)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_cached_decoding_equals_recompute(name):
    model = _model(PATTERNS[name])
    tokens = torch.randint(0, SMALL["vocab_size"], (2, 14), generator=torch.Generator().manual_seed(1))
    want = model.recompute(tokens)  # (B, T, V): one forward, every window a mask
    layouts = ("rotated", "unrotated") if model._rotary() is not None else (None,)
    for layout in layouts:
        for prefill in (1, 6):
            for form, backend in _shared_paths(model):
                cache = model.new_cache(rope_layout=layout)
                got = model.decode(tokens, cache, prefill=prefill, form=form, backend=backend)
                torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
                for w, held in zip(model.config.windows, cache.held):
                    assert held == (14 if w is None else w - 1)
    # the windows matter: the same weights without them give other logits
    plain = [LayerSpec(s.scheme, s.position) for s in PATTERNS[name]]
    assert not torch.allclose(_model(plain)(tokens), want)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_cached_decoding_on_each_path_and_generate(backend):
    model = _model(PATTERNS["rnope_swa"])
    tokens = torch.randint(0, SMALL["vocab_size"], (1, 12), generator=torch.Generator().manual_seed(2))
    want = model.recompute(tokens, backend=backend)
    torch.testing.assert_close(model.decode(tokens, model.new_cache(), backend=backend), want, atol=1e-10, rtol=0)
    prompt = tokens[:, :3]
    torch.testing.assert_close(model.generate(prompt, 9, model.new_cache(), backend=backend),
                               model.generate(prompt, 9, backend=backend))


def test_hybrid_without_windows_evicts_globally_and_rerotates_only_rope_layers():
    """SmolLM3's shape (RoPE, RoPE, RoPE, NoPE): the sink + window cache in the cache frame turns
    the kept RoPE keys and leaves the NoPE layer's keys alone; equal to recompute."""
    model = _model(pattern("rope", repeat=3, then="none"))
    tokens = torch.randint(0, SMALL["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(3))
    for layout in ("rotated", "unrotated"):
        for frame in ("cache", "original"):
            cache = model.new_cache(sinks=1, window=3, positions=frame, rope_layout=layout)
            got = model.decode(tokens, cache)
            want = model.recompute(tokens, sinks=1, window=3, positions=frame)
            torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def test_cache_and_recompute_refuse_a_global_window_with_window_layers():
    model = _model(PATTERNS["rnope_swa"])
    with pytest.raises(ValueError, match="cannot be combined"):
        model.new_cache(window=4)
    with pytest.raises(ValueError, match="cannot be combined"):
        model.recompute(torch.zeros(1, 5, dtype=torch.long), window=4)
    cache = model.new_cache()
    model.decode(torch.zeros(1, 8, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="window layers have dropped"):
        cache.truncate(2)


def test_a_cache_for_another_pattern_is_refused():
    a, b = _model(PATTERNS["rnope_swa"]), _model(pattern("rope@window=5", repeat=3, then="none"))
    with pytest.raises(ValueError, match="another model"):
        b(torch.zeros(1, 2, dtype=torch.long), a.new_cache())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cache_bytes_match_the_formula(dtype):
    """Per layer and in total at every step; one more token adds the global layers' K and V (and
    its position) once every window is full. Window W = 8: a window layer holds 7 tokens."""
    layers = pattern("rope@window=8", repeat=3, then="none", cycles=2)
    cfg = TransformerConfig(layers=layers, **SMALL)
    model = Transformer(cfg, dtype=dtype)
    B, T = 2, 30
    tokens = torch.randint(0, SMALL["vocab_size"], (B, T), generator=torch.Generator().manual_seed(4))
    cache, measured = model.new_cache(), []
    sizes = dict(num_heads=cfg.num_heads, head_dim=cfg.head_dim, dtype=dtype, batch=B)
    for t in range(T):
        model(tokens[:, t:t + 1], cache)
        want = cache_bytes(cfg.windows, t + 1, **sizes)
        assert cache.layer_nbytes() == want["layers"]
        got = cache.nbytes()
        assert (got["keys"], got["values"], got["positions"]) == (want["keys"], want["values"], want["positions"])
        measured.append(sum(got.values()))
    per_token = bytes_per_token(cfg.windows, **sizes)
    assert all(b - a == per_token for a, b in zip(measured[10:], measured[11:]))
    # the global layers alone: 2 of 8 layers; a window layer stays at 7 tokens
    size = torch.empty(0, dtype=dtype).element_size()
    assert per_token == 2 * 2 * B * cfg.num_heads * cfg.head_dim * size + 8
    assert cache.layer_nbytes()[0] == 2 * B * cfg.num_heads * cfg.head_dim * size * 7


# -- Hugging Face parity ------------------------------------------------------------------------------------

HF = dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=4,
          head_dim=8, max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
SLIDING = ["sliding_attention"] * 3 + ["full_attention"]


# Hugging Face forms RoPE's angles in float32 (its rotary embeddings call .float()), ours in float64: at the
# 13 positions here the rotating layers differ by at most 5e-10 (Gemma 3's base 1e6), the others by 1e-17.
# Hugging Face's eager path takes the softmax in float32, so its SDPA path is the oracle.
ROTATED_TOL = dict(atol=1e-8, rtol=1e-8)
EXACT_TOL = dict(atol=1e-10, rtol=1e-10)


def _hf_configs():
    T = pytest.importorskip("transformers")
    return {
        "smollm3": (T.SmolLM3Config, T.SmolLM3ForCausalLM,
                    dict(num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0], rope_theta=5e4)),
        "gemma3": (T.Gemma3TextConfig, T.Gemma3ForCausalLM,
                   dict(num_hidden_layers=6, sliding_window=5, sliding_window_pattern=3, rope_local_base_freq=1e4,
                        rope_theta=1e6, query_pre_attn_scalar=16, attn_logit_softcapping=None)),
        "cohere2": (T.Cohere2Config, T.Cohere2ForCausalLM,
                    dict(num_hidden_layers=4, sliding_window=5, layer_types=SLIDING, rope_theta=5e4)),
        "llama4": (T.Llama4TextConfig, T.Llama4ForCausalLM,
                   dict(num_hidden_layers=4, no_rope_layers=[1, 1, 1, 0], attention_chunk_size=None,
                        attn_temperature_tuning=False, use_qk_norm=False, rope_theta=5e4, num_local_experts=2,
                        intermediate_size_mlp=48)),
    }


def _hf_model(name):
    config_class, model_class, extra = _hf_configs()[name]
    config = config_class(**HF, **extra)
    config._attn_implementation = "sdpa"  # its eager path takes the softmax in float32
    torch.manual_seed(0)
    return model_class(config).to(torch.float64).eval()


def _layer_inputs_and_outputs(model, ids):
    """Each decoder layer's attention input hidden states and output, from Hugging Face's own forward."""
    seen = []

    def hook(module, args, kwargs, output):
        seen.append((kwargs.get("hidden_states", args[0] if args else None), output[0]))

    handles = [layer.self_attn.register_forward_hook(hook, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    return seen


def _relpos_attention(attn, x, term, window, *, backend):
    """attn's projections (and Gemma 3's q/k norms, applied before the rotation as Hugging Face does),
    then rp.attend with relpos' term and window, then attn's output projection."""
    B, L, _ = x.shape
    d = attn.head_dim

    def heads(proj):
        return proj(x).view(B, L, -1, d).transpose(1, 2)  # (B, H, L, d)

    q, k, v = heads(attn.q_proj), heads(attn.k_proj), heads(attn.v_proj)
    if hasattr(attn, "q_norm"):
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = q * (attn.scaling * d ** 0.5)  # Gemma 3's query_pre_attn_scalar: a scale on q, not a position
    form = None if term is None or not term.logit_pieces else "gather"
    out = rp.attend(q, k, v, term, form=form, backend=backend, causal=True, window=window)  # (B, H, L, d)
    return attn.o_proj(out.transpose(1, 2).reshape(B, L, -1))  # (B, L, D)


@pytest.mark.parametrize("name", ["smollm3", "gemma3", "cohere2", "llama4"])
def test_hugging_face_parity_per_layer(name):
    """Attention-layer parity in float64 (``EXACT_TOL``; ``ROTATED_TOL`` for rotating layers): the
    models differ from relpos' Transformer in non-position ways (norms, MLPs, MoE, Cohere's parallel block), so the
    comparison is per attention layer; the layer pattern is read from the Hugging Face config
    by ``relpos_core.oracles.hybrid`` and run by the relpos model's own terms and windows."""
    hf = _hf_model(name)
    layers = hybrid.LAYERS_FROM_CONFIG[hf.config.model_type](hf.config)
    cfg = TransformerConfig(layers=layers, d_model=hf.config.hidden_size, num_heads=HF["num_attention_heads"],
                            head_dim=HF["head_dim"], vocab_size=HF["vocab_size"], max_positions=64)
    model = Transformer(cfg, dtype=torch.float64)
    terms = model.position_terms()
    ids = torch.randint(3, HF["vocab_size"], (2, 13), generator=torch.Generator().manual_seed(5))
    captured = _layer_inputs_and_outputs(hf, ids)
    assert len(captured) == cfg.num_layers
    with torch.no_grad():
        for layer, (x, want) in enumerate(captured):
            for backend in ("eager", "sdpa"):
                got = _relpos_attention(hf.model.layers[layer].self_attn, x, terms[layer], cfg.windows[layer],
                                        backend=backend)
                tol = ROTATED_TOL if terms[layer] is not None and terms[layer].rotary is not None else EXACT_TOL
                torch.testing.assert_close(got, want, **tol,
                                           msg=f"{name} layer {layer} ({layers[layer]}) on {backend}")


def test_hugging_face_patterns_read_from_the_configs():
    """What each published design looks like in relpos' spelling (from the random configs above)."""
    read = {n: hybrid.LAYERS_FROM_CONFIG[_hf_model(n).config.model_type](_hf_model(n).config)
            for n in ("smollm3", "gemma3", "cohere2", "llama4")}
    assert read["smollm3"] == ("rope@base=50000.0",) * 3 + ("none",)
    assert read["gemma3"][:3] == ("rope@base=10000.0,window=5",) * 2 + ("rope@base=1000000.0",)
    assert read["gemma3"] == read["gemma3"][:3] * 2
    assert read["cohere2"] == ("rope@base=50000.0,pairing=interleaved,window=5",) * 3 + ("none",)
    assert read["llama4"] == ("rope@base=50000.0,pairing=interleaved",) * 3 + ("none",)
    # Cohere 2's layer types from sliding_window_pattern (every 4th layer global), as its published config does
    T = pytest.importorskip("transformers")
    config = T.Cohere2Config(**{**HF, "num_hidden_layers": 8}, sliding_window=6, sliding_window_pattern=4)
    assert hybrid.cohere2_layers(config) == (("rope@base=10000.0,pairing=interleaved,window=6",) * 3 + ("none",)) * 2


def test_hugging_face_features_not_reproduced_are_refused():
    config_class, _, extra = _hf_configs()["llama4"]
    with pytest.raises(ValueError, match="attn_temperature_tuning"):
        hybrid.llama4_layers(config_class(**HF, **{**extra, "attn_temperature_tuning": True}))
    with pytest.raises(ValueError, match="chunked attention"):
        hybrid.llama4_layers(config_class(**HF, **{**extra, "attention_chunk_size": 4}))
    config_class, _, extra = _hf_configs()["gemma3"]
    with pytest.raises(ValueError, match="softcapping"):
        hybrid.gemma3_layers(config_class(**HF, **{**extra, "attn_logit_softcapping": 50.0}))


# -- the lab and the language-model lab name a hybrid model by its pattern string ---------------------------

def test_pattern_strings_round_trip_and_bad_ones_are_refused():
    from relpos_core.layers import is_pattern, parse_pattern

    layers = pattern("rope@base=500000,window=8", repeat=3, then="none", cycles=2)
    label = TransformerConfig(layers=layers, **SMALL).label
    assert label == "rope@base=500000,window=8 x3, none, rope@base=500000,window=8 x3, none"
    assert parse_pattern(label) == layers and is_pattern(label) and not is_pattern("rope")
    with pytest.raises(ValueError, match="repeat count"):
        parse_pattern("rope x0, none")
    with pytest.raises(ValueError, match="scheme must be one of"):
        parse_pattern("rope x3, nope")


def test_the_lab_trains_a_hybrid_named_by_its_pattern():
    import json
    from dataclasses import replace

    from relpos_core.lab.presets import get_preset
    from relpos_core.lab.train import train_run

    preset = get_preset("tiny")
    tasks = {k: replace(t, cap=4, batch_size=8, eval_rows=4, probes=t.probes[:1]) for k, t in preset.tasks.items()}
    quick = replace(preset, tasks=tasks, solve_threshold=1.0, solve_window=50, warmup_steps=2)
    spec = replace(quick.run("retrieval/none"), variant="rnope-swa", scheme="rope@window=8 x1, none")
    record, model = train_run(quick, spec, seed=0, lr=3e-3)
    assert model.config.windows == (8, None) and record["model"]["layers"] == "rope@window=8, none"
    json.dumps(record)  # the record is JSON (the results file)
    assert record["steps"] == 16 and all(math.isfinite(c[1]) for c in record["curve"])


def test_the_language_model_lab_builds_a_hybrid_named_by_its_pattern():
    from relpos_core.lab.models import build_model
    from relpos_core.lm import presets, train

    p = presets.get_preset("tiny")
    name = "rope@window=16, none"
    model = build_model(train.model_config(p, name), seed=0)
    assert model.config.label == name and model.config.num_layers == 2
    tokens = torch.randint(0, 256, (2, 24))
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    assert all(p.grad is not None for p in model.blocks.parameters())
    with pytest.raises(ValueError, match="position must be empty for a layer pattern"):
        train.model_config(p, name, position={"base": 3.0})


def test_a_single_scheme_config_records_as_before():
    """Results files: a single-scheme config's record has exactly the fields it had (no ``layers``)."""
    cfg = TransformerConfig("rope", num_layers=3)
    assert cfg.record() == {k: v for k, v in vars(cfg).items() if k != "layers"}
    assert TransformerConfig(layers=("rope", "none"), **SMALL).record()["layers"] == "rope, none"


# -- options a pattern string spells: dict-valued ones field by field, each checked by name --------------

LOG_LENGTH = "length_scaling.type=log_length,length_scaling.train_length=16"


def test_a_pattern_spells_the_length_scaling_options_and_round_trips():
    from relpos_core.layers import parse_pattern
    from relpos_core.pieces.length_scaling import LengthScaling

    text = f"rope@{LOG_LENGTH},window=4 x2, none@{LOG_LENGTH}"
    layers = parse_pattern(text)
    assert layers[0] == LayerSpec("rope", {"length_scaling": {"type": "log_length", "train_length": 16}}, 4)
    assert layers[0] == layers[1] and layers[2].scheme == "none"
    scaling = layers[0].options.length_scaling
    assert isinstance(scaling, LengthScaling) and (scaling.method, scaling.train_length) == ("log_length", 16.0)
    assert layers[2].options.length_scaling == scaling
    label = TransformerConfig(layers=layers, **SMALL).label
    assert label == text and parse_pattern(label) == layers
    # other dict options and literals: a context-extension scaling, ssmax, True/False/None
    spec = LayerSpec.parse("rope@scaling.rope_type=linear,scaling.factor=4,rotary_dim=None")
    assert spec.position == {"scaling": {"rope_type": "linear", "factor": 4}, "rotary_dim": None}
    assert LayerSpec.parse(str(spec)) == spec
    assert LayerSpec.parse("shaw@value=False").options.value is False
    assert LayerSpec.parse("none@length_scaling.type=ssmax").options.length_scaling.method == "ssmax"


def test_a_pattern_with_length_scaling_trains_and_its_ssmax_scale_is_learned():
    model = Transformer(TransformerConfig(layers=("rope@length_scaling.type=ssmax,window=4",
                                                  "none@length_scaling.type=ssmax"), **SMALL), seed=0)
    tokens = torch.randint(0, SMALL["vocab_size"], (2, 12))
    model(tokens).sum().backward()
    scales = [p for n, p in model.named_parameters() if "ssmax" in n]
    assert len(scales) == 2 and all(p.grad is not None and p.grad.abs().sum() > 0 for p in scales)


def test_log_length_in_a_pattern_changes_the_logits_only_past_its_training_length():
    """Factor log n / log 16: 1 for the query that sees 16 keys, so that row's output equals plain RoPE's."""
    plain = Transformer(TransformerConfig(layers=("rope",), **SMALL), seed=0).eval()
    scaled = Transformer(TransformerConfig(layers=(f"rope@{LOG_LENGTH}",), **SMALL), seed=0).eval()
    tokens = torch.randint(0, SMALL["vocab_size"], (1, 20))
    a, b = plain(tokens), scaled(tokens)  # (1, 20, V)
    torch.testing.assert_close(a[:, 15], b[:, 15])  # query 15 sees 16 keys
    assert not torch.allclose(a[:, 19], b[:, 19]) and not torch.allclose(a[:, 3], b[:, 3])


@pytest.mark.parametrize("text, match", [
    ("rope@base=abc", "position option base of rope must be a number, got 'abc'"),
    ("rope@rotary_dim=4.5", "rotary_dim of rope must be an integer or None"),
    ("rope@pairing=1", "pairing of rope must be a string"),
    ("shaw@value=1", "value of shaw must be True or False"),
    ("rope@keep_fraction=2", "keep_fraction must be a real number in"),
    ("rope@bogus=1", r"\['bogus'\] are not options of rope"),
    ("rope@base=1,base=2", "'base' is given twice"),
    ("rope@length_scaling=3", "length_scaling must be None, a LengthScaling or a dict"),
    ("rope@length_scaling=3,length_scaling.type=ssmax", "given both a value and fields"),
    ("rope@length_scaling.type=log_len", "length_scaling type must be one of"),
    ("rope@length_scaling.type=log_length,length_scaling.train_length=1", "train_length must be a finite number > 1"),
    ("rope@length_scaling.type=log_length,length_scaling.init=2", r"takes \['train_length'\], got unknown \['init'\]"),
    ("none@length_scaling.type=llama4,length_scaling.attn_scale=x", "attn_scale must be a finite number"),
    ("rope@.type=ssmax", "option=value or option.field=value"),
    ("rope@window.size=4", "window must be an integer >= 1"),
    ("rope@scaling.rope_type=linear", "needs the field"),
])
def test_bad_pattern_options_are_refused_by_name(text, match):
    from relpos_core.layers import parse_pattern

    with pytest.raises(ValueError, match=match):
        parse_pattern(text + ", none")


def test_an_option_without_a_pattern_spelling_is_refused_when_labelled():
    from relpos_core.pieces.length_scaling import LengthScaling

    spec = LayerSpec("rope", {"length_scaling": LengthScaling("log_length", train_length=16)})
    with pytest.raises(ValueError, match="no pattern spelling"):
        str(spec)
