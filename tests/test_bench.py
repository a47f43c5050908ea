"""python -m relpos_core.bench: the quick preset end to end, its arithmetic, its argument checks, and
that it loses nothing (a bad path, an existing file, Ctrl-C)."""
from __future__ import annotations

import builtins
import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

import relpos_core as rp
from relpos_core import bench
from relpos_core.bench import cases as bench_cases
from relpos_core.bench import run as bench_run
from relpos_core.bench import stats as bench_stats
from relpos_core.bench.__main__ import main as bench_main

# The quick preset with a budget under the naive Shaw call at L = 32 (56 KiB counted) and over the
# gather paths and FlexAttention's baseline (42 KiB counted), so the guard's refusal is part of the run.
BUDGET = 45_000


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench-quick.json"
    status = bench_main(["--quick", "--out", str(out), "--budget", str(BUDGET), "--no-progress", "--no-figures"])
    return status, out, json.loads(out.read_text())


@pytest.mark.slow
def test_quick_run_is_green_and_has_provenance(quick):
    status, out, data = quick
    assert status == 0
    assert data["schema"] == bench.SCHEMA and data["complete"] is True
    assert not out.with_name(out.name + ".partial.jsonl").exists()  # removed once the result is written
    pv = data["provenance"]
    assert pv["preset"] == "quick" and pv["device"] == "cpu" and pv["dtype"] == "float32"
    assert pv["sizes"]["lengths"] == [16, 32] and pv["memory_budget_bytes"] == BUDGET
    assert pv["threads"] == 1 and "process CPU time" in pv["clock"]
    assert pv["torch"] == torch.__version__ and pv["git_commit"] and pv["date"].startswith("20")
    assert not out.with_suffix(".html").exists()


@pytest.mark.slow
def test_every_registry_path_is_a_row_at_every_length(quick):
    _, _, data = quick
    seen = {(r["scheme"], r["form"], r["backend"], r["mode"], r["L"]): r for r in data["rows"]}
    flex_lengths = bench.PRESETS["quick"]["flex_lengths"]
    for path in rp.registry.paths():
        for L in (16, 32):
            if path.backend == "flex" and (L not in flex_lengths or path.scheme != "none"):
                continue
            row = seen[(path.scheme, path.form, path.backend, "forward", L)]
            assert row["status"] in ("ok", "skipped"), row
    skipped = [r for r in data["rows"] if r["status"] == "skipped"]
    assert {(r["scheme"], r["form"], r["L"]) for r in skipped} >= {("shaw", "naive", 32), ("deberta", "naive", 32)}
    for r in data["rows"]:  # each scheme's distance parameter as its declaration gives the small preset
        distance = rp.schemes.lookup(r["scheme"]).scheme.distance
        assert r["k"] == (None if distance is None else distance.for_preset("small", r["L"]))
    for r in skipped:  # the guard's own message: what it needed, the budget, and a path that fits (or that none does)
        assert "over the memory budget" in r["reason"]
        assert "; use form=" in r["reason"] or "no path that accepts this call fits" in r["reason"]
        assert r["mode"] == "train" or r["analytic_bytes"] > BUDGET
    assert not [r for r in data["rows"] if r["status"] == "error"]


@pytest.mark.slow
def test_rows_record_their_spread(quick):
    _, _, data = quick
    ok = [r for r in data["rows"] if r["status"] == "ok"]
    threshold = bench.PRESETS["quick"]["spread_threshold"]
    for r in ok:
        t = r["time_ms"]
        assert t["min"] <= t["q1"] <= t["median"] <= t["q3"] <= t["max"]
        assert r["ms"] == t["median"]
        assert t == bench_stats.summarize(r["samples_ms"])  # the summary is of the recorded bursts
        assert t["n"] == bench.PRESETS["quick"]["repeats"] and r["attempts"] >= 1
        assert r["noisy"] == (t["spread"] > threshold or any("monotonic" in n for n in r["noise_reasons"]))
        assert r["first_call_s"] > 0 and r["iters"] >= 1
        assert isinstance(r["peak_bytes"], int)
    for r in ok:
        if r["mode"] == "forward" and r["backend"] in ("eager", "sdpa"):
            assert r["peak_over_analytic"] == pytest.approx(r["peak_bytes"] / r["analytic_bytes"])
        if r["backend"] == "sdpa":
            assert r["sdpa_backend"] in ("flash", "math")
    train_flex = [r for r in ok if r["mode"] == "train" and r["backend"] == "flex"]
    assert train_flex and all("FlexCPUBackwardWarning" in r["ran_instead"] for r in train_flex)
    for r in train_flex:  # a bias that requires grad sends SDPA to its math backend
        assert r["sdpa_backend"] == ("math" if r["scheme"] == "t5" else "flash")
    assert data["provenance"]["allocator"]["glibc mallopt"]["M_MMAP_THRESHOLD"] == 32 * 2**20
    assert all("page_faults_per_call" in r for r in ok)  # recorded for every CPU row


