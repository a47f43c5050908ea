"""The experiments lab (relpos_core.lab): tasks, models (the library's one transformer), training to a
solve criterion, statistics (paired differences, intervals, verdicts), determinism, CLI, Ctrl-C."""
from __future__ import annotations

import copy

import json
import math
from dataclasses import replace

import pytest
import torch

import relpos_core as rp
from relpos_core.lab.__main__ import main as lab_main
from relpos_core.lab.models import SCHEMES, build_model, lab_config
from relpos_core.lab.presets import LONGEST, get_preset, ladder
from relpos_core.lab.tasks import IGNORE, CopyTask, MarkerTask, PositionTask, RetrievalTask, make_task
from relpos_core.lab.train import SolveTracker, derive_seed, train_run

lab = rp.lab
R = rp.lab.results


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py: one torch thread, as the lab runs


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("gap", [1, 2, 3])
def test_retrieval_labels_are_the_value_gap_tokens_after_the_key(gap):
    task = RetrievalTask(num_pairs=3, num_keys=8, num_values=8, num_filler=4, gap=gap, min_pairs=1)
    F, K = task.num_filler, task.num_keys
    pair_counts = set()
    for L in (16, 128):
        b = task.sample(64, L, gen())
        assert b.tokens.shape == b.targets.shape == b.detail.shape == (64, L)
        for row, tgt, det in zip(b.tokens.tolist(), b.targets.tolist(), b.detail.tolist()):
            context = row[: L - 3]
            keys = [t for t in context if F <= t < F + K]
            assert len(keys) == len(set(keys)) and 1 <= len(keys) <= 3  # distinct keys, 1 to 3 pairs
            pair_counts.add(len(keys))
            for q in range(L - 3, L):
                k = context.index(row[q])  # every query asks a key of the row
                assert tgt[q] == context[k + gap] and F + K <= tgt[q] < task.vocab_size
                assert all(t >= F + K for t in context[k + 1: k + gap + 1])  # decoys, then the value
                assert det[q] == q - (k + gap)  # distance back to the value
            asked = {row[q] for q in range(L - 3, L)}
            assert asked == set(keys)  # each pair asked (some twice when there are fewer than 3)
            assert all(t == IGNORE for t in tgt[: L - 3])
    assert pair_counts == {1, 2, 3}  # the density changes from row to row


def test_retrieval_floor_is_the_rows_most_frequent_value():
    task = RetrievalTask(num_pairs=3, num_keys=8, num_values=8, num_filler=4)  # three pairs in every row
    b = task.sample(4096, 16, gen(1))
    # three values drawn with replacement from 8, each asked once: guessing the row's mode scores
    # 1/3 when all differ (42/64 of rows), 2/3 with one pair (21/64), 1 when all agree (1/64)
    exact = (42 / 64) * (1 / 3) + (21 / 64) * (2 / 3) + (1 / 64) * 1
    assert exact == 29 / 64 and abs(task.position_free_floor(b) - exact) < 0.02
    decoys = RetrievalTask(num_pairs=3, num_keys=8, num_values=8, num_filler=4, gap=2)
    assert decoys.position_free_floor(decoys.sample(2048, 16, gen(1))) < exact - 0.05  # decoys blur the mode


def test_copy_labels_are_the_next_token_of_the_copy_at_a_random_place():
    task = CopyTask(num_symbols=64, min_copy=2, max_copy=8)
    starts, sizes = set(), set()
    for L in (32, 128):
        b = task.sample(64, L, gen(1))
        for row, tgt, det in zip(b.tokens.tolist(), b.targets.tolist(), b.detail.tolist()):
            sep = row.index(CopyTask.SEP)
            n = sum(t != IGNORE for t in tgt)
            assert 2 <= n <= 8
            x = row[sep - n: sep]
            assert len(set(x)) == n and min(x) >= 2  # distinct symbols
            assert row[sep + 1: sep + 1 + n] == x  # the copy
            assert set(row[: sep - n]) <= {CopyTask.PAD} and set(row[sep + 1 + n:]) <= {CopyTask.PAD}
            assert tgt[sep: sep + n] == x and det[sep: sep + n] == list(range(n))
            starts.add(sep - n)
            sizes.add(n)
    assert len(starts) > 10 and sizes == set(range(2, 9))  # the separator's position does not give n away
    right = CopyTask(placement="right").sample(16, 32, gen(2))
    assert (right.tokens[:, -1] != CopyTask.PAD).all()  # right-aligned: the shortcut the random placement removes
    longer = CopyTask(min_copy=9, max_copy=15).sample(8, 32, gen(3))
    assert ((longer.targets != IGNORE).sum(1) >= 9).all()
    floor = task.position_free_floor(task.sample(512, 32, gen(4)))
    assert 0.2 < floor < 0.6  # guessing among the symbols not yet copied


def test_marker_labels_bidirectional_and_causal_and_their_parts():
    task = MarkerTask(max_offset=16, num_filler=1)
    b = task.sample(64, 32, gen(2))
    for row, tgt, det in zip(b.tokens.tolist(), b.targets.tolist(), b.detail.tolist()):
        assert row.count(task.marker_token) == 1
        m = row.index(task.marker_token)
        for i in range(32):
            r = m - i
            if r != 0 and abs(r) <= 16:
                assert det[i] == r and tgt[i] == (r + 16 if r < 0 else r + 15)
            else:
                assert det[i] == IGNORE and tgt[i] == IGNORE
    c = torch.arange(32)
    assert torch.equal(task.offset_to_class(task.class_to_offset(c)), c)
    causal = MarkerTask(max_offset=16, causal=True)
    assert causal.causal and causal.num_classes == 16
    bc = causal.sample(64, 32, gen(3))
    labelled = bc.targets != IGNORE
    assert (bc.detail[labelled] < 0).all()  # only tokens after the marker, which they can see
    assert torch.equal(bc.targets[labelled], -bc.detail[labelled] - 1)
    # sign and distance scored apart: the mirror image of r has the right distance, the wrong sign
    t = task.offset_to_class(torch.tensor([-3, 5]))
    mirrored = task.offset_to_class(torch.tensor([3, -5]))
    parts = task.parts(mirrored, t)
    assert parts["distance"].all() and not parts["sign"].any()
    assert set(causal.parts(t[:1] * 0, t[:1] * 0)) == {"distance"}


def test_position_labels_and_generators_are_seeded():
    b = PositionTask(num_positions=32).sample(4, 32, gen(3))
    assert torch.equal(b.targets, torch.arange(32).expand(4, 32)) and torch.equal(b.detail, b.targets)
    for name, L in (("retrieval", 16), ("copy", 32), ("marker", 32), ("position", 32)):
        a, c = make_task(name).sample(8, L, gen(5)), make_task(name).sample(8, L, gen(5))
        assert torch.equal(a.tokens, c.tokens) and torch.equal(a.targets, c.targets)
        assert not torch.equal(a.tokens, make_task(name).sample(8, L, gen(6)).tokens)


