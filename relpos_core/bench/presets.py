"""The benchmark's presets: sizes, lengths, clocks and what each measures.

Book: "What it costs" (chapters/11_what_it_costs.ipynb).

* ``quick`` (tests): tiny sizes, two lengths, FlexAttention's eager reference, nothing compiled;
* ``cpu`` (the default without ``--gpu``): four lengths for every path, FlexAttention
  compiled, one intra-op thread, process CPU time as the clock (on a shared machine
  wall-clock time also counts the time other processes held the core);
* ``gpu`` (``--gpu``): L up to 16384, B=1, H=16, d=64, bf16, CUDA events;
* ``peers``: relpos_core against x-transformers, rotary-embedding-torch and Hugging Face
  (``relpos_core.bench.peers``), L = 256, 1024, 2048, B=1, H=8, d=64, float32, one thread;
  ``peers_quick``: the same rows at a tiny shape (tests).

A preset has a ``size`` ("small", "medium", "large"): each scheme's declaration says what
value of its distance parameter a preset of that size uses (``Distance.for_preset``), and
which presets time its training step or FlexAttention's block skipping on it
(``Bench``), so no preset lists schemes.
"""
from __future__ import annotations

import json

from relpos_core import schemes
from relpos_core.attend import choose_form
from relpos_core.budget import MAX_BUDGET

__all__ = ["SCHEMA", "MAX_LENGTH", "PRESETS", "FLEX_FALLBACK_OPTIONS", "resolve_preset"]

SCHEMA = "relpos-bench/3"
MAX_LENGTH = 32768  # twice the GPU preset's largest L



def _train_schemes(size: str) -> list[str]:
    """The schemes whose declarations time their training step at ``size`` (``Bench.train``)."""
    return [s.name for s in schemes.SCHEMES.values() if size in s.bench.train]


def _block_skip_cases(size: str) -> list[tuple[str, str]]:
    """(scheme, its default form) for each declaration timing block skipping at ``size``."""
    terms = {s.name: schemes.lookup(s.name).example(2, 8, device="meta")
             for s in schemes.SCHEMES.values() if size in s.bench.block_skip}
    return [(name, "none" if term is None else choose_form(term, None)) for name, term in terms.items()]


PRESETS = {
    "quick": dict(size="small", B=1, H=2, d=8, lengths=[16, 32], dtype="float32", budget=64 * 2**20,
                  compiled=False, threads=1, clock="cpu", repeats=3, min_burst_ms=0.3, retries=1,
                  spread_threshold=0.5, monotonic_retries=0,
                  # FlexAttention's eager reference still traces each score_mod with dynamo (~1-3 s):
                  # one flex row (no bias), at the largest length only
                  flex_only=[[schemes.baseline(), "none", False]], flex_lengths=[32],
                  block_skip_cases=_block_skip_cases("small"), train_schemes=_train_schemes("small"), modules=False),
    "cpu": dict(size="medium", B=1, H=4, d=32, lengths=[128, 256, 512, 1024], dtype="float32", budget=2**30,
                compiled=True, threads=1, clock="cpu", repeats=5, min_burst_ms=20.0, retries=2,
                spread_threshold=0.20, monotonic_retries=2,
                block_skip_cases=_block_skip_cases("medium"), train_schemes=_train_schemes("medium"), modules=True),
    "gpu": dict(size="large", B=1, H=16, d=64, lengths=[1024, 2048, 4096, 8192, 16384], dtype="bfloat16",
                budget=40 * 2**30, compiled=True, threads=None, clock="cuda", repeats=5, min_burst_ms=5.0,
                retries=2, spread_threshold=0.10, monotonic_retries=2,
                block_skip_cases=_block_skip_cases("large"),
                train_schemes=_train_schemes("large"), train_lengths=[1024, 2048, 4096], modules=True,
                module_lengths=[1024, 2048, 4096]),
    # relpos_core side by side with x-transformers, rotary-embedding-torch and Hugging Face
    # (relpos_core.bench.peers; a row for every scheme a peer implements): a DeBERTa-v3-sized
    # layer (H=8, d=64, S=256 log buckets)
    "peers": dict(peers=True, B=1, H=8, d=64, lengths=[256, 1024, 2048], dtype="float32", budget=2**32,
                  threads=1, repeats=5, min_burst_ms=20.0, spread_threshold=0.20, flex=True, compiled=True,
                  att_span=256, modes=["forward", "train"]),
    "peers_quick": dict(peers=True, B=1, H=2, d=8, lengths=[16], dtype="float32", budget=2**28, threads=1,
                        repeats=2, min_burst_ms=0.2, spread_threshold=0.5, flex=False, compiled=False,
                        att_span=8, modes=["forward", "train"]),
}
# Flex kernel options to try, in order, when a compiled kernel runs out of GPU shared memory
# (the H200 reference needed num_stages=2 forward and 64 x 64 blocks, one stage, for backward).
FLEX_FALLBACK_OPTIONS = (None, {"num_stages": 2}, {"BLOCK_M": 64, "BLOCK_N": 64, "num_stages": 1})


def resolve_preset(preset: str, **overrides) -> dict:
    """A preset's settings with overrides (``lengths``, ``budget``, ``threads``, ``repeats``,
    ``spread_threshold``, ``modules``, ``seed``) applied; validated."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {list(PRESETS)}, got {preset!r}")
    p = json.loads(json.dumps(PRESETS[preset]))  # a deep copy
    p["name"] = preset
    for key, value in overrides.items():
        if value is not None:
            p[key] = value
    lengths = p["lengths"]
    if not lengths or any(not isinstance(L, int) or isinstance(L, bool) or not 1 <= L <= MAX_LENGTH for L in lengths):
        raise ValueError(f"lengths must be integers in [1, {MAX_LENGTH}], got {lengths}")
    p["lengths"] = sorted(set(lengths))
    if p["budget"] is not None and not 1 <= p["budget"] <= MAX_BUDGET:
        raise ValueError(f"budget must be a number of bytes in [1, 2**62] or None, got {p['budget']}")
    return p
