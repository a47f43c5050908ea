"""The experiments lab (relpos_core.lab): tasks, models (the library's one transformer), pipeline,
determinism, CLI."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

import relpos_core as rp
from relpos_core.lab.__main__ import main as lab_main
from relpos_core.lab.models import SCHEMES, build_model, lab_config
from relpos_core.lab.presets import MULTIPLIERS, get_preset
from relpos_core.lab.tasks import IGNORE, CopyTask, MarkerTask, PositionTask, RetrievalTask, make_task
from relpos_core.lab.train import derive_seed, train_run

lab = rp.lab


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the lab runs its models: with two, small element-wise ops (cos,
    sin) can be much slower on a shared 2-core machine."""
    with lab.train.threads(1):
        yield


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- tasks


def test_retrieval_labels_are_the_value_after_the_key():
    task = RetrievalTask(num_pairs=3, num_keys=8, num_values=8, num_filler=4)
    for L in (16, 128):
        b = task.sample(64, L, gen())
        assert b.tokens.shape == b.targets.shape == b.detail.shape == (64, L)
        F, K = task.num_filler, task.num_keys
        for row, tgt, det in zip(b.tokens.tolist(), b.targets.tolist(), b.detail.tolist()):
            context = row[: L - 3]
            keys = [t for t in context if F <= t < F + K]
            assert len(keys) == len(set(keys)) == 3  # distinct keys, each once in the context
            for q in range(L - 3, L):
                k = context.index(row[q])
                assert tgt[q] == context[k + 1] and F + K <= tgt[q] < task.vocab_size
                assert det[q] == q - (k + 1)  # distance back to the value
            assert all(t == IGNORE for t in tgt[: L - 3])


def test_copy_labels_are_the_next_token_of_the_copy():
    task = CopyTask(num_symbols=64, min_fraction=0.25)
    for L in (16, 128):
        b = task.sample(32, L, gen(1))
        lo, hi = task.copy_sizes(L)
        for row, tgt, det in zip(b.tokens.tolist(), b.targets.tolist(), b.detail.tolist()):
            sep = row.index(CopyTask.SEP)
            n = L - 1 - sep + 1  # labels from SEP to the end
            assert lo <= n <= hi
            x = row[sep - n: sep]
            assert row[: sep - n] == [CopyTask.PAD] * (sep - n)
            assert len(set(x)) == n and min(x) >= 2  # distinct symbols
            assert row[sep + 1:] == x[:-1]  # the copy
            assert tgt[sep:] == x and det[sep:] == list(range(n))
            assert all(t == IGNORE for t in tgt[:sep])
    sizes = {int((b.targets[i] != IGNORE).sum()) for i in range(32)}
    assert len(sizes) > 1  # the copy length varies from row to row: no fixed offset


def test_marker_labels_are_the_signed_offset():
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
    assert 0 not in task.class_to_offset(c).tolist()


def test_position_labels_and_generators_are_seeded():
    b = PositionTask(num_positions=32).sample(4, 32, gen(3))
    assert torch.equal(b.targets, torch.arange(32).expand(4, 32)) and torch.equal(b.detail, b.targets)
    for name, L in (("retrieval", 16), ("copy", 16), ("marker", 32), ("position", 32)):
        a, c = make_task(name).sample(8, L, gen(5)), make_task(name).sample(8, L, gen(5))
        assert torch.equal(a.tokens, c.tokens) and torch.equal(a.targets, c.targets)
        assert not torch.equal(a.tokens, make_task(name).sample(8, L, gen(6)).tokens)