@pytest.mark.parametrize("call, match", [
    (lambda: RetrievalTask(num_pairs=3).sample(2, 9, gen()), "length must be an integer >= 10"),
    (lambda: RetrievalTask(num_pairs=3, gap=0), r"gap must be an integer in \[1, 8\]"),
    (lambda: RetrievalTask(num_pairs=3, min_pairs=4), r"min_pairs must be an integer in \[1, 3\]"),
    (lambda: CopyTask(max_copy=8).sample(2, 16, gen()), "length must be an integer >= 17"),
    (lambda: CopyTask(min_copy=5, max_copy=4), r"max_copy must be an integer in \[5, 64\]"),
    (lambda: CopyTask(placement="left"), "placement must be one of"),
    (lambda: MarkerTask(max_offset=16).sample(2, 16, gen()), "length must be an integer >= 17"),
    (lambda: MarkerTask(causal="yes"), "causal must be one of"),
    (lambda: PositionTask(num_positions=32).sample(2, 33, gen()), r"length must be an integer in \[2, 32\]"),
    (lambda: MarkerTask().sample(0, 32, gen()), "batch_size"),
    (lambda: MarkerTask().sample(2, 32, 5), "generator must be a torch.Generator"),
    (lambda: make_task("sorting"), "task must be one of"),
])
def test_task_arguments_are_checked(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- presets


def test_presets_come_from_the_declarations_and_reach_512_tokens():
    full = get_preset("full")
    assert ladder(16) == (16, 32, 64, 128, 256, 512) and ladder(32)[-1] == LONGEST == 512
    for name, setup in full.tasks.items():
        if name != "position":
            assert setup.max_length >= 512, name
    assert len(full.seeds) >= 5 and len(full.lrs) >= 2 and full.budgets == (1, 4)
    gap = {r.scheme for r in full.runs if r.task == "retrieval_gap"}
    assert {"none", "rope", "alibi", "t5", "randomized", "fire"} <= gap  # NoPE, the usual, the long-input ones
    for r in full.runs:  # decoder-only schemes only on causal tasks
        task = lab.tasks.make_task(full.tasks[r.task].task, **full.tasks[r.task].options)
        assert task.causal or not rp.schemes.lookup(r.scheme).scheme.causal_only
    book = get_preset("book")
    assert {r.run_id for r in book.runs} <= {r.run_id for r in full.runs}
    tiny = get_preset("tiny")
    assert len(tiny.runs) <= 12 and {r.task for r in tiny.runs} == set(full.tasks)


def test_a_declared_experiment_run_joins_the_presets_and_the_experiment(monkeypatch):
    """A scheme that declares a run for an experiment (``Lab.runs``) gets it in the full,
    book and tiny presets and in that experiment's ids, with no edit to the lab."""
    from relpos_core.schemes.declaration import LabRun

    P = lab.presets
    name = next(n for n in P.MAIN_SCHEMES if "marker" in rp.schemes.lookup(n).lab.tasks
                and not rp.schemes.lookup(n).lab.runs and rp.schemes.lookup(n).lab.book)
    entry = rp.schemes.lookup(name)
    extra = LabRun("clipping", "marker", "1layer", model=dict(num_layers=1), tiny=True)
    lab_ = replace(entry.lab, runs=(LabRun("clipping", "marker"), extra), tiny=("marker",))
    scheme = replace(entry.scheme, lab=lab_)
    monkeypatch.setitem(rp.schemes._ENTRIES, name, replace(entry, scheme=scheme))
    runs = P._runs()
    spec = next(r for r in runs if r.run_id == f"marker/{name}-1layer")
    assert spec.scheme == name and spec.model == {"num_layers": 1}
    assert {f"marker/{name}", f"marker/{name}-1layer"} <= set(P._experiments(runs)["clipping"])
    assert f"marker/{name}-1layer" in {r.run_id for r in P._runs(P._BOOK_POOL)}
    assert {f"marker/{name}", f"marker/{name}-1layer"} <= P._tiny_ids()
    assert name in lab.figures.clipping_families()
    monkeypatch.undo()  # the committed declarations: the presets as committed
    assert f"marker/{name}-1layer" not in {r.run_id for r in P._runs()}
    assert name not in lab.figures.clipping_families()


# ----------------------------------------------------------------------------- models


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_model_runs_at_every_evaluation_length(scheme):
    for causal in (True, False):
        if rp.schemes.lookup(scheme).scheme.causal_only and not causal:
            continue
        cfg = lab_config(scheme, vocab_size=20, num_classes=7, max_positions=128, causal=causal)
        model = build_model(cfg, seed=0).eval()
        for L in (16, 128):
            tokens = torch.randint(0, 20, (2, L))  # (B, L)
            with torch.no_grad():
                logits = model(tokens)
            assert logits.shape == (2, L, 7) and torch.isfinite(logits).all()


def test_model_config_is_checked():
    base = dict(vocab_size=10, num_classes=3, max_positions=128, causal=False)
    with pytest.raises(ValueError, match="scheme must be one of"):
        lab_config("kerple", **base)
    with pytest.raises(ValueError, match="decoder-only"):
        lab_config("xpos", **base)
    with pytest.raises(ValueError, match="d_model must be divisible by num_heads"):
        lab_config("rope", num_heads=3, **base)
    with pytest.raises(ValueError, match="init must be one of"):
        lab_config("shaw", position=dict(init="zeros"), **base)
    learned = build_model(lab_config("learned", **dict(base, max_positions=8)), seed=0)
    with pytest.raises(ValueError, match="the table has 8 rows"):
        learned(torch.zeros(1, 9, dtype=torch.long))


def test_emd_adds_absolute_positions_and_reruns_the_last_block():
    cfg = lab_config("deberta_emd", vocab_size=10, num_classes=3, max_positions=128, causal=False)
    model = build_model(cfg, seed=0)
    plain = build_model(lab_config("deberta", vocab_size=10, num_classes=3, max_positions=128, causal=False), seed=0)
    assert sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in plain.parameters()) == 128 * 64
    calls = []
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda m, args, kwargs, out, i=i: calls.append((i, kwargs.get("query") is not None)),
                                    with_kwargs=True)
    model(torch.zeros(1, 5, dtype=torch.long))
    assert calls == [(0, False), (1, True), (1, True)]  # the second-to-last output, then the last block twice


def test_randomized_positions_are_drawn_in_training_only_and_seeded():
    cfg = lab_config("randomized", vocab_size=10, num_classes=3, max_positions=512, causal=True)
    a, b = build_model(cfg, seed=3), build_model(cfg, seed=3)
    pa = a.position.training_positions(32)
    assert pa.shape == (32,) and bool((pa[1:] > pa[:-1]).all()) and 0 <= int(pa.min()) and int(pa.max()) < 512
    assert torch.equal(pa, b.position.training_positions(32))  # the model's seed fixes the draws
    assert not torch.equal(pa, a.position.training_positions(32))  # a new draw each call
    seen = []
    real = a._run

    def spy(n, cache, positions, *args):
        seen.append(positions)
        return real(n, cache, positions, *args)

    a._run = spy
    tokens = torch.zeros(2, 16, dtype=torch.long)
    a.train()(tokens)
    a.eval()(tokens)
    assert seen[0] is not None and seen[0].shape == (16,) and seen[1] is None  # eval: 0 .. n - 1
    # the attention is RoPE's at the drawn positions
    rope = build_model(lab_config("rope", vocab_size=10, num_classes=3, max_positions=512, causal=True), seed=3)
    rope.load_state_dict(a.state_dict())
    p = torch.tensor([0, 7, 40, 41, 300])
    with torch.no_grad():
        torch.testing.assert_close(a.eval()(tokens[:, :5], positions=p), rope(tokens[:, :5], positions=p))
    with pytest.raises(ValueError, match="n must be at most max_positions = 512"):
        a.position.training_positions(513)
    import copy

    assert torch.equal(copy.deepcopy(b).position.training_positions(8),
                       build_model(cfg, seed=3).position.training_positions(8))


