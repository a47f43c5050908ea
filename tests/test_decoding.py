"""relpos_core.decoding: cached decoding equals recomputation, for every scheme and path.

* Every (form, backend) of the registry that decodes a scheme (``decode_paths``): the
  logits of step-by-step decoding with a KV cache equal those of one full forward pass,
  token by token (float64 on eager and SDPA; FlexAttention's eager reference in float32).
* Sliding-window eviction with attention sinks, in the cache's own position frame and at
  original positions, equals recomputation over the kept tokens (``Transformer.recompute``),
  and for one layer equals a float64 construction from the papers' formulas
  (``tests/references``) that shares no code with the cache.
* The byte counts of ``relpos_core.decoding.ledger`` equal the real tensors' sizes.
* A cache refuses a model it was not made for, and a refused step leaves it unchanged.

Every decodable scheme of the registry is run (``DECODED``, from the declarations), with
the distance parameter its declaration gives the small preset.

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
from tests.references import CASES

T, B, VOCAB = 8, 2, 32
SINKS, WINDOW = 2, 3
DECODED = dec.SCHEMES


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _position(scheme, max_positions=24):
    """The small preset's distance parameter (a short table, so that clipping shows), from the declaration."""
    distance = rp.schemes.lookup(scheme).scheme.distance
    if distance is None or distance.follows_length:
        return {}
    return {distance.name: distance.for_preset("small", max_positions)}


def _model(scheme, *, layers=2, dtype=torch.float64, max_positions=24):
    cfg = rp.models.TransformerConfig(scheme=scheme, position=_position(scheme), vocab_size=VOCAB, d_model=16, num_heads=2,
                            num_layers=layers, max_positions=max_positions)
    return rp.models.Transformer(cfg, seed=3, dtype=dtype)


def _tokens(n=T, seed=0):
    return torch.randint(0, VOCAB, (B, n), generator=torch.Generator().manual_seed(seed))


def _layouts(scheme):
    return dec.ledger.layouts(scheme)


def _cases(*, flex: bool):
    out = []
    for scheme in DECODED:
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


# FlexAttention's eager reference retraces every new shape (about a second on CPU): derived from the
# declarations, each decoded scheme's last flex path (gather where it has one), every unrotated RoPE-like cache.
FLEX_CASES = [c for c in _cases(flex=True) if c == [d for d in _cases(flex=True) if d[0] == c[0]][-1]
              or c[3] == "unrotated"]


@pytest.mark.parametrize("case", FLEX_CASES, ids=_id)
def test_a_decode_step_on_flex_equals_full_recomputation(case):
    """The cache filled on SDPA (its contents do not depend on the path), then one step on flex.

    One step per path: FlexAttention's eager reference traces once per new shape (about
    a second each on CPU), so a step-by-step run on flex would cost that at every step.
    """
    scheme, form, backend, layout = case
    model, tokens = _model(scheme, layers=1, dtype=torch.float32), _tokens(5)
    dense = form  # the same form on SDPA fills the cache
    full = model(tokens, form=dense, backend="sdpa")  # (B, 5, V)
    cache = model.new_cache(rope_layout=layout)
    model(tokens[:, :4], cache, form=dense, backend="sdpa")
    step = _quiet(model, tokens[:, 4:], cache, form=form, backend=backend, compiled=False)  # (B, 1, V)
    torch.testing.assert_close(step, full[:, 4:], rtol=1e-5, atol=1e-5)
    assert len(cache) == 5


@pytest.mark.parametrize("scheme", DECODED)
def test_greedy_generation_is_the_same_with_and_without_a_cache(scheme):
    model, prompt = _model(scheme), _tokens(3)
    with_cache = model.generate(prompt, 4, model.new_cache())  # the model's default path
    without = model.generate(prompt, 4, None)  # the whole sequence every step
    assert with_cache.shape == (B, 7) and torch.equal(with_cache, without)