@pytest.mark.parametrize("call, match", [
    (lambda: RetrievalTask(num_pairs=3).sample(2, 9, gen()), "length must be an integer >= 10"),
    (lambda: CopyTask(num_symbols=8).sample(2, 17, gen()), r"length must be an integer in \[4, 16\]"),
    (lambda: MarkerTask(max_offset=16).sample(2, 16, gen()), "length must be an integer >= 17"),
    (lambda: PositionTask(num_positions=32).sample(2, 33, gen()), r"length must be an integer in \[2, 32\]"),
    (lambda: MarkerTask().sample(0, 32, gen()), "batch_size"),
    (lambda: MarkerTask().sample(2, 32, 5), "generator must be a torch.Generator"),
    (lambda: CopyTask(min_fraction=0.7), r"min_fraction must be a number in \(0, 0.5\]"),
    (lambda: make_task("sorting"), "task must be one of"),
])
def test_task_arguments_are_checked(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- models


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_model_runs_at_every_evaluation_length(scheme):
    for causal in (True, False):
        if rp.schemes.lookup(scheme).scheme.causal_only and not causal:
            continue
        cfg = lab_config(scheme, vocab_size=20, num_classes=7, max_positions=128, causal=causal)
        model = build_model(cfg, seed=0).eval()
        for m in MULTIPLIERS:
            tokens = torch.randint(0, 20, (2, 16 * m))  # (B, L)
            with torch.no_grad():
                logits = model(tokens)
            assert logits.shape == (2, 16 * m, 7) and torch.isfinite(logits).all()


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


def test_deberta_layer_matches_relpos_core_disentangled_attention():
    """The lab's DeBERTa layer (rp.attend with the declared term) equals the module that matches HF's."""
    model = build_model(lab_config("deberta", vocab_size=10, num_classes=3, max_positions=12, causal=False,
                                   position=dict(att_span=4)), seed=0)
    attn = model.blocks[0].attention
    dcfg = rp.schemes.deberta.DisentangledConfig(hidden_size=64, num_heads=4, max_relative_positions=4)
    ref = rp.schemes.deberta.DisentangledSelfAttention(dcfg)
    with torch.no_grad():
        for mine, theirs in ((attn.wq, ref.query_proj), (attn.wk, ref.key_proj), (attn.wv, ref.value_proj)):
            theirs.weight.copy_(mine.weight)
            theirs.bias.zero_()
    h = torch.randn(2, 12, 64)  # (B, L, D)
    rel = model.position.norm(model.position.rel_embeddings)  # (2S, D): the shared table, normalised
    q, k, v = (attn.heads(h, w) for w in (attn.wq, attn.wk, attn.wv))
    ours = rp.attend(q, k, v, model.position.term(0, attn), backend="eager")  # (B, H, L, d)
    torch.testing.assert_close(ours.transpose(1, 2).reshape(2, 12, 64), ref(h, None, rel), rtol=1e-5, atol=1e-5)


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


def test_shaw_sinusoidal_init_has_the_random_init_row_norm():
    rows = {}
    for init in ("random", "sinusoidal"):
        cfg = lab_config("shaw", vocab_size=10, num_classes=3, max_positions=16, causal=False,
                         position=dict(max_relative_position=16, init=init))
        rows[init] = build_model(cfg, seed=0).position.rel_key[0].detach()  # (33, 16)
    assert rows["sinusoidal"].shape == (33, 16)
    torch.testing.assert_close(rows["sinusoidal"].norm(dim=1), torch.full((33,), 0.02 * 4.0))  # 0.02 sqrt(d)
    sim = lab.results.cosine_similarity(rows["sinusoidal"])
    assert sim[16, 17] > sim[16, 24] > sim[16, 16] - 2  # a band: neighbours are more alike


# ----------------------------------------------------------------------------- training, determinism, pipeline


def _strip_times(record):
    return {k: v for k, v in record.items() if k not in ("train_s", "eval_s", "cpu_s")}


def test_a_seeded_run_is_deterministic():
    preset = get_preset("tiny")
    for run_id in ("marker/shaw-k16", "copy/t5", "position/deberta_emd"):
        spec = preset.run(run_id)
        a, _ = train_run(preset, spec, seed=7)
        b, _ = train_run(preset, spec, seed=7)
        c, _ = train_run(preset, spec, seed=8)
        assert json.dumps(_strip_times(a)) == json.dumps(_strip_times(b))
        assert a["curve"] != c["curve"]
    assert derive_seed(0, "train", "copy") == derive_seed(0, "train", "copy") != derive_seed(1, "train", "copy")


def test_run_preset_checks_its_arguments():
    tiny = get_preset("tiny")
    with pytest.raises(ValueError, match="seeds must be distinct"):
        lab.run_preset(tiny, [0, 0], progress=False)
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        lab.run_preset(tiny, [0], progress=False, workers=0)
    with pytest.raises(ValueError, match="keep_models needs workers == 1"):
        lab.run_preset(tiny, [0], progress=False, workers=2, keep_models=True)


def test_two_processes_give_the_same_records_in_the_same_order():
    tiny = get_preset("tiny")
    small = replace(tiny, runs=(tiny.run("copy/rope"), tiny.run("position/deberta_emd"), tiny.run("marker/t5")))
    spawned = lab.run_preset(small, [3], progress=False, workers=2)
    assert spawned["workers"] == 2 and [r["run_id"] for r in spawned["runs"]] == [s.run_id for s in small.runs]
    for record, spec in zip(spawned["runs"], small.runs):
        here, _ = train_run(small, spec, seed=3)
        assert json.dumps(_strip_times(record)) == json.dumps(_strip_times(here))


def test_untrained_rows_of_the_learned_table_stay_at_their_initial_values():
    preset = get_preset("tiny")
    spec = preset.run("retrieval/learned")
    record, model = train_run(preset, spec, seed=0)
    init = build_model(model.config, seed=derive_seed(0, "init", spec.run_id)).position.weight
    trained = model.position.weight.detach()
    L = preset.tasks["retrieval"].train_length
    assert record["untrained_position_rows"] == [L, 8 * L]
    assert torch.equal(trained[L:], init[L:])  # never seen in training: untouched
    assert not torch.equal(trained[:L], init[:L])


@pytest.fixture(scope="module")
def tiny_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("lab")
    lab_main(["--preset", "tiny", "--seeds", "0", "1", "--out", str(out / "lab-tiny.json"), "--no-progress",
              "--workers", "1"])
    return out, lab.results.load_results(out / "lab-tiny.json")


def test_cli_pipeline_end_to_end_on_the_tiny_preset(tiny_results):
    out, res = tiny_results
    preset = get_preset("tiny")
    assert res["provenance"]["seeds"] == [0, 1] and res["provenance"]["preset"] == "tiny"
    for key in ("device", "torch", "date", "git_commit", "wall_s", "cpu_s", "threads", "command"):
        assert res["provenance"][key] is not None
    assert res["provenance"]["torch"] == torch.__version__
    assert len(res["runs"]) == 2 * len(preset.runs)
    for r in res["runs"]:
        setup = preset.tasks[r["task"]]
        assert sorted(map(int, r["eval"])) == list(setup.multipliers)
        assert 0.0 <= r["eval"]["1"]["accuracy"] <= 1.0 and r["eval"]["1"]["labels"] > 0
        assert r["curve"][-1][0] == setup.steps
        assert sum(t for _, t in r["eval"]["1"]["by_detail"].values()) == r["eval"]["1"]["labels"]
    for name in ("retrieval", "copy", "marker", "marker-detail", "position-detail"):
        assert (out / f"lab-tiny-{name}.png").stat().st_size > 1000
    assert res["provenance"]["workers"] == 1 and res["complete"] is True
    assert not (out / "lab-tiny.json.partial.jsonl").exists()
    table = lab.results.length_table(res, "marker")
    assert [row["variant"] for row in table][:2] == ["none", "absolute"]
    assert table[0][1]["n"] == 2


def test_results_tables_and_figures(tiny_results):
    _, res = tiny_results
    s = lab.results.summary([0.5, 1.0, 0.75])
    assert s["mean"] == 0.75 and s["min"] == 0.5 and s["max"] == 1.0 and math.isclose(s["std"], 0.25)
    md = lab.results.length_table_markdown(res, "retrieval")
    assert md.splitlines()[0].startswith("| model | 1x (L = 16) | 2x (L = 32)")
    details, mean, per_seed = lab.results.detail_accuracy(res, "marker/shaw")
    assert len(per_seed) == 2 and len(mean) == len(details) and set(details) <= set(range(-16, 17)) - {0}
    assert len(lab.figures.length_figure(res, "copy").data) == len(lab.presets.schemes_for(True))
    assert len(lab.figures.clipping_slider(res, "shaw").static_figure().frames) == 4
    assert len(lab.figures.clipping_slider(res, "t5").static_figure().frames) == 3
    assert len(lab.figures.band_figure(res).static_figure().frames) == 2
    assert lab.figures.t5_last_bucket_start(128) == 91 and lab.figures.t5_last_bucket_start(16) == 15
    with pytest.raises(ValueError, match="run_id must be one of"):
        lab.results.records(res, "marker/xpos")


def test_load_results_rejects_other_files(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "something"}))
    with pytest.raises(ValueError, match="not a lab results file"):
        lab.results.load_results(bad)
    with pytest.raises(ValueError, match="path must be an existing results file"):
        lab.results.load_results(tmp_path / "missing.json")


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "argument --preset: invalid choice"),
    (["--seeds", "-1"], "argument --seeds: must be an integer in [0, 2147483647], got -1"),
    (["--seeds", "x"], "argument --seeds: must be an integer"),
    (["--seeds", "1", "1"], "argument --seeds: seeds must be distinct"),
    (["--seeds"] + [str(i) for i in range(17)], "argument --seeds: at most 16 seeds"),
    (["--threads", "0"], "argument --threads: must be an integer in"),
    (["--workers", "0"], "argument --workers: must be an integer in"),
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
                          (["--out", str(tmp_path / "r.txt")], "must end in .json")):
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


def test_ctrl_c_keeps_the_finished_runs(tmp_path, monkeypatch):
    calls = []
    real = lab.train.train_run

    def train_then_interrupt(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(lab.train, "train_run", train_then_interrupt)
    out = tmp_path / "lab.json"
    with pytest.raises(SystemExit) as exc:
        lab_main(["--preset", "tiny", "--seeds", "0", "--out", str(out), "--no-progress", "--workers", "1",
                  "--no-plots"])
    assert exc.value.code == 130
    res = lab.results.load_results(out)
    assert res["complete"] is False and len(res["runs"]) == 2
    assert [r["run_id"] for r in res["runs"]] == [s.run_id for s in get_preset("tiny").runs[:2]]


def test_compare_is_seed_by_seed(tiny_results):
    _, res = tiny_results
    same = lab.results.compare(res, "marker/rope", "marker/rope")
    assert same["diffs"] == [0.0, 0.0] and not same["a_wins_every_seed"] and not same["b_wins_every_seed"]
    c = lab.results.compare(res, "copy/rope", "copy/none", 2)
    rope, none = (lab.results.accuracies(res, f"copy/{s}", 2) for s in ("rope", "none"))
    want = [a - b for a, b in zip(rope, none)]
    assert c["diffs"] == want