def test_shaw_sinusoidal_init_has_the_random_init_row_norm():
    rows = {}
    for init in ("random", "sinusoidal"):
        cfg = lab_config("shaw", vocab_size=10, num_classes=3, max_positions=16, causal=False,
                         position=dict(max_relative_position=16, init=init))
        rows[init] = build_model(cfg, seed=0).position.rel_key[0].detach()  # (33, 16)
    assert rows["sinusoidal"].shape == (33, 16)
    torch.testing.assert_close(rows["sinusoidal"].norm(dim=1), torch.full((33,), 0.02 * 4.0))  # 0.02 sqrt(d)
    sim = R.cosine_similarity(rows["sinusoidal"])
    assert sim[16, 17] > sim[16, 24] > sim[16, 16] - 2  # a band: neighbours are more alike


# ----------------------------------------------------------------------------- the solve criterion and budgets


def test_solve_tracker_pools_the_last_window_of_steps():
    t = SolveTracker(0.99, window=3)
    assert not t.add(99, 100) and not t.add(100, 100)  # the window is not full yet
    assert t.add(100, 100) and math.isclose(t.accuracy, 299 / 300)
    assert not t.add(90, 100)  # the oldest step leaves, a bad one enters: 290 / 300
    assert not t.add(100, 100) and not t.add(100, 100) and t.add(100, 100)  # the bad step has left
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\]"):
        SolveTracker(1.5, 3)
    with pytest.raises(ValueError, match="window must be an integer >= 1"):
        SolveTracker(0.9, 0)


def _quick(preset, cap=20, threshold=0.99, window=5):
    tasks = {k: replace(t, cap=cap, batch_size=8, eval_rows=4, probes=t.probes[:2]) for k, t in preset.tasks.items()}
    return replace(preset, tasks=tasks, solve_threshold=threshold, solve_window=window, warmup_steps=2)


def test_a_solved_run_stops_and_is_the_same_model_for_every_budget():
    quick = _quick(get_preset("tiny"), cap=30, threshold=0.05, window=2)  # an easy criterion: solved at once
    record, _ = train_run(quick, quick.run("retrieval/none"), seed=0, lr=3e-3)
    assert record["solved_at"] == record["steps"] == 2 and record["budgets"]["1"]["solved"]
    assert record["budgets"]["4"] == {"steps": 2, "solved": True, "eval_of": "1"}
    assert R.result(record, "L16", 4) == R.result(record, "L16", 1)


def test_an_unsolved_run_is_evaluated_at_the_cap_and_at_the_end():
    quick = _quick(get_preset("tiny"), cap=5, threshold=1.0, window=50)  # never solved
    record, _ = train_run(quick, quick.run("marker/shaw"), seed=0, lr=3e-3)
    assert record["solved_at"] is None and record["steps"] == 20
    one, four = record["budgets"]["1"], record["budgets"]["4"]
    assert (one["steps"], four["steps"], one["solved"], four["solved"]) == (5, 20, False, False)
    assert set(one["eval"]) == set(four["eval"]) == {"L32", "L64"}
    assert [c[0] for c in record["curve"]][-1] == 20


@pytest.mark.slow
def test_a_seeded_run_is_deterministic_and_the_learning_rate_changes_only_the_updates():
    tiny = get_preset("tiny")
    for run_id in ("marker/shaw-k16", "copy/randomized", "position/deberta_emd"):
        spec = tiny.run(run_id)
        a, _ = train_run(tiny, spec, seed=7, lr=3e-3)
        b, _ = train_run(tiny, spec, seed=7, lr=3e-3)
        c, _ = train_run(tiny, spec, seed=8, lr=3e-3)
        assert json.dumps(_strip_times(a)) == json.dumps(_strip_times(b))
        assert a["curve"] != c["curve"]
        d, _ = train_run(tiny, spec, seed=7, lr=1e-3)
        assert d["curve"][0] != a["curve"][0] or d["budgets"] != a["budgets"]
    assert derive_seed(0, "train", "copy") == derive_seed(0, "train", "copy") != derive_seed(1, "train", "copy")


def _strip_times(record):
    return {k: v for k, v in record.items() if k not in ("train_s", "eval_s", "cpu_s")}


def test_run_preset_checks_its_arguments():
    tiny = get_preset("tiny")
    with pytest.raises(ValueError, match="seeds must be distinct"):
        lab.run_preset(tiny, [0, 0], progress=False)
    with pytest.raises(ValueError, match=r"lrs must be distinct numbers in \(0, 1\)"):
        lab.run_preset(tiny, [0], [0.1, 0.1], progress=False)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        lab.run_preset(tiny, [0], progress=False, workers=0)
    with pytest.raises(ValueError, match="keep_models needs workers == 1"):
        lab.run_preset(tiny, [0], progress=False, workers=2, keep_models=True)
    with pytest.raises(ValueError, match=r"lr must be a number in \(0, 1\)"):
        train_run(tiny, tiny.runs[0], seed=0, lr=2.0)


@pytest.mark.slow
def test_two_processes_give_the_same_records_in_the_same_order():
    tiny = get_preset("tiny")
    small = replace(tiny, runs=(tiny.run("copy/randomized"), tiny.run("position/deberta_emd")), lrs=(3e-3,))
    spawned = lab.run_preset(small, [3], progress=False, workers=2)
    assert spawned["workers"] == 2 and [r["run_id"] for r in spawned["runs"]] == [s.run_id for s in small.runs]
    for record, spec in zip(spawned["runs"], small.runs):
        here, _ = train_run(small, spec, seed=3, lr=3e-3)
        assert json.dumps(_strip_times(record)) == json.dumps(_strip_times(here))


def test_untrained_rows_of_the_learned_table_stay_at_their_initial_values():
    quick = _quick(get_preset("full"), cap=3, threshold=1.0, window=50)
    spec = quick.run("retrieval_gap/learned")
    record, model = train_run(quick, spec, seed=0, lr=3e-3)
    init = build_model(model.config, seed=derive_seed(0, "init", spec.run_id)).position.weight
    trained = model.position.weight.detach()
    L = quick.tasks["retrieval_gap"].train_length
    assert record["untrained_position_rows"] == [L, quick.tasks["retrieval_gap"].max_length]
    assert torch.equal(trained[L:], init[L:])  # never seen in training: untouched
    assert not torch.equal(trained[:L], init[:L])
    table = record["input_table"]  # the table's trained rows against the token embeddings, and zeroed
    assert 0 < table["row_norm"] < table["token_norm"] and 0 <= table["accuracy_zeroed"] <= 1


# ----------------------------------------------------------------------------- statistics


def test_t_quantiles_and_intervals():
    for df, q in ((1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423)):  # tables of Student's t
        assert abs(R.t_quantile(0.975, df) - q) < 5e-4
    assert abs(R.t_quantile(0.95, 4) - 2.1318) < 5e-4 and R.t_quantile(0.025, 4) == -R.t_quantile(0.975, 4)
    ti = R.t_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    half = 2.7764 * math.sqrt(0.025) / math.sqrt(5)
    assert math.isclose(ti["mean"], 0.3) and abs(ti["low"] - (0.3 - half)) < 1e-3 and ti["n"] == 5
    flat = R.t_interval([1.0, 1.0, 1.0])
    assert flat["low"] == flat["high"] == 1.0
    assert R.t_interval([0.5])["low"] == -math.inf  # one value says nothing about the spread
    s = R.summary([0.5, 1.0, 0.75])
    assert s["mean"] == 0.75 and s["min"] == 0.5 and s["max"] == 1.0 and math.isclose(s["std"], 0.25)
    with pytest.raises(ValueError, match="values must hold at least one number"):
        R.t_interval([])


