"""The peer benchmark (relpos_core.bench.peers): every peer agrees with float64 before it is timed, a peer
that disagrees is refused from the round, and a run gives ratios to each row's fastest."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from relpos_core.bench.__main__ import main as bench_main
from relpos_core.bench.peers import run as peers_run
from relpos_core.bench.peers.common import Contender
from relpos_core.bench.presets import resolve_preset

pytest.importorskip("x_transformers")  # [bench]: installed by requirements.txt
pytest.importorskip("rotary_embedding_torch")

QUICK = resolve_preset("peers_quick")
CONTENDERS, MISSING = peers_run.peer_contenders()


def _rows():
    return sorted({(c.scheme, c.kind) for c in CONTENDERS})


def test_every_peer_library_is_found_and_every_row_has_relpos_core_paths():
    assert not MISSING, MISSING
    libraries = {c.library for c in CONTENDERS}
    assert libraries == {"x-transformers", "rotary-embedding-torch", "transformers"}
    kinds = {k for _, k in _rows()}
    assert kinds == {"kernel", "module"}
    for scheme, kind in _rows():
        assert peers_run.relpos_contenders(scheme, kind, flex=True, compiled=True), (scheme, kind)


@pytest.mark.parametrize("contender", CONTENDERS + [c for s, k in _rows() for c in peers_run.relpos_contenders(
    s, k, flex=False, compiled=False)], ids=lambda c: f"{c.scheme}-{c.kind}-{c.name}")
def test_each_contender_equals_the_float64_reference_at_a_tiny_shape(contender):
    row = peers_run.make_row(contender.scheme, contender.kind, 16, QUICK, "cpu")
    x, x64 = peers_run._inputs(row, torch.float32), peers_run._inputs(row, torch.float64)
    for mode in ("forward", "train"):  # train: the gradients into q, k, v (the hidden states) too
        diff, reason = peers_run.check_contender(row, contender, contender.build(row), x, x64, mode)
        assert reason is None, reason
        assert diff <= peers_run.tolerance(torch.float32)


def test_a_wrong_gradient_is_refused_from_a_train_row():
    """A contender whose forward is right but whose backward is not (a detached key)."""
    peer = next(c for c in CONTENDERS if c.library == "rotary-embedding-torch")
    row = peers_run.make_row("rope", "kernel", 16, QUICK, "cpu")
    x, x64 = peers_run._inputs(row, torch.float32), peers_run._inputs(row, torch.float64)
    built = peer.build(row)
    broken = dataclasses.replace(built, fn=lambda q, k, v: built.fn(q, k.detach(), v))
    assert peers_run.check_contender(row, peer, broken, x, x64, "forward")[1] is None
    diff, reason = peers_run.check_contender(row, peer, broken, x, x64, "train")
    assert reason is not None and "gradient" in reason and diff > 1e-3, (diff, reason)


def _wrong_table(contender: Contender) -> Contender:
    """The same peer given another T5 table (a bias copied from the wrong place): its numbers differ."""
    def build(row):
        return contender.build(dataclasses.replace(row, t5_table=row.t5_table.flip(0)))
    return dataclasses.replace(contender, name=contender.name + " (wrong table)", build=build)


def test_a_contender_that_disagrees_is_refused_from_the_round():
    peer = next(c for c in CONTENDERS if c.library == "x-transformers" and c.scheme == "t5")
    p = dict(QUICK, modes=["forward"], repeats=1)  # one row: the peer's (T5, kernel, forward)
    result = peers_run.run_peers(p, log=lambda *a: None, contenders=[peer, _wrong_table(peer)])
    by_name = {r["contender"]: r for r in result["rows"]}
    broken = by_name[peer.name + " (wrong table)"]
    assert broken["status"] == "refused" and "float64 reference" in broken["reason"], broken
    assert "ms" not in broken and "x_fastest" not in broken  # not timed, not in the ratios
    assert by_name[peer.name]["status"] == "ok"
    ok = [r for r in result["rows"] if r["status"] == "ok"]
    assert len(ok) >= 3 and min(r["x_fastest"] for r in ok) == 1.0


def test_the_peers_quick_preset_end_to_end(tmp_path):
    out = tmp_path / "peers.json"
    assert bench_main(["--preset", "peers_quick", "--out", str(out), "--no-progress"]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == peers_run.SCHEMA and data["provenance"]["preset"] == "peers_quick"
    assert data["provenance"]["threads"] == 1 and not data["provenance"]["peers_missing"]
    rows = {}
    for r in data["rows"]:
        assert r["status"] == "ok" and isinstance(r["noisy"], bool) and r["time_ms"]["n"] == QUICK["repeats"], r
        rows.setdefault((r["scheme"], r["kind"], r["mode"], r["L"]), []).append(r)
    assert {(s, k, m) for s, k, m, _ in rows} == {
        *((s, k, m) for s, k in _rows() for m in (("forward", "train") if k == "kernel" else ("forward",)))}
    for key, group in rows.items():
        assert min(r["x_fastest"] for r in group) == 1.0, key  # ratios to the row's fastest
        assert {r["library"] for r in group} >= {"relpos_core"} and len({r["library"] for r in group}) >= 2, key
    deberta = [r["contender"] for r in rows[("deberta", "module", "forward", 16)]]
    assert any("skew" in name for name in deberta) and any("log buckets" in name for name in deberta)
    assert len(data["summary"]) == len(rows)


def test_relpos_core_imports_without_the_peer_libraries():
    code = ("import sys, relpos_core, relpos_core.bench, relpos_core.bench.peers; "
            "assert not {'x_transformers', 'rotary_embedding_torch'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_missing_peer_library_is_reported_not_fatal(monkeypatch):
    monkeypatch.setattr(peers_run, "PEER_MODULES", peers_run.PEER_MODULES + ("relpos_core.bench.peers._absent",))
    found, missing = peers_run.peer_contenders()
    assert found and set(missing) == {"_absent"} and "pip install" in missing["_absent"]


def test_a_path_over_the_memory_budget_is_refused_by_name_and_a_failure_is_reported(tmp_path, monkeypatch, capsys):
    """The committed run's naive DeBERTa layer at L = 2048 (8.5 GiB over a 4 GiB budget) is a refusal, not an
    error; a contender that raises is an error, and the command line names it (it raised KeyError: 'label')."""
    peer = next(c for c in CONTENDERS if c.scheme == "deberta" and c.kind == "module")
    p = dict(QUICK, budget=1024, repeats=1)  # 1 KiB: the naive DeBERTa paths are over it
    result = peers_run.run_peers(p, log=lambda *a: None, contenders=[peer])
    over = [r for r in result["rows"] if r["library"] == "relpos_core" and r["status"] != "ok"]
    assert over and all(r["status"] == "refused" and "MemoryBudgetError" in r["reason"] for r in over), over

    def broken(row):
        raise RuntimeError("this contender cannot run")
    failing = dataclasses.replace(peer, name="a peer that raises", build=broken)
    monkeypatch.setattr(peers_run, "peer_contenders", lambda: ([failing], {}))
    out = tmp_path / "peers.json"
    assert bench_main(["--preset", "peers_quick", "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "a peer that raises: RuntimeError: this contender cannot run" in err, err
