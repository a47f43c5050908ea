"""Work done once per shape (``relpos_core.kernels.memo``): rp.attend's call plans, RoPE's cached
cos / sin, the dense bias shared by a model's layers, DeBERTa's gather mapping the distinct offsets.

Each cache must give the numbers a fresh computation gives, see a table changed in place, keep
refusing what it refused, and never hand a tensor made under inference mode to a call that
records gradients.
"""
from __future__ import annotations

import importlib
from unittest import mock

import pytest
import torch

import relpos_core as rp
from relpos_core.kernels import memo, rotary, sdpa
from relpos_core.pieces import vectors

attend_module = importlib.import_module("relpos_core.attend")


def _qkv(B=2, H=4, L=8, d=16, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, d, generator=g, dtype=dtype) for _ in range(3)]


def _t5(H=4, dtype=torch.float64, seed=1):
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(32, H, generator=g, dtype=dtype)
    return table, rp.schemes.t5.position_term(table, bidirectional=False)


def test_signature_reads_structure_not_identity_unless_asked():
    a, b = torch.zeros(3, 4), torch.zeros(3, 4)
    assert memo.signature(a) == memo.signature(b)
    assert memo.signature(a, identity=True) != memo.signature(b, identity=True)
    before = memo.signature(a, identity=True)
    a.add_(1)  # an in-place write bumps the version counter
    assert memo.signature(a, identity=True) != before
    _, t1 = _t5()
    _, t2 = _t5()  # built alike: the bucket functions are new closures over the same values
    assert memo.signature(t1) == memo.signature(t2)
    with pytest.raises(memo.Unhashable):
        memo.signature(torch.nn.Linear(2, 2), identity=True)


def test_a_cached_plan_sees_new_table_values():
    q, k, v = _qkv()
    table, term = _t5()
    first = rp.attend(q, k, v, term, causal=True)
    with torch.no_grad():
        table.mul_(-2.0)  # same shapes: the plan is reused, the values are read again
    again = rp.attend(q, k, v, term, causal=True)
    fresh_table = table.clone()
    fresh = rp.attend(q, k, v, rp.schemes.t5.position_term(fresh_table, bidirectional=False), causal=True)
    torch.testing.assert_close(again, fresh, rtol=0, atol=0)
    assert not torch.allclose(first, again)


def test_a_cached_plan_still_refuses():
    q, k, v = _qkv()
    _, term = _t5()
    rp.attend(q, k, v, term, causal=True)
    _, wrong_heads = _t5(H=3)
    with pytest.raises(ValueError, match="heads"):
        rp.attend(q, k, v, wrong_heads, causal=True)
    with pytest.raises(ValueError, match="backend"):
        rp.attend(q, k, v, term, causal=True, backend="fast")
    bad = q.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):  # the scan reads values on every call
        rp.attend(bad, k, v, term, causal=True)
    with rp.budget.memory_budget(64), pytest.raises(rp.budget.MemoryBudgetError):
        rp.attend(q, k, v, term, causal=True)  # the budget is part of the plan's key


def test_plans_are_made_once_per_shape():
    q, k, v = _qkv(dtype=torch.float32, L=5)
    term = rp.schemes.rope.position_term()
    with mock.patch.object(attend_module, "_plan", wraps=attend_module._plan) as plan:
        for _ in range(3):
            rp.attend(q, k, v, term, causal=True, check_finite=False)
        assert plan.call_count <= 1  # at most the first call (an earlier test may have made it)
        rp.attend(q[:, :, :4], k, v, term, causal=True, check_finite=False)
        assert plan.call_count >= 1


@pytest.mark.parametrize("scheme", ["rope", "xpos"])
def test_cached_rotation_equals_the_uncached_one(scheme):
    q, k, v = _qkv(dtype=torch.float32)
    term = rp.registry.example_term(scheme, num_heads=4, head_dim=16, k=None)
    pos = rp.positions.resolve_positions(8, 8, query_offset=3)
    for _ in range(2):  # the second call reads the cache
        cached = rotary.rotate_qk(q, k, term.rotary, pos)
        plain_q = rotary.rotate(q, pos.query, term.rotary, decay_sign=1,
                                centre=(pos.min_query + pos.max_key) // 2 if term.rotary.decay else 0)
        torch.testing.assert_close(cached[0], plain_q, rtol=0, atol=0)


def test_rotation_tables_made_in_inference_mode_are_not_used_for_training():
    term = rp.schemes.rope.position_term()
    q, k, v = _qkv(dtype=torch.float32, L=6, seed=3)
    with torch.inference_mode():
        rp.attend(q, k, v, term, causal=True)
    q = q.clone().requires_grad_(True)
    rp.attend(q, k, v, term, causal=True).sum().backward()  # raises if an inference tensor was saved
    assert q.grad is not None and torch.isfinite(q.grad).all()


def _model(scheme, **kw):
    cfg = rp.models.TransformerConfig(scheme, vocab_size=16, d_model=32, num_heads=4, num_layers=3,
                                      max_positions=32, **kw)
    return rp.models.Transformer(cfg, seed=0).double()


@pytest.mark.parametrize("scheme", ["t5", "alibi"])
def test_a_bias_shared_by_the_layers_is_built_once_per_forward(scheme):
    """Hugging Face's T5 computes its bias once per stack: so does the model, for every layer sharing
    the table, where no gradient reaches it (the forward before this built it in every layer)."""
    model = _model(scheme)
    tokens = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0))
    with mock.patch.object(sdpa, "dense_bias", wraps=sdpa.dense_bias) as built, torch.no_grad():
        model(tokens)
    assert built.call_count == 1
    with mock.patch.object(sdpa, "dense_bias", wraps=sdpa.dense_bias) as built:
        model(tokens)  # training: ALiBi's slopes take no gradient, T5's table does
    assert built.call_count == (1 if scheme == "alibi" else model.config.num_layers)


