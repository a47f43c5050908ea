"""xPos: RoPE with an exponential decay, so that far keys weigh less (length-extrapolatable attention).

Paper: Yutao Sun, Li Dong, Barun Patra, Shuming Ma, Shaohan Huang, Alon Benhaim, Vishrav
Chaudhary, Xia Song and Furu Wei (2023), "A Length-Extrapolatable Transformer", ACL 2023
(arXiv:2212.10554). Book: "RoPE and ALiBi" (chapters/06_rope_and_alibi.ipynb),
as a RoPE variant; the experiments (chapters/14_experiments_length.ipynb).

Sign convention: ``key_minus_query``, as RoPE. The query at n is rotated by n theta and
scaled by ``zeta^(n / B)``, the key at m rotated by m theta and scaled by ``zeta^(-m / B)``,
per rotated pair k:

    zeta_k = (2k / d + gamma) / (1 + gamma),   gamma = 0.4,   B = scale_base = 512,

so the score of a pair gains ``zeta^((n - m) / B)`` < 1 for a key behind the query: a
decay that is faster for the high-frequency pairs (small k). The paper is a causal
decoder (keys after the query would be scaled up); ``rp.attend`` requires ``causal=True``.
Inside a call the positions are centred between the first query and the last key (the
centre cancels in every score): a decode step's largest factor is then 1 at any length,
and a call whose factors the input dtype cannot hold (a float16 self-attention over
about 6,800 positions, ``relpos_core.kernels.rotary.xpos_limit``) is refused with a
ValueError instead of overflowing to NaN. Because the centre moves with every call, a KV
cache keeps xPos keys *unrotated* and scales them at read time
(``Rotary.rotated_keys_cacheable`` is False).
The maths is in ``relpos_core.kernels.rotary``; the paper's code pairs the dimensions
interleaved (2k with 2k + 1), the default here.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

from relpos_core._validate import check_choice
from relpos_core.kernels.rotary import PAIRINGS
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme
from relpos_core.terms import PositionTerm, Rotary, XPosDecay

__all__ = ["position_term", "XPosOptions", "XPosPosition", "SCHEME"]


def position_term(*, base: float = 10000.0, scale_base: float = 512.0, gamma: float = 0.4,
                  pairing: str = "interleaved") -> PositionTerm:
    """xPos's term for ``rp.attend``: RoPE's rotation with the decay (module docstring). Causal only."""
    rotary = Rotary(base=base, pairing=check_choice("pairing", pairing, PAIRINGS),
                    decay=XPosDecay(scale_base=scale_base, gamma=gamma))
    return PositionTerm(scheme="xpos", convention="key_minus_query", rotary=rotary, causal_only=True)


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=None, generator=None) -> PositionTerm:
    """xPos with the options' constants (no table)."""
    return position_term(base=options.base, scale_base=options.scale_base, gamma=options.gamma,
                         pairing=options.pairing)


@dataclass(frozen=True)
class XPosOptions:
    """``base`` (RoPE's), ``scale_base`` B (512) and ``gamma`` (0.4), ``pairing`` (the paper's: interleaved)."""

    base: float = 10000.0
    scale_base: float = 512.0
    gamma: float = 0.4
    pairing: str = "interleaved"

    def __post_init__(self):
        check_choice("pairing", self.pairing, PAIRINGS)
        for name in ("base", "scale_base", "gamma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")


class XPosPosition(PositionModule):
    """No parameters: every layer rotates and scales its q and k the same way."""

    def __init__(self, shape, options: XPosOptions):
        super().__init__(shape, options)
        if shape.head_dim % 2:
            raise ValueError(f"head_dim must be even for xpos (pairs are rotated), got {shape.head_dim}")

    def term(self, layer, attention):
        o = self.options
        return position_term(base=o.base, scale_base=o.scale_base, gamma=o.gamma, pairing=o.pairing)


SCHEME = Scheme(
    name="xpos", color="#6699ff", display="xPos", paper="Sun et al. 2023", cite="sun2023xpos", chapter=None,
    convention="key_minus_query", formula=r"q_i^\top R\big((j - i)\,\theta\big)\, \zeta^{-(j - i)/B}\, k_j",
    code="relpos_core.schemes.xpos.position_term", injects="rotation of q and k",
    summary="RoPE whose scores decay exponentially with the distance", causal_only=True,
    caches="unrotated keys, rotated and scaled at read time",
    example=example, options=XPosOptions, module=XPosPosition, order=90,
    lab=Lab(("retrieval_gap",)),
)
