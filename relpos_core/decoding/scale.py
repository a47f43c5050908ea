"""The KV cache at the scale of real models: bytes per token of MHA, MQA, GQA and MLA, published
configurations as presets, and a decode-step measurement of each cache layout.

Book: "The KV cache at the scale of real models" (chapters/09_kv_cache_at_scale.ipynb).

Per token and layer a cache keeps (elements; times the dtype's bytes):

* multi-head attention (MHA, Vaswani et al. 2017): a key and a value per head, 2 H d_h;
* multi-query attention (MQA, Shazeer 2019): one key and one value for all heads, 2 d_h;
* grouped-query attention (GQA, Ainslie et al. 2023): one per group of heads, 2 G d_h;
* multi-head latent attention (MLA, DeepSeek-AI 2024): one latent and one shared rotary
  key, d_c + d_R (``relpos_core.mla``).

``PRESETS``: published configurations of real models, each with the paper (a key of
references.bib) and the table or section it comes from. ``decode_step_times`` times one
attention layer's decode step (one new query against a cache of ``context`` tokens) for
every layout, on one device, in one run; ``python -m relpos_core.decoding --scale`` runs it
with provenance (``--preset gpu`` on a CUDA device; ``tools/gpu_check.sh``). Sign
conventions: not applicable (sizes and times only).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int
from relpos_core.cli import integer_in
from relpos_core.kernels.rotary import rotate
from relpos_core.measure.timing import measure_time
from relpos_core.mla import MLAConfig, MLAttention
from relpos_core.measure.device import check_device
from relpos_core.outputs import Output
from relpos_core.provenance import git_commit, load_average, machine
from relpos_core.terms import Rotary

__all__ = ["KINDS", "CACHE_DTYPES", "elements_per_token", "bytes_per_token", "ModelPreset", "PRESETS",
           "LAYOUTS", "MEASURE_PRESETS", "decode_step_times", "main"]

KINDS = ("MHA", "MQA", "GQA", "MLA")
CACHE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def elements_per_token(kind: str, *, num_layers: int, num_heads: int, head_dim: int, num_kv_heads: int | None = None,
                       kv_lora_rank: int | None = None, qk_rope_head_dim: int | None = None) -> int:
    """Numbers a cache keeps per token, all layers together (module docstring).

    ``num_kv_heads``: GQA's groups G (1 <= G <= num_heads, dividing it); ``kv_lora_rank`` and
    ``qk_rope_head_dim``: MLA's d_c and d_R. ``head_dim`` is d_h (MLA: not cached).
    """
    kind = check_choice("kind", kind, KINDS)
    L = check_positive_int("num_layers", num_layers)
    H = check_positive_int("num_heads", num_heads)
    d = check_positive_int("head_dim", head_dim)
    if kind == "MHA":
        return 2 * L * H * d
    if kind == "MQA":
        return 2 * L * d
    if kind == "GQA":
        G = check_int("num_kv_heads", num_kv_heads, min_value=1, max_value=H)
        if H % G:
            raise ValueError(f"num_kv_heads must divide num_heads = {H} (each group shares one key and value), "
                             f"got {G}")
        return 2 * L * G * d
    d_c = check_positive_int("kv_lora_rank", kv_lora_rank)
    d_r = check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
    return L * (d_c + d_r)


def bytes_per_token(kind: str, *, dtype=torch.bfloat16, **sizes) -> int:
    """``elements_per_token(kind, **sizes)`` times the bytes of one ``dtype`` element."""
    dtype = check_choice("dtype", dtype, CACHE_DTYPES + (torch.float64,))
    return elements_per_token(kind, **sizes) * dtype.itemsize


@dataclass(frozen=True)
class ModelPreset:
    """A published attention configuration and where it is published (``cite``: references.bib, ``where``).

    ``window``: a sliding window whose cache holds at most that many tokens (Mistral's
    rolling buffer), else None.
    """

    name: str
    kind: str
    num_layers: int
    num_heads: int
    head_dim: int
    cite: str
    where: str
    num_kv_heads: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    window: int | None = None

    def __post_init__(self):
        self.elements_per_token()  # checks the sizes

    def sizes(self) -> dict:
        return dict(num_layers=self.num_layers, num_heads=self.num_heads, head_dim=self.head_dim,
                    num_kv_heads=self.num_kv_heads, kv_lora_rank=self.kv_lora_rank,
                    qk_rope_head_dim=self.qk_rope_head_dim)

    def elements_per_token(self) -> int:
        return elements_per_token(self.kind, **self.sizes())

    def bytes_per_token(self, dtype=torch.bfloat16) -> int:
        return bytes_per_token(self.kind, dtype=dtype, **self.sizes())

    def cache_bytes(self, context: int, *, batch: int = 1, dtype=torch.bfloat16, use_window: bool = True) -> int:
        """Bytes of the cache of ``batch`` sequences of ``context`` tokens (at most ``window`` kept)."""
        context = check_positive_int("context", context)
        kept = min(context, self.window) if (use_window and self.window) else context
        return check_positive_int("batch", batch) * kept * self.bytes_per_token(dtype)

    def as_kind(self, kind: str, **sizes) -> "ModelPreset":
        """The same layers, heads and head size with another attention (GQA: 8 groups, or the
        largest divisor of the head count below 8; MLA: DeepSeek-V2's ratios d_c = 4 d_h and
        d_R = d_h / 2), unless ``sizes`` say otherwise."""
        kind = check_choice("kind", kind, KINDS)
        defaults = dict(num_kv_heads=None, kv_lora_rank=None, qk_rope_head_dim=None)
        if kind == "GQA":
            defaults["num_kv_heads"] = max(g for g in range(1, 9) if self.num_heads % g == 0)
        if kind == "MLA":
            defaults.update(kv_lora_rank=4 * self.head_dim, qk_rope_head_dim=self.head_dim // 2)
        return dataclasses.replace(self, name=f"{self.name} as {kind}", kind=kind, window=None,
                                   **{**defaults, **sizes})


PRESETS: dict[str, ModelPreset] = {p.name: p for p in [
    ModelPreset("GPT-3 175B", "MHA", 96, 96, 128, "brown2020gpt3", "Table 2.1"),
    ModelPreset("LLaMA 7B", "MHA", 32, 32, 128, "touvron2023llama", "Table 2 (dimension 4096, 32 heads)"),
    ModelPreset("PaLM 540B", "MQA", 118, 48, 256, "chowdhery2023palm", "Table 1 and section 2 (multi-query)"),
    ModelPreset("Falcon 7B", "MQA", 32, 71, 64, "almazrouei2023falcon",
                "Falcon-7B config (4544 = 71 x 64, multi-query)"),
    ModelPreset("Mistral 7B", "GQA", 32, 32, 128, "jiang2023mistral", "Table 1 (window 4096)", num_kv_heads=8,
                window=4096),
    ModelPreset("Llama 3 8B", "GQA", 32, 32, 128, "grattafiori2024llama3", "Table 3", num_kv_heads=8),
    ModelPreset("Llama 3.1 405B", "GQA", 126, 128, 128, "grattafiori2024llama3", "Table 3", num_kv_heads=8),
    ModelPreset("DeepSeek-V2", "MLA", 60, 128, 128, "deepseekai2024v2", "section 3.1.2", kv_lora_rank=512,
                qk_rope_head_dim=64),
    ModelPreset("DeepSeek-V3", "MLA", 61, 128, 128, "deepseekai2024v3", "section 4.2", kv_lora_rank=512,
                qk_rope_head_dim=64),
]}


# -- measuring a decode step ------------------------------------------------------------------
LAYOUTS = ("MHA (rotated keys)", "MHA (unrotated keys)", "GQA", "MQA", "MLA (absorbed)", "MLA (expanded)")
MEASURE_PRESETS = {
    "tiny": dict(num_heads=4, head_dim=16, groups=2, contexts=[64, 256], dtype="float32", warmup=1, iters=2,
                 repeats=1, threads=1),
    "cpu": dict(num_heads=16, head_dim=64, groups=4, contexts=[1024, 4096, 16384], dtype="float32", warmup=2,
                iters=5, repeats=3, threads=1),
    "gpu": dict(num_heads=32, head_dim=128, groups=8, contexts=[4096, 16384, 65536, 131072], dtype="bfloat16",
                warmup=5, iters=50, repeats=3, threads=None),
}


def _layout_step(layout: str, p: dict, context: int, device, dtype, g: torch.Generator):
    """A callable running one decode step's attention for ``layout`` against ``context`` cached tokens
    (the new token's key and value included), and the cache's bytes. Only the attention over the cache is timed: the
    projections of the new token cost the same for every layout of the same model."""
    H, d, G = p["num_heads"], p["head_dim"], p["groups"]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    if layout.startswith("MLA"):  # DeepSeek-V2's ratios: d_c = 4 d_h, d_R = d_h / 2
        cfg = MLAConfig(d_model=H * d, num_heads=H, kv_lora_rank=4 * d, qk_nope_head_dim=d, qk_rope_head_dim=d // 2,
                        v_head_dim=d)
        layer = MLAttention(cfg).to(device=device, dtype=dtype).eval()
        latent, k_rope = rand(1, context, cfg.kv_lora_rank), rand(1, context, cfg.qk_rope_head_dim)
        q_nope, q_rope = rand(1, H, 1, d), rand(1, H, 1, d // 2)
        absorbed = layout == "MLA (absorbed)"

        def step():
            with torch.no_grad():
                layer.attend(q_nope, q_rope, latent, k_rope, absorbed=absorbed)

        return step, (latent.numel() + k_rope.numel()) * latent.element_size()
    kv_heads = {"GQA": G, "MQA": 1}.get(layout, H)
    k, v = rand(1, kv_heads, context, d), rand(1, kv_heads, context, d)
    q = rand(1, H, 1, d)
    rotary, positions = Rotary(), torch.arange(context, device=device)
    unrotated = layout == "MHA (unrotated keys)"

    def step():
        with torch.no_grad():
            keys = rotate(k, positions, rotary) if unrotated else k  # every kept key turned at read time
            sdpa(q, keys, v, enable_gqa=kv_heads != H)

    return step, (k.numel() + v.numel()) * k.element_size()


def decode_step_times(preset: str = "cpu", *, device=None, contexts=None, layouts=None, progress: bool = True,
                      on_row=None, seed: int = 0) -> dict:
    """Milliseconds of one attention layer's decode step for every layout and context; with provenance.

    Every layout has H query heads of size d_h (MLA: d_c = 4 d_h, d_R = d_h / 2, DeepSeek-V2's
    ratios); one new query attends to ``context`` cached tokens. The layouts of one context
    are timed in rounds side by side, each keeping its best round. ``on_row(row)`` is called
    with every finished row (a command line keeps it at once).
    """
    check_choice("preset", preset, tuple(MEASURE_PRESETS))
    p = dict(MEASURE_PRESETS[preset])
    if contexts is not None:
        p["contexts"] = [check_positive_int("contexts[i]", int(c)) for c in contexts]
    layouts = list(LAYOUTS) if layouts is None else [check_choice("layouts[i]", x, LAYOUTS) for x in layouts]
    device = torch.device(device if device is not None else ("cuda" if preset == "gpu" else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False: use preset 'cpu' or 'tiny'")
    dtype = getattr(torch, p["dtype"])
    previous = torch.get_num_threads()
    if p["threads"] is not None and device.type == "cpu":
        torch.set_num_threads(p["threads"])
    threads_used = torch.get_num_threads()  # read before the finally below restores it
    load_start, start, commit = load_average(), time.perf_counter(), git_commit()
    g = torch.Generator().manual_seed(seed)
    results = []
    try:
        for context in p["contexts"]:
            cases = [(layout, *_layout_step(layout, p, context, device, dtype, g)) for layout in layouts]
            rounds = {layout: [] for layout in layouts}
            for r in range(p["repeats"]):
                for layout, step, _ in cases:
                    rounds[layout].append(measure_time(step, warmup=p["warmup"] if r == 0 else 0, iters=p["iters"],
                                                       device=device))
            for layout, _, nbytes in cases:
                row = dict(layout=layout, context=context, ms_per_step=min(rounds[layout]), ms_rounds=rounds[layout],
                           cache_bytes=nbytes, cache_bytes_per_token=nbytes / context)
                results.append(row)
                if on_row is not None:
                    on_row(row)
            if progress:
                print(f"context {context}: {len(layouts)} layouts timed", flush=True)
            del cases
            if device.type == "cuda":
                torch.cuda.empty_cache()
    finally:
        torch.set_num_threads(previous)
    provenance = dict(**machine(device, commit=commit), preset=preset, sizes=p, threads=threads_used,
                      load_average_start=load_start, load_average_end=load_average(),
                      wall_seconds=round(time.perf_counter() - start, 1),
                      timing=("per context, every layout timed once per round (repeats rounds, side by side); a "
                              "round is the mean of iters steps (warmup calls before round 1); a layout's time is "
                              "its best round; one layer, batch 1, one new query against `context` cached tokens "
                              "(CUDA events on GPU, perf_counter on CPU)"))
    return dict(provenance=provenance, results=results, complete=True)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m relpos_core.decoding --scale",
                                     description="Time one decode step of every cache layout (MHA, GQA, MQA, MLA).")
    parser.add_argument("--preset", default="cpu", choices=sorted(MEASURE_PRESETS))
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the preset's)")
    parser.add_argument("--contexts", type=integer_in(1, 2**22, "cached tokens"), nargs="+", default=None)
    parser.add_argument("--out", default=None, help="JSON file (default: a new file under ./relpos-results/)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if args.device is not None:  # checked before the partial file is written (it would block the same --out)
        try:
            args.device = str(check_device(args.device))
        except ValueError as err:
            parser.error(f"argument --device: {err}")
    output = Output.for_command_line(parser, args.out, tool=f"kv-scale-{args.preset}", force=args.force)
    output.begin(dict(preset=args.preset, command=" ".join(sys.argv)))
    rows = []

    def keep(row):
        rows.append(row)
        output.add(row)

    try:
        result = decode_step_times(args.preset, device=args.device, contexts=args.contexts, on_row=keep)
    except KeyboardInterrupt:
        result = dict(provenance=machine(args.device or "cpu"), results=rows, complete=False)
        output.finish(result)
        print(f"\ninterrupted: wrote the {len(rows)} finished row(s) to {output.path} (complete: false)")
        raise SystemExit(130)
    output.finish(result)
    print(f"wrote {output.path}")
    return result