@pytest.mark.slow
def test_ratios_come_from_the_same_run(quick):
    _, _, data = quick
    rows = data["rows"]

    def base(backend, r):
        skip = True if (backend == "flex" and r["causal"]) else None
        return next((b for b in rows if (b["scheme"], b["backend"], b["mode"], b["causal"], b["block_skipping"],
                                         b["L"]) == ("none", backend, r["mode"], r["causal"], skip, r["L"])), None)

    checked = 0
    for r in rows:
        if r["status"] != "ok" or r["mode"] == "module":
            continue
        for name, backend in (("x_sdpa0", "sdpa"), ("x_flex0", "flex")):
            b = base(backend, r)
            if b is None or b["status"] != "ok":
                assert r[name] is None
                continue
            assert r[name] == pytest.approx(r["ms"] / b["ms"])
            lo, hi = r[name + "_iqr"]
            assert lo == pytest.approx(r["time_ms"]["q1"] / b["time_ms"]["q3"])
            assert hi == pytest.approx(r["time_ms"]["q3"] / b["time_ms"]["q1"])
            checked += 1
        same = [x for x in rows if x["status"] == "ok" and (x["scheme"], x["mode"], x["causal"], x["L"])
                == (r["scheme"], r["mode"], r["causal"], r["L"]) and x["block_skipping"] is not False]
        assert r["x_best"] == pytest.approx(r["ms"] / min(x["ms"] for x in same))
    assert checked > 50
    flex_rows = [r for r in rows if r["x_flex0"] is not None and r["mode"] == "forward"]
    assert flex_rows and all(r["L"] == 32 for r in flex_rows)  # the flex baseline ran at L = 32 only


@pytest.mark.slow
def test_growth_exponents_are_fitted_from_the_rows(quick):
    _, _, data = quick
    fits = {(f["scheme"], f["form"], f["backend"], f["mode"], f["causal"], f["quantity"]): f for f in data["fits"]}
    f = fits[("none", "none", "eager", "forward", False, "peak_bytes")]
    rows = sorted((r for r in data["rows"] if (r["scheme"], r["form"], r["backend"], r["mode"], r["causal"])
                   == ("none", "none", "eager", "forward", False)), key=lambda r: r["L"])
    want = math.log(rows[1]["peak_bytes"] / rows[0]["peak_bytes"]) / math.log(2)
    assert f["slope"] == pytest.approx(want) and f["n"] == 2 and f["stderr"] is None
    assert 1.9 < f["slope"] < 2.1  # scores and weights, [B, H, L, L] each: quadratic in L
    assert ("shaw_key", "naive", "eager", "forward", False, "peak_bytes") not in fits  # refused at L = 32
    table = bench.format_table(data)
    assert "growth exponent" in table and "worst measured peak / analytic" in table and "skipped" in table


def test_summarize_and_spread():
    s = bench_stats.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["min"], s["q1"], s["median"], s["q3"], s["max"], s["n"]) == (1.0, 2.0, 3.0, 4.0, 5.0, 5)
    assert s["spread"] == pytest.approx(2.0 / 3.0)
    assert bench_stats.summarize([2.0])["spread"] == 0.0
    with pytest.raises(ValueError, match="samples"):
        bench_stats.summarize([])
    with pytest.raises(ValueError, match="finite"):
        bench_stats.summarize([1.0, float("nan")])


