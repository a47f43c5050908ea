"""relpos_core.decoding: cached decoding equals recomputation, for every scheme and path.

* Every (form, backend) of the registry that decodes a scheme (``decode_paths``): the
  logits of step-by-step decoding with a KV cache equal those of one full forward pass,
  token by token (float64 on eager and SDPA; FlexAttention's eager reference in float32).
* Sliding-window eviction with attention sinks, at original and at renumbered
  positions, equals recomputation over the kept tokens (``Decoder.recompute``), and
  for one layer equals a float64 construction from the papers' formulas
  (``tests/references_attend.py``) that shares no code with the cache.
* The byte formulas of ``relpos_core.decoding.ledger`` equal the real tensors' sizes.

Tiny models and one CPU thread (module fixture): a decode step is a few small
operations, where a second thread only adds waiting on a shared machine.
"""
from __future__ import annotations

import json
import math
import warnings

import pytest
import torch

import relpos_core as rp
from relpos_core import decoding as dec
from relpos_core.schemes import transformer_xl as txl_mod
from tests.references_attend import REFERENCES

T, B, VOCAB = 8, 2, 32
SINKS, WINDOW = 2, 3


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _model(scheme, *, layers=2, dtype=torch.float64, **kw):
    cfg = dec.DecoderConfig(scheme=scheme, vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=layers,
                            max_positions=24, max_relative_position=3, num_buckets=8, max_distance=12, **kw)
    return dec.Decoder(cfg, seed=3, dtype=dtype)


def _tokens(n=T, seed=0):
    return torch.randint(0, VOCAB, (B, n), generator=torch.Generator().manual_seed(seed))


def _layouts(scheme):
    return ["rotated", "unrotated"] if scheme == "rope" else [None]


def _cases(*, flex: bool):
    out = []
    for scheme in dec.SCHEMES:
        for form, backend in dec.decode_paths(scheme):
            if (backend == "flex") == flex:
                out += [(scheme, form, backend, layout) for layout in _layouts(scheme)]
    return out


def _id(case):
    return "-".join(str(x) for x in case if x is not None)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # flex's eager reference says it is unfused
        return fn(*args, **kwargs)


# -- no eviction: every scheme on every path ------------------------------------------------
@pytest.mark.parametrize("case", _cases(flex=False), ids=_id)
def test_cached_decoding_equals_full_recomputation(case):
    scheme, form, backend, layout = case
    model, tokens = _model(scheme), _tokens()
    full = model(tokens, form=form, backend=backend)  # (B, T, V): one call per layer, Lq = Lk = T
    cache = model.new_cache(rope_layout=layout)
    stepped = model.decode(tokens, cache, prefill=3, form=form, backend=backend)  # 3 at once, then 1 by 1
    torch.testing.assert_close(stepped, full, rtol=0, atol=1e-10)
    assert len(cache) == T and cache.positions.tolist() == list(range(T))
    assert full.abs().max() > 0.5  # logits of a real size: the comparison can fail


# FlexAttention's eager reference retraces every new shape (about a second on CPU): one scalar-bias
# scheme, RoPE's unrotated cache and Transformer-XL's vector term cover what flex does differently.
FLEX_CASES = [c for c in _cases(flex=True) if c[:2] in {("t5", "gather"), ("transformer_xl", "gather")}
              or c[3] == "unrotated"]


@pytest.mark.parametrize("case", FLEX_CASES, ids=_id)
def test_a_decode_step_on_flex_equals_full_recomputation(case):
    """The cache filled on SDPA (its contents do not depend on the path), then one step on flex.

    One step per path: FlexAttention's eager reference traces once per new shape (about
    a second each on CPU), so a step-by-step run on flex would cost that at every step.
    """
    scheme, form, backend, layout = case
    model, tokens = _model(scheme, layers=1, dtype=torch.float32), _tokens(5)
    dense = None if form == "none" else "gather"
    full = model(tokens, form=dense, backend="sdpa")  # (B, 5, V)
    cache = model.new_cache(rope_layout=layout)
    model(tokens[:, :4], cache, form=dense, backend="sdpa")
    step = _quiet(model, tokens[:, 4:], cache, form=form, backend=backend, compiled=False)  # (B, 1, V)
    torch.testing.assert_close(step, full[:, 4:], rtol=1e-5, atol=1e-5)
    assert len(cache) == 5


