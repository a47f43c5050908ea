"""relpos_core.decoding.scale: bytes per token of MHA, MQA, GQA and MLA, the published presets, the
decode-step timing of every cache layout and its command line.

The presets are checked against their papers' numbers as typed in the module (the cite key must
resolve in references.bib) and, where transformers ships a configuration class whose defaults
are that model's, against those defaults (built locally, nothing downloaded).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from relpos_core.decoding import scale

ROOT = Path(__file__).resolve().parents[1]


def test_the_formulas():
    sizes = dict(num_layers=2, num_heads=8, head_dim=16)
    assert scale.elements_per_token("MHA", **sizes) == 2 * 2 * 8 * 16
    assert scale.elements_per_token("MQA", **sizes) == 2 * 2 * 16
    assert scale.elements_per_token("GQA", num_kv_heads=2, **sizes) == 2 * 2 * 2 * 16
    assert scale.elements_per_token("GQA", num_kv_heads=8, **sizes) == scale.elements_per_token("MHA", **sizes)
    assert scale.elements_per_token("GQA", num_kv_heads=1, **sizes) == scale.elements_per_token("MQA", **sizes)
    assert scale.elements_per_token("MLA", kv_lora_rank=64, qk_rope_head_dim=8, **sizes) == 2 * (64 + 8)
    assert scale.bytes_per_token("MHA", dtype=torch.float8_e4m3fn, **sizes) * 4 == \
        scale.bytes_per_token("MHA", dtype=torch.float32, **sizes)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="MQB", num_layers=1, num_heads=2, head_dim=4), "kind must be one of"),
    (dict(kind="GQA", num_layers=1, num_heads=8, head_dim=4, num_kv_heads=3), "num_kv_heads must divide"),
    (dict(kind="GQA", num_layers=1, num_heads=8, head_dim=4), "num_kv_heads must be an integer"),
    (dict(kind="GQA", num_layers=1, num_heads=8, head_dim=4, num_kv_heads=16), r"num_kv_heads must be an integer in"),
    (dict(kind="MLA", num_layers=1, num_heads=8, head_dim=4, kv_lora_rank=16), "qk_rope_head_dim must be"),
    (dict(kind="MHA", num_layers=0, num_heads=8, head_dim=4), "num_layers must be an integer >= 1"),
])
def test_bad_sizes_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        scale.elements_per_token(**kwargs)


def test_every_preset_cites_a_bibliography_entry():
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "references.bib").read_text()))
    for preset in scale.PRESETS.values():
        assert preset.cite in keys, preset.name
        assert preset.where


def test_deepseek_v2_caches_what_gqa_with_two_and_a_quarter_groups_would():
    """DeepSeek-V2, section 2.1.4: MLA's cache equals GQA's with 2.25 groups, (d_c + d_R) l = 9/2 d_h l."""
    ds = scale.PRESETS["DeepSeek-V2"]
    assert ds.elements_per_token() == 9 * ds.head_dim * ds.num_layers // 2
    mha = ds.as_kind("MHA")
    assert mha.elements_per_token() / ds.elements_per_token() == pytest.approx(2 * 128 / 4.5)


def test_presets_match_the_configuration_classes_of_transformers():
    transformers = pytest.importorskip("transformers")
    P = scale.PRESETS
    llama = transformers.LlamaConfig()  # defaults: LLaMA 7B
    assert (llama.num_hidden_layers, llama.num_attention_heads, llama.hidden_size // llama.num_attention_heads) == \
        (P["LLaMA 7B"].num_layers, P["LLaMA 7B"].num_heads, P["LLaMA 7B"].head_dim)
    mistral = transformers.MistralConfig()  # defaults: Mistral 7B
    assert (mistral.num_hidden_layers, mistral.num_attention_heads, mistral.num_key_value_heads, mistral.head_dim,
            mistral.sliding_window) == (32, 32, 8, 128, 4096) == \
        (P["Mistral 7B"].num_layers, P["Mistral 7B"].num_heads, P["Mistral 7B"].num_kv_heads,
         P["Mistral 7B"].head_dim, P["Mistral 7B"].window)
    falcon = transformers.FalconConfig()  # defaults: Falcon 7B
    assert falcon.multi_query and (falcon.num_hidden_layers, falcon.num_attention_heads,
                                   falcon.hidden_size // falcon.num_attention_heads) == (32, 71, 64)
    v3 = transformers.DeepseekV3Config()  # defaults: DeepSeek-V3
    assert (v3.num_hidden_layers, v3.num_attention_heads, v3.kv_lora_rank, v3.qk_rope_head_dim,
            v3.qk_nope_head_dim) == (61, 128, 512, 64, 128)
    p = P["DeepSeek-V3"]
    assert (p.num_layers, p.num_heads, p.kv_lora_rank, p.qk_rope_head_dim, p.head_dim) == (61, 128, 512, 64, 128)


def test_a_sliding_window_caps_the_cache():
    mistral = scale.PRESETS["Mistral 7B"]
    per_token = mistral.bytes_per_token(torch.bfloat16)
    assert per_token == 2 * 32 * 8 * 128 * 2 == 128 * 2**10
    assert mistral.cache_bytes(32768) == 4096 * per_token
    assert mistral.cache_bytes(32768, use_window=False) == 32768 * per_token
    assert mistral.cache_bytes(1000, batch=3) == 3000 * per_token


def test_decode_step_times_measures_every_layout_with_the_formula_bytes():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the tiny preset runs on 1: the provenance must say 1, not the restored 2
    try:
        result = scale.decode_step_times("tiny", progress=False)
        assert torch.get_num_threads() == 2  # restored after the run
    finally:
        torch.set_num_threads(before)
    p = result["provenance"]
    assert p["threads"] == p["sizes"]["threads"] == 1
    assert {"device", "device_name", "torch", "date", "git_commit", "sizes", "load_average_start"} <= set(p)
    rows = result["results"]
    assert {(r["layout"], r["context"]) for r in rows} == {(x, c) for x in scale.LAYOUTS for c in (64, 256)}
    s = p["sizes"]
    H, d, G = s["num_heads"], s["head_dim"], s["groups"]
    formula = {"GQA": scale.bytes_per_token("GQA", num_layers=1, num_heads=H, head_dim=d, num_kv_heads=G,
                                            dtype=torch.float32),
               "MQA": scale.bytes_per_token("MQA", num_layers=1, num_heads=H, head_dim=d, dtype=torch.float32),
               "MHA": scale.bytes_per_token("MHA", num_layers=1, num_heads=H, head_dim=d, dtype=torch.float32),
               "MLA": scale.bytes_per_token("MLA", num_layers=1, num_heads=H, head_dim=d, kv_lora_rank=4 * d,
                                            qk_rope_head_dim=d // 2, dtype=torch.float32)}
    for r in rows:
        assert r["cache_bytes_per_token"] == formula[r["layout"].split()[0]]
        assert r["ms_per_step"] > 0 and len(r["ms_rounds"]) == 1


def test_the_command_line_writes_its_result_and_keeps_what_it_finds(tmp_path):
    out = tmp_path / "kv.json"
    scale.main(["--preset", "tiny", "--contexts", "32", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["complete"] and len(result["results"]) == len(scale.LAYOUTS)
    assert not out.with_name(out.name + ".partial.jsonl").exists()
    with pytest.raises(SystemExit):  # an existing file is not replaced without --force
        scale.main(["--preset", "tiny", "--contexts", "32", "--out", str(out)])
    with pytest.raises(SystemExit):  # a context out of range is refused before any work
        scale.main(["--preset", "tiny", "--contexts", "0", "--out", str(tmp_path / "other.json")])