def test_fit_exponent_recovers_a_known_slope():
    lengths = [128, 256, 512, 1024, 2048]
    exact = bench_stats.fit_exponent(lengths, [3e-6 * L**1.5 for L in lengths])
    assert exact["slope"] == pytest.approx(1.5) and exact["stderr"] == pytest.approx(0.0, abs=1e-12)
    assert exact["last_slope"] == pytest.approx(1.5) and exact["n"] == 5
    # a constant cost plus a quadratic one: the fit lies between, the last slope nears 2
    mixed = bench_stats.fit_exponent(lengths, [5.0 + 1e-5 * L**2 for L in lengths])
    assert 0.5 < mixed["slope"] < mixed["last_slope"] < 2.0 and mixed["stderr"] > 0.05
    # noise of known size: the standard error is the textbook one
    wobble = [1.0, 1.1, 0.9, 1.1, 1.0]
    noisy = bench_stats.fit_exponent(lengths, [w * L for w, L in zip(wobble, lengths)])
    xs = [math.log(L) for L in lengths]
    ys = [math.log(w * L) for w, L in zip(wobble, lengths)]
    mx, my = sum(xs) / 5, sum(ys) / 5
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    se = math.sqrt(sum((y - a - b * x) ** 2 for x, y in zip(xs, ys)) / 3 / sxx)
    assert noisy["slope"] == pytest.approx(b) and noisy["stderr"] == pytest.approx(se) and se > 0
    for bad in (([1, 2], [1]), ([4], [1.0]), ([4, 4], [1.0, 2.0]), ([1, 2], [0.0, 1.0])):
        with pytest.raises(ValueError):
            bench_stats.fit_exponent(*bad)


def _row(scheme, form, backend, L, ms, *, q=(0.9, 1.1), noisy=False, causal=False, skip=None, mode="forward"):
    return dict(scheme=scheme, form=form, backend=backend, mode=mode, causal=causal, block_skipping=skip, L=L,
                status="ok", ms=ms, noisy=noisy,
                time_ms=dict(min=ms * 0.8, q1=ms * q[0], median=ms, q3=ms * q[1], max=ms * 1.3, n=5, spread=0.2))


def test_ratio_arithmetic_on_synthetic_rows():
    rows = [_row("none", "none", "sdpa", 64, 2.0), _row("none", "none", "flex", 64, 4.0, noisy=True),
            _row("t5", "gather", "sdpa", 64, 3.0), _row("t5", "naive", "eager", 64, 12.0),
            _row("t5", "gather", "flex", 64, 6.0),
            _row("none", "none", "flex", 64, 8.0, causal=True, skip=True),
            _row("alibi", "gather", "flex", 64, 9.0, causal=True, skip=False)]
    bench_stats.add_ratios(rows)
    t5_naive = rows[3]
    assert t5_naive["x_sdpa0"] == pytest.approx(6.0) and t5_naive["x_flex0"] == pytest.approx(3.0)
    assert t5_naive["x_best"] == pytest.approx(4.0) and t5_naive["best_path"] == "gather/sdpa"
    assert t5_naive["x_sdpa0_iqr"] == pytest.approx([12 * 0.9 / (2 * 1.1), 12 * 1.1 / (2 * 0.9)])
    assert any("no-bias flex row it divides by is noisy" in n for n in t5_naive["ratio_notes"])
    assert rows[2]["x_best"] == 1.0
    no_skip = rows[6]  # divides by the causal no-bias flex row (with its BlockMask)
    assert no_skip["x_flex0"] == pytest.approx(9.0 / 8.0) and no_skip["x_sdpa0"] is None


def test_monotonic_violations_pair_neighbouring_lengths():
    rows = [_row("t5", "gather", "sdpa", L, ms) for L, ms in ((128, 1.0), (256, 3.0), (512, 2.0), (1024, 9.0))]
    rows.append(_row("t5", "gather", "flex", 128, 5.0))
    pairs = bench_stats.monotonic_violations(rows)
    assert [(a["L"], b["L"]) for a, b in pairs] == [(256, 512)]


def test_noisy_rows_are_measured_again_then_flagged(monkeypatch):
    preset = bench.resolve_preset("quick", lengths=[16], repeats=3, retries=2, spread_threshold=0.2)
    cases = [bench_cases.Case("none", "none", "sdpa"), bench_cases.Case("none", "none", "eager")]
    # per-call times each row's bursts report, in order: one call to choose the burst size,
    # then three bursts per attempt
    scripts = {"sdpa": iter([1.0, 1.0, 1.0, 1.0]),  # steady: measured once
               "eager": iter([1.0, 1.0, 5.0, 9.0,  # attempt 1: spread out
                              1.0, 7.0, 1.0,  # attempt 2: still
                              8.0, 1.0, 1.0])}  # attempt 3: still

    def fake_burst(fn, iters, device):
        ms = next(scripts[fn()])
        return dict(cpu_ms=ms, wall_ms=ms, faults=0.0)

    monkeypatch.setattr(bench_run, "make_call", lambda case, *a, **k: ((lambda: case.backend), {}))
    monkeypatch.setattr(bench_run, "case_analytic_bytes", lambda *a, **k: 100)
    monkeypatch.setattr(bench_run, "batched_cpu_profile", lambda fns: [(100, "none")] * len(fns))
    monkeypatch.setattr(bench_run, "burst", fake_burst)
    monkeypatch.setattr(rp.measure.timing, "burst", fake_burst)
    rows, timed = bench_run._prepare_length(cases, preset, 16, torch.device("cpu"), torch.float32, lambda text: None,
                                            lambda row: None)
    bench_run._time_rows(timed, preset, torch.device("cpu"))
    steady, spread = rows
    assert steady["attempts"] == 1 and not steady["noisy"] and steady["ms"] == 1.0
    assert spread["attempts"] == 3 and spread["noisy"] and "over the threshold" in spread["noise_reasons"][0]
    assert spread["time_ms"] == bench_stats.summarize([1.0, 5.0, 9.0])  # the quietest attempt is kept