@pytest.mark.parametrize("scheme", dec.SCHEMES)
def test_greedy_generation_is_the_same_with_and_without_a_cache(scheme):
    model, prompt = _model(scheme), _tokens(3)
    form = None if scheme in ("absolute", "rope") else "gather"
    backend = "eager" if scheme == "shaw" else "sdpa"
    with_cache = model.generate(prompt, 4, model.new_cache(), form=form, backend=backend)
    without = model.generate(prompt, 4, None, form=form, backend=backend)  # the whole sequence every step
    assert with_cache.shape == (B, 7) and torch.equal(with_cache, without)


# -- eviction ---------------------------------------------------------------------------
def _eviction_cases():
    out = []
    for scheme in dec.SCHEMES:
        for frame in ("original", "renumbered"):
            if scheme == "absolute" and frame == "renumbered":
                continue
            paths = [p for p in dec.decode_paths(scheme, evicted=frame == "original") if p[1] != "flex"]
            chosen = {paths[-1]} | {p for p in paths if p[0] == "skew"}  # one path, and the skew form
            out += [(scheme, frame, form, backend, layout) for form, backend in sorted(chosen)
                    for layout in _layouts(scheme)]
    return out


@pytest.mark.parametrize("case", _eviction_cases(), ids=_id)
def test_sink_window_eviction_equals_recomputation(case):
    scheme, frame, form, backend, layout = case
    model, tokens = _model(scheme), _tokens(10)
    cache = model.new_cache(sinks=SINKS, window=WINDOW, positions=frame, rope_layout=layout)
    stepped = model.decode(tokens, cache, prefill=SINKS + WINDOW, form=form, backend=backend)
    ref_form = "gather" if form == "skew" else form  # the per-row recomputation has gapped positions
    recomputed = model.recompute(tokens, sinks=SINKS, window=WINDOW, positions=frame, form=ref_form,
                                 backend=backend)
    torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
    assert len(cache) == SINKS + WINDOW and cache.seen == 10 and cache.evicted == 10 - SINKS - WINDOW
    expected = [0, 1, 7, 8, 9] if frame == "original" else [0, 1, 2, 3, 4]
    assert cache.positions.tolist() == expected
    # eviction changed what the late tokens saw: the no-eviction logits differ there
    assert (stepped[:, -1] - model(tokens, form=ref_form, backend=backend)[:, -1]).abs().max() > 1e-3


def test_eviction_on_flex_equals_recomputation():
    """Gapped key positions on flex (a BlockMask from explicit positions): one step after the eviction."""
    model, tokens = _model("alibi", layers=1, dtype=torch.float32), _tokens(7)
    cache = model.new_cache(sinks=SINKS, window=WINDOW)
    model.decode(tokens[:, :6], cache, prefill=SINKS + WINDOW, form="gather", backend="sdpa")
    assert cache.positions.tolist() == [0, 1, 3, 4, 5]
    step = _quiet(model, tokens[:, 6:], cache, form="gather", backend="flex", compiled=False)
    recomputed = model.recompute(tokens, sinks=SINKS, window=WINDOW, form="gather", backend="sdpa")
    torch.testing.assert_close(step, recomputed[:, 6:], rtol=1e-5, atol=1e-5)


def _reference_params(model):
    cfg, attn = model.config, model.blocks[0].attention
    if cfg.scheme == "shaw":
        return dict(k=cfg.max_relative_position, rel_key=attn.rel_key, rel_value=attn.rel_value)
    if cfg.scheme == "t5":
        return dict(table=model.t5_table, bidirectional=False, max_distance=cfg.max_distance)
    if cfg.scheme == "transformer_xl":
        R = txl_mod.sinusoidal_relative_encoding(cfg.max_positions, cfg.d_model, dtype=torch.float64)  # (D, D_m)
        r_k = (R @ attn.r_net.weight.T).view(cfg.max_positions, cfg.num_heads, cfg.head_dim)  # (D, H, dh)
        return dict(r_k=r_k.transpose(0, 1), u=attn.u, v=attn.v)
    return dict(symmetric=False)


