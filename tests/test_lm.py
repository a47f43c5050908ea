"""The language-model lab (relpos_core.lm): corpus pinning, the split, bits per byte, the sliding
window, the passkey probe, the tiny preset end to end, --resume and the output checks."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from relpos_core.lab.models import build_model
from relpos_core.lm import corpus, presets, train
from relpos_core.lm.__main__ import main


def _fake_stdlib(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


FILES = {f"mod{i}.py": f"x = {i}\n" * (i + 1) for i in range(30)}
FILES.update({"pkg/__init__.py": "", "pkg/a.py": "a = 1\n", "test/test_x.py": "skip\n", "idlelib/b.py": "skip\n",
              "pkg/test_y.py": "skip\n", "encodings/cp.py": "skip\n"})


@pytest.fixture
def fake(tmp_path):
    root = tmp_path / "lib"
    _fake_stdlib(root, FILES)
    pin = tmp_path / "pin.json"
    corpus.pin_corpus(root, pin)
    return root, pin


def test_selection_excludes_tests_and_data(fake):
    root, pin = fake
    chosen = corpus.select_files(root)
    assert "pkg/a.py" in chosen and "mod3.py" in chosen
    assert not any(p.startswith(("test/", "idlelib/", "encodings/")) or p.endswith("test_y.py") for p in chosen)
    assert chosen == sorted(chosen)


def test_split_is_by_file_and_deterministic(fake):
    root, pin = fake
    a = corpus.load_corpus(root, pin_path=pin)
    b = corpus.load_corpus(root, pin_path=pin)
    assert a.train == b.train and a.held_out_files == b.held_out_files
    assert set(a.train_files).isdisjoint(a.held_out_files)
    assert sorted(a.train_files + a.held_out_files) == corpus.select_files(root)
    assert all(corpus.is_held_out(p) for p in a.held_out_files)
    assert not any(corpus.is_held_out(p) for p in a.train_files)
    # whole files: the held-out bytes are the held-out files' bytes, concatenated in path order
    assert a.held_out == b"".join((root / p).read_bytes() for p in a.held_out_files)


def test_changed_file_is_named_and_refused(fake):
    root, pin = fake
    (root / "mod7.py").write_text(FILES["mod7.py"].replace("7", "8"))  # same size, other bytes
    (root / "mod3.py").unlink()
    with pytest.raises(corpus.CorpusMismatch) as err:
        corpus.load_corpus(root, pin_path=pin)
    text = str(err.value)
    assert "mod7.py" in text and "mod3.py" in text and "1 file(s) with other bytes" in text
    assert "allow_other_corpus" in text
    other = corpus.load_corpus(root, pin_path=pin, allow_other_corpus=True)
    assert other.record["matches_pin"] is False
    assert other.record["differing_files"] == ["mod7.py"] and other.record["missing_files"] == ["mod3.py"]
    assert other.record["hash"] != other.record["pinned_hash"]


def test_committed_pin_matches_this_python():
    pin = corpus.load_pin()
    assert pin["num_files"] == len(pin["files"]) and pin["total_hash"] == corpus.list_hash(pin["files"])
    import platform
    if platform.python_version() != pin["python"]:
        pytest.skip(f"the pin is of Python {pin['python']}")
    c = corpus.load_corpus()
    assert c.record["matches_pin"] and 100_000 < len(c.held_out) < len(c.train)


def test_bits_per_byte_by_hand():
    p = presets.get_preset("tiny")
    model = build_model(train.model_config(p, "rope"), seed=3).eval()
    data = torch.randint(0, 256, (200,))
    bits = train.window_bits(model, data, [5, 40], 32)  # (2, 32)
    with torch.no_grad():
        for row, s in enumerate((5, 40)):
            logits = model(data[s:s + 32][None])[0].double()  # (32, 256)
            probs = torch.softmax(logits, -1)
            by_hand = [-math.log2(float(probs[t, data[s + t + 1]])) for t in range(32)]
            assert torch.allclose(bits[row], torch.tensor(by_hand, dtype=torch.float64), atol=1e-6)


@pytest.mark.parametrize("length,stride", [(32, 16), (64, 16), (64, 64), (128, 32)])
def test_sliding_window_scores_every_byte_once(length, stride):
    starts = train.segment_starts(5000, 3, 128)
    seen = []
    for w, first, seg in train.sliding_windows(starts, 128, length, stride):
        assert first == length - stride  # each window scores its last `stride` predictions
        targets = range(w + 1 + first, w + 1 + length)  # the bytes those predictions are of
        assert all(starts[seg] < t <= starts[seg] + 128 for t in targets)
        seen += targets
    expected = [t for s in starts for t in range(s + 1, s + 129)]
    assert sorted(seen) == sorted(expected) and len(seen) == len(set(seen))


def test_nonoverlapping_windows_cover_the_same_bytes():
    starts = train.segment_starts(5000, 2, 128)
    for length in (32, 64, 128):
        seen = [w + 1 + i for w, _, _ in train.nonoverlapping_windows(starts, 128, length) for i in range(length)]
        assert sorted(seen) == [t for s in starts for t in range(s + 1, s + 129)]


def test_segments_refuse_short_text():
    with pytest.raises(ValueError, match="too short"):
        train.segment_starts(1000, 4, 512)


@pytest.mark.parametrize("depth", train.DEPTHS)
def test_passkey_row(depth):
    held = bytes(range(32, 127)) * 50
    g = torch.Generator().manual_seed(0)
    row = train.passkey_row(held, 256, depth, g)
    text = bytes(row["tokens"].tolist())
    assert len(text) == 257
    line = b'\npasskey = "' + row["digits"].encode() + b'"\n'
    assert text[row["needle"]:row["needle"] + len(line)] == line
    assert text.endswith(b'\npasskey = "' + row["digits"].encode())
    # the scored predictions are those of the five digits at the end
    assert [text[i + 1] for i in row["scored"]] == list(row["digits"].encode())
    if depth == "near":
        assert row["distance"] == train.NEAR + len(line)
    if depth == "start":
        assert row["needle"] == 0


def test_passkey_row_refuses_short_length():
    with pytest.raises(ValueError, match="length must be at least"):
        train.passkey_row(b"x" * 1000, 64, "start", torch.Generator())


def test_model_at_length_keeps_trained_rows():
    p = presets.get_preset("tiny")
    model = build_model(train.model_config(p, "learned"), seed=1)
    with torch.no_grad():
        model.position.weight.add_(1.0)  # "trained"
    longer, extended = train.model_at_length(model, 128, seed=1)
    assert extended == {"position.weight": {"trained_rows": 32, "rows": 128, "layout": "first"}}
    assert torch.equal(longer.position.weight[:32], model.position.weight)
    x = torch.randint(0, 256, (1, 32))
    assert torch.allclose(longer(x), model.eval()(x), atol=1e-6)


def test_extension_position_options():
    yarn = presets.extension_methods(["yarn"])[0]
    assert yarn.position(4.0, 128) == {"scaling": {"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 128}}
    assert presets.extension_methods(["abf"])[0].position(4.0, 128) == {"base": 500000.0}
    assert presets.extension_methods(["rope"])[0].position(4.0, 128) == {}
    with pytest.raises(ValueError, match="extension method"):
        presets.extension_methods(["nope"])


def test_full_preset_schemes_come_from_the_declarations():
    from relpos_core import schemes
    full = presets.get_preset("full")
    want = [n for n in schemes.names() if schemes.lookup(n).scheme.not_decoded is None
            and schemes.lookup(n).scheme.injects != "vector on the logit"]
    assert list(full.schemes) == want and len(want) >= 10
    for s in ("none", "absolute", "learned", "rope", "alibi", "t5", "kerple_log", "fire", "xpos", "randomized"):
        assert s in full.schemes
    assert full.eval_lengths[-1] == 16 * full.train_length and len(full.seeds) >= 3


def test_out_checked_before_training(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("{}")
    with pytest.raises(SystemExit):
        main(["--preset", "tiny", "--out", str(out), "--workers", "1"])
    assert "exists" in capsys.readouterr().err
    assert not (tmp_path / "r.json.partial.jsonl").exists()


@pytest.mark.slow
def test_tiny_end_to_end_and_resume(tmp_path):
    out = tmp_path / "r.json"
    res = main(["--preset", "tiny", "--out", str(out), "--workers", "1"])
    p = presets.get_preset("tiny")
    assert res["complete"] and len(res["runs"]) == len(train.jobs_of(p))
    saved = json.loads(out.read_text())
    assert saved["provenance"]["corpus_hash"] == saved["corpus"]["hash"]
    base = [r for r in saved["runs"] if r["kind"] == "base"]
    assert {r["scheme"] for r in base} == set(p.schemes)
    for r in base:
        assert set(r["eval"]) == {str(L) for L in p.eval_lengths}
        assert all(0 < r["eval"][str(L)]["bpb"] < 12 for L in p.eval_lengths)
    # an interrupted run: keep two finished rows in a partial file, resume, and those rows stay as they were
    head = {"preset": "tiny", "command": "x", "git_commit": "abc", "load_start": None,
            "machine": {"cpu_model": "Elsewhere CPU", "runs": []}}
    kept = saved["runs"][:2]
    kept[0] = dict(kept[0], marker="kept")
    out2 = tmp_path / "r2.json"
    with open(tmp_path / "r2.json.partial.jsonl", "w") as f:
        f.write(json.dumps({"head": head}) + "\n")
        for r in kept:
            f.write(json.dumps({"row": r}) + "\n")
    res2 = main(["--preset", "tiny", "--out", str(out2), "--workers", "1", "--resume"])
    assert len(res2["runs"]) == len(res["runs"])
    assert [r for r in res2["runs"] if r.get("marker") == "kept"] == [kept[0]]
    assert res2["provenance"]["git_commit"] == "abc"
    # where the kept rows were trained is kept: the earlier machine with their ids
    from relpos_core.lm.train import record_id

    (earlier,) = res2["provenance"]["earlier_machines"]
    assert earlier["cpu_model"] == "Elsewhere CPU" and earlier["runs"] == [record_id(r) for r in kept]


def test_committed_run_loads_with_provenance():
    from relpos_core.lm import results
    res = results.load_committed()
    p = res["provenance"]
    assert p["preset"] == "full" and p["corpus_hash"] == corpus.load_pin()["total_hash"]
    for key in ("cpu_model", "cpu_capability", "torch", "date", "git_commit", "wall_s", "cpu_s", "workers"):
        assert p.get(key) is not None, key
    base = results.base_runs(res)
    schemes = {r["scheme"] for r in base}
    assert len(schemes) >= 10
    for s in schemes:
        assert len(results.base_runs(res, s)) >= 3, s
    assert max(res["preset"]["eval_lengths"]) == 16 * res["preset"]["train_length"]
    assert all(set(r["eval"]) == {str(L) for L in res["preset"]["eval_lengths"]} for r in base)
    methods = {r["method"] for r in results.extension_runs(res)}
    assert {"linear", "ntk", "dynamic", "yarn", "llama3", "abf", "rope"} <= methods
    assert any(r["finetuned"] is not None for r in results.extension_runs(res))


def _fake_results(changes: dict, lengths=(128, 2048)) -> dict:
    """A results object whose runs have bits per byte 2.0 at the training length and 2.0 + change at the last."""
    runs = [{"kind": "base", "scheme": s, "seed": i,
             "eval": {str(lengths[0]): {"bpb": 2.0}, str(lengths[-1]): {"bpb": 2.0 + d}}}
            for s, ds in changes.items() for i, d in enumerate(ds)]
    return {"preset": {"schemes": list(changes), "eval_lengths": list(lengths)}, "runs": runs}


def test_a_verdict_reads_the_interval_of_the_paired_change():
    from relpos_core.lm.results import change_verdict

    assert change_verdict({"low": -0.2, "high": -0.1}) == "holds"
    assert change_verdict({"low": -0.2, "high": 0.1}) == "not shown"
    assert change_verdict({"low": 0.0, "high": 0.1}) == "not shown"  # an end at zero is not shown
    assert change_verdict({"low": 0.2, "high": 0.9}) == "rises"
    assert change_verdict({"low": 1.2, "high": 3.0}) == "rises steeply"


def test_only_a_verdict_both_runs_give_survives_the_second():
    from relpos_core.lm.results import verdicts_at_both

    first = _fake_results({"a": [-0.03, -0.02, -0.025], "b": [-0.03, -0.02, -0.025], "c": [2.0, 2.2, 2.1]})
    second = _fake_results({"a": [-0.02, -0.021, -0.022], "b": [0.03, -0.02, 0.01], "d": [0.1, 0.2, 0.3]})
    got = verdicts_at_both(first, second, 2048)
    assert sorted(got) == ["a", "b"]  # only the schemes of both
    assert got["a"]["verdicts"] == ("holds", "holds") and got["a"]["agree"]
    assert got["b"]["verdicts"] == ("holds", "not shown") and not got["b"]["agree"]
    assert got["a"]["second"]["n"] == 3 and abs(got["a"]["second"]["mean"] + 0.021) < 1e-12


def test_resume_continues_a_finished_run_only_when_its_preset_has_grown(tmp_path):
    from relpos_core.outputs import Output, read_unfinished

    path = tmp_path / "done.json"
    rows = [{"run_id": "base/rope/seed0"}, {"run_id": "base/none/seed0"}]
    path.write_text(json.dumps({"complete": True, "provenance": {"preset": "long"}, "runs": rows}))
    output = Output.from_argument(str(path), tool="lm-long", force=True)
    head_of = lambda p: {"preset": p["preset"]}  # noqa: E731
    have = lambda rows: {r["run_id"] for r in rows}  # noqa: E731
    grown = lambda rows: {"base/rope/seed0", "base/none/seed0", "base/alibi/seed0"} - have(rows)  # noqa: E731
    head, done = read_unfinished(output, head_of, missing=grown)
    assert head == {"preset": "long"} and done == rows  # the finished rows, to train only what is missing
    for missing in (None, lambda rows: set()):  # nothing new to train: refused, naming the file
        with pytest.raises(ValueError, match="finished run .*nothing to continue"):
            read_unfinished(output, head_of, missing=missing)
    assert json.loads(path.read_text())["runs"] == rows  # read, never rewritten


def test_the_lm_resume_lists_the_runs_a_grown_preset_adds():
    from relpos_core.lm.__main__ import _missing_runs
    from relpos_core.lm.train import job_id

    jobs = train.jobs_of(presets.get_preset("long"))  # ("base", scheme, seed)
    first = [{"kind": kind, "scheme": scheme, "seed": seed} for kind, scheme, seed in jobs if scheme != "kerple_log"]
    assert _missing_runs("long")(first) == {job_id(j) for j in jobs if j[1] == "kerple_log"}
    assert _missing_runs("long")(first + [{"kind": "base", "scheme": "kerple_log", "seed": s} for s in (0, 1, 2)]) == set()
