"""Randomised positions: train at sorted positions drawn from a range longer than any input.

Paper: Ruoss, Deletang, Genewein, Grau-Moya, Csordas, Bennani, Legg and Veness (2023),
"Randomized Positional Encodings Boost Length Generalization of Transformers", ACL 2023.
Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb).

The observation behind it: a model trained on sequences of at most N tokens sees only
positions (and offsets) below N, so a longer input at test time meets position values
it was never trained on, relative encodings included. Ruoss et al. therefore place each
training sequence of n tokens at n positions drawn without replacement from a much
longer range [0, L) and sorted, so that every position and offset up to L is met in
training while the order of the tokens is kept. Their code draws the positions the same
way at test time (one draw per call, shared by the batch), which is what
``training_positions`` offers an evaluation too.

Here the drawn positions are encoded with RoPE (the paper also randomises sinusoidal,
learned, ALiBi and Transformer-XL encodings; RoPE is the one today's decoders use), so
the attention call is exactly RoPE's at explicit positions: ``q_i^T R((p_j - p_i) theta) k_j``.
Sign convention: ``key_minus_query``, as RoPE. Outside training (and without explicit
positions) the model places tokens at 0 .. n - 1 like any RoPE model, so decoding with a
KV cache works unchanged; the spacing of those positions is then smaller than in
training, which is why the lab evaluates at drawn positions as the paper does.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from relpos_core._validate import check_int
from relpos_core.schemes.declaration import Lab, PositionModule, Scheme
from relpos_core.schemes.rope import _check_base
from relpos_core.terms import PositionTerm, Rotary

__all__ = ["random_sorted_positions", "position_term", "RandomizedOptions", "RandomizedPosition", "SCHEME"]


def random_sorted_positions(n: int, max_positions: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """(n,) int64: n distinct positions drawn uniformly from [0, max_positions), increasing.

    Ruoss et al.'s draw: a random subset of the range (without replacement), sorted, so
    the tokens keep their order. ``n`` must not exceed ``max_positions``.
    """
    max_positions = check_int("max_positions", max_positions, min_value=1)
    n = check_int("n", n, min_value=1, max_value=max_positions)
    return torch.randperm(max_positions, generator=generator)[:n].sort().values  # (n,)


def position_term(*, base: float = 10000.0) -> PositionTerm:
    """The attention term: RoPE's rotation (rotate-half pairing) at whatever positions the call gives.

    Convention ``key_minus_query``: the score depends on p_j - p_i, the drawn positions'
    difference. The randomisation is in the positions (``RandomizedPosition``), not here.
    """
    rotary = Rotary(base=_check_base(base), pairing="rotate_half")
    return PositionTerm(scheme="randomized", convention="key_minus_query", rotary=rotary)


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=None, generator=None) -> PositionTerm:
    """The rotation (no table: the arguments only fix the shapes)."""
    return position_term(base=options.base)


@dataclass(frozen=True)
class RandomizedOptions:
    """``max_positions`` L: training positions are drawn from [0, L) (None: the model's
    ``max_positions``, the longest input it is built for); ``base``: RoPE's base."""

    max_positions: int | None = None
    base: float = 10000.0

    def __post_init__(self):
        if self.max_positions is not None:
            check_int("max_positions", self.max_positions, min_value=1)
        _check_base(self.base)


class RandomizedPosition(PositionModule):
    """RoPE at randomised positions. No parameters; a generator of its own (seeded when the
    model draws its parameters) draws the training positions, so a seeded model trains the
    same way again."""

    def __init__(self, shape, options: RandomizedOptions):
        super().__init__(shape, options)
        if shape.head_dim % 2:
            raise ValueError(f"head_dim must be even for randomized (RoPE rotates pairs), got {shape.head_dim}")
        self.max_positions = shape.max_positions if options.max_positions is None else options.max_positions
        self._seed = 0
        self._generator: torch.Generator | None = None

    def term(self, layer, attention):
        return position_term(base=self.options.base)

    @torch.no_grad()
    def init_parameters(self, generator):
        self._seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        self._generator = None  # restarts the draws

    def training_positions(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """n sorted positions from [0, max_positions); ``generator`` None: the module's own."""
        if n > self.max_positions:
            raise ValueError(f"n must be at most max_positions = {self.max_positions} (positions are drawn without "
                             f"replacement from [0, {self.max_positions})), got {n}")
        if generator is None:
            if self._generator is None:
                self._generator = torch.Generator().manual_seed(self._seed)
            generator = self._generator
        return random_sorted_positions(n, self.max_positions, generator)

    def __getstate__(self):  # a torch.Generator cannot be copied or pickled: a copy restarts its draws
        state = dict(self.__dict__)
        state["_generator"] = None
        return state


SCHEME = Scheme(
    name="randomized", color="#7766ff", short="rand. RoPE", display="randomised RoPE", paper="Ruoss et al. 2023", cite="ruoss2023randomized",
    chapter="14_experiments_length", convention="key_minus_query",
    formula=r"q_i^\top R\big((p_j - p_i)\,\theta\big)\, k_j,\ p \text{ sorted, drawn from } [0, L)",
    code="relpos_core.schemes.randomized.random_sorted_positions", injects="rotation of q and k",
    summary="RoPE at sorted random positions from a longer range in training (Ruoss et al.)",
    caches="keys rotated at write time, or unrotated keys rotated at read time",
    example=example, options=RandomizedOptions, module=RandomizedPosition, order=75,
    lab=Lab(("copy", "retrieval_gap"), book=True, tiny=("copy",)),
)
