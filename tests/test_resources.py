"""The committed data ships with the package and is found by one function (relpos_core.resources)."""
from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest

import relpos_core as rp

ROOT = Path(__file__).resolve().parents[1]
H200_SHA256 = "0bd0254cba18f3b6ccfef1a6483a0d2d67d7551c41053884fc4961e4d5dbd05b"
# every file a chapter reads; the names the chapters pass to rp.resources, rp.failures and rp.lab
CHAPTER_DATA = {"bench-cpu.json", "bench-cpu-repeat.json", "kv_decode_cpu.json", "kv_scale_cpu.json", "lab-full.json",
                "lab-recheck-gap.json", "lm-full.json", "lm-full-lr1e-3.json", "lm-long.json", "lm-hybrid.json",
                "lm-hybrid-lr1e-3.json", "lab-hybrid.json",
                "peers-cpu.json", "h200-2026-11-30.jsonl"}


def test_every_file_the_chapters_read_is_package_data():
    assert set(rp.resources.names()) == CHAPTER_DATA
    for name in CHAPTER_DATA:
        path = rp.resources.path(name)
        assert path.is_file() and path.parent.name == "data" and path.parent.parent.name == "relpos_core"


def test_the_h200_reference_exists_once_and_unchanged():
    copies = [p for p in ROOT.rglob("h200-*.jsonl") if ".venv" not in p.parts and "_build" not in p.parts]
    assert copies == [rp.resources.path("h200-2026-11-30.jsonl")]
    assert hashlib.sha256(copies[0].read_bytes()).hexdigest() == H200_SHA256
    readme = (ROOT / "relpos_core" / "data" / "README.md").read_text()
    assert f"{H200_SHA256}  h200-2026-11-30.jsonl" in readme  # the sum is recorded next to the file


def test_no_data_folder_at_the_root_and_every_data_file_documented():
    assert not (ROOT / "data").exists(), "committed data lives in relpos_core/data/ (package data)"
    readme = (ROOT / "relpos_core" / "data" / "README.md").read_text()
    for name in rp.resources.names():
        assert f"`{name}`" in readme, f"{name} is not described in relpos_core/data/README.md"


def test_readers_use_the_shipped_files():
    provenance, records = rp.failures.read_reference()
    assert provenance["device"] == "NVIDIA H200" and records
    assert rp.resources.read_jsonl("h200-2026-11-30.jsonl")[0] == {"provenance": provenance}
    assert rp.lab.results.committed_path() == rp.resources.path("lab-full.json")
    assert rp.lab.results.load_results(rp.lab.results.committed_path())["provenance"]["preset"] == "full"
    assert rp.lm.results.committed_path() == rp.resources.path("lm-full.json")
    assert rp.lm.results.load_committed()["provenance"]["preset"] == "full"
    assert rp.decoding.bench.load_result() == rp.resources.load_json("kv_decode_cpu.json")
    assert rp.figures.bench.read_result(rp.resources.path("bench-cpu.json"))["schema"] == "relpos-bench/2"
    assert rp.resources.names("bench-*.json") == ["bench-cpu-repeat.json", "bench-cpu.json"]


def test_every_recorded_thread_count_agrees_with_the_run_it_describes():
    """A data file that records the thread count its preset set (provenance.sizes.threads)
    and the one it ran on (provenance.threads) says the same in both (kv_scale_cpu.json
    once said 2 for a 1-thread run: read after the caller's count was restored)."""
    for name in sorted(CHAPTER_DATA):
        if not name.endswith(".json"):
            continue
        prov = rp.resources.load_json(name).get("provenance", {})
        preset = (prov.get("sizes") or {}).get("threads")
        if preset is not None and "threads" in prov:
            assert prov["threads"] == preset, f"{name}: provenance.threads {prov['threads']} for a {preset}-thread preset"


def test_unknown_names_are_refused_with_the_list():
    with pytest.raises(ValueError, match=r"name must be one of .*bench-cpu\.json"):
        rp.resources.path("bench-gpu.json")
    with pytest.raises(ValueError, match="name must be one of"):
        rp.resources.path("../pyproject.toml")
    with pytest.raises(ValueError, match=r"name must be a \.json data file"):
        rp.resources.load_json("h200-2026-11-30.jsonl")
    with pytest.raises(ValueError, match=r"name must be a \.jsonl data file"):
        rp.resources.read_jsonl("bench-cpu.json")
    with pytest.raises(ValueError, match="pattern must be"):
        rp.resources.names("")


@pytest.mark.parametrize("path", [ROOT / "intro.ipynb", *sorted((ROOT / "chapters").glob("*.ipynb"))],
                         ids=lambda p: p.name)
def test_no_page_looks_for_the_repository(path):
    """A page finds its data through the package: no walking up folders, no clone, no data/ path."""
    code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
    for pattern in (r"git\s*clone", r"\"clone\"", r"\.\./data", r"[\"']data/", r"Path\.cwd\(\)", r"\.parents\b",
                    r"direct_url\.json", r"__file__"):
        assert not re.search(pattern, code), f"{path.name}: {pattern!r} in a code cell; use rp.resources"


@pytest.mark.slow
def test_the_wheel_carries_the_data(tmp_path):
    """Built the way Colab's pip builds it: the data files and their README are in the wheel."""
    import subprocess
    import sys

    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    import shutil

    shutil.copytree(ROOT / "relpos_core", source / "relpos_core", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path / "wheel"), str(source)], check=True)
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    inside = set(zipfile.ZipFile(wheel).namelist())
    assert {f"relpos_core/data/{name}" for name in CHAPTER_DATA} | {"relpos_core/data/README.md",
                                                                   "relpos_core/resources.py"} <= inside
