"""No position signal at all ("NoPE"): content-only attention, the baseline every scheme is compared with.

Paper: Kazemnejad, Padhi, Natesan Ramamurthy, Das and Reddy (2023), "The Impact of
Positional Encoding on Length Generalization in Transformers", NeurIPS 2023, who show that
a causal decoder without any position encoding learns order from its causal mask.
Book: "Why relative positions" (chapters/01_why_relative_positions.ipynb).

Sign convention: ``none`` (no offset is formed). Bidirectional attention without positions
is permutation-equivariant ("Why relative positions" shows it); a causal mask alone breaks that
symmetry.

Option ``length_scaling`` (as RoPE's, ``relpos_core.pieces.length_scaling``): NoPE with
each query's logits multiplied by a factor of its length or position, as Llama 4's layers
without positions do (``{"type": "llama4", "floor_scale": 8192, "attn_scale": 0.1}``).
"""
from __future__ import annotations

from dataclasses import dataclass

from relpos_core.pieces import length_scaling as lengths
from relpos_core.schemes.declaration import Bench, Lab, Scheme
from relpos_core.schemes.rope import ScaledPosition
from relpos_core.terms import PositionTerm

__all__ = ["NoneOptions", "NoPosition", "position_term", "SCHEME"]


def position_term(length_scaling=None) -> PositionTerm | None:
    """No term (None), or a term that only scales each query by its length factor."""
    scaled = lengths.from_config(length_scaling)
    return None if scaled is None else PositionTerm(scheme="none", convention="none", pieces=(scaled,))


@dataclass(frozen=True)
class NoneOptions:
    """``length_scaling``: None (nothing at all), or a length scaling of the logits (module docstring)."""

    length_scaling: object | None = None

    def __post_init__(self):
        object.__setattr__(self, "length_scaling", lengths.from_config(self.length_scaling))


class NoPosition(ScaledPosition):
    """Adds nothing: every layer's term is None (or only its length scaling)."""

    def term(self, layer, attention):
        return position_term(self.layer_scaling(layer))


def example(num_heads, head_dim, options, *, device=None, dtype=None, generator=None):
    """No term (or the length scaling alone)."""
    return position_term(lengths.example(options.length_scaling, num_heads, device, dtype))


SCHEME = Scheme(
    name="none", color="#8c8c8c", short="no position", display="no position (NoPE)", paper="Kazemnejad et al. 2023", cite="kazemnejad2023impact",
    chapter="01_why_relative_positions", convention="none", formula=r"\text{nothing}",
    code="relpos_core.schemes.none.NoPosition", injects="nothing", has_positions=False,
    summary="content only; a causal mask alone gives order",
    example=example, options=NoneOptions, module=NoPosition, order=0,
    lab=Lab(("marker_causal", "retrieval", "copy", "retrieval_gap"), book=True, tiny=("retrieval",),
            language_model=("book", "tiny")),
    bench=Bench(block_skip=("medium", "large")),
)