def _fake_results(acc_a, acc_b, solved_a, solved_b, lr=1e-3):
    """Two runs of one task, five seeds, one learning rate; accuracy at the training probe L8 and at L16."""
    probes = [{"name": "L8", "length": 8, "options": {}}, {"name": "L16", "length": 16, "options": {}}]
    runs = []
    for variant, accs, solved in (("a", acc_a, solved_a), ("b", acc_b, solved_b)):
        for seed, (acc, ok) in enumerate(zip(accs, solved)):
            ev = {p["name"]: {"accuracy": acc, "labels": 10, "floor": 0.1, "parts": {}, "by_detail": {"1": [1, 1]}}
                  for p in probes}
            runs.append({"run_id": f"t/{variant}", "task": "t", "variant": variant, "scheme": variant, "seed": seed,
                         "lr": lr, "solved_at": 10 if ok else None, "steps": 10 if ok else 40,
                         "budgets": {"1": {"steps": 10, "solved": ok, "eval": ev},
                                     "4": {"steps": 10, "solved": ok, "eval_of": "1"}}})
    return {"format": R.FORMAT, "provenance": {"lrs": [lr]},
            "preset": {"budgets": [1, 4], "tasks": {"t": {"probes": probes}}, "runs": []}, "runs": runs}


def test_paired_differences_are_seed_by_seed_and_beyond_training_only_on_solved_runs():
    res = _fake_results([0.9, 0.8, 0.95, 0.7, 0.85], [0.5, 0.6, 0.55, 0.5, 0.45], [True] * 5,
                        [True, True, False, True, True])
    d = R.paired(res, "t/a", "t/b", "L8", lr=1e-3)
    assert d["n"] == 5 and d["a_wins"] == 5 and d["low"] > 0  # at the training probe every seed counts
    assert [round(x, 2) for x in d["diffs"]] == [0.4, 0.2, 0.4, 0.2, 0.4]
    far = R.paired(res, "t/a", "t/b", "L16", lr=1e-3, rule="training")
    assert far["n"] == 4 and far["seeds"] == [0, 1, 3, 4]  # seed 2: b did not solve its task
    assert R.solved(res, "t/b", rule="training") == (4, 5)
    unsolved = _fake_results([1] * 5, [1] * 5, [False] * 5, [False] * 5)
    none = R.paired(unsolved, "t/a", "t/b", "L16", lr=1e-3, rule="training")
    assert none["n"] == 0 and math.isnan(none["mean"])
    claim = R.better(res, "t/a", "t/b", "L8")  # one learning rate, two budgets (the same model)
    assert claim["verdict"] == "holds" and all(claim["checks"].values())
    assert (claim["testable"], claim["cells"]) == (2, 2) and R.testable_text(claim) == "2 of 2 cells"
    assert R.better(unsolved, "t/a", "t/b", "L16", rule="training")["verdict"] == "untestable"
    assert R.better(res, "t/b", "t/a", "L8")["verdict"] == "does not hold"  # the opposite is shown
    assert R.solves(res, "t/b", rule="training")["verdict"] == "does not hold"
    assert R.solves(res, "t/b", at_least_k=4, rule="training")["verdict"] == "holds"
    assert R.at_least(res, "t/a", "L8", 0.7)["verdict"] == "holds"
    assert R.at_most(res, "t/a", "L8", 0.7)["verdict"] == "does not hold"
    table = R.claims_table([("a beats b", claim)], res)
    assert table.count("✓") == 2 and "**holds**" in table and "| 2/2 |" in table


def test_the_verdict_grid_is_short_and_reads_the_claims_at_the_largest_budget():
    res = _fake_results([0.9, 0.8, 0.95, 0.7, 0.85], [0.5, 0.6, 0.55, 0.5, 0.45], [True] * 5, [True] * 5)
    rows = [("a beats b", R.better(res, "t/a", "t/b", "L8")), ("b solves", R.solves(res, "t/b")),
            ("a >= 0.99", R.at_least(res, "t/a", "L8", 0.99))]
    grid = R.verdict_grid(rows, res).splitlines()
    assert grid[0] == "| finding | verdict | lr 0.001 |"  # one column per learning rate
    assert grid[2] == "| a beats b | holds | +0.32 ✓ |"
    assert grid[3] == "| b solves | does not hold | 0/5 ✗ |"  # held out 0.5 < 0.95: none solved
    assert grid[4] == "| a >= 0.99 | does not hold | 0.84 ✗ |"
    with pytest.raises(ValueError, match="budget must be one of"):
        R.verdict_grid(rows, res, budget=2)


def test_the_levels_figure_has_a_point_per_learning_rate_and_names_unsolved_rows():
    res = _fake_results([0.99, 0.98, 0.97, 0.99, 0.96], [0.5] * 5, [True] * 5, [False] * 5)
    fig = lab.figures.levels_figure(res, "t", "L16", ["a", "b"], reference=0.3, reference_label="floor")
    (trace,) = fig.data  # one learning rate: one trace
    assert list(trace.x) == [pytest.approx(R.t_interval([0.99, 0.98, 0.97, 0.99, 0.96])["mean"])]
    assert list(fig.layout.yaxis.ticktext) == ["a", "b"]
    assert [a.text for a in fig.layout.annotations][:1] == ["0 of 5 runs solved"]  # b: no point
    with pytest.raises(ValueError, match="budget must be one of"):
        lab.figures.levels_figure(res, "t", "L16", ["a"], budget=3)


def test_solved_is_read_from_the_held_out_evaluation():
    # a: never stopped by the training rule, but 0.99 on held-out rows; b: stopped, 0.90 held out
    res = _fake_results([0.99] * 5, [0.90] * 5, [False] * 5, [True] * 5)
    assert R.solved(res, "t/a") == (5, 5) and R.solved(res, "t/a", rule="training") == (0, 5)
    assert R.solved(res, "t/b") == (0, 5) and R.solved(res, "t/b", rule="training") == (5, 5)
    assert R.solves(res, "t/a")["verdict"] == "holds"
    assert len(R.values(res, "t/a", "L16", solved_only=True)) == 5  # judged beyond training
    with pytest.raises(ValueError, match="rule must be one of"):
        R.solved(res, "t/a", rule="train")
    rows = R.length_table(res, "t", ["a", "b"])
    assert rows[1]["L16"] is None and rows[1]["all"]["L16"]["mean"] == pytest.approx(0.9)
    text = R.length_table_markdown(res, "t", ["a", "b"])
    assert "| b | 0/5 | 0.90 | 0.90 (–) |" in text  # every run reported beside the solved ones


def test_a_level_claim_needs_its_interval_past_the_level_and_three_runs():
    near = _fake_results([0.95, 0.85, 0.92, 0.88, 0.93], [0.1] * 5, [True] * 5, [True] * 5)
    c = R.at_least(near, "t/a", "L8", 0.9)  # mean 0.906, interval about [0.86, 0.96]
    assert R.summary([0.95, 0.85, 0.92, 0.88, 0.93])["mean"] >= 0.9
    assert c["verdict"] == "not shown" and not any(c["checks"].values()) and not any(c["opposite"].values())
    assert "· 0.91 [0.86, 0.96] (5)" in R.claims_table([("a >= 0.9", c)], near)
    assert R.at_least(near, "t/a", "L8", 0.8)["verdict"] == "holds"
    assert R.at_least(near, "t/a", "L8", 0.99)["verdict"] == "does not hold"  # upper end below
    assert R.margin(R.at_least(near, "t/a", "L8", 0.8)) == pytest.approx(
        R.t_interval([0.95, 0.85, 0.92, 0.88, 0.93])["low"] - 0.8)
    two = _fake_results([0.99, 0.98, 0.1, 0.1, 0.1], [0.1] * 5, [True] * 5, [True] * 5)
    c2 = R.at_least(two, "t/a", "L16", 0.9, solved_only=True)  # only two runs solved
    assert c2["verdict"] == "untestable" and c2["testable"] == 0
    with pytest.raises(ValueError, match="level must be a number in"):
        R.at_least(near, "t/a", "L8", 90)