def test_batched_profile_agrees_with_the_library(monkeypatch):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 24, 8) for _ in range(3))
    calls = []
    for scheme, form, backend in (("none", "none", "sdpa"), ("shaw", "naive", "eager"), ("alibi", "naive", "sdpa")):
        term = rp.registry.example_term(scheme, num_heads=2, head_dim=8, k=4)
        calls.append(lambda term=term, form=form, backend=backend: rp.attend(q, k, v, term, form=form,
                                                                             backend=backend))
    with torch.no_grad():
        for fn in calls:
            fn()
        batched = rp.measure.profile.batched_cpu_profile(calls)
        one_by_one = [(rp.measure.measure_peak_memory(fn), rp.measure.detect_sdpa_backend(fn)[1]) for fn in calls]
    assert batched == one_by_one
    assert [b for _, b in batched] == ["flash", "none", "flash"]


THREE_CASES = [bench_cases.Case("none", "none", "sdpa"), bench_cases.Case("alibi", "gather", "sdpa"),
               bench_cases.Case("t5", "gather", "eager")]


def test_a_row_that_fails_makes_the_run_fail(tmp_path, monkeypatch, capsys):
    real = bench_run.make_call

    def failing(case, *args, **kwargs):
        if case.scheme == "alibi":
            raise RuntimeError("a kernel that breaks")
        return real(case, *args, **kwargs)

    monkeypatch.setattr(bench_run, "build_cases", lambda p: THREE_CASES)
    monkeypatch.setattr(bench_run, "make_call", failing)
    out = tmp_path / "b.json"
    status = bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures"])
    assert status == 1
    rows = json.loads(out.read_text())["rows"]  # written before failing
    assert [r["status"] for r in rows] == ["ok", "error", "ok"]
    assert rows[1]["reason"] == "RuntimeError: a kernel that breaks"
    assert "1 row(s) failed" in capsys.readouterr().err


def test_ctrl_c_keeps_what_was_measured(tmp_path, monkeypatch):
    """Interrupted while timing: the result holds every row, summarised from the bursts taken so far."""
    monkeypatch.setattr(bench_run, "build_cases", lambda p: THREE_CASES)
    real = rp.measure.timing.burst
    calls = []

    def interrupt_later(fn, iters, device):
        calls.append(1)
        if len(calls) > 6:  # after two rounds of the three rows
            raise KeyboardInterrupt
        return real(fn, iters, device)

    monkeypatch.setattr(rp.measure.timing, "burst", interrupt_later)
    out = tmp_path / "b.json"
    status = bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures"])
    data = json.loads(out.read_text())
    assert status == 130 and data["complete"] is False
    assert [r["status"] for r in data["rows"]] == ["ok", "ok", "ok"] and all(r["time_ms"]["n"] == 2 for r in data["rows"])


