"""The lab's models: the library's one transformer, with a classifier head, for every scheme.

Book: "Synthetic tasks" (chapters/14_experiments_length.ipynb, chapters/15_experiments_marker.ipynb). A lab model is
``relpos_core.models.Transformer`` (pre-LayerNorm blocks, GELU MLP, final LayerNorm)
with ``num_outputs`` = the task's classes and ``causal`` = the task's; the position
scheme, from its declaration, is the only difference between two models of one
experiment. Every attention call is ``rp.attend`` on the model's default dense path.

Learned absolute positions: the table has ``max_positions`` rows (enough for the longest
evaluation) but training only ever shows rows ``0 .. train_length - 1``; the others keep
their initial values (Adam without weight decay: a row that gets no gradient does not
move). ``untrained_position_rows`` names them.
"""
from __future__ import annotations

from relpos_core import schemes
from relpos_core._validate import check_int, check_positive_int
from relpos_core.layers import is_pattern, parse_pattern
from relpos_core.models import Transformer, TransformerConfig

__all__ = ["SCHEMES", "lab_config", "build_model", "untrained_position_rows"]

SCHEMES: tuple[str, ...] = schemes.names()


def lab_config(scheme: str, *, vocab_size: int, num_classes: int, max_positions: int, causal: bool,
               position: dict | None = None, d_model: int = 64, num_layers: int = 2, num_heads: int = 4,
               d_mlp: int = 128) -> TransformerConfig:
    """The ``TransformerConfig`` of a lab model (``position``: the scheme's options).

    ``scheme`` may also name a model whose layers differ, by its pattern string
    (``"rope@window=32 x3, none"``, ``relpos_core.layers.parse_pattern``): the layers then
    carry their own options (``position`` must be empty) and ``num_layers`` is the pattern's.
    """
    shape = dict(vocab_size=vocab_size, num_outputs=num_classes, d_model=d_model, num_heads=num_heads, d_mlp=d_mlp,
                 causal=causal, max_positions=max_positions)
    if is_pattern(scheme):
        if position:
            raise ValueError(f"position must be empty for a layer pattern ({scheme!r}): each layer spells its "
                             f"options, e.g. 'rope@base=500000,window=32'; got {position}")
        return TransformerConfig(layers=parse_pattern(scheme), **shape)
    return TransformerConfig(scheme, position=dict(position or {}), num_layers=num_layers, **shape)


def build_model(config: TransformerConfig, *, seed: int) -> Transformer:
    """The model for ``config`` with parameters drawn from ``seed`` (float32, CPU, training mode)."""
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")
    seed = check_int("seed", seed, min_value=0, max_value=2**63 - 1)
    return Transformer(config, seed=seed).train()


def untrained_position_rows(model: Transformer, train_length: int) -> range:
    """Rows of a learned absolute table that training at ``train_length`` never reaches (empty otherwise)."""
    train_length = check_positive_int("train_length", train_length)
    return model.position.untrained_rows(train_length)
