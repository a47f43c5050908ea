"""What ``python -m relpos_core.bench`` measures: its cases, their inputs and the calls it times.

Book: chapter 8, "What it costs" (chapters/08_what_it_costs.ipynb). Every case comes
from ``relpos_core.registry.paths()`` (no hand-written list): a new scheme or path is
benchmarked as soon as the registry knows it. Four kinds of rows (``mode``):

* ``forward``: ``rp.attend(q, k, v, term, form=, backend=)`` for every registry path,
  bidirectional unless the path requires causality (Transformer-XL), plus the no-bias
  baselines ("none") both ways, so every ratio divides like by like;
* ``forward`` with ``block_skipping=False``: causal FlexAttention masked inside the
  score_mod (``rp.kernels.flex.attention(..., block_skipping=False)``), next to the same
  call with its BlockMask, at the preset's largest L;
* ``train``: forward and backward with gradients into q, k, v and the scheme's tables
  (the learnable T5 table of the H200 reference), for the preset's ``train_schemes``;
* ``module``: a Hugging Face module (``T5Attention``, eager; one ``DebertaV2Layer``) and
  the same module, same weights and inputs, with its attention computed by ``rp.attend``
  on a few relpos_core paths; the outputs are compared before anything is timed.

Sign conventions: each scheme's own (its ``PositionTerm`` records it).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

import relpos_core.registry as registry
from relpos_core.attend import attend
from relpos_core.kernels import flex
from relpos_core.measure.analytic import analytic_bytes, peak_bytes
from relpos_core.positions import resolve_positions

__all__ = ["Case", "build_cases", "make_inputs", "make_call", "case_analytic_bytes", "distance_parameter",
           "MODULE_PATHS"]

# relpos_core paths that stand in for the Hugging Face module of a scheme ("module" rows)
MODULE_PATHS = {
    "t5": (("gather", "sdpa"), ("gather", "flex")),
    "deberta": (("gather", "sdpa"), ("gather", "flex")),
}
HF_LABELS = {"t5": "Hugging Face T5Attention (eager)", "deberta": "Hugging Face DebertaV2Layer (eager, one layer)"}


@dataclass(frozen=True)
class Case:
    """One curve of the benchmark: a path in one mode, measured at every length."""

    scheme: str
    form: str
    backend: str
    mode: str = "forward"  # forward | train | module
    causal: bool = False
    block_skipping: bool | None = None  # flex + causal: BlockMask (True) or masked in the score_mod (False)
    lengths: tuple[int, ...] = ()  # empty: every length of the preset
    note: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        if self.backend == "transformers":
            return HF_LABELS[self.scheme]
        text = f"{self.scheme}: {self.form}/{self.backend}"
        if self.mode == "module":
            text += " (relpos_core in the module)"
        if self.mode == "train":
            text += " (forward + backward)"
        if self.causal:
            text += ", causal"
        if self.block_skipping is False:
            text += ", no block skipping"
        return text


def distance_parameter(scheme: str, preset: dict, L: int) -> int:
    """The ``k`` of ``registry.example_term`` for a scheme at length L (Transformer-XL: one row per distance)."""
    if scheme == "transformer_xl":
        return L
    return int(preset["k"].get(scheme, 1))


def build_cases(preset: dict, *, include_modules: bool | None = None) -> list[Case]:
    """Every case of a preset, from ``registry.paths()``."""
    cases = []
    largest = (max(preset["lengths"]),)
    for path in registry.paths():
        causal = path.causal == "required"
        skip = True if (path.backend == "flex" and causal) else None
        cases.append(Case(path.scheme, path.form, path.backend, causal=causal, block_skipping=skip))
        if path.scheme == "none":  # the causal baselines (Transformer-XL and the block-skipping rows divide by them)
            cases.append(Case("none", path.form, path.backend, causal=True,
                              block_skipping=True if path.backend == "flex" else None))
    for scheme, form in preset.get("block_skip_cases", ()):
        if Case(scheme, form, "flex", causal=True, block_skipping=True) not in cases:
            cases.append(Case(scheme, form, "flex", causal=True, block_skipping=True, lengths=largest,
                              note="causal, BlockMask: tiles above the diagonal skipped"))
        cases.append(Case(scheme, form, "flex", causal=True, block_skipping=False, lengths=largest,
                          note="causal masked inside the score_mod: every tile computed"))
    for scheme in preset.get("train_schemes", ()):
        for path in registry.paths(scheme) + registry.paths("none"):
            if path.form in preset.get("train_forms", ("gather", "none")):
                note = "forward + backward into q, k, v and the scheme's tables"
                if path.backend == "flex":
                    note += "; FlexAttention has no backward on CPU (torch raises): SDPA ran instead there"
                case = Case(path.scheme, path.form, path.backend, mode="train", note=note)
                if case not in cases:
                    cases.append(case)
    if include_modules if include_modules is not None else preset.get("modules", False):
        for scheme, paths in MODULE_PATHS.items():
            cases.append(Case(scheme, "hf", "transformers", mode="module",
                              note="the module a user would otherwise run, projections included"))
            for form, backend in paths:
                cases.append(Case(scheme, form, backend, mode="module",
                                  note="the same module and weights, attention by rp.attend"))
    # a flex case at one length only is kept only where it is compiled anyway (block-skipping rows)
    return cases


def make_inputs(preset: dict, L: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> dict:
    """q, k, v (B, H, L, d) and the Hugging Face hidden states (B, L, H d), from a seeded CPU generator."""
    g = torch.Generator(device="cpu").manual_seed(seed + L)
    B, H, d = preset["B"], preset["H"], preset["d"]

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    return dict(q=rnd(B, H, L, d), k=rnd(B, H, L, d), v=rnd(B, H, L, d), hidden=rnd(B, L, H * d), generator=g)


def _term(case: Case, preset: dict, L: int, x: dict, device, dtype):
    k = distance_parameter(case.scheme, preset, L)
    return registry.example_term(case.scheme, num_heads=preset["H"], head_dim=preset["d"], k=k, device=device,
                                 dtype=dtype, generator=x["generator"])


def case_analytic_bytes(case: Case, preset: dict, L: int, dtype: torch.dtype, device: torch.device,
                        compiled: bool) -> int | None:
    """The analytic peak of a forward row (None for train and module rows: no ledger for those)."""
    if case.mode != "forward":
        return None
    k = distance_parameter(case.scheme, preset, L)
    sizes = dict(B=preset["B"], H=preset["H"], Lq=L, Lk=L, d=preset["d"], dtype=dtype, causal=case.causal,
                 device_type=device.type)
    if case.backend == "flex" and not compiled:
        term = registry.example_term(case.scheme, num_heads=preset["H"], head_dim=preset["d"], k=k,
                                     device="meta", dtype=dtype)
        return peak_bytes(term, case.form, case.backend, compiled=False, **sizes)
    return analytic_bytes(case.scheme, case.form, case.backend, k=k, **sizes)


def make_call(case: Case, preset: dict, L: int, x: dict, device: torch.device, dtype: torch.dtype, *,
              compiled: bool, kernel_options: dict | None = None):
    """(fn, info): ``fn()`` runs the case once; ``info`` records what ran (notes, output checks)."""
    info: dict = {}
    if case.mode == "module":
        return _module_call(case, preset, L, x, device, dtype, compiled=compiled,
                            kernel_options=kernel_options, info=info), info
    q, k, v = x["q"], x["k"], x["v"]
    term = _term(case, preset, L, x, device, dtype)
    opts = dict(compiled=compiled, kernel_options=kernel_options) if case.backend == "flex" else {}
    if case.block_skipping is False:
        pos = resolve_positions(L, L, device=device)

        def fn():
            return flex.attention(q, k, v, term, form=case.form, pos=pos, causal=True, compiled=compiled,
                                  kernel_options=kernel_options, block_skipping=False)  # (B, H, L, d)
        return fn, info
    if case.mode == "forward":
        def fn():
            return attend(q, k, v, term, form=case.form, backend=case.backend, causal=case.causal, **opts)
        return fn, info
    # train: gradients into q, k, v and every table of the term
    qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    learnable = [t.requires_grad_(True) for _, t in term.tensors() if t.is_floating_point()]
    leaves = [qg, kg, vg] + learnable

    def fn():
        with torch.enable_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", flex.FlexCPUBackwardWarning)
            out = attend(qg, kg, vg, term, form=case.form, backend=case.backend, causal=case.causal, **opts)
            out.float().sum().backward()
        if any(issubclass(w.category, flex.FlexCPUBackwardWarning) for w in caught):
            info["ran_instead"] = "sdpa (FlexCPUBackwardWarning: no FlexAttention backward on CPU)"
        for t in leaves:
            t.grad = None
        return None
    return fn, info


# ----------------------------------------------------------------------------- Hugging Face modules


def _hf_t5(preset: dict, device, dtype):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    H, d = preset["H"], preset["d"]
    cfg = T5Config(d_model=H * d, d_kv=d, num_heads=H, relative_attention_num_buckets=32,
                   relative_attention_max_distance=int(preset["k"]["t5"]), dropout_rate=0.0, is_decoder=False)
    cfg._attn_implementation = "eager"
    return T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0).to(device=device, dtype=dtype).eval()


def _hf_deberta(preset: dict, device, dtype):
    from transformers import DebertaV2Config
    from transformers.models.deberta_v2.modeling_deberta_v2 import DebertaV2Layer

    H, d, S = preset["H"], preset["d"], int(preset["k"]["deberta"])
    cfg = DebertaV2Config(hidden_size=H * d, num_attention_heads=H, intermediate_size=4 * H * d,
                          relative_attention=True, position_buckets=S, max_relative_positions=2 * S,
                          pos_att_type=["c2p", "p2c"], share_att_key=True, hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    return DebertaV2Layer(cfg).to(device=device, dtype=dtype).eval()


_MODULES: dict = {}


def hf_module(scheme: str, preset: dict, device, dtype):
    """The Hugging Face module of a scheme, built once per (scheme, sizes) from a config (random weights)."""
    key = (scheme, preset["H"], preset["d"], str(device), str(dtype))
    if key not in _MODULES:
        torch.manual_seed(0)
        _MODULES[key] = (_hf_t5 if scheme == "t5" else _hf_deberta)(preset, device, dtype)
    return _MODULES[key]


def _heads(x: torch.Tensor, H: int) -> torch.Tensor:  # (B, L, H d) -> (B, H, L, d)
    B, L, D = x.shape
    return x.view(B, L, H, D // H).transpose(1, 2)


def _module_call(case: Case, preset: dict, L: int, x: dict, device, dtype, *, compiled, kernel_options, info):
    from relpos_core.schemes import deberta as rp_deberta
    from relpos_core.schemes import t5 as rp_t5

    H = preset["H"]
    hidden = x["hidden"]  # (B, L, H d)
    B = hidden.shape[0]
    module = hf_module(case.scheme, preset, device, dtype)
    opts = dict(compiled=compiled, kernel_options=kernel_options) if case.backend == "flex" else {}
    if case.scheme == "t5":
        if case.backend == "transformers":
            return lambda: module(hidden)[0]  # (B, L, H d)
        table = module.relative_attention_bias.weight.detach()  # (num_buckets, H)
        term = rp_t5.position_term(table, bidirectional=True, max_distance=module.relative_attention_max_distance)

        def t5_fn():
            q, k, v = (_heads(p(hidden), H) for p in (module.q, module.k, module.v))  # (B, H, L, d) each
            out = attend(q, k, v, term, form=case.form, backend=case.backend, **opts)  # (B, H, L, d)
            return module.o(out.transpose(1, 2).reshape(B, L, -1))  # (B, L, H d)
        return t5_fn
    S = module.attention.self.pos_ebd_size
    if "rel" not in x:
        x["rel"] = torch.randn(2 * S, hidden.shape[-1], generator=x["generator"]).to(device=device, dtype=dtype)
        x["mask"] = torch.ones(B, 1, 1, L, dtype=torch.bool, device=device)  # no padding
    rel, mask = x["rel"], x["mask"]
    if case.backend == "transformers":
        return lambda: module(hidden, mask, rel_embeddings=rel)[0]  # (B, L, H d)
    sa = module.attention.self
    cfg = module.attention.self

    def deberta_fn():
        q, k, v = (_heads(p(hidden), H) for p in (sa.query_proj, sa.key_proj, sa.value_proj))  # (B, H, L, d)
        pos_key = _heads(sa.key_proj(rel)[None], H)[0]  # (H, 2S, d)
        pos_query = _heads(sa.query_proj(rel)[None], H)[0]  # (H, 2S, d)
        term = rp_deberta.position_term(pos_key, pos_query, att_span=S, position_buckets=cfg.position_buckets,
                                        max_relative_positions=cfg.max_relative_positions)
        ctx = attend(q, k, v, term, form=case.form, backend=case.backend, **opts)  # (B, H, L, d)
        ctx = ctx.transpose(1, 2).reshape(B, L, -1)  # (B, L, H d)
        attention_output = module.attention.output(ctx, hidden)  # (B, L, H d)
        return module.output(module.intermediate(attention_output), attention_output)  # (B, L, H d)
    return deberta_fn