# -- eviction ---------------------------------------------------------------------------
def _eviction_cases():
    out = []
    for scheme in DECODED:
        for frame in ("original", "cache"):
            if rp.schemes.lookup(scheme).scheme.positions_in_tokens and frame == "cache":
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
    cache = model.new_cache(sinks=SINKS, window=WINDOW, positions="original")
    model.decode(tokens[:, :6], cache, prefill=SINKS + WINDOW, form="gather", backend="sdpa")
    assert cache.positions.tolist() == [0, 1, 3, 4, 5]
    step = _quiet(model, tokens[:, 6:], cache, form="gather", backend="flex", compiled=False)
    recomputed = model.recompute(tokens, sinks=SINKS, window=WINDOW, positions="original", form="gather",
                                 backend="sdpa")
    torch.testing.assert_close(step, recomputed[:, 6:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", DECODED)
def test_one_layer_eviction_matches_the_papers_formulas(scheme):
    """One layer: each step's logits from the cache equal attention written pair by pair from the
    paper (tests/references) over the kept tokens at their original positions."""
    model, tokens = _model(scheme, layers=1), _tokens(9, seed=4)
    cache = model.new_cache(sinks=SINKS, window=WINDOW, positions="original")
    stepped = model.decode(tokens, cache, prefill=1, backend="eager")
    block, attn = model.blocks[0], model.blocks[0].attention
    case = CASES[scheme]
    term = model.position_terms()[0]
    params = case.params_of(term)
    positions = torch.arange(tokens.shape[1])
    h = model.position.embed(model.embed(tokens), positions)  # absolute positions enter here
    x = block.norm1(h)
    q, k, v = (attn.heads(x, w) for w in (attn.wq, attn.wk, attn.wv))  # (B, H, T, dh)
    rows = []
    for t in range(tokens.shape[1]):
        kept = [j for j in range(t + 1) if j < SINKS or j >= t - WINDOW]
        out = case.reference(q[:, :, t:t + 1], k[:, :, kept], v[:, :, kept], params,
                             torch.tensor([t]), torch.tensor(kept), True)  # (B, H, 1, dh)
        rows.append(out)
    out = torch.cat(rows, dim=2).transpose(1, 2).reshape(B, tokens.shape[1], -1)  # (B, T, H dh)
    h = h + attn.wo(out)
    logits = model.head(model.norm(h + block.mlp(block.norm2(h))))  # (B, T, V)
    torch.testing.assert_close(stepped, logits, rtol=0, atol=1e-10)


def test_renumbering_needs_the_rotated_keys_turned(monkeypatch):
    """Without the re-rotation a renumbered, rotated RoPE cache is wrong; the unrotated one needs none."""
    model, tokens = _model("rope"), _tokens(10)
    recomputed = model.recompute(tokens, sinks=SINKS, window=WINDOW, positions="cache")
    rotated = model.new_cache(sinks=SINKS, window=WINDOW, positions="cache", rope_layout="rotated")
    unrotated = model.new_cache(sinks=SINKS, window=WINDOW, positions="cache", rope_layout="unrotated")
    torch.testing.assert_close(model.decode(tokens, rotated), recomputed, rtol=0, atol=1e-10)
    torch.testing.assert_close(model.decode(tokens, unrotated), recomputed, rtol=0, atol=1e-10)
    # the rotated cache's keys are the unrotated cache's keys rotated at their new positions
    for layer in range(2):
        torch.testing.assert_close(rotated.keys[layer],
                                   rp.schemes.rope.apply_rope(unrotated.keys[layer], unrotated.positions))
    monkeypatch.setattr(dec.KVCache, "_rerotate", lambda self, delta: None)  # forget to re-rotate
    stale = model.decode(tokens, model.new_cache(sinks=SINKS, window=WINDOW, positions="cache"))
    assert (stale[:, SINKS + WINDOW + 1:] - recomputed[:, SINKS + WINDOW + 1:]).abs().max() > 1e-3
    torch.testing.assert_close(stale[:, :SINKS + WINDOW + 1], recomputed[:, :SINKS + WINDOW + 1])  # before


def test_transformer_xl_table_must_cover_the_distances_to_the_sinks():
    model, tokens = _model("transformer_xl", layers=1), _tokens(30)  # rows for distances 0 .. 23
    cache = model.new_cache(sinks=SINKS, window=WINDOW, positions="original")
    with pytest.raises(ValueError, match="covers offsets"):
        model.decode(tokens, cache, form="gather", backend="sdpa")
    assert cache.seen == 24 and len(cache) == SINKS + WINDOW  # the refused step left the cache as it was
    in_cache = model.new_cache(sinks=SINKS, window=WINDOW, positions="cache")
    out = model.decode(tokens, in_cache, form="gather", backend="sdpa")  # distances stay below 6
    torch.testing.assert_close(out, model.recompute(tokens, sinks=SINKS, window=WINDOW, positions="cache",
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
@pytest.mark.parametrize("scheme", DECODED)
def test_byte_counts_equal_the_real_tensors(scheme):
    model, tokens = _model(scheme), _tokens(10)
    cfg = model.config
    sizes = dict(num_layers=2, num_heads=cfg.num_heads, head_dim=cfg.head_dim, dtype=torch.float64)
    for window in (None, WINDOW):
        cache = model.new_cache(sinks=SINKS if window else 0, window=window, positions="original")
        model.decode(tokens, cache, prefill=2, backend="eager")
        assert cache.nbytes() == dec.cache_bytes(scheme, tokens=len(cache), batch=B, **sizes)
    held = dec.ledger.term_state_bytes(model.position_terms())  # the real tensors a decoding run holds
    assert held == dec.shared_position_bytes(scheme, context=cfg.max_positions, position=_position(scheme), **sizes)
    per_token = dec.bytes_per_token(scheme, context=10, batch=B, position=_position(scheme), **sizes)
    cache_part = sum(v for k, v in per_token.items() if k != "position tables")
    assert math.isclose(cache_part * 10, sum(dec.cache_bytes(scheme, tokens=10, batch=1, **sizes).values()))


def test_a_shared_table_is_counted_once():
    sizes = dict(num_heads=4, head_dim=8, context=64, dtype=torch.float32)
    t5 = [dec.shared_position_bytes("t5", num_layers=n, **sizes) for n in (1, 6)]
    shaw = [dec.shared_position_bytes("shaw", num_layers=n, **sizes) for n in (1, 6)]
    assert t5[0] == t5[1] == 32 * 4 * 4  # one (32 buckets, 4 heads) table for every layer
    assert shaw[1] == 6 * shaw[0] == 6 * 2 * 17 * 8 * 4  # a^K and a^V (2k + 1 = 17 rows) per layer
    txl = [dec.shared_position_bytes("transformer_xl", num_layers=1, **dict(sizes, context=c)) for c in (64, 128)]
    assert txl[1] - txl[0] == 64 * 4 * 8 * 4  # rows W_kR R grow with the distances the cache reaches


def test_every_scheme_caches_keys_and_values():
    for scheme in DECODED:
        kv = dec.cache_bytes(scheme, tokens=100, batch=1, num_layers=1, num_heads=4, head_dim=8)
        assert kv == dict(keys=100 * 4 * 8 * 4, values=100 * 4 * 8 * 4, positions=800)


def test_step_work():
    kw = dict(context=1000, num_heads=4, head_dim=8)
    assert dec.step_work("rope", rope_layout="rotated", **kw)["madds"] == 2 * 2 * 4 * 8  # the new q and k only
    assert dec.step_work("rope", rope_layout="unrotated", **kw)["madds"] == 2 * 4 * 8 * 1001  # every kept key
    assert dec.step_work("absolute", **kw)["madds"] == 0
    assert dec.step_work("alibi", **kw)["madds"] == 4 * 1000
    assert dec.step_work("transformer_xl", **kw)["madds"] == 4 * 1000 * 8  # (q + v) . r for 1000 distances
    with pytest.raises(ValueError, match="rope_layout"):
        dec.step_work("rope", **kw)
    with pytest.raises(ValueError, match="rope_layout"):
        dec.step_work("xpos", rope_layout="rotated", **kw)  # xPos keys are kept unrotated


def test_every_piece_says_what_a_decode_step_computes_for_it(monkeypatch):
    """step_work asks every piece of the term (CoPE's in the ``pieces`` slot too): a scheme with position
    pieces does work at every step, and a piece that does not say is an error naming it, not zero."""
    from dataclasses import dataclass
    from typing import ClassVar

    from relpos_core.pieces.base import Piece

    kw = dict(context=100, num_heads=4, head_dim=8)
    for scheme in DECODED:
        term = dec.ledger.decoder_terms(scheme, num_layers=1, context=100, num_heads=4, head_dim=8)[0]
        for layout in dec.ledger.layouts(scheme):
            work = dec.step_work(scheme, rope_layout=layout, **kw)
            if term is not None and term.all_pieces:
                assert work["madds"] > 0 and work["what"], (scheme, layout, work)
    # CoPE: a gate sigmoid(q . k) per kept key (d + 1), their running sum (1), the interpolation (2),
    # and q . e for its 16 table rows (d each), per head
    assert dec.step_work("cope", **kw)["madds"] == 4 * (100 * (8 + 1 + 1 + 2) + 16 * 8)

    @dataclass(frozen=True)
    class Silent(Piece):
        name: str = "silent piece"
        kind: ClassVar[str] = "silent"

    term = rp.terms.PositionTerm(scheme="silent", convention="none", pieces=(Silent(),))
    with pytest.raises(NotImplementedError, match="silent piece.*Silent.*decode_step_work"):
        term.all_pieces[0].decode_step_work(100, 4, 8)
    monkeypatch.setattr(dec.ledger, "decoder_terms", lambda *a, **k: [term])  # a decoder whose term holds it
    with pytest.raises(NotImplementedError, match="silent piece"):
        dec.step_work("alibi", **kw)


# -- arguments --------------------------------------------------------------------------
def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="encoder"):
        rp.models.Transformer(rp.models.TransformerConfig(scheme="deberta")).new_cache()
    with pytest.raises(ValueError, match="scheme must be one of"):
        rp.models.TransformerConfig(scheme="xlnet")
    with pytest.raises(ValueError, match="decoder-only"):
        rp.models.TransformerConfig(scheme="xpos", causal=False)
    with pytest.raises(ValueError, match="not options of"):
        rp.models.TransformerConfig(scheme="t5", position=dict(max_relative_position=3))
    with pytest.raises(ValueError, match="window must be"):
        dec.KVCache(2, window=0)
    with pytest.raises(ValueError, match="sinks must be 0"):
        dec.KVCache(2, sinks=2)
    model = _model("absolute")
    with pytest.raises(ValueError, match="recomputing"):
        model.new_cache(sinks=1, window=2)  # the cache frame renumbers: absolute positions cannot
    with pytest.raises(ValueError, match="rope_layout"):
        model.new_cache(rope_layout="rotated")
    with pytest.raises(ValueError, match="tokens must lie in"):
        model(torch.full((1, 2), VOCAB))
    with pytest.raises(ValueError, match="the table has 24 rows"):
        model.decode(_tokens(30)[:1], model.new_cache())
    with pytest.raises(ValueError, match="made for another model"):
        _model("transformer_xl")(_tokens(2), model.new_cache())
    cache = model.new_cache()
    model(_tokens(2), cache)
    with pytest.raises(ValueError, match="batch size"):
        model(_tokens(1)[:1], cache)
    with pytest.raises(ValueError, match="truncate"):
        evicting = model.new_cache(sinks=1, window=1, positions="original")
        model.decode(_tokens(4), evicting)
        evicting.truncate(1)
    assert dec.kept_positions(9, sinks=2, window=3).tolist() == [0, 1, 6, 7, 8, 9]
    assert dec.kept_positions(3, sinks=2, window=None).tolist() == [0, 1, 2, 3]


def test_a_cache_refuses_another_model():
    """Same scheme, other settings: a RoPE base, a pairing, a layout, a dtype, a T5 table size."""
    rope = _model("rope")
    other_base = rp.models.Transformer(rp.models.TransformerConfig(scheme="rope", position=dict(base=500.0), vocab_size=VOCAB, d_model=16,
                                               num_heads=2, max_positions=24), seed=3, dtype=torch.float64)
    for other in (other_base, _model("rope", dtype=torch.float32), _model("rope", layers=1)):
        with pytest.raises(ValueError, match="made for another model"):
            rope(_tokens(2), other.new_cache())
    unrotated = rope.new_cache(rope_layout="unrotated")
    rope(_tokens(2), unrotated)  # its own layout is fine
    t5_small = rp.models.Transformer(rp.models.TransformerConfig(scheme="t5", position=dict(num_buckets=8, max_distance=12),
                                             vocab_size=VOCAB, d_model=16, num_heads=2), seed=3)
    with pytest.raises(ValueError, match="made for another model"):
        _model("t5", dtype=torch.float32)(_tokens(2), t5_small.new_cache())


def test_a_refused_step_leaves_the_cache_unchanged():
    model, tokens = _model("shaw"), _tokens(6)
    cache = model.new_cache()
    model(tokens[:, :4], cache, backend="eager")
    keys = [k.clone() for k in cache.keys]
    with pytest.raises(ValueError, match="use backend 'eager'"):  # Shaw's value term on SDPA: refused in layer 0
        model(tokens[:, 4:5], cache, form="gather", backend="sdpa")
    assert len(cache) == 4 and cache.next_position == 4 and cache.seen == 4
    assert all(torch.equal(a, b) for a, b in zip(keys, cache.keys))
    full = model(tokens[:, :5], backend="eager")
    torch.testing.assert_close(model(tokens[:, 4:5], cache, backend="eager"), full[:, 4:], rtol=0, atol=1e-10)


# -- benchmark --------------------------------------------------------------------------
def test_benchmark_writes_rows_with_provenance(tmp_path):
    out = tmp_path / "kv.json"
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the tiny preset runs on 1: the provenance must say 1, not the restored 2
    try:
        result = dec.bench.main(["--bench", "--preset", "tiny", "--schemes", "none", "alibi", "fire",
                                 "--backends", "eager", "sdpa", "--out", str(out), "--no-progress"])
    finally:
        torch.set_num_threads(before)
    saved = json.loads(out.read_text())
    assert saved["provenance"]["threads"] == saved["provenance"]["sizes"]["threads"] == 1
    assert saved["complete"] is True and not out.with_name(out.name + ".partial.jsonl").exists()
    assert saved["provenance"]["git_commit"] and saved["provenance"]["torch"] == torch.__version__
    assert saved["provenance"]["sizes"]["contexts"] == [16]
    labels = {r["label"] for r in saved["results"]}
    assert labels == {dec.bench._label(*c) for c in dec.bench.benchmark_cases(["none", "alibi", "fire"],
                                                                              ["eager", "sdpa"])}
    assert len(labels) == 8  # none: 2 backends; alibi: naive and gather on 2; fire: naive on 2
    for r in saved["results"]:
        assert r["status"] == "ok" and r["tokens_per_s"] > 0 and r["step_peak_bytes"] > 0
        t = r["ms_per_step"]
        assert t["min"] <= t["median"] <= t["max"] and t["n"] == dec.bench.PRESETS["tiny"]["rounds"]
    ratios = dec.bench.throughput_ratios(result)
    assert ratios[("none: none/sdpa", 16)] == 1.0


@pytest.mark.parametrize("scheme", DECODED)
def test_plots_count_shared_bytes_as_the_ledger_does(scheme):
    # the figures count one and two layers and extrapolate: equal to building every layer
    for layers, heads in ((32, 32), (3, 4)):
        direct = dec.ledger.shared_position_bytes(scheme, num_layers=layers, num_heads=heads, head_dim=16,
                                                  context=512, dtype=torch.float16,
                                                  position=dec.plots._position_options(scheme, 512))
        assert dec.plots.shared_bytes(scheme, num_layers=layers, num_heads=heads, head_dim=16, context=512,
                                      dtype=torch.float16) == direct
    with pytest.raises(ValueError, match="num_layers"):
        dec.plots.shared_bytes(scheme, num_layers=0, num_heads=1, head_dim=2, context=3, dtype=torch.float16)


def test_throughput_figure_divides_by_the_baseline_the_run_has():
    # no position on SDPA; a run made before the "none" scheme existed: absolute positions
    rows = [dict(scheme=s, layout=None, form=f, backend="sdpa", context=16, label=f"{s}: {f}/sdpa", status="ok",
                 tokens_per_s=t) for s, f, t in (("absolute", "none", 50.0), ("alibi", "gather", 25.0))]
    old = dict(results=rows)
    assert dec.plots.throughput_baseline(old) == ("absolute", None, "none", "sdpa")
    fig = dec.plots.throughput_figure(old)
    assert sorted(fig.data[0].x) == [0.5, 1.0] and "absolute on SDPA" in fig.layout.xaxis.title.text
    new = dict(results=rows + [dict(rows[0], scheme="none", label="none: none/sdpa", tokens_per_s=100.0)])
    assert dec.plots.throughput_baseline(new) == dec.bench.BASELINE
    assert sorted(dec.plots.throughput_figure(new).data[0].x) == [0.25, 0.5, 1.0]
    with pytest.raises(ValueError, match="baseline"):
        dec.plots.throughput_baseline(dict(results=rows[1:]))
    committed = dec.bench.load_result()  # every timed row of the shipped run is drawn
    drawn = sum(len(trace.x) for trace in dec.plots.throughput_figure(committed).data)
    assert drawn == sum(r["status"] == "ok" for r in committed["results"])


def test_benchmark_records_a_prefill_over_budget_and_goes_on(tmp_path):
    out = tmp_path / "kv.json"
    with rp.budget.memory_budget(40_000):  # the tiny prefill of Shaw's naive path fits, T5's dense bias does not
        result = dec.bench.main(["--bench", "--preset", "tiny", "--schemes", "shaw_key", "t5", "--backends", "eager",
                                 "--contexts", "16", "64", "--out", str(out), "--no-progress"])
    statuses = {(r["scheme"], r["context"], r["status"]) for r in result["results"]}
    assert any(s == "skipped" for *_, s in statuses) and any(s == "ok" for *_, s in statuses)
    for r in result["results"]:
        if r["status"] == "skipped":
            assert "over the memory budget" in r["reason"]


def test_benchmark_output_is_checked_first(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(dec.bench, "run_decode_benchmark", lambda *a, **k: pytest.fail("ran"))
    existing = tmp_path / "kv.json"
    existing.write_text("keep")
    for argv, text in ((["--out", str(existing)], "pass --force"), (["--contexts", "0"], "[1, 131072]"),
                       (["--contexts", "999999999"], "[1, 131072]")):
        with pytest.raises(SystemExit):
            dec.bench.main(["--bench", "--preset", "tiny"] + argv)
        assert text in capsys.readouterr().err
    assert existing.read_text() == "keep"
    monkeypatch.chdir(rp.outputs.PACKAGE.parent / "data" if (rp.outputs.PACKAGE.parent / "data").is_dir()
                      else rp.outputs.PACKAGE)
    with pytest.raises(SystemExit):  # the default path would land in data/ (or the package): refused
        dec.bench.main(["--bench", "--preset", "tiny"])
    assert "committed results" in capsys.readouterr().err


def test_benchmark_ctrl_c_keeps_what_finished(tmp_path, monkeypatch):
    real = rp.measure.timing.burst
    calls = []

    def interrupt(fn, iters, device):
        calls.append(1)
        if len(calls) > 3:  # after one round of the three cases
            raise KeyboardInterrupt
        return real(fn, iters, device)

    monkeypatch.setattr(rp.measure.timing, "burst", interrupt)
    out = tmp_path / "kv.json"
    with pytest.raises(SystemExit) as exc:
        dec.bench.main(["--bench", "--preset", "tiny", "--schemes", "none", "alibi", "--backends", "sdpa",
                        "--out", str(out), "--no-progress"])
    saved = json.loads(out.read_text())
    assert exc.value.code == 130 and saved["complete"] is False
    assert {r["status"] for r in saved["results"]} == {"ok"} and all(r["ms_per_step"]["n"] == 1
                                                                      for r in saved["results"])


# -- a window without sinks, at original positions (the kept positions are a run that does not start at 0) --
def _window_cases():
    out = []
    for scheme in DECODED:
        paths = [p for p in dec.decode_paths(scheme, evicted=True) if p[1] != "flex"]
        out += [(scheme, *paths[-1], layout) for layout in _layouts(scheme)]
    return out


@pytest.mark.parametrize("case", _window_cases(), ids=_id)
def test_a_window_without_sinks_keeps_the_original_positions(case):
    """sinks=0, positions="original": after an eviction the kept keys sit at e.g. 6 .. 9, not 0 .. 3;
    cached decoding equals recomputation at those positions (before the fix the cache called them
    contiguous and rp.attend placed them at 0 .. K - 1)."""
    scheme, form, backend, layout = case
    model, tokens = _model(scheme), _tokens(10)
    cache = model.new_cache(sinks=0, window=WINDOW, positions="original", rope_layout=layout)
    stepped = model.decode(tokens, cache, prefill=WINDOW, form=form, backend=backend)
    recomputed = model.recompute(tokens, sinks=0, window=WINDOW, positions="original", form=form, backend=backend)
    torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
    assert cache.positions.tolist() == [7, 8, 9] and not cache.contiguous


def test_fire_window_without_sinks_reads_the_query_position():
    """FIRE's normaliser psi(max(L, i)) reads the query's own position: with a small threshold (init_L = 2)
    a FIFO window at original positions must keep the true positions 7 .. 9, not 0 .. K - 1 (issue 25 S1:
    with init_L = 512 the error showed only from step 513 on)."""
    cfg = rp.models.TransformerConfig(scheme="fire", position=dict(init_L=2.0), vocab_size=VOCAB, d_model=16,
                                      num_heads=2, num_layers=2, max_positions=24)
    model, tokens = rp.models.Transformer(cfg, seed=3, dtype=torch.float64), _tokens(10)
    cache = model.new_cache(sinks=0, window=WINDOW, positions="original")
    stepped = model.decode(tokens, cache, prefill=1, form="naive", backend="sdpa")
    recomputed = model.recompute(tokens, sinks=0, window=WINDOW, positions="original", form="naive", backend="sdpa")
    torch.testing.assert_close(stepped, recomputed, rtol=0, atol=1e-10)
    renumbered = model.recompute(tokens, sinks=0, window=WINDOW, positions="cache", form="naive", backend="sdpa")
    assert (stepped[:, -1] - renumbered[:, -1]).abs().max() > 1e-4  # the positions matter here


def test_a_cache_refuses_another_models_weights_and_sizes():
    """Same config but other weights, or another vocabulary, MLP or max_positions: refused by name."""
    model = _model("rope")
    cache = model.new_cache()
    model(_tokens(2), cache)
    same_config = rp.models.Transformer(model.config, seed=4, dtype=torch.float64)
    with pytest.raises(ValueError, match="the weights are not the ones"):
        same_config(_tokens(1), cache)
    for change in (dict(vocab_size=VOCAB + 1), dict(d_mlp=24), dict(max_positions=32)):
        cfg = rp.models.TransformerConfig(scheme="rope", **{**dict(vocab_size=VOCAB, d_model=16, num_heads=2,
                                                          max_positions=24), **change})
        other = rp.models.Transformer(cfg, seed=3, dtype=torch.float64)
        with pytest.raises(ValueError, match="made for another model"):
            other(_tokens(1), cache)
    with torch.no_grad():
        model.head.weight.add_(1.0)  # the weights changed in place since the cache was filled
    with pytest.raises(ValueError, match="changed in place"):
        model(_tokens(1), cache)
    assert len(cache) == 2


def test_kept_positions_of_a_far_step_builds_only_the_kept_ones():
    """Before: kept_positions(10**12, window=4) built arange(10**12 + 1) (8 TB) for five positions."""
    far = 10**12
    assert dec.kept_positions(far, sinks=0, window=4).tolist() == list(range(far - 4, far + 1))
    assert dec.kept_positions(far, sinks=2, window=3).tolist() == [0, 1] + list(range(far - 3, far + 1))
    for step in range(9):  # near the start the sinks and the window overlap: each position once
        for sinks in range(4):
            for window in range(1, 5):
                everything = torch.arange(step + 1)
                want = everything[(everything < sinks) | (everything >= step - window)]
                assert dec.kept_positions(step, sinks=sinks, window=window).tolist() == want.tolist()


@pytest.mark.parametrize("scheme, change, name", [
    ("transformer_xl", dict(max_positions=2**40), "max_positions"),  # before: built, then 8 TiB rows per forward
    ("absolute", dict(max_positions=2**40), "max_positions"),
    ("music_transformer", dict(max_positions=2**40), "max_positions"),
    ("rope", dict(vocab_size=2**40), "vocab_size"),
])
def test_a_model_too_large_to_build_is_refused_before_allocating(scheme, change, name):
    cfg = rp.models.TransformerConfig(scheme=scheme, **{**dict(vocab_size=VOCAB, d_model=16, num_heads=2, max_positions=24),
                                              **change})
    with pytest.raises(rp.budget.MemoryBudgetError, match=f"sized by {name}.*over the memory budget"):
        rp.models.Transformer(cfg)


@pytest.mark.parametrize("device", ["tpu", "cuda:7" if torch.cuda.is_available() else "cuda"])
@pytest.mark.parametrize("which", ["bench", "scale"])
def test_a_device_this_machine_lacks_is_refused_before_any_file(tmp_path, capsys, which, device):
    """Before: the command wrote a head-only partial file, then failed, and the file blocked the same --out."""
    from relpos_core.decoding import bench as dbench
    from relpos_core.decoding import scale as dscale

    out = tmp_path / "r.json"
    argv = ["--device", device, "--out", str(out)]
    with pytest.raises(SystemExit) as exc:
        dbench.main(["--bench"] + argv) if which == "bench" else dscale.main(argv)
    assert exc.value.code == 2 and "argument --device" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out", [".", "..", "/", "results/"])
def test_out_naming_a_folder_is_refused_by_every_command_line(tmp_path, monkeypatch, capsys, out):
    """Before: --out . ended in a traceback about an empty name (bench, decoding and lab alike), and
    --out results/ lost its slash to Path and was taken for a file named results."""
    from relpos_core.bench.__main__ import main as bench_main
    from relpos_core.decoding import bench as dbench
    from relpos_core.lab.__main__ import main as lab_main

    monkeypatch.chdir(tmp_path)
    for run in (lambda: bench_main(["--quick", "--out", out]), lambda: dbench.main(["--bench", "--out", out]),
                lambda: lab_main(["--preset", "tiny", "--out", out])):
        with pytest.raises(SystemExit) as exc:
            run()
        assert exc.value.code == 2 and "names a folder" in capsys.readouterr().err


def test_the_position_bytes_figure_labels_its_kept_position_line_inside_the_plot():
    """The int64 kept position is a labelled reference line, not a legend entry; on the log axis the
    label's y is the exponent (at y = 8 it was drawn at 10^8, off the plot)."""
    import math

    contexts = [16, 256, 4096]
    series = rp.decoding.plots.position_bytes(contexts, num_layers=2, num_heads=4, head_dim=16,
                                              dtype=torch.float16)
    fig = rp.decoding.plots.position_bytes_figure(series, contexts, y_range=(1e-3, 1e5))
    kept = rp.decoding.plots.KEPT_POSITION
    assert kept not in {t.name for t in fig.data}
    (shape,), (note,) = fig.layout.shapes, fig.layout.annotations
    assert shape.y0 == series[kept][0] and note.text == kept
    assert math.log10(1e-3) < note.y < math.log10(1e5) and 10 ** note.y == pytest.approx(shape.y0)


def test_the_cache_components_figure_names_every_row_on_a_phone():
    """20 rows: plotly's automatic ticks named every other one at 390 px; every label is asked for."""
    fig = rp.decoding.plots.components_figure(4096, num_layers=2, num_heads=4, head_dim=16, dtype=torch.float16)
    names = list(fig.data[0].y)
    assert len(names) == len(set(names)) >= 10
    assert fig.layout.yaxis.dtick == 1 and fig.layout.yaxis.type in (None, "category", "-")
