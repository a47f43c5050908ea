"""The concept figures (relpos_core.figures.concepts) draw what the library computes."""
import pytest
import torch

import relpos_core as rp

concepts = rp.figures.concepts


def test_entry_points_come_from_the_position_terms():
    entries = concepts.position_entry_points()
    assert entries["absolute"] == ["input"]
    assert entries["rope"] == ["rotary"]
    assert entries["t5"] == ["scalar"] and entries["alibi"] == ["scalar"]
    assert entries["shaw"] == ["vector", "output"]  # key and value vectors
    assert entries["transformer_xl"] == ["vector"] and entries["deberta"] == ["vector"]
    assert entries["kerple_log"] == ["scalar"] and entries["fire"] == ["scalar"]  # a function of the offset
    assert entries["xpos"] == ["rotary"]
    assert set(entries) == set(rp.schemes.SCHEMES) - {"none"}  # every declared scheme, no variant
    fig = concepts.entry_points_figure(entries)
    texts = {a.text for a in fig.layout.annotations}
    assert {rp.schemes.lookup(s).short for s in entries} <= texts
    with pytest.raises(ValueError, match="stages that do not exist"):
        concepts.entry_points_figure({"rope": ["nowhere"]})



def test_entry_points_html_draws_the_same_places_without_a_script():
    import re

    entries = concepts.position_entry_points()
    html = concepts.entry_points_html(entries)
    assert html._repr_html_() == str(html) and "<script" not in html  # the landing page loads no plotly.js
    titles = [title for _, title, _ in concepts.STAGES]
    assert [html.index(t) for t in titles] == sorted(html.index(t) for t in titles)  # data-flow order
    stage_blocks = html.split("&#8595;")  # one block per stage, the arrows between
    assert len(stage_blocks) == len(concepts.STAGES)
    for (key, _, _), block in zip(concepts.STAGES, stage_blocks):
        chips = re.findall(r'style="background:(#[0-9a-f]{6});[^"]*" data-scheme="([a-z_0-9]+)"', block)
        assert {s for _, s in chips} == {s for s, st in entries.items() if key in st}
        assert all(colour == rp.figures.style.scheme_color(s) for colour, s in chips)  # each in its colour
    with pytest.raises(ValueError, match="stages that do not exist"):
        concepts.entry_points_html({"rope": ["nowhere"]})

def test_memory_reach_grows_by_a_segment_per_layer():
    reach = concepts.memory_reach(num_layers=3, segment=4, memory=4, segments=4)
    T = reach.shape[1]
    back = [T - 1 - int(row.nonzero().min()) for row in reach]
    assert back == [15, 11, 7, 0]  # input, layer 1, layer 2, the top: (L - 1) + N L
    no_memory = concepts.memory_reach(num_layers=3, segment=4, memory=0, segments=4)
    assert (T - 1 - int(no_memory[0].nonzero().min())) == 3  # never beyond the segment
    with pytest.raises(ValueError, match="num_layers"):
        concepts.memory_reach(num_layers=0, segment=4, memory=4, segments=4)
    with pytest.raises(ValueError, match="segment must divide"):
        concepts.memory_reach_figure(reach, segment=5)


def test_skew_steps_follow_the_library_skew():
    fig = concepts.skew_steps(L=4)
    texts = [a.text for a in fig.layout.annotations]
    assert "4. drop row 0" in texts
    with pytest.raises(ValueError, match="L"):
        concepts.skew_steps(L=1)


def test_rope_rotation_shows_equal_scores_for_equal_offsets():
    fig = concepts.rope_rotation(pairs=[(1, 3), (6, 8)])
    titles = [a.text for a in fig.layout.annotations if a.text and "q·k" in a.text]
    scores = {t.split("q·k = ")[1] for t in titles}
    assert len(titles) == 2 and len(scores) == 1  # same offset, same score
    other = concepts.rope_rotation(pairs=[(1, 3), (1, 4)])
    titles = [a.text for a in other.layout.annotations if a.text and "q·k" in a.text]
    assert len({t.split("q·k = ")[1] for t in titles}) == 2


def test_emd_flow_reads_the_module():
    config = rp.oracles.deberta.DisentangledConfig(hidden_size=16, num_heads=2,
                                                   max_relative_positions=4)
    last = rp.oracles.deberta.DisentangledLayer(config)
    shared = rp.oracles.deberta.EnhancedMaskDecoder(config, layer=last, num_steps=3)
    texts = [a.text for a in concepts.emd_flow(shared, last).layout.annotations]
    assert sum("same weights" in t for t in texts) == 3  # one box per step
    assert any("I<sub>3</sub>" in t for t in texts)
    own = rp.oracles.deberta.EnhancedMaskDecoder(config, num_steps=1)
    texts = [a.text for a in concepts.emd_flow(own, last).layout.annotations]
    assert any("own weights" in t for t in texts)


def test_concepts_do_not_import_plotly_at_import_time():
    import importlib
    import re

    module = importlib.import_module("relpos_core.figures.concepts")
    header = open(module.__file__).read().split("\ndef ", 1)[0]  # module-level code
    assert not re.search(r"^\s*(import plotly|from plotly)", header, re.M)
    assert isinstance(concepts.memory_reach(num_layers=1, segment=2, memory=0, segments=1),
                      torch.Tensor)


def test_memory_reach_is_guarded_before_allocating():
    """Before: memory_reach(segment=10**6, segments=10**2, ...) tried a (T, T) table of 10 PB."""
    with pytest.raises(ValueError, match=r"segment \* segments \(the positions drawn\) must be <= 4096"):
        concepts.memory_reach(num_layers=2, segment=10**6, memory=4, segments=100)
    with pytest.raises(ValueError, match="memory must keep"):
        concepts.memory_reach(num_layers=2, segment=4, memory=10**9, segments=4)
    with pytest.raises(ValueError, match="num_layers must be <= 4096"):
        concepts.memory_reach(num_layers=10**9, segment=4, memory=4, segments=4)
