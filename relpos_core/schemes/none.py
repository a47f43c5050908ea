"""No position signal at all ("NoPE"): content-only attention, the baseline every scheme is compared with.

Paper: Kazemnejad, Padhi, Natesan Ramamurthy, Das and Reddy (2023), "The Impact of
Positional Encoding on Length Generalization in Transformers", NeurIPS 2023, who show that
a causal decoder without any position encoding learns order from its causal mask.
Book: "Why relative positions" (chapters/01_why_relative_positions.ipynb).

Sign convention: ``none`` (no offset is formed). Bidirectional attention without positions
is permutation-equivariant ("Why relative positions" shows it); a causal mask alone breaks that
symmetry.
"""
from __future__ import annotations

from dataclasses import dataclass

from relpos_core.schemes.declaration import Bench, Lab, PositionModule, Scheme

__all__ = ["NoneOptions", "NoPosition", "SCHEME"]


@dataclass(frozen=True)
class NoneOptions:
    """No settings."""


class NoPosition(PositionModule):
    """Adds nothing: every layer's term is None."""


def example(num_heads, head_dim, options, *, device=None, dtype=None, generator=None):
    """No term."""
    return None


SCHEME = Scheme(
    name="none", color="#8c8c8c", short="no position", display="no position (NoPE)", paper="Kazemnejad et al. 2023", cite="kazemnejad2023impact",
    chapter="01_why_relative_positions", convention="none", formula=r"\text{nothing}",
    code="relpos_core.schemes.none.NoPosition", injects="nothing", has_positions=False,
    summary="content only; a causal mask alone gives order",
    example=example, options=NoneOptions, module=NoPosition, order=0,
    lab=Lab(("marker_causal", "retrieval", "copy", "retrieval_gap"), book=True, tiny=("retrieval",),
            language_model=("book", "tiny", "full_lr1e-3")),
    bench=Bench(block_skip=("medium", "large")),
)