@pytest.mark.slow  # two quick benchmark runs
def test_a_second_ctrl_c_while_the_result_is_written_loses_nothing(tmp_path, monkeypatch):
    """The first Ctrl-C ends the timing; a second one during the provenance is ignored (before: the
    KeyboardInterrupt left the rows only in the partial file). A Ctrl-C outside the timing writes the
    prepared rows, marked complete: false."""
    import os
    import signal

    monkeypatch.setattr(bench_run, "build_cases", lambda p: THREE_CASES)
    monkeypatch.setattr(bench_run, "_time_rows", lambda *a: os.kill(os.getpid(), signal.SIGINT))
    real = bench_run._provenance

    def provenance_interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_run, "_provenance", provenance_interrupted)
    out = tmp_path / "b.json"
    status = bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures"])
    data = json.loads(out.read_text())
    assert status == 130 and data["complete"] is False and len(data["rows"]) == 3
    assert "provenance" in data and data["provenance"]["preset"] == "quick"

    monkeypatch.setattr(bench_run, "_provenance", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    out2 = tmp_path / "c.json"
    status = bench_main(["--quick", "--lengths", "16", "--out", str(out2), "--no-progress", "--no-figures"])
    data = json.loads(out2.read_text())
    assert status == 130 and data["complete"] is False and len(data["rows"]) == 3
    assert "outside the timing" in data["provenance"]["interrupted"]
    assert not out2.with_name(out2.name + ".partial.jsonl").exists()


def test_the_partial_file_keeps_prepared_rows_if_the_process_dies(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_run, "build_cases", lambda p: THREE_CASES)
    monkeypatch.setattr(bench_run, "_time_rows", lambda *a: (_ for _ in ()).throw(SystemExit(9)))  # a crash
    out = tmp_path / "b.json"
    with pytest.raises(SystemExit):
        bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures"])
    assert not out.exists()
    head, rows = rp.outputs.read_partial(out.with_name(out.name + ".partial.jsonl"))
    assert head["preset"] == "quick" and [r["scheme"] for r in rows] == ["none", "alibi", "t5"]
    assert all("peak_bytes" in r for r in rows)  # prepared: first call and memory measured


def test_existing_output_is_not_replaced_without_force(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench_run, "build_cases", lambda p: THREE_CASES[:1])
    out = tmp_path / "b.json"
    out.write_text("keep me")
    with pytest.raises(SystemExit):
        bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures"])
    assert out.read_text() == "keep me" and "pass --force" in capsys.readouterr().err
    assert bench_main(["--quick", "--lengths", "16", "--out", str(out), "--no-progress", "--no-figures",
                       "--force"]) == 0
    assert json.loads(out.read_text())["complete"] is True


def test_the_default_output_is_outside_the_package_and_data(tmp_path, monkeypatch):
    from relpos_core.bench.__main__ import parse_args

    monkeypatch.chdir(tmp_path)
    args = parse_args(["--quick"])
    assert args.output.path.parent == tmp_path / "relpos-results"
    monkeypatch.chdir(rp.outputs.PACKAGE)
    with pytest.raises(SystemExit):
        parse_args(["--quick"])  # the default would land inside the package: refused


@pytest.mark.parametrize("argv, argument, text", [
    (["--lengths", "0"], "--lengths", "[1, 32768]"),
    (["--lengths", "-5"], "--lengths", "[1, 32768]"),
    (["--lengths", "100000"], "--lengths", "[1, 32768]"),
    (["--lengths", "12.5"], "--lengths", "[1, 32768]"),
    (["--budget", "abc"], "--budget", "[1, 2**62]"),
    (["--budget", "inf"], "--budget", "[1, 2**62]"),
    (["--budget", "-1"], "--budget", "[1, 2**62]"),
    (["--budget", "0"], "--budget", "[1, 2**62]"),
    (["--device", "meta"], "--device", "'cpu', 'cuda' or 'cuda:N', got 'meta'"),
    (["--device", "cuda"], "--device", "torch.cuda.is_available() is False"),
    (["--gpu"], "--device", "torch.cuda.is_available() is False"),
    (["--threads", "0"], "--threads", "must be an integer in [1,"),
    (["--repeats", "0"], "--repeats", "[1, 100]"),
    (["--spread-threshold", "nan"], "--spread-threshold", "(0, 10]"),
    (["--quick", "--gpu"], "--quick and --gpu", "use one"),
    (["--preset", "huge"], "--preset", "invalid choice"),
])
def test_bad_arguments_fail_before_anything_runs(argv, argument, text, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("relpos_core.bench.__main__.run_benchmark",
                        lambda *a, **k: pytest.fail("ran despite a bad argument"))
    with pytest.raises(SystemExit) as exit_info:
        bench_main(argv + ["--out", str(tmp_path / "b.json")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert argument in err and text in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("make_out, text", [
    (lambda tmp: tmp / "a_file.txt" / "b.json", "cannot write to"),  # parent is a file
    (lambda tmp: tmp, "is a folder"),
    (lambda tmp: tmp / "b.csv", "must end in .json"),
])
def test_unwritable_out_fails_before_anything_runs(make_out, text, monkeypatch, capsys, tmp_path):
    (tmp_path / "a_file.txt").write_text("x")
    monkeypatch.setattr("relpos_core.bench.__main__.run_benchmark",
                        lambda *a, **k: pytest.fail("ran despite a bad --out"))
    with pytest.raises(SystemExit) as exit_info:
        bench_main(["--quick", "--out", str(make_out(tmp_path))])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and text in err, err


def test_run_benchmark_checks_its_own_arguments():
    with pytest.raises(ValueError, match="preset"):
        bench.run_benchmark("huge")
    with pytest.raises(ValueError, match=r"lengths must be integers in \[1, 32768\]"):
        bench.run_benchmark("quick", lengths=[0])
    with pytest.raises(ValueError, match="budget"):
        bench.run_benchmark("quick", budget=-1)
    with pytest.raises(ValueError, match="device"):
        bench.run_benchmark("quick", device="meta")


def test_cases_come_from_the_registry():
    cases = bench_cases.build_cases(bench.PRESETS["cpu"])
    forward = {(c.scheme, c.form, c.backend) for c in cases if c.mode == "forward"}
    assert forward == {(p.scheme, p.form, p.backend) for p in rp.registry.paths()}
    skips = [c for c in cases if c.block_skipping is False]
    assert {(c.scheme, c.form) for c in skips} == {("none", "none"), ("alibi", "gather")}
    assert all(c.lengths == (1024,) and c.causal for c in skips)
    modules = {(c.scheme, c.backend) for c in cases if c.mode == "module"}
    assert ("t5", "transformers") in modules and ("deberta", "transformers") in modules
    assert {c.scheme for c in cases if c.mode == "module"} == set(bench_cases.module_schemes())


@pytest.mark.slow
def test_figures_read_the_result(quick):
    _, _, data = quick
    fig = rp.figures.bench.scheme_figure(data, "t5")
    paths = {(r["form"], r["backend"]) for r in data["rows"]
             if r["scheme"] == "t5" and r["mode"] == "forward" and r["status"] == "ok"}
    curves = [t for t in fig.data if t.x and t.x[0] is not None]  # the rest is the legend's key
    assert len(curves) == 3 * len(paths)  # time, memory, ratio panels
    assert {t.name for t in fig.data if t.x == (None,)} >= {"naive", "gather", "eager", "sdpa", "flex"}
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    slider = rp.figures.bench.scheme_slider(data, ["t5", "shaw_key"])
    static = slider.static_figure()
    assert len({len(frame.data) for frame in static.frames}) == 1
    exponents = rp.figures.bench.exponent_figure(data, min_points=2)
    slopes = [x for trace in exponents.data for x in trace.x if x is not None]
    assert len(slopes) == len([f for f in data["fits"] if f["mode"] == "forward" and not
                               (f["scheme"] == "none" and f["causal"])])


def test_progress_falls_back_without_tqdm(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError("no tqdm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    items = [1, 2]
    assert bench_run._progress(items, "x") is items
    assert "tqdm is not installed" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a CUDA-only test (tools/gpu_check.sh runs it)")
def test_quick_preset_on_cuda(tmp_path):
    out = tmp_path / "bench-cuda.json"
    status = bench_main(["--quick", "--device", "cuda", "--out", str(out), "--no-progress", "--no-figures"])
    data = json.loads(out.read_text())
    assert status == 0 and data["provenance"]["device"] == "cuda"
    assert "CUDA events" in data["provenance"]["clock"]
    ok = [r for r in data["rows"] if r["status"] == "ok"]
    assert ok and all(r["time_ms"]["n"] == bench.PRESETS["quick"]["repeats"] for r in ok)
    assert {r["sdpa_backend"] for r in ok if r["backend"] == "sdpa"} <= {"flash", "efficient", "cudnn", "math"}
    for r in ok:  # the fused kernels keep their tiles on chip: the ledger counts the rest
        if r["mode"] == "forward" and r["backend"] == "eager":
            assert abs(r["peak_over_analytic"] - 1) < 0.10, r


def test_the_hugging_face_rows_are_guarded():
    """A module row of HF's eager module is refused over the budget like any path, before it runs."""
    preset = bench.resolve_preset("quick", lengths=[64])
    x = bench_cases.make_inputs(preset, 64, torch.device("cpu"), torch.float32)
    case = bench_cases.Case("t5", "hf", "transformers", mode="module")
    with rp.budget.memory_budget(10_000), pytest.raises(rp.budget.MemoryBudgetError, match="T5Attention"):
        bench_cases.make_call(case, preset, 64, x, torch.device("cpu"), torch.float32, compiled=False)
