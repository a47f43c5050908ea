"""The decision guide's helpers: the lab's evidence over every run
(``relpos_core.lab.guide``) and the flowchart (``relpos_core.figures.flowchart``)."""
from __future__ import annotations

import importlib
import math

import pytest

import relpos_core as rp

G, R = rp.lab.guide, rp.lab.results
FLOW = importlib.import_module("relpos_core.figures.flowchart")  # the module, not the function


def _result(accuracies: dict, solved: dict) -> dict:
    """A minimal lab result: one run id, probes L16, two learning rates, budgets 1 and 4;
    ``accuracies[(lr, seed)]`` and ``solved[(lr, seed)]`` at the longer budget."""
    seeds = sorted({s for _, s in accuracies})
    lrs = sorted({lr for lr, _ in accuracies})
    runs = []
    for (lr, seed), acc in accuracies.items():
        ev = {"L16": {"accuracy": acc, "floor": 0.1, "parts": {"sign": acc}}}
        runs.append({"run_id": "t/x", "task": "t", "lr": lr, "seed": seed,
                     "budgets": {"1": {"solved": False, "eval": ev},
                                 "4": {"solved": solved[(lr, seed)], "eval": ev}}})
    return {"provenance": {"seeds": seeds, "lrs": lrs},
            "preset": {"budgets": [1, 4], "runs": [{"run_id": "t/x", "task": "t"}],
                       "tasks": {"t": {"probes": [{"name": "L16"}]}}},
            "runs": runs}


ACC = {(0.001, 0): 1.0, (0.001, 1): 0.9, (0.001, 2): 0.8,
       (0.003, 0): 0.5, (0.003, 1): 0.96, (0.003, 2): 0.97}
SOLVED = {k: False for k in ACC}
SOLVED[(0.001, 0)] = True


def test_level_reads_every_run_not_only_the_solved_ones():
    res = _result(ACC, SOLVED)
    lv = G.level(res, "t/x", "L16")
    assert set(lv) == {0.001, 0.003}
    for lr in lv:  # every run counts; ``solved`` is the lab's own count, whatever its rule
        assert lv[lr]["n"] == 3
        assert lv[lr]["solved"] == R.solved(res, "t/x", budget=4, lr=lr)[0] < 3
    assert math.isclose(lv[0.001]["mean"], 0.9)
    iv = R.t_interval([1.0, 0.9, 0.8])
    assert math.isclose(lv[0.001]["low"], iv["low"]) and lv[0.001]["high"] > 0.9
    assert math.isclose(lv[0.003]["mean"], 0.81)
    assert G.span(lv) == "0.90 / 0.81"
    assert G.interval_text(lv[0.001]).startswith("0.90 [")


def test_reaching_counts_runs_at_a_level_on_held_out_rows():
    res = _result(ACC, SOLVED)
    assert G.reaching(res, "t/x", "L16", 0.95) == {0.001: (1, 3), 0.003: (2, 3)}
    assert G.reaching(res, "t/x", "L16", 0.9) == {0.001: (2, 3), 0.003: (2, 3)}


def test_difference_is_paired_over_every_seed_and_everywhere_needs_every_rate():
    res = R.only_complete_seeds(R.load_committed())
    d = G.difference(res, "retrieval_gap/none", "retrieval_gap/rope", "L512")
    assert all(x["n"] == 5 for x in d.values())  # every seed, solved or not
    assert G.everywhere(d, lambda x: x["low"] > 0)
    assert not G.everywhere({1: {"v": 1}, 2: {"v": 0}}, lambda st: st["v"])


@pytest.mark.parametrize("call, param", [
    (lambda res: G.level(res, "t/x", "L16", budget=2), "budget"),
    (lambda res: G.reaching(res, "t/x", "L16", 1.5), "at_least"),
    (lambda res: G.level(res, "t/nope", "L16"), "run_id"),
    (lambda res: G.everywhere({}, bool), "per_lr"),
])
def test_guide_refuses_bad_arguments(call, param):
    with pytest.raises(ValueError, match=param):
        call(_result(ACC, SOLVED))


STEPS = [("Question one?", "yes", "<b>Answer</b><br>two lines", "no"),
         ("Question two,<br>on two lines?", "no", "Second answer", "yes")]


def _layouts(fig) -> dict:
    """The wide layout and the narrow one the figure script applies below 600 px."""
    narrow = fig.layout.meta["relpos"]["narrow"]
    assert narrow["below"] == FLOW.NARROW_BELOW
    return {"wide": fig.layout.to_plotly_json(), "narrow": narrow["layout"]}


def _rects(layout: dict) -> list[dict]:
    return [s for s in layout["shapes"] if s["type"] == "rect"]


def _texts(layout: dict) -> list[str]:
    return [a["text"] for a in layout["annotations"]]


@pytest.mark.parametrize("which", ["wide", "narrow"])
def test_flowchart_draws_every_box_and_its_text(which):
    layout = _layouts(rp.figures.flowchart(STEPS, "The end<br>of it"))[which]
    rects = _rects(layout)
    assert len(rects) == 2 * len(STEPS) + 1
    texts = _texts(layout)
    for question, branch, answer, onward in STEPS:
        assert question in texts and answer in texts
        assert f"<i>{branch}</i>" in texts and f"<i>{onward}</i>" in texts
    assert "The end<br>of it" in texts
    # boxes in one column follow one another from the top, without overlapping
    columns: dict = {}
    for r in rects:
        columns.setdefault(r["x0"] < 0.5, []).append((r["y0"], r["y1"]))
    for spans in columns.values():
        spans.sort()
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    assert layout["height"] >= max(r["y1"] for r in rects)
    assert layout["yaxis"]["range"][0] > layout["yaxis"]["range"][1]  # y grows down


def test_flowchart_is_two_columns_wide_and_one_on_a_phone():
    layouts = _layouts(rp.figures.flowchart(STEPS, "end"))
    wide, narrow = (_rects(layouts[k]) for k in ("wide", "narrow"))
    assert {r["x1"] for r in wide} == {0.45, 1.0}  # questions left, answers right
    assert {r["x1"] for r in narrow} == {1.0}  # every box the column's width
    assert layouts["wide"]["height"] < layouts["narrow"]["height"]


def test_flowchart_grows_with_its_lines():
    short = _layouts(rp.figures.flowchart(STEPS, "end"))
    tall = _layouts(rp.figures.flowchart(STEPS, "end<br>and<br>more"))
    for which in ("wide", "narrow"):
        assert tall[which]["height"] == short[which]["height"] + 2 * 17


@pytest.mark.parametrize("steps, end, param", [
    ([], "end", "steps"),
    ([("q", "yes", "a")], "end", r"steps\[0\]"),
    ([("q" * 41, "yes", "a", "no")], "end", r"steps\[0\] question"),
    ([("q", "yes", "<b>" + "a" * 40 + "</b>", "no")], "x" * 41, "end"),
    ([("q", "", "a", "no")], "end", "branch"),
])
def test_flowchart_refuses_text_a_phone_cannot_show(steps, end, param):
    with pytest.raises(ValueError, match=param):
        rp.figures.flowchart(steps, end)
