"""What ``python -m relpos_core.bench`` measures: its cases, their inputs and the calls it times.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Every case comes
from ``relpos_core.registry.paths()`` and the scheme declarations (no hand-written
list): a new scheme or path is benchmarked as soon as the registry knows it, with the
distance parameter its declaration gives the preset's size. Four kinds of rows (``mode``):

* ``forward``: ``rp.attend(q, k, v, term, form=, backend=)`` for every registry path,
  bidirectional unless the path requires causality (Transformer-XL, xPos), plus the
  no-bias baselines ("none") both ways, so every ratio divides like by like;
* ``forward`` with ``block_skipping=False``: causal FlexAttention masked inside the
  score_mod (``rp.kernels.flex.attention(..., block_skipping=False)``), next to the same
  call with its BlockMask, at the preset's largest L;
* ``train``: forward and backward with gradients into q, k, v and the scheme's tables
  (the learnable T5 table of the H200 reference), for the preset's ``train_schemes``;
* ``module``: a Hugging Face module and the same module, same weights and inputs, with its
  attention computed by ``rp.attend`` (the schemes that declare a ``benchmark_module``);
  the outputs are compared before anything is timed.

Sign conventions: each scheme's own (its ``PositionTerm`` records it).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

import relpos_core.registry as registry
from relpos_core import schemes
from relpos_core.attend import attend
from relpos_core.budget import check_memory
from relpos_core.kernels import flex
from relpos_core.measure.analytic import analytic_bytes, peak_bytes
from relpos_core.positions import resolve_positions

__all__ = ["Case", "build_cases", "make_inputs", "make_call", "case_analytic_bytes", "distance_parameter",
           "module_schemes"]


def module_schemes() -> list[str]:
    """The schemes whose declaration has a Hugging Face module to benchmark against."""
    return [name for name, s in schemes.SCHEMES.items() if s.benchmark_module is not None]


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
            return f"{self.scheme}: Hugging Face module"
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


def distance_parameter(scheme: str, preset: dict, L: int) -> int | None:
    """The value of a scheme's distance parameter in this preset at length L (its declaration says)."""
    distance = schemes.lookup(scheme).scheme.distance
    return None if distance is None else distance.for_preset(preset["size"], L)


def build_cases(preset: dict, *, include_modules: bool | None = None) -> list[Case]:
    """Every case of a preset, from ``registry.paths()`` and the declarations."""
    cases = []
    largest = (max(preset["lengths"]),)
    base = schemes.baseline()  # no position at all (``has_positions=False``)
    for path in registry.paths():
        causal = path.causal == "required"
        skip = True if (path.backend == "flex" and causal) else None
        cases.append(Case(path.scheme, path.form, path.backend, causal=causal, block_skipping=skip))
        if path.scheme == base:  # the causal baselines (decoder-only paths and block skipping divide by them)
            cases.append(Case(base, path.form, path.backend, causal=True,
                              block_skipping=True if path.backend == "flex" else None))
    for scheme, form in preset.get("block_skip_cases", ()):
        if Case(scheme, form, "flex", causal=True, block_skipping=True) not in cases:
            cases.append(Case(scheme, form, "flex", causal=True, block_skipping=True, lengths=largest,
                              note="causal, BlockMask: tiles above the diagonal skipped"))
        cases.append(Case(scheme, form, "flex", causal=True, block_skipping=False, lengths=largest,
                          note="causal masked inside the score_mod: every tile computed"))
    for scheme in preset.get("train_schemes", ()):
        for path in registry.paths(scheme) + registry.paths(base):
            if path.form in preset.get("train_forms", ("gather", "none")):
                note = "forward + backward into q, k, v and the scheme's tables"
                if path.backend == "flex":
                    note += "; FlexAttention has no backward on CPU (torch raises): SDPA ran instead there"
                case = Case(path.scheme, path.form, path.backend, mode="train", note=note)
                if case not in cases:
                    cases.append(case)
    if include_modules if include_modules is not None else preset.get("modules", False):
        for scheme in module_schemes():
            cases.append(Case(scheme, "hf", "transformers", mode="module",
                              note="the module a user would otherwise run, projections included"))
            for path in registry.paths(scheme):  # the dense and the fused path that compute its term per offset
                if path.form == "gather" and path.backend in ("sdpa", "flex"):
                    cases.append(Case(scheme, path.form, path.backend, mode="module",
                                      note="the same module and weights, attention by rp.attend"))
    return cases