def test_permutation_p_is_exact_and_knows_its_smallest_value():
    assert R.permutation_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    assert R.permutation_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert R.permutation_p([1, 2, 3, 4, 5], [1.5, 2.5, 3.5, 4.5, 5.5], paired=True) == pytest.approx(2 / 32)
    assert R.permutation_p([1, 1, 1], [1, 1, 1]) == 1.0
    many = R.permutation_p(list(range(20)), [x + 30 for x in range(20)])  # sampled, seeded
    assert many < 0.001 and many == R.permutation_p(list(range(20)), [x + 30 for x in range(20)])
    with pytest.raises(ValueError, match="same length"):
        R.permutation_p([1, 2], [1], paired=True)


def test_verdicts_over_learning_rates_and_budgets():
    assert R.verdict({(1, 1): True, (1, 4): True, (2, 1): True, (2, 4): True}) == "holds"
    assert R.verdict({(1, 1): None, (1, 4): True, (2, 1): None, (2, 4): True}) == "holds where testable"
    assert R.verdict({(1, 1): None, (1, 4): None, (2, 1): None, (2, 4): None}) == "untestable"
    assert R.verdict({(1, 1): None, (1, 4): False, (2, 1): None, (2, 4): False}) == "not shown"
    both = {(1, 1): False, (1, 4): False, (2, 1): False, (2, 4): False}
    assert R.verdict(both) == "not shown"
    assert R.verdict(both, opposite={k: True for k in both}) == "does not hold"
    assert R.verdict(both, opposite={(1, 1): True}) == "not shown"
    by_budget = {(1, 1): True, (1, 4): False, (2, 1): True, (2, 4): False}
    by_lr = {(1, 1): True, (1, 4): True, (2, 1): False, (2, 4): False}
    # a pattern alone names no dependence: the interaction test must back it
    assert R.verdict(by_budget) == "shown in some cells" and R.verdict(by_lr) == "shown in some cells"
    assert R.verdict(by_budget, interaction={"budget": {1: 0.01, 2: 0.03}}) == "budget-dependent"
    assert R.verdict(by_budget, interaction={"budget": {1: 0.01, 2: 0.2}}) == "shown in some cells"
    assert R.verdict(by_lr, interaction={"lr": {1: 0.008, 4: 0.04}}) == "depends on the learning rate"
    assert R.verdict(by_lr, interaction={"lr": {1: 0.008, 4: 0.09}}) == "shown in some cells"
    assert R.verdict(by_lr, interaction={"budget": {1: 0.0, 2: 0.0}}) == "shown in some cells"
    one_cell = {(1, 1): True, (1, 4): False, (2, 1): False, (2, 4): False}
    assert R.verdict(one_cell, interaction={"lr": {1: 0.0, 4: 0.0}, "budget": {1: 0.0, 2: 0.0}}) == (
        "shown in some cells")
    with pytest.raises(ValueError, match="checks must hold"):
        R.verdict({})


def test_a_learning_rate_dependence_is_tested_before_it_is_named():
    def two_lrs(a_low, a_high):
        lo, hi = (_fake_results(a, [0.0] * 5, [True] * 5, [True] * 5, lr=lr) for a, lr in
                  ((a_low, 1e-3), (a_high, 3e-3)))
        return {**lo, "provenance": {"lrs": [1e-3, 3e-3]}, "runs": lo["runs"] + hi["runs"]}

    clear = two_lrs([0.80, 0.82, 0.84, 0.81, 0.83], [0.97, 0.98, 0.99, 0.97, 0.98])
    c = R.at_least(clear, "t/a", "L8", 0.9)
    assert c["verdict"] == "depends on the learning rate"
    assert c["interaction"]["lr"][1] == pytest.approx(2 / 252)
    # the same pattern of cells, but the two learning rates' runs overlap: not significant
    vague = two_lrs([0.80, 0.99, 0.90, 0.85, 0.96], [0.91, 0.92, 0.93, 0.94, 0.92])
    v = R.at_least(vague, "t/a", "L8", 0.9)
    assert [v["checks"][(lr, 1)] for lr in (1e-3, 3e-3)] == [False, True]
    assert v["interaction"]["lr"][1] > 0.05 and v["verdict"] == "shown in some cells"
    assert "shown in 2 of 4 cells" in R.claims_table([("a >= 0.9", v)], vague)


def test_rows_for_a_standard_error():
    assert R.rows_for_standard_error(3) == 834  # 2,500 labels at p = 0.5
    assert R.rows_for_standard_error(96 / 32, se=0.03) == 93
    with pytest.raises(ValueError, match="labels_per_row must be > 0"):
        R.rows_for_standard_error(0)


def test_retrieval_with_a_gap_needs_order_and_content_not_far_positions():
    task = RetrievalTask(gap=2, min_pairs=1)
    b = task.sample(2000, 16, torch.Generator().manual_seed(0))
    floor, free = task.position_free_floor(b), task.binding_free_floor(b)
    assert 0.40 < floor < 0.50 and 0.63 < free < 0.71  # knowing the values without their keys
    assert task.order_rule_accuracy(b) == 1.0  # "the second value-type token after the key"
    one = RetrievalTask(gap=2, num_pairs=1)
    assert one.binding_free_floor(one.sample(50, 8, torch.Generator().manual_seed(1))) == 1.0


# ----------------------------------------------------------------------------- the pipeline and the CLI


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    with lab.train.threads(1):
        lab_main(["--preset", "tiny", "--out", str(out / "lab-tiny.json"), "--no-progress", "--workers", "1"])
    return out, R.load_results(out / "lab-tiny.json")



def test_the_declared_lab_tasks_exist_and_a_new_scheme_is_in_the_full_preset():
    """Every task a declaration names is one of the lab's language tasks (a misspelt task would train
    nothing, silently); a scheme declared with the default Lab trains on retrieval_gap in the full preset."""
    from relpos_core.lab import presets

    for name in rp.schemes.names():
        unknown = set(rp.schemes.lookup(name).lab.tasks) - set(presets._CAUSAL)
        assert not unknown, f"{name} declares lab tasks {sorted(unknown)}; the lab has {sorted(presets._CAUSAL)}"
    assert rp.schemes.Lab().tasks == ("retrieval_gap",)
    full = {r.run_id for r in get_preset("full").runs}
    for name in presets.MAIN_SCHEMES:
        for task in rp.schemes.lookup(name).lab.tasks:
            if name in presets.schemes_for(presets._CAUSAL[task]):
                assert f"{task}/{name}" in full

