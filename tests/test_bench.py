"""python -m relpos_core.bench --preset tiny: provenance, every case present or skipped with a reason, ratios."""
from __future__ import annotations

import builtins
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from relpos_core import bench


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench-tiny.json"
    # 40 000 bytes: the naive Shaw [32, 32, 16] fp32 tensor (64 KiB) is over budget, the gather path is not
    bench.main(["--preset", "tiny", "--out", str(out), "--budget", "40000", "--no-progress"])
    return out, json.loads(out.read_text())


def test_provenance(result):
    out, data = result
    pv = data["provenance"]
    for key in ("device", "device_name", "torch", "cuda", "date", "git_commit", "sizes", "dtype", "preset"):
        assert key in pv
    assert pv["preset"] == "tiny" and pv["sizes"]["lengths"] == [32] and pv["dtype"] == "float32"
    assert out.with_suffix(".png").exists() and pv["plot"].endswith(".png")


def test_every_case_present_or_skipped_with_reason(result):
    _, data = result
    seen = {(r["L"], r["scheme"], r["path"]): r for r in data["results"]}
    for scheme, path in bench.CASES:
        r = seen[(32, scheme, path)]
        assert r["status"] in ("ok", "skipped", "error")
        if r["status"] == "ok":
            assert r["ms"] > 0 and r["peak_bytes"] >= 0
        else:
            assert r["reason"]
    for scheme, path in bench.ANCHOR_CASES:
        assert (32, scheme, path) in seen
    skipped = [r for r in data["results"] if r["status"] == "skipped"]
    assert any(r["scheme"] == "shaw" and r["path"] == "naive" for r in skipped)
    assert all("over the memory budget" in r["reason"] and "; use " in r["reason"] for r in skipped)
    assert not [r for r in data["results"] if r["status"] == "error"], "no path may fail on CPU"
    sdpa_rows = [r for r in data["results"] if r["path"] in ("sdpa", "sdpa_bias") and r["status"] == "ok"]
    assert all(r["backend"] in ("flash", "math") for r in sdpa_rows)


def test_ratios_are_from_this_run(result):
    _, data = result
    rows = data["results"]
    base = {r["path"]: r["ms"] for r in rows if r["scheme"] == "none"}
    for r in rows:
        if r["status"] != "ok" or r["scheme"] == "shaw_key_term":
            continue
        assert r["x_flex_none"] == pytest.approx(r["ms"] / base["flex"])
        assert r["x_sdpa_none"] == pytest.approx(r["ms"] / base["sdpa"])
    table = bench.format_table(data)
    assert "x flex0" in table and "skipped" in table


def test_progress_falls_back_without_tqdm(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name.startswith("tqdm"):
            raise ImportError("no tqdm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    items = [1, 2]
    assert bench._progress(items, "x") is items
    assert "tqdm is not installed" in capsys.readouterr().out


@pytest.mark.parametrize("argv, match", [
    (["--preset", "huge"], None),
])
def test_bad_cli_input(argv, match):
    with pytest.raises(SystemExit):
        bench.main(argv)


def test_bad_run_arguments():
    with pytest.raises(ValueError, match="preset"):
        bench.run_benchmark("huge")