@pytest.mark.parametrize("scheme", dec.SCHEMES)
def test_one_layer_eviction_matches_the_papers_formulas(scheme):
    """One layer: each step's logits from the cache equal attention written pair by pair from the
    paper (tests/references_attend.py) over the kept tokens at their original positions."""
    model, tokens = _model(scheme, layers=1), _tokens(9, seed=4)
    cache = model.new_cache(sinks=SINKS, window=WINDOW)
    stepped = model.decode(tokens, cache, prefill=1, form=None if scheme in ("absolute", "rope") else "gather",
                           backend="eager")
    block, attn = model.blocks[0], model.blocks[0].attention
    reference = REFERENCES["none" if scheme == "absolute" else scheme]
    positions = torch.arange(tokens.shape[1])
    h = model.embed(tokens)
    if scheme == "absolute":
        h = h + rp.schemes.absolute.sinusoidal_position_embeddings(24, 16).double()[positions]
    x = block.norm1(h)
    q, k, v = (attn.heads(x, w) for w in (attn.wq, attn.wk, attn.wv))  # (B, H, T, dh)
    rows = []
    for t in range(tokens.shape[1]):
        kept = [j for j in range(t + 1) if j < SINKS or j >= t - WINDOW]
        out = reference(q[:, :, t:t + 1], k[:, :, kept], v[:, :, kept], _reference_params(model),
                        torch.tensor([t]), torch.tensor(kept), True)  # (B, H, 1, dh)
        rows.append(out)
    out = torch.cat(rows, dim=2).transpose(1, 2).reshape(B, tokens.shape[1], -1)  # (B, T, H dh)
    logits = model.head(model.norm(block.finish(h, attn.wo(out))))  # (B, T, V)
    torch.testing.assert_close(stepped, logits, rtol=0, atol=1e-10)


def test_renumbering_needs_the_rotated_keys_turned(monkeypatch):
    """Without the re-rotation a renumbered, rotated RoPE cache is wrong; the unrotated one needs none."""
    model, tokens = _model("rope"), _tokens(10)
    recomputed = model.recompute(tokens, sinks=SINKS, window=WINDOW, positions="renumbered")
    rotated = model.new_cache(sinks=SINKS, window=WINDOW, positions="renumbered", rope_layout="rotated")
    unrotated = model.new_cache(sinks=SINKS, window=WINDOW, positions="renumbered", rope_layout="unrotated")
    torch.testing.assert_close(model.decode(tokens, rotated), recomputed, rtol=0, atol=1e-10)
    torch.testing.assert_close(model.decode(tokens, unrotated), recomputed, rtol=0, atol=1e-10)
    # the rotated cache's keys are the unrotated cache's keys rotated at their new positions
    for layer in range(2):
        torch.testing.assert_close(rotated.keys[layer],
                                   rp.schemes.rope.apply_rope(unrotated.keys[layer], unrotated.positions))
    monkeypatch.setattr(dec.KVCache, "_rerotate", lambda self, delta: None)  # forget to re-rotate
    stale = model.decode(tokens, model.new_cache(sinks=SINKS, window=WINDOW, positions="renumbered"))
    assert (stale[:, SINKS + WINDOW + 1:] - recomputed[:, SINKS + WINDOW + 1:]).abs().max() > 1e-3
    torch.testing.assert_close(stale[:, :SINKS + WINDOW + 1], recomputed[:, :SINKS + WINDOW + 1])  # before


def test_transformer_xl_table_must_cover_the_distances_to_the_sinks():
    model, tokens = _model("transformer_xl", layers=1), _tokens(30)  # rows for distances 0 .. 23
    with pytest.raises(ValueError, match="covers offsets"):
        model.decode(tokens, model.new_cache(sinks=SINKS, window=WINDOW), form="gather", backend="sdpa")
    renumbered = model.new_cache(sinks=SINKS, window=WINDOW, positions="renumbered")
    out = model.decode(tokens, renumbered, form="gather", backend="sdpa")  # distances stay below 6
    torch.testing.assert_close(out, model.recompute(tokens, sinks=SINKS, window=WINDOW, positions="renumbered",
                                                    form="gather"), rtol=0, atol=1e-10)


def test_truncate_rolls_back_a_step():
    model, tokens = _model("t5"), _tokens()
    cache = model.new_cache()
    model(tokens[:, :5], cache, form="gather")
    first = model(tokens[:, 5:6], cache, form="gather")
    cache.truncate(5)
    assert len(cache) == 5 and cache.next_position == 5
    torch.testing.assert_close(model(tokens[:, 5:6], cache, form="gather"), first, rtol=0, atol=0)