@pytest.mark.slow
def test_cli_pipeline_end_to_end_on_the_tiny_preset(tiny_results):
    out, res = tiny_results
    tiny = get_preset("tiny")
    p = res["provenance"]
    assert p["seeds"] == [0] and p["lrs"] == [3e-3, 1e-3] and p["preset"] == "tiny"
    for key in ("device", "cpu_model", "cpu_capability", "cpu_flags", "torch_threads", "torch_build", "torch",
                "date", "git_commit", "wall_s", "cpu_s", "threads", "command", "load_average_start"):
        assert p[key] is not None, key
    assert p["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert p["torch_build"]["version"] == torch.__version__ and p["torch_build"]["blas"]
    assert len(res["runs"]) == 2 * len(tiny.runs) and res["complete"] is True
    for r in res["runs"]:
        setup = tiny.tasks[r["task"]]
        assert set(r["budgets"]) == {"1", "4"} and r["steps"] <= setup.cap * 4
        first = R.result(r, setup.probes[0].name)
        assert 0.0 <= first["accuracy"] <= 1.0 and first["labels"] > 0 and 0 <= first["floor"] <= 1
        assert sum(t for _, t in first["by_detail"].values()) == first["labels"]
        four = r["budgets"]["4"]  # evaluated again, or the same model as budget 1 (solved or stopped there)
        if "eval" in four:
            assert set(four["eval"]) == {probe.name for probe in setup.probes}
        else:
            assert four["eval_of"] == "1" and "eval" in r["budgets"]["1"]
            assert R.result(r, setup.probes[0].name, 4) is r["budgets"]["1"]["eval"][setup.probes[0].name]
    for task in tiny.tasks:
        assert (out / f"lab-tiny-{task}.png").stat().st_size > 1000
    assert not (out / "lab-tiny.json.partial.jsonl").exists()
    marker = R.records(res, "marker/shaw")[0]
    assert set(R.result(marker, "L32")["parts"]) == {"sign", "distance"}


def test_cli_trains_only_the_named_runs_on_new_seeds(tmp_path):
    out = tmp_path / "recheck.json"
    with lab.train.threads(1):
        res = lab_main(["--preset", "tiny", "--runs", "retrieval_gap/rope", "--seeds", "10", "11", "--lrs", "3e-3",
                        "--out", str(out), "--no-progress", "--workers", "1", "--no-plots"])
    assert [r["run_id"] for r in res["runs"]] == ["retrieval_gap/rope"] * 2
    assert [r["seed"] for r in res["runs"]] == [10, 11]
    loaded = R.load_results(out)
    assert loaded["provenance"]["runs"] == ["retrieval_gap/rope"] and R.complete_seeds(loaded) == [10, 11]
    assert [r["run_id"] for r in loaded["preset"]["runs"]] == ["retrieval_gap/rope"]
    with pytest.raises(ValueError, match="run_ids must be run ids of preset"):
        lab.presets.subset(get_preset("tiny"), ["copy/nope"])


@pytest.mark.slow
def test_results_tables_and_figures(tiny_results):
    _, res = tiny_results
    md = R.length_table_markdown(res, "retrieval")
    assert md.splitlines()[0].startswith("| model | solved | L = 16 | L = 32")
    details, mean, per_run = R.detail_accuracy(res, "marker/shaw")
    assert len(per_run) == 2 and len(mean) == len(details) and set(details) <= set(range(-16, 17)) - {0}
    assert len(lab.figures.length_figure(res, "copy").static_figure().frames) == 2  # the two budgets
    assert len(lab.figures.clipping_figure(res).static_figure().frames) == 2
    assert len(lab.figures.band_figure(res).static_figure().frames) == 2
    assert len(lab.figures.position_figure(res).static_figure().frames) == 2
    assert len(lab.figures.parts_figure(res, "marker").static_figure().frames) == 2
    assert lab.figures.steps_figure(res, "marker").data
    # paired differences need two seeds: a second seed made from the first, Shaw's accuracy lowered by 0.25
    two = copy.deepcopy(res)
    for r in [r for r in res["runs"] if r["run_id"] in ("marker/shaw", "marker/t5")]:
        again = copy.deepcopy(r)
        again["seed"] = 1
        if r["run_id"] == "marker/shaw":
            for b in again["budgets"].values():
                for e in b.get("eval", {}).values():
                    e["accuracy"] -= 0.25
        two["runs"].append(again)
    comparisons = [("Shaw − T5, marker", "marker/shaw", "marker/t5", "L32")]
    fig = lab.figures.paired_figure(two, comparisons)
    assert len(fig.data) == len(R.lrs(two)) * len(R.budgets(two))  # one trace per (learning rate, budget)
    assert list(fig.layout.yaxis.ticktext) == ["Shaw − T5, marker"]
    for trace in fig.data:  # the mean over the two seeds of Shaw - T5, at the training probe (no solve filter)
        lr = float(trace.name.split()[1].rstrip(","))
        budget = 1 if trace.name.endswith(", the cap") else int(trace.name.split(", ")[1].split("x")[0])
        a, b = (R.values(two, run, "L32", budget=budget, lr=lr) for run in ("marker/shaw", "marker/t5"))
        want = sum(a[key] - b[key] for key in a) / len(a)
        assert len(a) == 2 and len(trace.x) == 1 and trace.x[0] == pytest.approx(want)
    assert lab.figures.label("shaw-1layer") == f"{rp.schemes.lookup('shaw').display}, one layer"
    with pytest.raises(ValueError, match="run_id must be one of"):
        R.records(res, "marker/xpos")


@pytest.mark.slow
def test_an_unfinished_run_is_read_from_its_partial_file_and_compared_on_whole_seeds(tiny_results, tmp_path):
    _, res = tiny_results
    tiny, lrs = get_preset("tiny"), res["provenance"]["lrs"]
    rows = res["runs"]  # seed 0, every run at both learning rates
    unfinished = [dict(r, seed=1) for r in rows[:3]]  # seed 1: its first three jobs only
    head = dict(preset="tiny", seeds=[0, 1], lrs=lrs, command="python -m relpos_core.lab --preset tiny",
                git_commit="0123456789abcdef", load_start=[0.5, 0.5, 0.5])
    partial = tmp_path / "lab.json.partial.jsonl"
    lines = [{"head": head}] + [{"row": r} for r in reversed(rows + unfinished)]  # finished in any order
    partial.write_text("".join(json.dumps(x) + "\n" for x in lines))
    before = partial.read_text()

    snap = R.from_partial(partial)
    assert partial.read_text() == before  # read, never moved or changed
    jobs = lab.train.jobs_of(tiny, [0, 1], lrs)
    assert [(r["run_id"], r["seed"], r["lr"]) for r in snap["runs"]] == [
        (s.run_id, seed, lr) for s, seed, lr in jobs[:len(rows) + 3]]  # the run's order
    p = snap["provenance"]
    assert snap["complete"] is False and p["git_commit"] == head["git_commit"] and p["wall_s"] is None
    assert p["snapshot"]["rows"] == len(rows) + 3 and p["snapshot"]["of"] == len(jobs)
    assert p["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    R.save_results(snap, tmp_path / "snap.json")
    loaded = R.load_results(tmp_path / "snap.json")
    assert R.complete_seeds(loaded) == [0]
    kept = R.only_complete_seeds(loaded)
    assert kept["provenance"]["seeds"] == [0] and kept["provenance"]["seeds_dropped"] == [1]
    assert kept["runs"] == rows and loaded["provenance"]["seeds"] == [0, 1]  # a copy: the file is untouched
    line = R.provenance_line(kept)
    assert f"unfinished: {len(rows) + 3} of {len(jobs)} runs" in line and "seeds 1 left out" in line
    assert "wall time not recorded" in line
    assert R.only_complete_seeds(res) is res  # a finished run is kept whole

    with pytest.raises(ValueError, match="at least one seed finished"):
        R.only_complete_seeds({**loaded, "runs": unfinished})
    with pytest.raises(ValueError, match="path must be an existing partial file"):
        R.from_partial(tmp_path / "missing.partial.jsonl")
    stranger = tmp_path / "other.partial.jsonl"
    stranger.write_text(json.dumps({"head": head}) + "\n" + json.dumps({"row": dict(rows[0], run_id="marker/xpos")}))
    with pytest.raises(ValueError, match="rows that preset 'tiny' does not define"):
        R.from_partial(stranger)
    headless = tmp_path / "headless.partial.jsonl"
    headless.write_text(json.dumps({"row": rows[0]}) + "\n")
    with pytest.raises(ValueError, match="no head line"):
        R.from_partial(headless)


def test_load_results_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "relpos-lab/1"}))
    with pytest.raises(ValueError, match="not a lab results file of this version"):
        R.load_results(bad)
    with pytest.raises(ValueError, match="path must be an existing results file"):
        R.load_results(tmp_path / "missing.json")


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "argument --preset: invalid choice"),
    (["--seeds", "-1"], "argument --seeds: must be an integer in [0, 2147483647], got -1"),
    (["--seeds", "x"], "argument --seeds: must be an integer"),
    (["--seeds", "1", "1"], "argument --seeds: seeds must be distinct"),
    (["--seeds"] + [str(i) for i in range(17)], "argument --seeds: at most 16 seeds"),
    (["--lrs", "2"], "argument --lrs: must be a number in (0, 1), got 2"),
    (["--lrs", "0.1", "0.1"], "argument --lrs: learning rates must be distinct"),
    (["--threads", "0"], "argument --threads: must be an integer in"),
    (["--workers", "0"], "argument --workers: must be an integer in"),
    (["--resume"], "argument --resume: name the interrupted run's results file with --out"),
    (["--preset", "tiny", "--runs", "copy/nope"], "argument --runs: distinct run ids of preset 'tiny'"),
])
def test_cli_rejects_bad_arguments_before_training(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(lab.train, "run_preset", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exc:
        lab_main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_checks_the_output_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(lab.train, "run_preset", lambda *a, **k: pytest.fail("training started"))
    target = tmp_path / "results.json"
    target.write_text("{}")
    for argv, message in ((["--out", str(target)], "exists: pass --force"),
                          (["--out", str(tmp_path)], "is a folder"),
                          (["--out", str(tmp_path / "r.txt")], "must end in .json"),
                          (["--out", str(tmp_path / "new.json"), "--resume"], "is there to continue")):
        with pytest.raises(SystemExit):
            lab_main(["--preset", "tiny"] + argv)
        assert message in capsys.readouterr().err
    assert target.read_text() == "{}"  # nothing replaced


def test_cli_never_writes_into_the_package_by_default(tmp_path, monkeypatch):
    from relpos_core.outputs import Output, protected_folders

    monkeypatch.chdir(rp.outputs.PACKAGE)  # a user running it from inside the package folder
    default = Output.from_argument(None, tool="lab-tiny")
    with pytest.raises(ValueError, match="committed results: name it with --out"):
        default.check()
    assert rp.outputs.PACKAGE in protected_folders()


def _tiny_run_interrupted_at_the_third_run(tmp_path, monkeypatch):
    """A two-run tiny preset whose third training raises KeyboardInterrupt: (preset, out, argv, real train_run)."""
    calls = []
    real = lab.train.train_run

    def train_then_interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    tiny = get_preset("tiny")
    small = replace(tiny, runs=tiny.runs[:2])
    monkeypatch.setitem(lab.presets.PRESETS, "tiny", small)
    monkeypatch.setattr(lab.train, "train_run", train_then_interrupt)
    out = tmp_path / "lab.json"
    argv = ["--preset", "tiny", "--out", str(out), "--no-progress", "--workers", "1", "--no-plots"]
    return small, out, argv, real


def test_ctrl_c_keeps_the_finished_runs_and_resume_finishes_them(tmp_path, monkeypatch):
    small, out, argv, real = _tiny_run_interrupted_at_the_third_run(tmp_path, monkeypatch)
    with pytest.raises(SystemExit) as exc:
        lab_main(argv)
    assert exc.value.code == 130
    res = R.load_results(out)
    assert res["complete"] is False and len(res["runs"]) == 2
    jobs = lab.train.jobs_of(small)
    assert [(r["run_id"], r["lr"]) for r in res["runs"]] == [(s.run_id, lr) for s, _, lr in jobs[:2]]
    monkeypatch.setattr(lab.train, "train_run", real)
    resumed = lab_main(argv + ["--resume"])  # trains only the two runs it lacks
    assert resumed["complete"] is True and len(resumed["runs"]) == 4
    assert [(r["run_id"], r["lr"]) for r in resumed["runs"]] == [(s.run_id, lr) for s, _, lr in jobs]
    assert json.dumps(_strip_times(resumed["runs"][0])) == json.dumps(_strip_times(res["runs"][0]))


def _as_partial(out):
    """Turn an interrupted run's results file into the partial file a killed run leaves (and remove the results)."""
    old = json.loads(out.read_text())
    p = old["provenance"]
    head = dict(preset=p["preset"], seeds=p["seeds"], lrs=p["lrs"], git_commit=p["git_commit"],
                load_start=p.get("load_average_start"))
    partial = out.with_name(out.name + ".partial.jsonl")
    partial.write_text("".join(json.dumps(x) + "\n" for x in [{"head": head}] + [{"row": r} for r in old["runs"]]))
    out.unlink()
    return partial, len(old["runs"])


@pytest.mark.slow  # trains five tiny runs
def test_resume_never_loses_the_partial_file_and_drops_a_torn_line_saying_so(tmp_path, monkeypatch):
    """An interrupt or write error while --resume starts (before: the partial file was truncated and
    re-appended before the Ctrl-C handling was armed: 1 of 4 runs left, no results file); a torn
    last line (the process killed mid-write) is dropped with a warning naming the file."""
    small, out, argv, real = _tiny_run_interrupted_at_the_third_run(tmp_path, monkeypatch)
    with pytest.raises(SystemExit):
        lab_main(argv)
    monkeypatch.setattr(lab.train, "train_run", real)
    partial, finished = _as_partial(out)
    assert finished == 2
    before = partial.read_bytes()

    def interrupted_write(self, row):
        raise KeyboardInterrupt  # Ctrl-C at the first row the resumed run writes

    monkeypatch.setattr(rp.outputs.Output, "add", interrupted_write)
    with pytest.raises(SystemExit) as exc:
        lab_main(argv + ["--resume"])
    assert exc.value.code == 130
    res = R.load_results(out)
    assert res["complete"] is False and len(res["runs"]) == finished  # nothing lost

    monkeypatch.undo()
    monkeypatch.setitem(lab.presets.PRESETS, "tiny", small)
    partial, _ = _as_partial(out)
    assert partial.read_bytes() == before
    with open(partial, "a") as f:
        f.write('{"row": {"run_id": "copy-rope", "seed": 0, "lr"')  # torn: killed while appending
    with pytest.warns(RuntimeWarning, match=r"lab\.json\.partial\.jsonl: dropped its torn last line 4"):
        resumed = lab_main(argv + ["--resume"])
    assert resumed["complete"] is True and len(resumed["runs"]) == 4


def test_a_partial_file_with_a_bad_middle_line_is_refused_naming_the_file(tmp_path):
    partial = tmp_path / "x.json.partial.jsonl"
    partial.write_text('{"head": {}}\nnot json\n{"row": {}}\n')
    with pytest.raises(ValueError, match=r"x\.json\.partial\.jsonl line 2"):
        rp.outputs.read_partial(partial)


@pytest.mark.slow  # starts processes
def test_lab_workers_end_with_their_parent(tmp_path):
    """A SIGKILL of the process that runs the lab (no clean-up runs) ends its workers too; before, they
    stayed blocked on their pipes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "parent.py"
    script.write_text(
        "import concurrent.futures, multiprocessing, os, sys, time\n"
        "from relpos_core.lab.train import _worker_init\n"
        "if __name__ == '__main__':\n"
        "    ctx = multiprocessing.get_context('spawn')\n"
        "    pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx, initializer=_worker_init,"
        " initargs=(1,))\n"
        "    print(pool.submit(os.getpid).result(), flush=True)\n"
        "    pool.submit(time.sleep, 600)\n"
        "    time.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        worker = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            os.kill(worker, signal.SIGKILL)
            pytest.fail(f"worker {worker} outlived its parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_result_files_get_the_mode_of_any_file_the_user_writes(tmp_path):
    """Before: the result JSON came from mkstemp with mode 0600, beside 0644 HTML."""
    import os
    import stat

    mask = os.umask(0)
    os.umask(mask)
    output = rp.outputs.Output(tmp_path / "r.json", explicit=True).check()
    output.begin({})
    output.finish({"complete": True})
    assert stat.S_IMODE(os.stat(output.path).st_mode) == 0o666 & ~mask


# -- the hybrid preset: designs of 2025-26 models, declared from the schemes and the task ------------------

def test_the_hybrid_preset_is_built_from_the_declarations_and_the_task():
    from relpos_core import schemes
    from relpos_core.layers import parse_pattern
    from relpos_core.lab.presets import HYBRID_TASK, hybrid_designs

    hybrid, full = get_preset("hybrid"), get_preset("full")
    setup = hybrid.tasks[HYBRID_TASK]
    assert setup == full.tasks[HYBRID_TASK] and list(hybrid.tasks) == [HYBRID_TASK]
    assert hybrid.lrs == (1e-3, 3e-3) and len(hybrid.seeds) >= 3 and hybrid.budgets == full.budgets
    rotary = next(n for n in schemes.names() if schemes.lookup(n).lab.extended)
    # the controls are the full preset's own runs (same ids, specs and task), so their records compare
    for name in (rotary, schemes.baseline()):
        assert hybrid.run(f"{HYBRID_TASK}/{name}") == full.run(f"{HYBRID_TASK}/{name}")
    designs = dict(hybrid_designs(setup.train_length, 16))
    assert [r.variant for r in hybrid.runs[:len(designs)]] == list(designs)
    window = parse_pattern(designs["rnope_swa"])[0].window
    gap = setup.options["gap"]
    # the window covers a key and its value but not the way back from a query to its value
    assert gap + 1 <= window < setup.train_length
    for variant, text in designs.items():
        layers = parse_pattern(text)
        assert len(layers) == hybrid.model["num_layers"] and {s.scheme for s in layers} <= {rotary, schemes.baseline()}
        for layer in layers:
            layer.options  # every option is one the scheme has, of the right kind
    assert parse_pattern(designs["rope_log"])[0].options.length_scaling.train_length == setup.train_length
    assert parse_pattern(designs["rotary_half"])[0].options.rotary_dim == 8  # half of head_dim 16


def test_the_hybrid_pipeline_check_trains_every_run_of_the_preset(tmp_path):
    hybrid, tiny = get_preset("hybrid"), get_preset("hybrid_tiny")
    assert [r.run_id for r in tiny.runs] == [r.run_id for r in hybrid.runs]
    lab_main(["--preset", "hybrid_tiny", "--out", str(tmp_path / "h.json"), "--no-progress", "--workers", "1",
              "--no-plots"])
    res = rp.lab.results.load_results(tmp_path / "h.json")
    assert res["complete"] is True and len(res["runs"]) == len(tiny.runs)
    layers = {r["variant"]: r["model"].get("layers") for r in res["runs"]}
    assert layers["rnope_swa"] == "rope@window=4, none" and layers["rope"] is None
    assert "length_scaling.type=log_length" in layers["none_log"]


def _without(res, run_id):
    out = copy.deepcopy(res)
    out["preset"]["runs"] = [r for r in out["preset"]["runs"] if r["run_id"] != run_id]
    out["runs"] = [r for r in out["runs"] if r["run_id"] != run_id]
    return out


def test_with_runs_sets_another_runs_controls_beside_new_runs_after_checking_the_settings():
    R = rp.lab.results
    full = R.load_committed()
    rope = "retrieval_gap/rope"
    base = _without(full, rope)
    base["provenance"]["seeds"] = [0, 1, 2]
    base["runs"] = [r for r in base["runs"] if r["seed"] in (0, 1, 2)]
    both = R.with_runs(base, full, [rope])
    assert R.records(both, rope) == [r for r in R.records(full, rope) if r["seed"] in (0, 1, 2)]
    assert both["provenance"]["added"][0]["runs"] == [rope]
    assert both["provenance"]["added"][0]["from"]["git_commit"] == full["provenance"]["git_commit"]
    assert R.complete_seeds(both) == [0, 1, 2] and "added" not in base["provenance"]
    with pytest.raises(ValueError, match="already holds"):
        R.with_runs(both, full, [rope])
    with pytest.raises(ValueError, match="run_ids must be runs of other"):
        R.with_runs(base, full, ["retrieval_gap/nonsense"])
    other = copy.deepcopy(full)
    other["preset"]["tasks"]["retrieval_gap"]["cap"] += 1
    with pytest.raises(ValueError, match="set up differently"):
        R.with_runs(base, other, [rope])
    other = copy.deepcopy(full)
    other["preset"]["warmup_steps"] += 1
    with pytest.raises(ValueError, match="warmup_steps"):
        R.with_runs(base, other, [rope])
    other = copy.deepcopy(full)
    other["runs"] = [r for r in other["runs"] if not (r["run_id"] == rope and r["seed"] == 2)]
    with pytest.raises(ValueError, match=r"lacks retrieval_gap/rope at \(seed, lr\) \[\(2, 0.001\)"):
        R.with_runs(base, other, [rope])


def test_the_compact_claims_table_has_one_column_per_learning_rate_and_the_verdict_over_every_cell():
    res = _fake_results([0.9, 0.8, 0.95, 0.7, 0.85], [0.5, 0.6, 0.55, 0.5, 0.45], [True] * 5, [True] * 5)
    claim = R.better(res, "t/a", "t/b", "L16", solved_only=False)
    wide = R.claims_table([("a beats b", claim)], res)
    narrow = R.compact_claims_table([("a beats b", claim)], res)
    head, rule, row = narrow.splitlines()
    assert head == "| claim | lr 0.001 | verdict |" and rule == "|---|---|---|"
    d = R.paired(res, "t/a", "t/b", "L16", budget=4, lr=1e-3, solved_only=False)
    assert row == f"| a beats b | ✓ {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] (5) | **holds** |"
    assert wide.splitlines()[2].endswith("| 2/2 | **holds** |")  # the same verdict, every cell
    assert R.compact_claims_table([("a beats b", claim)], res, budget=1).splitlines()[2] == row  # eval_of: the same
    with pytest.raises(ValueError, match=r"budget must be one of \[1, 4\], got 2"):
        R.compact_claims_table([("a", claim)], res, budget=2)


def test_the_length_figure_names_the_models_it_cannot_draw_past_the_training_length():
    """A model no run of which solved the task has no point past the training length: the frame says so
    (the copy task at the cap drew points at 32 tokens only, and an empty plot beyond)."""
    res = R.only_complete_seeds(R.load_committed())
    fig = lab.figures.length_figure(res, "copy").static_figure()
    for frame in fig.frames:
        drawn = [t for t in frame.data if t.mode == "lines+markers"]
        missing = [t.name for t in drawn if all(y is None for y in t.y[1:])]
        (note,) = [a for a in frame.layout.annotations if a.xref == "paper" and a.yref == "paper"]
        assert note.visible == bool(missing)
        if len(missing) == len(drawn):
            assert "no model solved the task" in note.text
        else:
            assert all(name in note.text.replace("<br>", " ") for name in missing)
