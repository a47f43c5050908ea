"""RoPE: rotary position embeddings, queries and keys rotated by angles proportional to position.

Paper: Su, Lu, Pan, Murtadha, Wen and Liu (2021), "RoFormer: Enhanced Transformer with
Rotary Position Embedding", arXiv:2104.09864.
Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb); RoPE in a KV
cache (rotated or unrotated keys) in "The KV cache" (chapters/08_the_kv_cache.ipynb).

Sign convention: ``key_minus_query``. Rotating q_i by angle i*theta and k_j by j*theta gives
``(R_i q)^T (R_j k) = q^T R((j - i) theta) k``: the score depends only on ``j - i``
(positive when the key comes after the query). Nothing is added to the scores, so RoPE
runs inside any attention kernel and any KV cache.

Two layouts pair the head dimensions differently (same maths, different order):

* ``"rotate_half"`` (GPT-NeoX, Hugging Face's models): dimension k pairs with k + d/2.
* ``"interleaved"`` (the paper, GPT-J, Meta's LLaMA reference code): dimension 2k pairs
  with 2k + 1. Hugging Face's LLaMA is rotate-half: its conversion script permutes the
  rows of W_q and W_k so that the scores stay the same.

Pair k turns at frequency ``theta_k = base^(-2k/d)``. The rotation itself is kernel
maths shared with xPos and the context-extension scalings: ``relpos_core.kernels.rotary``
(``apply_rope``, ``rope_cos_sin`` and ``rotate_half`` are re-exported here).

Past the training length ("RoPE past its training length",
chapters/07_rope_context_extension.ipynb): the
``scaling`` option takes a dict shaped like Hugging Face's ``rope_scaling``
(``{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 2048}``; types
``linear``, ``ntk``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``) or a scaling object of
``relpos_core.kernels.rope_scaling``; every RoPE path, the model and its KV cache use it.

Two more options. ``keep_fraction`` p: p-RoPE (Barbero et al. 2024, "Round and Round We
Go! What makes Rotary Positional Encodings useful?", arXiv:2410.06205), only the fraction p
of pairs with the highest frequencies turns, the lowest-frequency pairs pass unrotated;
unlike ``rotary_dim`` (GPT-NeoX's ``partial_rotary_factor``), which rotates the first r
dimensions with the whole frequency range re-spaced over them
(``relpos_core.pieces.rotary.Rotary`` gives both frequency lists). ``length_scaling``: each
query's logits multiplied by a factor of the number of keys it attends or of its position
(log-length, scalable softmax, Llama 4's temperature: ``relpos_core.pieces.length_scaling``);
``schemes.none`` takes it too.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
import torch.nn as nn

from relpos_core._validate import check_choice, check_int
from relpos_core.kernels import rope_scaling
from relpos_core.kernels.rotary import PAIRINGS, apply_rope, rope_cos_sin, rotate_half
from relpos_core.pieces import length_scaling as lengths
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme
from relpos_core.terms import PositionTerm, Rotary

__all__ = ["rope_cos_sin", "rotate_half", "apply_rope", "position_term", "RoPEOptions", "RoPEPosition", "SCHEME",
           "PAIRINGS", "ScaledPosition"]


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
        raise ValueError(f"base must be a real number > 1, got {base!r}")
    return float(base)


def position_term(*, base: float = 10000.0, pairing: str = "rotate_half", rotary_dim: int | None = None,
                  scaling=None, keep_fraction: float = 1.0, length_scaling=None) -> PositionTerm:
    """RoPE's position term for ``rp.attend``: q and k rotated by their positions, nothing added.

    Convention ``key_minus_query``. Every backend rotates q by the call's query positions
    and k by its key positions (``relpos_core.positions``), then runs unchanged: RoPE
    needs no form (naive, gather, skew) and keeps the fused kernels. ``rotary_dim``:
    rotate the first r dimensions only (partial rotary); ``scaling``: a context-extension
    method (position interpolation, NTK, YaRN, ...) as a dict like Hugging Face's
    ``rope_scaling`` or a ``relpos_core.kernels.rope_scaling`` object, or None;
    ``keep_fraction``: p-RoPE's fraction of pairs rotated (the highest frequencies; 1: all);
    ``length_scaling``: None, a ``relpos_core.pieces.length_scaling.LengthScaling`` or its
    dict (``{"type": "log_length", "train_length": 512}``; ssmax needs its ``s``).
    """
    rotary = Rotary(base=_check_base(base), pairing=check_choice("pairing", pairing, PAIRINGS),
                    rotary_dim=rotary_dim, scaling=rope_scaling.from_config(scaling), keep_fraction=keep_fraction)
    scaled = lengths.from_config(length_scaling)
    return PositionTerm(scheme="rope", convention="key_minus_query", rotary=rotary,
                        pieces=() if scaled is None else (scaled,))


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=None, generator=None) -> PositionTerm:
    """RoPE with the options' base, pairing and scaling (no table: the arguments only fix the shapes;
    ssmax's per-head scale at its ``init``)."""
    return position_term(base=options.base, pairing=options.pairing, rotary_dim=options.rotary_dim,
                         scaling=options.scaling, keep_fraction=options.keep_fraction,
                         length_scaling=lengths.example(options.length_scaling, num_heads, device, dtype))


