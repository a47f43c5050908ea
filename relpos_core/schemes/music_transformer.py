"""Music Transformer: relative logits by the skewing trick.

Paper: Cheng-Zhi Anna Huang, Ashish Vaswani, Jakob Uszkoreit, Noam Shazeer, Ian Simon,
Curtis Hawthorne, Andrew M. Dai, Matthew D. Hoffman, Monica Dinculescu, Douglas Eck,
"Music Transformer", 2018 (ICLR 2019). Book: "Shaw et al. and the Music Transformer's skew"
(chapters/02_shaw_and_skew.ipynb): relative logits without an L x L x d tensor.

Sign convention: ``key_minus_query``. A relative embedding table E has one row per
distance r = j - i; row ``r + (L - 1)`` embeds distance r, so the first row is the
farthest key *before* the query. The relative logit is S^rel_ij = q_i . E[j - i + L - 1].

Here: the definition (``relative_logits_gather``: Q E^T is (L, 2L - 1), then column
j - i + L - 1 is picked for every pair) and the scheme's ``position_term`` (E as a Shaw key
table clipped at L - 1, i.e. one row per distance). *How* the paper computes it, the
skew (pad a zero column, reinterpret the buffer, drop a row), is a kernel form:
``relpos_core.kernels.skew`` (``skew``, ``rel_shift_bidirectional`` and the general
``skew_view``), tested equal to the definition here.
"""
from __future__ import annotations

import math

import torch

from dataclasses import dataclass

import torch.nn as nn

from relpos_core._validate import check_int, check_tensor
from relpos_core.budget import check_memory
from relpos_core.offsets import relative_offsets
from relpos_core.schemes.declaration import Distance, Lab, PositionModule, Scheme
from relpos_core.terms import PositionTerm, QueryVectors, clipped_rows, example_tensor

__all__ = ["relative_logits_gather", "position_term", "MusicTransformerOptions", "MusicTransformerPosition",
           "SCHEME"]

_ANY_RANK = tuple(range(2, 9))


def _check_q_and_table(q, rel_emb) -> tuple[int, int]:
    check_tensor("q", q, ndim=_ANY_RANK, floating=True)
    L, d = q.shape[-2], q.shape[-1]
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True, dtype=q.dtype, shape={1: d})
    if rel_emb.shape[0] != 2 * L - 1:
        raise ValueError(f"rel_emb must have 2L - 1 = {2 * L - 1} rows for a sequence of length L = {L}, "
                         f"got shape {tuple(rel_emb.shape)}")
    return L, d


def relative_logits_gather(q: torch.Tensor, rel_emb: torch.Tensor) -> torch.Tensor:
    """Relative logits q_i . E[j - i + L - 1] for every (i, j), by an explicit gather.

    Sign convention: ``key_minus_query``. q: (..., L, d); rel_emb: (2L - 1, d), row r
    embeds distance r - (L - 1), covering every j - i in [-(L-1), L-1]. Returns (..., L, L).
    """
    L, _ = _check_q_and_table(q, rel_emb)
    lead = math.prod(q.shape[:-2])
    check_memory(L * L * (8 + 8 * lead) + lead * L * (2 * L - 1) * q.element_size() + lead * L * L * q.element_size(),
                 what="relative_logits_gather", shape=(*q.shape[:-2], L, L), dtype=q.dtype,
                 alternative="rp.attend with rp.schemes.music_transformer.position_term on backend 'flex'")
    qe = q @ rel_emb.transpose(0, 1)  # (..., L, 2L - 1): query i vs every distance
    idx = relative_offsets(L, convention="key_minus_query", device=q.device) + (L - 1)  # (L, L) in [0, 2L-2]
    idx = idx.expand(*qe.shape[:-2], L, L)  # (..., L, L)
    return torch.gather(qe, -1, idx)  # (..., L, L)


def position_term(rel_emb: torch.Tensor) -> PositionTerm:
    """The Music Transformer's term for ``rp.attend``: one embedding per distance, on the logits.

    rel_emb: (2K + 1, d), row r embeds distance r - K (``key_minus_query``); distances
    beyond K share the end rows (with K = L - 1 for a sequence of length L this is the
    paper's unclipped table). The same logit term as Shaw's a^K with k = K.
    """
    check_tensor("rel_emb", rel_emb, ndim=2, floating=True)
    R = rel_emb.shape[0]
    if R % 2 == 0 or R < 3:
        raise ValueError(f"rel_emb must have an odd number 2K + 1 >= 3 of rows (distances -K .. K), got shape "
                         f"{tuple(rel_emb.shape)}")
    return PositionTerm(scheme="music_transformer", convention="key_minus_query",
                        query_vectors=(QueryVectors(rel_emb, clipped_rows((R - 1) // 2), name="relative embedding"),))


# ----------------------------------------------------------------------------- in a model


@dataclass(frozen=True)
class MusicTransformerOptions:
    """``max_relative_position`` K: one embedding per distance -K .. K (None: the model's whole
    length, max_positions - 1, the paper's unclipped table)."""

    max_relative_position: int | None = None

    def __post_init__(self):
        if self.max_relative_position is not None:
            check_int("max_relative_position", self.max_relative_position, min_value=1)


class MusicTransformerPosition(PositionModule):
    """Per layer, one relative embedding E (2K + 1, d_head) shared by the layer's heads."""

    def __init__(self, shape, options: MusicTransformerOptions):
        super().__init__(shape, options)
        self.K = options.max_relative_position or max(1, shape.max_positions - 1)
        self.rel_emb = nn.ParameterList(nn.Parameter(torch.zeros(2 * self.K + 1, shape.head_dim))
                                        for _ in range(shape.num_layers))

    def term(self, layer, attention):
        return position_term(self.rel_emb[layer])


def example(num_heads: int, head_dim: int, options, *, device=None, dtype=torch.float32, generator=None):
    """A random table of 2K + 1 distances (K = the preset's length: the paper's one row per distance)."""
    K = options.max_relative_position or 1
    return position_term(example_tensor(2 * K + 1, head_dim, device=device, dtype=dtype, generator=generator,
                                        scale=0.3))


SCHEME = Scheme(
    name="music_transformer", color="#aa3322", short="Music T.", display="Music Transformer", paper="Huang et al. 2018", cite="huang2018music",
    chapter="02_shaw_and_skew", convention="key_minus_query", formula=r"E_r[(j - i) + (L - 1)]",
    code="relpos_core.schemes.music_transformer.relative_logits_gather", injects="vector on the logit",
    summary="one learned vector per distance, computed with the skew",
    distance=Distance("max_relative_position", "one row per distance up to the sequence length",
                      follows_length=True, minimum=1),
    example=example, options=MusicTransformerOptions, module=MusicTransformerPosition, order=25,
    lab=Lab(()),
)
