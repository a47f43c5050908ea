"""The intuition sliders (relpos_core.figures.intuition) draw what the library computes:
RoPE scores that follow the offset, the cells the skew reads, the turns of rotary pairs."""
import math

import pytest
import torch

import relpos_core as rp
from relpos_core.figures.style import MAX_HEIGHT

intuition = rp.figures.intuition


def test_rope_scores_depend_on_the_offset_only():
    same = intuition.rope_pair_scores([(m, m - 2) for m in range(2, 10)])
    assert max(same) - min(same) < 1e-12
    moved = intuition.rope_pair_scores([(7, n) for n in range(8)])
    for n, score in enumerate(moved):
        assert math.isclose(score, math.cos(0.8 + n - 7), abs_tol=1e-12)
    with pytest.raises(ValueError, match="pairs"):
        intuition.rope_pair_scores([])
    with pytest.raises(ValueError, match="n must be"):
        intuition.rope_pair_scores([(1, -1)])


def test_rope_slider_prints_the_score_of_each_frame():
    pairs = [(2, 0), (5, 3), (7, 1)]
    fig = intuition.rope_angle_slider(pairs).static_figure()
    titles = [frame.layout.title.text for frame in fig.frames]
    scores = intuition.rope_pair_scores(pairs)
    assert [t.split(": angle")[0] for t in titles] == [f"i = {m}, j = {n}" for m, n in pairs]
    assert [t.split(", q·k = ")[1] for t in titles] == [f"{s:.3f}" for s in scores]
    assert titles[0].split("= ")[-1] == titles[1].split("= ")[-1] != titles[2].split("= ")[-1]
    assert fig.layout.height <= MAX_HEIGHT


def test_skew_reads_are_the_library_skew():
    for L in range(2, 9):
        reads = intuition.skew_reads(L)  # (L, L)
        qe = torch.randn(L, L, dtype=torch.float64)
        buffer = torch.nn.functional.pad(qe, (1, 0)).reshape(-1)
        torch.testing.assert_close(buffer[reads], rp.kernels.skew.skew(qe))
        assert [divmod(int(r), L + 1) for r in reads[:, 0]] == [(i, L - i) for i in range(L)]
    with pytest.raises(ValueError, match="L"):
        intuition.skew_reads(1)


def test_skew_slider_outlines_the_cells_of_each_row():
    L = 4
    slider = intuition.skew_read_slider(L)
    assert slider.values == list(intuition.SKEW_STEPS) + [f"row {i}" for i in range(L)]
    fig = slider.static_figure()
    reads = intuition.skew_reads(L)
    for i in range(L):
        frame = fig.frames[len(intuition.SKEW_STEPS) + i]
        # the strip's marked cells (centres at y = 0.5) are the ones the row reads
        (marks,) = [t for t in frame.data if t.name == "skew: cells the row reads"]
        lit = [int(x - 0.5) for x, y in zip(marks.x, marks.y) if y == 0.5]
        assert lit == reads[i].tolist()
        assert frame.layout.title.text == f"row {i} reads cells {int(reads[i, 0])}–{int(reads[i, -1])}"
    assert fig.layout.height <= MAX_HEIGHT


def test_clock_turns_count_the_turns_of_slow_and_fast_pairs():
    turns = intuition.clock_turns([4095], [0, 32, 48, 63], head_dim=128, base=10000.0)[0]
    assert turns.floor().long().tolist() == [651, 6, 0, 0]
    theta = rp.kernels.rope_scaling.default_inverse_frequencies(128, 10000.0).double()
    torch.testing.assert_close(turns, 4095 * theta[[0, 32, 48, 63]] / (2 * math.pi))
    with pytest.raises(ValueError, match="pair"):
        intuition.clock_turns([0], [64], head_dim=128, base=10000.0)
    with pytest.raises(ValueError, match="head_dim"):
        intuition.clock_turns([0], [0], head_dim=7, base=10000.0)


def test_clock_slider_marks_hands_that_leave_their_arc():
    slider = intuition.clock_hands_slider(positions=(0, 4095, 6144, 32768))
    fig = slider.static_figure()
    assert fig.layout.height <= MAX_HEIGHT
    notes = [[a.text for a in frame.layout.annotations if "turns" in a.text]
             for frame in fig.frames]
    assert not any("off its arc" in t for t in notes[0] + notes[1])  # within training
    # at 6144 pair 48 (wavelength 6283) is at 0.98 of a turn, past its 0.65 arc; at 32768 it
    # has turned 5.2 times and points at 0.22 of a turn, on its arc; pair 63 is off it at both
    assert ["off its arc" in t for t in notes[2]] == [False, False, True, True]
    assert ["off its arc" in t for t in notes[3]] == [False, False, False, True]
    with pytest.raises(ValueError, match="pairs must hold 1 to 4"):
        intuition.clock_hands_slider(pairs=(0, 1, 2, 3, 4))


def test_the_skew_strip_has_a_phone_layout_that_keeps_it_legible():
    fig = intuition._skew_figure("row 1", 4, height=380)
    narrow = fig.layout.meta["relpos"]["narrow"]
    assert narrow["below"] == intuition.SKEW_NARROW_BELOW
    wide_notes, notes = fig.layout.annotations, narrow["layout"]["annotations"]
    index = [a for a in notes if a["y"] == -0.35]  # the flat index under the strip
    assert [a["text"] for a in index] == [str(c) for c in range(0, 20, 2)]  # every other cell
    assert len(notes) == len(wide_notes) - 10 and all(a["font"]["size"] <= 10 for a in notes)
    assert narrow["layout"]["height"] > fig.layout.height
    patched = {k for t in narrow["data"] for k in t}
    assert {"textfont", "marker"} <= patched  # numbers and outlines shrink with the cells