# -- bytes ------------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", dec.SCHEMES)
def test_byte_formulas_equal_the_real_tensors(scheme):
    model, tokens = _model(scheme), _tokens(10)
    cfg = model.config
    sizes = dict(num_layers=2, num_heads=cfg.num_heads, head_dim=cfg.head_dim, dtype=torch.float64)
    for window in (None, WINDOW):
        cache = model.new_cache(sinks=SINKS if window else 0, window=window)
        model.decode(tokens, cache, prefill=2, backend="eager")
        assert cache.nbytes() == dec.cache_bytes(scheme, tokens=len(cache), batch=B, d_model=cfg.d_model, **sizes)
    tensors = {t.data_ptr(): t for term in model.position_terms() if term is not None
               for _, t in term.tensors()}  # T5's table and ALiBi's slopes: one tensor for all layers
    stored = sum(t.numel() * t.element_size() for t in tensors.values())
    assert stored == dec.shared_position_bytes(scheme, max_relative_position=3, num_buckets=8,
                                               distances=cfg.max_positions, **sizes)
    per_token = dec.bytes_per_token(scheme, context=10, batch=B, d_model=cfg.d_model, max_relative_position=3,
                                    num_buckets=8, **sizes)
    cache_part = sum(v for k, v in per_token.items() if k != "position tables")
    assert math.isclose(cache_part * 10, sum(dec.cache_bytes(scheme, tokens=10, batch=1, d_model=cfg.d_model,
                                                             **sizes).values()))


def test_transformer_xl_memory_is_half_the_keys_and_values():
    kv = dec.cache_bytes("alibi", tokens=100, batch=1, num_layers=1, num_heads=4, head_dim=8, d_model=32)
    mem = dec.cache_bytes("transformer_xl", tokens=100, batch=1, num_layers=1, num_heads=4, head_dim=8, d_model=32)
    assert 2 * mem["memory"] == kv["keys"] + kv["values"] and kv["positions"] == mem["positions"] == 800


def test_step_work():
    kw = dict(context=1000, num_heads=4, head_dim=8)
    assert dec.step_work("rope_rotated", **kw)["madds"] == 2 * 2 * 4 * 8  # the new q and k only
    assert dec.step_work("rope_unrotated", **kw)["madds"] == 2 * 4 * 8 * 1001  # every kept key again
    assert dec.step_work("absolute", **kw)["madds"] == 0
    with pytest.raises(ValueError, match="cache layout"):
        dec.step_work("rope", **kw)


# -- arguments --------------------------------------------------------------------------
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="encoder"):
        dec.DecoderConfig(scheme="deberta")
    with pytest.raises(ValueError, match="scheme must be one of"):
        dec.DecoderConfig(scheme="xpos")
    with pytest.raises(ValueError, match="window must be"):
        dec.KVCache(2, window=0)
    with pytest.raises(ValueError, match="sinks must be 0"):
        dec.KVCache(2, sinks=2)
    model = _model("absolute")
    with pytest.raises(ValueError, match="renumbered"):
        model.new_cache(sinks=1, window=2, positions="renumbered")
    with pytest.raises(ValueError, match="rope_layout"):
        model.new_cache(rope_layout="rotated")
    with pytest.raises(ValueError, match="tokens must lie in"):
        model(torch.full((1, 2), VOCAB))
    with pytest.raises(ValueError, match="max_positions"):
        model.decode(_tokens(30)[:1], model.new_cache())
    with pytest.raises(ValueError, match="must store 'memory'"):
        _model("transformer_xl")(_tokens(2), model.new_cache())
    cache = model.new_cache()
    model(_tokens(2), cache)
    with pytest.raises(ValueError, match="batch size"):
        model(_tokens(1)[:1], cache)
    with pytest.raises(ValueError, match="truncate"):
        evicting = model.new_cache(sinks=1, window=1)
        model.decode(_tokens(4), evicting)
        evicting.truncate(1)
    broken = _model("alibi")
    with torch.no_grad():
        broken.blocks[1].attention.wk.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        broken.decode(_tokens(3), broken.new_cache())
    assert dec.kept_positions(9, sinks=2, window=3).tolist() == [0, 1, 6, 7, 8, 9]
    assert dec.kept_positions(3, sinks=2, window=None).tolist() == [0, 1, 2, 3]


# -- benchmark --------------------------------------------------------------------------
def test_benchmark_writes_rows_with_provenance(tmp_path):
    out = tmp_path / "kv.json"
    result = dec.bench.main(["--bench", "--preset", "tiny", "--schemes", "absolute", "alibi",
                           "--backends", "eager", "sdpa", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["provenance"]["git_commit"] and saved["provenance"]["torch"] == torch.__version__
    assert saved["provenance"]["sizes"]["contexts"] == [16]
    labels = {r["label"] for r in saved["results"]}
    assert labels == {dec.bench._label(*c) for c in dec.bench.benchmark_cases(["absolute", "alibi"],
                                                                              ["eager", "sdpa"])}
    assert len(labels) == 6  # absolute: none on 2 backends; alibi: naive and gather on 2
    assert all(r["status"] == "ok" and r["tokens_per_s"] > 0 for r in saved["results"])
    ratios = dec.bench.throughput_ratios(result)
    assert ratios[("absolute: none/sdpa", 16)] == 1.0