def make_inputs(preset: dict, L: int, device: torch.device, dtype: torch.dtype, seed: int = 0) -> dict:
    """q, k, v (B, H, L, d) and the Hugging Face hidden states (B, L, H d), from a seeded CPU generator."""
    g = torch.Generator(device="cpu").manual_seed(seed + L)
    B, H, d = preset["B"], preset["H"], preset["d"]

    def rnd(*shape):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dtype)

    return dict(q=rnd(B, H, L, d), k=rnd(B, H, L, d), v=rnd(B, H, L, d), hidden=rnd(B, L, H * d), generator=g)


def _term(case: Case, preset: dict, L: int, x: dict, device, dtype):
    return registry.example_term(case.scheme, num_heads=preset["H"], head_dim=preset["d"],
                                 k=distance_parameter(case.scheme, preset, L), device=device, dtype=dtype,
                                 generator=x["generator"])


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
    return analytic_bytes(case.scheme, case.form, case.backend, k=k or 1, **sizes)


def make_call(case: Case, preset: dict, L: int, x: dict, device: torch.device, dtype: torch.dtype, *,
              compiled: bool, kernel_options: dict | None = None):
    """(fn, info): ``fn()`` runs the case once; ``info`` records what ran (notes, output checks)."""
    info: dict = {}
    if case.mode == "module":
        return _module_call(case, preset, x, device, dtype, compiled=compiled, kernel_options=kernel_options), info
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

_MODULES: dict = {}


def _module(scheme: str, preset: dict, device, dtype=torch.float32, generator=None):
    """The scheme's declared benchmark module, built once per (scheme, sizes, device, dtype)."""
    key = (scheme, preset["H"], preset["d"], preset["size"], str(device), str(dtype))
    if key not in _MODULES:
        k = distance_parameter(scheme, preset, max(preset["lengths"]))
        build = schemes.SCHEMES[scheme].load_benchmark_module()
        _MODULES[key] = build(preset["H"], preset["d"], k, device=device, dtype=dtype, generator=generator)
    return _MODULES[key]


def _module_call(case: Case, preset: dict, x: dict, device, dtype, *, compiled, kernel_options):
    module = _module(case.scheme, preset, device, dtype, x["generator"])
    hidden = x["hidden"]  # (B, L, H d)
    if case.backend == "transformers":
        # Hugging Face's eager module builds its bias and scores per pair, as the naive eager path does: the
        # guard counts that path's bytes for it before it runs (a lower bound: the module's own copies add more)
        B, L = hidden.shape[0], hidden.shape[1]
        need = analytic_bytes(case.scheme, "naive", "eager", B=B, H=preset["H"], Lq=L, Lk=L, d=preset["d"],
                              k=distance_parameter(case.scheme, preset, L) or 1, dtype=dtype, device_type=device.type)
        check_memory(need, what=module.label, shape=(B, preset["H"], L, L), dtype=dtype,
                     alternative="the same module with its attention on rp.attend (the module rows' other paths)")
        return lambda: module.hf(hidden)  # (B, L, H d)
    opts = dict(compiled=compiled, kernel_options=kernel_options) if case.backend == "flex" else {}

    def fn():
        q, k, v, term = module.prepare(hidden)  # (B, H, L, d) each, the module's term
        ctx = attend(q, k, v, term, form=case.form, backend=case.backend, **opts)  # (B, H, L, d)
        return module.finish(ctx, hidden)  # (B, L, H d)
    return fn