@pytest.mark.parametrize("scheme", ["t5", "alibi", "deberta", "kerple_log"])
def test_the_shared_bias_changes_no_number(scheme):
    """Logits and gradients with the forward's memo equal those with every layer building its own bias."""
    model = _model(scheme, causal=scheme != "deberta")
    tokens = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(1))

    def run():
        model.zero_grad(set_to_none=True)
        out = model(tokens)
        out.square().sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    shared_out, shared_grads = run()
    with mock.patch.object(sdpa.memo, "shared_bias_memo", lambda: None):
        own_out, own_grads = run()
    torch.testing.assert_close(shared_out, own_out, rtol=1e-12, atol=1e-12)
    assert shared_grads.keys() == own_grads.keys()
    for name in own_grads:
        torch.testing.assert_close(shared_grads[name], own_grads[name], rtol=1e-10, atol=1e-12, msg=name)
    with torch.no_grad():  # evaluation shares T5's bias too: the same numbers, bit for bit
        shared = model(tokens)
        with mock.patch.object(sdpa.memo, "shared_bias_memo", lambda: None):
            own = model(tokens)
    torch.testing.assert_close(shared, own, rtol=0, atol=0)


def _bucketed_deberta(H=4, d=16, S=8, seed=2):
    g = torch.Generator().manual_seed(seed)
    tables = [torch.randn(H, 2 * S, d, generator=g, dtype=torch.float64) for _ in range(2)]
    return rp.schemes.deberta.position_term(*tables, att_span=S, position_buckets=S, max_relative_positions=64)


def test_deberta_gather_maps_the_distinct_offsets_only():
    """The log buckets run on Lq + Lk - 1 offsets (they ran on all Lq Lk pairs, for c2p and p2c), same rows."""
    term = _bucketed_deberta()
    piece = term.query_vectors[0]
    assert piece.rows.work(1), "the log buckets declare their working bytes"
    pos = rp.positions.resolve_positions(40, 40)
    seen = []
    rows = vectors.RowIndex(piece.rows.num_rows, lambda off: (seen.append(off.numel()), piece.rows(off))[1],
                            piece.rows.description, piece.rows.min_offset, piece.rows.work_bytes)
    got = vectors.rows_per_pair(rows, pos)
    torch.testing.assert_close(got, piece.rows(pos.offsets()), rtol=0, atol=0)
    assert seen == [2 * 40 - 1]


@pytest.mark.parametrize("causal", [False, True])
def test_deberta_gather_equals_naive_with_log_buckets(causal):
    q, k, v = _qkv(L=40)
    term = _bucketed_deberta()
    for backend in ("eager", "sdpa"):
        gather = rp.attend(q, k, v, term, form="gather", backend=backend, causal=causal)
        naive = rp.attend(q, k, v, term, form="naive", backend=backend, causal=causal)
        torch.testing.assert_close(gather, naive, rtol=1e-12, atol=1e-12)


def test_tables_made_under_inference_mode_are_not_keyed_by_identity():
    """An inference tensor has no version counter: a term holding one is computed afresh, not keyed."""
    with torch.inference_mode():
        table = torch.randn(32, 4, dtype=torch.float64)
        with pytest.raises(memo.Unhashable):
            memo.signature(table, identity=True)
        term = rp.schemes.t5.position_term(table, bidirectional=False)
        model = _model("t5").eval()
        q, k, v = _qkv()
        first = rp.attend(q, k, v, term, causal=True)
        table.mul_(2.0)  # in place, unseen by any version counter
        again = rp.attend(q, k, v, term, causal=True)
        assert not torch.allclose(first, again)
        model(torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(0)))  # evaluation runs