class ScaledPosition(PositionModule):
    """A position module whose options may hold a ``length_scaling``: it owns ssmax's s (num_layers, H),
    started at the scaling's ``init`` (RoPE and NoPE share it)."""

    def __init__(self, shape, options):
        super().__init__(shape, options)
        scaling = options.length_scaling
        if scaling is not None and scaling.method == "ssmax":
            self.ssmax_s = nn.Parameter(torch.full((shape.num_layers, shape.num_heads), scaling.init))

    @torch.no_grad()
    def init_parameters(self, generator):
        if hasattr(self, "ssmax_s"):
            self.ssmax_s.fill_(self.options.length_scaling.init)

    def layer_scaling(self, layer: int):
        """The layer's ``LengthScaling`` (ssmax: with its row of s), or None."""
        scaling = self.options.length_scaling
        return scaling.with_scale(self.ssmax_s[layer]) if hasattr(self, "ssmax_s") else scaling


@dataclass(frozen=True)
class RoPEOptions:
    """``base`` (theta_k = base^(-2k / r)), ``pairing`` ("rotate_half" or "interleaved"),
    ``rotary_dim`` (None: the whole head; fewer: partial rotary, as GPT-NeoX's ``rotary_pct``),
    ``scaling`` (None, or a context extension: a dict like Hugging Face's
    ``rope_scaling``, kept as the checked ``relpos_core.kernels.rope_scaling`` object),
    ``keep_fraction`` (p-RoPE: 0 < p <= 1 of the pairs rotated, highest frequencies first)
    and ``length_scaling`` (None, or a dict such as ``{"type": "ssmax", "init": 1.0}``, kept
    as the checked ``relpos_core.pieces.length_scaling.LengthScaling``; ssmax's s is learned
    per layer and head)."""

    base: float = 10000.0
    pairing: str = "rotate_half"
    rotary_dim: int | None = None
    scaling: object | None = None
    keep_fraction: float = 1.0
    length_scaling: object | None = None

    def __post_init__(self):
        _check_base(self.base)
        check_choice("pairing", self.pairing, PAIRINGS)
        if self.rotary_dim is not None:
            check_int("rotary_dim", self.rotary_dim, min_value=2)
        object.__setattr__(self, "scaling", rope_scaling.from_config(self.scaling))
        Rotary(keep_fraction=self.keep_fraction)  # checks it, naming the field
        object.__setattr__(self, "length_scaling", lengths.from_config(self.length_scaling))


class RoPEPosition(ScaledPosition):
    """No parameters (but ssmax's per-layer, per-head s): every layer rotates its q and k the same way."""

    def __init__(self, shape, options: RoPEOptions):
        super().__init__(shape, options)
        Rotary(rotary_dim=options.rotary_dim, keep_fraction=options.keep_fraction).check(shape.num_heads,
                                                                                          shape.head_dim)
        if shape.head_dim % 2:
            raise ValueError(f"head_dim must be even for rope (pairs are rotated), got {shape.head_dim}")
        if options.rotary_dim is not None and (options.rotary_dim > shape.head_dim or options.rotary_dim % 2):
            raise ValueError(f"rotary_dim must be an even number <= head_dim = {shape.head_dim}, "
                             f"got {options.rotary_dim}")
        if options.scaling is not None:  # a scaling that cannot serve these sizes fails here, not mid-run
            r = shape.head_dim if options.rotary_dim is None else options.rotary_dim
            for seq_len in (None, 2**30) if options.scaling.dynamic else (None,):  # both ends of a dynamic one
                options.scaling.inverse_frequencies(r, options.base, seq_len=seq_len)

    def term(self, layer, attention):
        o = self.options
        return position_term(base=o.base, pairing=o.pairing, rotary_dim=o.rotary_dim, scaling=o.scaling,
                             keep_fraction=o.keep_fraction, length_scaling=self.layer_scaling(layer))


SCHEME = Scheme(
    name="rope", color="#0072b2", display="RoPE", paper="Su et al. 2021", cite="su2021roformer", chapter="06_rope_and_alibi",
    convention="key_minus_query", formula=r"q_i^\top R\big((j - i)\,\theta\big)\, k_j",
    code="relpos_core.schemes.rope.apply_rope", injects="rotation of q and k",
    summary="q and k rotated by their positions; no bias, fused kernels unchanged",
    caches="keys rotated at write time, or unrotated keys rotated at read time",
    example=example, options=RoPEOptions, module=RoPEPosition, order=70,
    lab=Lab(("marker", "marker_causal", "copy", "retrieval_gap"), book=True, tiny=("retrieval_gap",),
            language_model=("book", "tiny"), extended=True),
    roles=("rotation",),
)
